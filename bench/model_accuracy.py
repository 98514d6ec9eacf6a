"""How accurately the model predicts three times the load: tree7 characterized at a
low rate, predicted at 3x, measured there, several times over.

One *round* replays tree7 (`hop replay`, each run a process of its own, the clients
out of this process's heap) three times in a row: the calibration at the file's rates
(`--seconds` long, 24 s by default), the second characterization at `SECOND` times
them and the measurement at `SCALE` times them, each for `--seconds` divided by its
rate scale and with an eighth of that as warm-up (`bench.rate_response.replay`). All
share the seed, so they publish the same events with the gaps scaled, and the
prediction starts from the rates the calibration measured (`measured_rates`): what is
left to predict is how the network behaves at three times the load. The three runs of
a round follow each other so that a drift of the host weighs on all sides alike.

One *repetition* is what `hop predict --other-runs` gives from all its rounds'
characterization runs (each rate's repeats pooled, `monitor.carry`) against the
median per publisher (and per broker) of its rounds' measurements: the worst
per-broker throughput error and the worst per-publisher mean-latency error. Beside
them, the medians over the rounds of each round's own two-run prediction, of the
prediction from the 1x run alone (samples drawn again by idle gaps, `monitor.warmth`)
and of that run taken as measured.

Why a benchmark and not a test: on this 2-core VM one 8-second run at 3x gives mean
latencies 10-20 % apart from the next (the whole distribution moves), and now and then
one run is disturbed far more; a pass/fail assertion on one repetition then fails
often for no change of the code. The targets (throughput within `THROUGHPUT_TARGET`,
latency within `LATENCY_TARGET`, the one-run prediction within `ONE_RUN_GUARD`) are
judged on the median over the repetitions, and the count of repetitions meeting each
is recorded beside it. Run it on an otherwise idle host: the result records the load
average before and after.

Run: ``python -m bench.model_accuracy [--quick] [--repetitions N] [--rounds R]
[--seconds T]``; writes ``bench/results/model_accuracy.json`` (every repetition's
figures, their median and spread, and whether the targets were met). ``--quick``: two
repetitions of one round, 6 s at 1x (a smoke run: its figures are not the
accuracy). The traces go to a temporary folder.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from bench.common import median, write_result
from bench.rate_response import replay
from broker.local_network import REPO
from broker.process import unwind_on_termination
from monitor.carry import carried, total_rate
from monitor.characterize import Characterization, characterize
from monitor.measured import window_figures
from monitor.predict import predict, target_workload, warmed
from monitor.traces import read_table

STUDY = REPO / "topologies" / "tree7.toml"
SCALE = 3.0
# The second characterization run's rates, times the first's: 2/3 of the target, as in
# `hop validate` (calibrations at 0.3 and 0.6 of the load). With 1.5x the prediction was
# within 8 % in four runs while the VM was fast, but off by 27 % an hour later when it
# had turned slow: its stage costs then did not move between 1x and 1.5x.
SECOND = 2.0
SECONDS_AT_1X = 24.0  # the calibration's duration; the measurement's is a third of it
THROUGHPUT_TARGET = 0.03
LATENCY_TARGET = 0.15  # worst per-publisher latency error at 3x (docs/accuracy.md)
# The prediction from the 1x run alone (no second rate) cannot see a bias of the host
# between rates: it is only guarded against gross regression (it was 10-35 % off in
# different hours of the same day, 47-53 % without the idle-gap redraw).
ONE_RUN_GUARD = 0.50
PREDICTION_WALL_S = 10.0  # simulation time of the prediction judged
DIAGNOSTIC_WALL_S = 5.0  # simulation time of the per-round predictions beside it
FIGURES = (
    "worst_throughput_error",
    "worst_latency_error",
    "one_round_worst",
    "one_run_worst",
    "as_measured_worst",
)
TARGETS = {
    "worst_throughput_error": THROUGHPUT_TARGET,
    "worst_latency_error": LATENCY_TARGET,
    "one_run_worst": ONE_RUN_GUARD,
}


@dataclass(frozen=True)
class Round:
    """The three runs of one round: 1x, `SECOND`x and `SCALE`x the rates."""

    calibration: Path
    second: Path
    measurement: Path


def replay_round(workdir: Path, name: str, seconds: float) -> Round:
    """Replay tree7 at 1x, `SECOND`x and `SCALE`x, one after the other."""
    return Round(
        replay(STUDY, workdir, f"{name}-calibration", seconds, 1.0),
        replay(STUDY, workdir, f"{name}-second", seconds, SECOND),
        replay(STUDY, workdir, f"{name}-measurement", seconds, SCALE),
    )


def predicted(run_dir: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Per-broker throughput and per-publisher mean latency (ms) the `sim` method gave,
    the publisher's pairs weighted by their deliveries in the characterization (a
    pair's share of a publisher's deliveries does not change with its rate)."""
    rows = pq.read_table(run_dir / "analysis" / "predictions.parquet").to_pandas()
    rows = rows[rows["method"] == "sim"]
    brokers = rows[(rows["kind"] == "broker") & (rows["metric"] == "throughput")]
    throughput = dict(zip(brokers["entity"], brokers["predicted"], strict=True))
    pairs = rows[(rows["kind"] == "pair") & (rows["metric"] == "latency_ms")].copy()
    pairs[["publisher", "subscriber"]] = pairs["entity"].str.split(">", expand=True)
    dels = read_table(run_dir, "deliveries").table.select(["publisher", "subscriber"])
    weights = dels.to_pandas().groupby(["publisher", "subscriber"]).size()
    pairs["weight"] = [
        float(weights.get((p, s), 0.0))
        for p, s in zip(pairs["publisher"], pairs["subscriber"], strict=True)
    ]
    latency = {
        publisher: float((g["predicted"] * g["weight"]).sum() / g["weight"].sum())
        for publisher, g in pairs.groupby("publisher")
        if g["weight"].sum() > 0
    }
    return throughput, latency


