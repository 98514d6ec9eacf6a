"""`hop validate`: characterize at low load, predict the target, measure it, report.

1. calibration replays at each of `calibration_fractions` of the target rates, each
   `calibration_repeats` times: the first into RUN_DIR/calibration/ (analysed with
   Spark), the others into RUN_DIR/calibration-F-K/. Their phases are 1/F times
   longer, and the seed is the same, so they publish the very events the measurement
   will, only slower;
2. prediction of the target workload (RUN_DIR/calibration/analysis/predictions.parquet):
   from the first calibration's measured rates scaled up to the target, so the
   prediction is for the events the measurement replays, not for the scenario's
   nominal rates, which a short run's Poisson arrivals miss by several percent; with
   calibrations at two or more fractions, each stage's cost is carried to the target
   load by how it changed with the host's busy share between them (`monitor.carry`;
   costs fall as the host gets busier, and one run cannot show by how much:
   docs/accuracy.md), otherwise the one run's samples are
   drawn again by idle gaps (`monitor.warmth`);
3. measurement replay at the target rates into RUN_DIR/measurement/, analysed;
4. RUN_DIR/report.html and report.md comparing 2 with 3.

One Spark session serves both analyses.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from monitor.errors import InputError
from topologies import Workload, load_case_study

QUICK = {"duration_s": 10.0, "warmup_s": 2.0}
CALIBRATION_FRACTIONS = (0.3, 0.6)


@dataclass
class ValidationResult:
    run_dir: Path
    report_html: Path
    summary: str
    seconds: float


def validate(
    study_file: Path,
    run_dir: Path,
    scenario: str | None = None,
    duration_s: float | None = None,
    quick: bool = False,
    load_scale: float = 1.0,
    calibration_fractions: Sequence[float] = CALIBRATION_FRACTIONS,
    calibration_repeats: int = 1,
    master: str | None = None,
    quiet: bool = False,
) -> ValidationResult:
    # Imported here: `hop` reads CALIBRATION_FRACTIONS for its help text, and the
    # other commands have no use for Spark, pyarrow and pandas.
    from monitor.analysis import analyze
    from monitor.predict import predict
    from monitor.replay import replay
    from monitor.report import render
    from monitor.spark import spark_session

    if not calibration_fractions or not all(0 < f <= 1 for f in calibration_fractions):
        raise InputError(
            f"calibration fractions must be in (0, 1], got {list(calibration_fractions)}"
        )
    if calibration_repeats < 1:
        raise InputError(f"calibration repeats must be at least 1, got {calibration_repeats}")
    carry = len(set(calibration_fractions)) > 1
    if calibration_repeats > 1 and not carry:
        raise InputError("repeated calibrations are pooled across two or more fractions: give two")
    started = time.monotonic()
    durations = dict(QUICK) if quick else {}
    if duration_s is not None:
        durations["duration_s"] = duration_s
    run_dir.mkdir(parents=True, exist_ok=True)

    def step(text: str) -> None:
        if not quiet:
            print(f"[{time.monotonic() - started:6.1f} s] {text}", file=sys.stderr, flush=True)

    workload = load_case_study(study_file).workload or Workload()
    calibrations: list[Path] = []
    for k in range(calibration_repeats):
        for fraction in calibration_fractions:
            name = "calibration" if not calibrations else f"calibration-{fraction:g}-{k + 1}"
            step(f"calibration replay at {fraction:g} of the load ({name})")
            run = replay(
                study_file,
                run_dir / name,
                scenario=scenario,
                rate_scale=load_scale * fraction,
                quiet=quiet,
                duration_s=durations.get("duration_s", workload.duration_s) / fraction,
                warmup_s=durations.get("warmup_s", workload.warmup_s) / fraction,
            )
            calibrations.append(run.run_dir)
    spark = spark_session(master)
    step("analysing the calibration run")
    analyze(calibrations[0], master=master, spark=spark)
    step("predicting the target workload")
    predict(
        calibrations[0],
        rate_scale=1 / calibration_fractions[0],
        measured_rates=True,
        other_runs=calibrations[1:] if carry else (),
    )
    step("measurement replay")
    measurement = replay(
        study_file,
        run_dir / "measurement",
        scenario=scenario,
        rate_scale=load_scale,
        quiet=quiet,
        **durations,
    )
    step("analysing the measurement run")
    analyze(measurement.run_dir, master=master, spark=spark)
    step("writing the report")
    report_html, _, summary = render(run_dir)
    return ValidationResult(run_dir, report_html, summary, time.monotonic() - started)
