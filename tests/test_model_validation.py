"""The model validated against real processes (docs/accuracy.md): characterize tree7 at a low
rate, predict 3x that rate, measure there.

The replays share the seed, and the calibration runs three times longer at a third of
the rates, so all publish the same events (the same families, the same inter-arrival
gaps scaled) and the prediction starts from the rates the calibration measured
(`measured_rates`): what is left to predict is how the network behaves at three times
the load, not which events the random workload happened to draw.

The latency asserted is predicted from eight characterization runs, four at 1x and four
at 2x the rates (`hop predict --other-runs`): each stage carried to 3x along its line
in the host's busy share through the two rates (`monitor.carry`), each rate's repeats
pooled. The rounds' own predictions (one 1x and one 2x run each) and those from the 1x
runs alone (with and without the idle-gap redraw, `monitor.warmth`) are printed beside
it.

The measurement is made four times and the median taken per publisher: on a shared
2-core machine the same 8-second run at 3x gives mean latencies 10-20 % apart from one
run to the next (the whole distribution moves, not a few outliers), and now and then
one run is disturbed far more, which a median leaves out where a mean would not.
Calibrations and measurements alternate, so that a host growing faster as it stays
busy does not favour the runs made last (docs/accuracy.md).

The test prints, besides the latency tables, each stage's mean in the characterization
runs, as carried to 3x and as measured at 3x, and each link's mean delay
(docs/accuracy.md explains them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from broker.local_network import REPO, on_free_ports
from hop.command import run_hop
from monitor.carry import carried, total_rate
from monitor.characterize import Characterization, characterize
from monitor.measured import window_figures
from monitor.predict import predict, target_workload, warmed
from monitor.traces import read_table

pytestmark = pytest.mark.integration

SCALE = 3.0
DURATION_S = 8.0
WARMUP_S = 1.0
THROUGHPUT_TOLERANCE = 0.03
REPETITIONS = 4  # rounds of the three runs (1x, 2x, 3x)
# The second characterization run's rates, times the first's: 2/3 of the target, as in
# `hop validate` (calibrations at 0.3 and 0.6 of the load). Two rates closer together
# (1x and 1.5x) leave the line through them to the runs' noise: on a slow hour the stage
# costs hardly moved between them, and the extrapolation to 3x missed by far.
SECOND = 2.0
# The model's latency target at three times the characterized load, asserted; the
# stages are carried along the host's busy share (`monitor.carry`), which erred less
# than a power of the rate did on the same saved runs (docs/accuracy.md).
LATENCY_TARGET = 0.15
DIAGNOSTIC_WALL_S = 5.0  # simulation time of the printed per-round predictions
# The prediction from the 1x run alone (its samples drawn again by idle gaps,
# `monitor.warmth`) is guarded against gross regression only: the host's own speed can
# change between a low-rate run and the 3x runs, a bias that one low-rate run cannot
# show (the second run can), so its error moves between hours by far more than the
# two-rate prediction's.
ONE_RUN_GUARD = 0.50


def hop_replay(tmp_path: Path, name: str, duration_s: float, warmup_s: float, scale: float) -> Path:
    """`hop replay` of tree7 (on ports free now) in a process of its own, as a user runs
    it: the clients then do not share this test process, whose large heap (Spark,
    earlier tests) and threads are the likely reason one calibration came out with
    latencies 60 % too high in a full `make test`."""
    out = tmp_path / name
    result = run_hop(
        "replay",
        str(on_free_ports(REPO / "topologies" / "tree7.toml", tmp_path / f"{name}.toml")),
        "--out",
        str(out),
        "--duration",
        str(duration_s),
        "--warmup",
        str(warmup_s),
        "--rate-scale",
        str(scale),
        "--quiet",
        timeout=duration_s + warmup_s + 120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def predicted(run_dir: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Per-broker throughput and per-publisher mean latency (ms) the `sim` method gave,
    the publisher's pairs weighted by their predicted delivery rates."""
    rows = pq.read_table(run_dir / "analysis" / "predictions.parquet").to_pandas()
    rows = rows[rows["method"] == "sim"]
    brokers = rows[(rows["kind"] == "broker") & (rows["metric"] == "throughput")]
    throughput = dict(zip(brokers["entity"], brokers["predicted"], strict=True))
    pairs = rows[(rows["kind"] == "pair") & (rows["metric"] == "latency_ms")].copy()
    pairs[["publisher", "subscriber"]] = pairs["entity"].str.split(">", expand=True)
    weights = _pair_weights(run_dir)
    pairs["weight"] = [
        weights.get((p, s), 0.0)
        for p, s in zip(pairs["publisher"], pairs["subscriber"], strict=True)
    ]
    latency = {
        publisher: float((g["predicted"] * g["weight"]).sum() / g["weight"].sum())
        for publisher, g in pairs.groupby("publisher")
        if g["weight"].sum() > 0
    }
    return throughput, latency


def _pair_weights(run_dir: Path) -> dict[tuple[str, str], float]:
    """Deliveries per (publisher, subscriber) in the characterization: the pairs'
    shares of a publisher's deliveries do not change with its rate."""
    dels = read_table(run_dir, "deliveries").table.select(["publisher", "subscriber"]).to_pandas()
    return {k: float(v) for k, v in dels.groupby(["publisher", "subscriber"]).size().items()}