def calibrated_prediction(
    calibration: Path,
    warm: bool = True,
    others: Sequence[Path] = (),
    wall_s: float = PREDICTION_WALL_S,
) -> tuple[dict[str, float], dict[str, float]]:
    """`predicted` for `SCALE` times the rates a calibration run measured."""
    predict(
        calibration,
        rate_scale=SCALE,
        methods=("sim",),
        measured_rates=True,
        max_wall_s=wall_s,
        warm=warm,
        other_runs=others,
    )
    return predicted(calibration)


def stage_columns(low: Characterization, high: Characterization) -> dict[str, dict[str, float]]:
    """Each stage's mean in a round's two characterization runs, and in the 1x run's
    samples drawn again by idle gaps for `SCALE` times the load (`warmed`)."""
    target = target_workload(low, None, None, SCALE, True)
    return {
        "at_1x": low.stage_means_us(),
        f"at_{SECOND:g}x": high.stage_means_us(),
        "drawn_for_3x": warmed(low, target).stage_means_us(),
    }


def _worst(errors: pd.Series) -> float:
    return float(errors.abs().max())


def evaluate(rounds: Sequence[Round]) -> dict[str, Any]:
    """One repetition's figures from its rounds: the errors of the prediction from all
    characterization runs, and the per-round diagnostics beside them."""
    calibrations = [r.calibration for r in rounds]
    seconds = [r.second for r in rounds]
    want_throughput, want_latency = calibrated_prediction(
        calibrations[0], others=[*calibrations[1:], *seconds]
    )
    chars = {run: characterize(run) for r in rounds for run in (r.calibration, r.second)}
    chars |= {r.measurement: characterize(r.measurement) for r in rounds}
    pairwise, one_run, as_measured, stages = [], [], [], []
    for r in rounds:
        wall = DIAGNOSTIC_WALL_S
        pairwise.append(calibrated_prediction(r.calibration, others=[r.second], wall_s=wall)[1])
        one_run.append(calibrated_prediction(r.calibration, wall_s=wall)[1])
        as_measured.append(calibrated_prediction(r.calibration, warm=False, wall_s=wall)[1])
        stages.append(stage_columns(chars[r.calibration], chars[r.second]))
    pooled = carried(
        [chars[run] for run in [*calibrations, *seconds]],
        SCALE * total_rate(chars[calibrations[0]]),
    )
    measured = [window_figures(r.measurement) for r in rounds]
    throughput = pd.DataFrame([t for t, _ in measured]).median()
    by_round = pd.DataFrame([lat for _, lat in measured])
    latency = by_round.median()

    throughput_error = pd.Series(want_throughput) / throughput - 1
    latency_error = pd.Series(want_latency) / latency - 1
    one_round = pd.DataFrame(pairwise).median() / latency - 1
    one_run_error = pd.DataFrame(one_run).median() / latency - 1
    as_measured_error = pd.DataFrame(as_measured).median() / latency - 1
    stage_table = pd.DataFrame(
        {
            **{c: pd.DataFrame([s[c] for s in stages]).median() for c in stages[0]},
            "carried_to_3x": pd.Series(pooled.stage_means_us()),
            "measured_3x": pd.DataFrame(
                [chars[r.measurement].stage_means_us() for r in rounds]
            ).median(),
        }
    )
    return {
        "brokers": sorted(throughput_error.index, key=int),
        "publishers": sorted(latency_error.index),
        "worst_throughput_error": _worst(throughput_error),
        "worst_latency_error": _worst(latency_error),
        "one_round_worst": _worst(one_round),
        "one_run_worst": _worst(one_run_error),
        "as_measured_worst": _worst(as_measured_error),
        "throughput": _table(
            {"predicted": pd.Series(want_throughput), "measured": throughput},
            throughput_error,
        ),
        "latency_ms": _table(
            {"predicted": pd.Series(want_latency), "measured": latency}, latency_error
        ),
        "measured_latency_ms_per_round": _rounded(by_round.T),
        "stage_means_us": _rounded(stage_table),
    }


