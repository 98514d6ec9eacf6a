"""`hop validate`: characterize at low load, predict the target, measure it, report;
`repeats` times, interleaved.

Each repetition is one calibration set and one measurement, and the repetitions run
in alternation (c1, m1, c2, m2, ...), so a drift of the host's speed hits calibration
and measurement alike:

1. calibration replays at each of `calibration_fractions` of the target rates, each
   `calibration_repeats` times: the first of repetition 1 into RUN_DIR/calibration/
   (analysed with Spark), the others into RUN_DIR/calibration-F-K/; repetition R > 1
   adds ``-rR`` to each name. Their phases are 1/F times longer, and the seed is the
   same, so they publish the very events the measurement will, only slower;
2. measurement replay at the target rates into RUN_DIR/measurement/ (``-rR``);
3. once every replay ran, each repetition's prediction of the target workload
   (its first calibration's analysis/predictions.parquet): from that calibration's
   measured rates scaled up to the target, so the prediction is for the events the
   measurement replays, not for the scenario's nominal rates, which a short run's
   Poisson arrivals miss by several percent; with calibrations at two or more
   fractions, their samples are pooled (`trend` "none", the default) or each stage's
   cost is carried to the target load along its line in the host's busy share between
   them (`trend` "line"; `monitor.carry` and docs/accuracy.md say when which), otherwise
   the one run's samples are drawn again by idle gaps (`monitor.warmth`);
4. RUN_DIR/report.html and report.md comparing the predictions with the measurements
   (`monitor.repeats`: medians, intervals and run-to-run spread).

Every replay records the CPU other processes used on the host (`monitor.hostload`);
a disturbed one is set aside (renamed ``NAME-disturbed-K``) and run again, at most
`disturbed_retries` times, after which it is kept and the report says the host was
not quiet. RUN_DIR/validation.json lists the repetitions, the order the replays ran
in and what was set aside. One Spark session serves both analyses of repetition 1.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from broker import logs
from monitor.errors import InputError, check_number, made_folder, write_output
from monitor.hostload import disturbed
from monitor.spark_master import check_spark_start
from topologies import Workload, load_case_study

QUICK = {"duration_s": 10.0, "warmup_s": 2.0}
CALIBRATION_FRACTIONS = (0.3, 0.6)
TREND = "none"
"""Calibrations pooled, not carried along a line: on siena15 with a process per client
the line through two single runs followed their noise (docs/accuracy.md)."""
DISTURBED_RETRIES = 1
"""How many times a replay disturbed by other load on the host is run again before it
is kept as it is (and reported as such)."""
VALIDATION_FILE = "validation.json"
SIMULATION_S = 20.0
"""Wall-clock seconds the simulation may run per prediction by default (`hop predict`,
`hop validate`); it stops sooner once the 95 % interval of every mean it tracks is
within 2 % of it."""


@dataclass(frozen=True)
class Step:
    """One replay of a validation: its repetition (from 1), whether it calibrates or
    measures, its fraction of the target load, and its folder's name."""

    repetition: int
    kind: str
    fraction: float
    name: str


def phase_lengths(
    workload: Workload,
    fraction: float,
    quick: bool = False,
    duration_s: float | None = None,
    warmup_s: float | None = None,
) -> tuple[float, float]:
    """The measured and warm-up seconds of a replay at ``fraction`` of the target load:
    the given ones (InputError if not numbers of seconds), else `QUICK`'s with
    ``quick``, else the workload's; 1/``fraction`` times longer, so a calibration
    publishes the very events the measurement will."""
    lengths = {"duration_s": workload.duration_s, "warmup_s": workload.warmup_s}
    if quick:
        lengths.update(QUICK)
    if duration_s is not None:
        lengths["duration_s"] = check_number(duration_s, "duration", positive=True)
    if warmup_s is not None:
        lengths["warmup_s"] = check_number(warmup_s, "warm-up")
    return lengths["duration_s"] / fraction, lengths["warmup_s"] / fraction


def schedule(repeats: int, fractions: Sequence[float], calibration_repeats: int) -> list[Step]:
    """The replays in the order they run: each repetition's calibrations, then its
    measurement, repetition after repetition."""
    steps: list[Step] = []
    for r in range(1, repeats + 1):
        suffix = "" if r == 1 else f"-r{r}"
        for k in range(calibration_repeats):
            for i, fraction in enumerate(fractions):
                first = k == 0 and i == 0
                name = "calibration" if first else f"calibration-{fraction:g}-{k + 1}"
                steps.append(Step(r, "calibration", fraction, name + suffix))
        steps.append(Step(r, "measurement", 1.0, "measurement" + suffix))
    return steps


@dataclass
class Repetition:
    """The folders of one repetition: its calibrations (the first holds the prediction)
    and its measurement."""

    calibrations: list[str] = field(default_factory=list)
    measurement: str = ""


def repetitions(steps: Sequence[Step]) -> list[Repetition]:
    out: dict[int, Repetition] = {}
    for step in steps:
        rep = out.setdefault(step.repetition, Repetition())
        if step.kind == "calibration":
            rep.calibrations.append(step.name)
        else:
            rep.measurement = step.name
    return [out[r] for r in sorted(out)]


@dataclass
class ValidationResult:
    run_dir: Path
    report_html: Path
    summary: str
    seconds: float