def stage_columns(low: Characterization, high: Characterization) -> dict[str, dict[str, float]]:
    """The stage means (`Characterization.stage_means_us`) of one round's two
    characterization runs, and of the 1x run's samples drawn again by idle gaps for 3x
    the load (`warmed`)."""
    target = target_workload(low, None, None, SCALE, True)
    return {
        "at_1x": low.stage_means_us(),
        f"at_{SECOND}x": high.stage_means_us(),
        "drawn_for_3x": warmed(low, target).stage_means_us(),
    }


def calibrated_prediction(
    calibration: Path, warm: bool = True, others: Sequence[Path] = (), wall_s: float = 10.0
) -> tuple[dict[str, float], ...]:
    """`predicted` for 3x the load of a calibration run (and other runs of its workload)."""
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


def test_three_times_the_load_is_predicted_from_low_load_runs(tmp_path: Path) -> None:
    # The three runs of a round follow each other, so that a drift of the host during
    # the test (measured latencies falling 15 % over three measurements in one `make
    # test` that ran them after all the calibrations) weighs on all sides alike.
    rounds = []
    for k in range(REPETITIONS):
        calibration = hop_replay(
            tmp_path, f"calibration{k}", DURATION_S * SCALE, WARMUP_S * SCALE, 1.0
        )
        second = hop_replay(
            tmp_path, f"second{k}", DURATION_S * SCALE / SECOND, WARMUP_S * SCALE / SECOND, SECOND
        )
        measurement = hop_replay(tmp_path, f"measurement{k}", DURATION_S, WARMUP_S, SCALE)
        rounds.append((calibration, second, measurement))
    calibrations = [c for c, _, _ in rounds]
    seconds = [s for _, s, _ in rounds]
    # The prediction asserted: from all characterization runs (each rate's repeats
    # pooled, `monitor.carry`).
    want_throughput, want_latency = calibrated_prediction(
        calibrations[0], others=[*calibrations[1:], *seconds]
    )
    # Each run characterized once for the tables printed below.
    chars = {run: characterize(run) for run_round in rounds for run in run_round}
    pairwise, one_run, as_measured, stages = [], [], [], []
    for calibration, second, _ in rounds:
        wall = DIAGNOSTIC_WALL_S
        pairwise.append(calibrated_prediction(calibration, others=[second], wall_s=wall)[1])
        one_run.append(calibrated_prediction(calibration, wall_s=wall)[1])
        as_measured.append(calibrated_prediction(calibration, warm=False, wall_s=wall)[1])
        stages.append(stage_columns(chars[calibration], chars[second]))
    pooled = carried(
        [chars[run] for run in [*calibrations, *seconds]],
        SCALE * total_rate(chars[calibrations[0]]),
    )
    runs = [window_figures(measurement) for _, _, measurement in rounds]
    throughput = pd.DataFrame([t for t, _ in runs]).median().to_dict()
    by_run = pd.DataFrame([lat for _, lat in runs])
    latency = by_run.median().to_dict()

    errors = pd.DataFrame(
        {
            "predicted": pd.Series(want_throughput),
            "measured": pd.Series(throughput),
        }
    )
    errors["error"] = errors["predicted"] / errors["measured"] - 1
    latencies = pd.DataFrame(
        {
            "predicted": pd.Series(want_latency),
            "measured": pd.Series(latency),
            "one_round": pd.DataFrame(pairwise).median(),
            "one_run": pd.DataFrame(one_run).median(),
            "as_measured": pd.DataFrame(as_measured).median(),
        }
    )
    for column in ("predicted", "one_round", "one_run", "as_measured"):
        latencies[f"{column}_error"] = latencies[column] / latencies["measured"] - 1
    # Where the latency error lives: each stage's mean (median over the rounds) in the
    # two characterization runs, as the model uses it at 3x, and as measured at 3x.
    stage_table = pd.DataFrame(
        {
            **{column: pd.DataFrame([c[column] for c in stages]).median() for column in stages[0]},
            "carried_to_3x": pd.Series(pooled.stage_means_us()),
            "measured_3x": pd.DataFrame([chars[m].stage_means_us() for _, _, m in rounds]).median(),
        }
    )
    links = pd.DataFrame(
        {
            f"at_{scale}x": pd.DataFrame([chars[r].link_means_us() for r in runs]).median()
            for scale, runs in (("1", calibrations), ("3", [m for _, _, m in rounds]))
        }
    )
    one_round_errors = pd.DataFrame(pairwise).T.div(pd.Series(latency), axis=0) - 1
    report = (
        f"\nthroughput (events/s):\n{errors.to_string()}"
        f"\nmean latency (ms):\n{latencies.to_string()}"
        f"\nmean of each stage (us):\n{stage_table.to_string()}"
        f"\nmean delay of each link (us):\n{links.to_string()}"
        f"\nerror of each round's own two-run prediction:\n{one_round_errors.to_string()}"
        f"\nmeasured latency per round (ms):\n{by_run.T.to_string()}"
    )
    print(report)
    assert set(errors.index) == {str(b) for b in range(1, 8)}, report
    assert errors["error"].abs().max() <= THROUGHPUT_TOLERANCE, report
    assert set(latencies.index) == {f"pub{k}" for k in range(1, 5)}, report
    worst = latencies["predicted_error"].abs().max()
    one_run_worst = latencies["one_run_error"].abs().max()
    print(
        f"worst latency error {worst:.1%} from all runs (target {LATENCY_TARGET:.0%}), "
        f"{latencies['one_round_error'].abs().max():.1%} as the median of the rounds' "
        f"own two-run predictions, {one_run_worst:.1%} from the 1x run alone"
    )
    assert worst <= LATENCY_TARGET, report
    assert one_run_worst <= ONE_RUN_GUARD, report