def _table(columns: dict[str, pd.Series], error: pd.Series) -> dict[str, dict[str, float]]:
    """{entity: {column: value, "error": relative error}}, rounded for the JSON."""
    return _rounded(pd.DataFrame({**columns, "error": error}))


def _rounded(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    return {
        str(index): {str(k): round(float(v), 4) for k, v in row.items()}
        for index, row in frame.iterrows()
    }


def summarize(repetitions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per figure: median, lowest, highest and spread (highest - lowest) over the
    repetitions; per target: met by the median, and in how many repetitions."""
    figures = {}
    for name in FIGURES:
        values = [r[name] for r in repetitions]
        figures[name] = {
            "median": median(values),
            "min": min(values),
            "max": max(values),
            "spread": max(values) - min(values),
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        }
    targets = {
        name: {
            "target": target,
            "median": figures[name]["median"],
            "target_met": figures[name]["median"] <= target,
            "met_in": sum(r[name] <= target for r in repetitions),
            "repetitions": len(repetitions),
        }
        for name, target in TARGETS.items()
    }
    return {"figures": figures, "targets": targets}


def run(repetitions: int, rounds: int, seconds: float, workdir: Path) -> dict[str, Any]:
    """`repetitions` evaluations of `rounds` rounds each; every repetition's figures
    and their summary."""
    results = []
    load_before = os.getloadavg()
    for k in range(repetitions):
        runs = [replay_round(workdir, f"r{k}-{j}", seconds) for j in range(rounds)]
        figures = evaluate(runs)
        results.append(figures)
        print(_line(k, figures), flush=True)
    return {
        "study": STUDY.name,
        "scale": SCALE,
        "second": SECOND,
        "seconds_at_1x": seconds,
        "rounds_per_repetition": rounds,
        # Other work on the host moves the measured latencies far more than the model's
        # error (one repetition at load 15 on 2 cores: 51 % off): read the figures with it.
        "load_average_1_5_15_min": {"before": load_before, "after": os.getloadavg()},
        "repetitions": results,
        **summarize(results),
    }


def _line(k: int, figures: dict[str, Any]) -> str:
    return (
        f"repetition {k}: throughput worst {figures['worst_throughput_error']:.1%}, "
        f"latency worst {figures['worst_latency_error']:.1%} (target {LATENCY_TARGET:.0%}); "
        f"one round's own {figures['one_round_worst']:.1%}, 1x run alone "
        f"{figures['one_run_worst']:.1%}, as measured {figures['as_measured_worst']:.1%}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 repetitions of 1 round, 6 s")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4, help="rounds per repetition")
    parser.add_argument("--seconds", type=float, default=SECONDS_AT_1X, help="duration at 1x")
    args = parser.parse_args(argv)
    if args.quick:
        args.repetitions, args.rounds, args.seconds = 2, 1, 6.0
    if args.repetitions < 1 or args.rounds < 1:
        parser.error("--repetitions and --rounds must be at least 1")
    unwind_on_termination()  # stop what it started also when killed with SIGTERM
    with tempfile.TemporaryDirectory(prefix="bench-model-accuracy-") as tmp:
        result = run(args.repetitions, args.rounds, args.seconds, Path(tmp))
    result["mode"] = "quick" if args.quick else "full"
    for name, t in result["targets"].items():
        print(
            f"{name}: median {t['median']:.1%} (target {t['target']:.0%}, "
            f"{'met' if t['target_met'] else 'missed'}; met in {t['met_in']} of "
            f"{t['repetitions']} repetitions)"
        )
    print(write_result("model_accuracy", result))


if __name__ == "__main__":
    main()