def _check(
    calibration_fractions: Sequence[float],
    calibration_repeats: int,
    repeats: int,
    disturbed_retries: int,
    trend: str,
) -> None:
    from monitor.carry import check_trend

    check_trend(trend)
    if not calibration_fractions or not all(0 < f <= 1 for f in calibration_fractions):
        raise InputError(
            f"calibration fractions must be in (0, 1], got {list(calibration_fractions)}"
        )
    if calibration_repeats < 1:
        raise InputError(f"calibration repeats must be at least 1, got {calibration_repeats}")
    if calibration_repeats > 1 and len(set(calibration_fractions)) < 2:
        raise InputError("repeated calibrations are pooled across two or more fractions: give two")
    if repeats < 1:
        raise InputError(f"repeats must be at least 1, got {repeats}")
    if disturbed_retries < 0:
        raise InputError(f"disturbed retries must be 0 or more, got {disturbed_retries}")


def run_replays(
    steps: Sequence[Step],
    run_dir: Path,
    replay_step: Callable[[Step, Path], None],
    disturbed_retries: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Run `steps` in order through `replay_step(step, folder)`; a replay whose manifest
    marks it disturbed is renamed NAME-disturbed-K and run again, at most
    `disturbed_retries` times. Returns the record for validation.json."""
    from monitor.traces import read_manifest  # (pyarrow: not for the command line's start)

    order, set_aside, kept_disturbed = [], [], []
    for step in steps:
        folder = run_dir / step.name
        for attempt in range(disturbed_retries + 1):
            say(f"{step.kind} replay at {step.fraction:g} of the load ({step.name})")
            replay_step(step, folder)
            order.append(step.name)
            if not disturbed(read_manifest(folder, ["host_load.disturbed"])):
                break
            if attempt == disturbed_retries:
                kept_disturbed.append(step.name)
                say(f"{step.name}: the host was not quiet (kept, marked disturbed)")
                break
            aside = f"{step.name}-disturbed-{attempt + 1}"
            folder.rename(run_dir / aside)
            set_aside.append(aside)
            say(f"{step.name}: the host was not quiet, set aside as {aside}; again")
    return {"order": order, "set_aside": set_aside, "disturbed": kept_disturbed}


def validate(
    study_file: Path,
    run_dir: Path,
    scenario: str | None = None,
    duration_s: float | None = None,
    quick: bool = False,
    warmup_s: float | None = None,
    load_scale: float = 1.0,
    calibration_fractions: Sequence[float] = CALIBRATION_FRACTIONS,
    calibration_repeats: int = 1,
    master: str | None = None,
    quiet: bool = False,
    repeats: int = 1,
    disturbed_retries: int = DISTURBED_RETRIES,
    trend: str = TREND,
    sim_seconds: float = SIMULATION_S,
) -> ValidationResult:
    _check(calibration_fractions, calibration_repeats, repeats, disturbed_retries, trend)
    check_number(load_scale, "load scale", positive=True)
    check_number(sim_seconds, "simulation seconds", positive=True)
    study = load_case_study(study_file)
    study.rates_for(scenario)  # an unknown scenario fails before anything is made
    workload = study.workload or Workload()
    phase_lengths(workload, 1.0, quick, duration_s, warmup_s)  # bad lengths fail before a replay
    if run_dir.is_dir() and any(run_dir.iterdir()):
        raise InputError(f"--out {run_dir} holds files already; choose an empty folder")
    check_spark_start(master)  # before the replays, which a Spark that cannot start wastes
    # Imported here, after the checks: `hop` reads CALIBRATION_FRACTIONS for its help
    # text, the other commands have no use for Spark, pyarrow, pandas and matplotlib,
    # and a mistyped option is refused without the second their imports take.
    from monitor.analysis import analyze
    from monitor.predict import predict
    from monitor.replay import replay
    from monitor.report import render
    from monitor.spark import jit_options, spark_session, stopped_at_end
    from monitor.traces import count_rows

    carry = len(set(calibration_fractions)) > 1
    started = time.monotonic()
    made_folder(run_dir, "--out")

    def step(text: str) -> None:
        if not quiet:
            logs.say(f"[{time.monotonic() - started:6.1f} s] {text}")

    def replay_step(s: Step, folder: Path) -> None:
        measured_s, warm_s = phase_lengths(workload, s.fraction, quick, duration_s, warmup_s)
        replay(
            study_file,
            folder,
            scenario=scenario,
            rate_scale=load_scale * s.fraction,
            quiet=quiet,
            duration_s=measured_s,
            warmup_s=warm_s,
        )

    steps = schedule(repeats, calibration_fractions, calibration_repeats)
    reps = repetitions(steps)
    record = run_replays(steps, run_dir, replay_step, disturbed_retries, step)
    validation = (
        json.dumps(
            {
                "repeats": repeats,
                "calibration_fractions": list(calibration_fractions),
                "calibration_repeats": calibration_repeats,
                "disturbed_retries": disturbed_retries,
                "trend": trend if carry else None,
                "repetitions": [asdict(r) for r in reps],
                **record,
            },
            indent=2,
        )
        + "\n"
    )
    write_output(run_dir / VALIDATION_FILE, validation)
    analysed = [run_dir / reps[0].calibrations[0], run_dir / reps[0].measurement]
    largest = max(count_rows(folder, "hops") for folder in analysed)
    spark = spark_session(master, java_options=jit_options(largest))
    with stopped_at_end(spark):
        step("analysing the calibration run")
        analyze(analysed[0], master=master, spark=spark)
        for r, rep in enumerate(reps, start=1):
            step(f"predicting the target workload (repetition {r})")
            predict(
                run_dir / rep.calibrations[0],
                rate_scale=1 / calibration_fractions[0],
                measured_rates=True,
                other_runs=[run_dir / name for name in rep.calibrations[1:]] if carry else (),
                trend=trend,
                max_wall_s=sim_seconds,
            )
        step("analysing the measurement run")
        analyze(analysed[1], master=master, spark=spark)
    step("writing the report")
    report_html, _, summary = render(run_dir)
    return ValidationResult(run_dir, report_html, summary, time.monotonic() - started)
