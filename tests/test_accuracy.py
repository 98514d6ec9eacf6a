"""Repeated validation on synthetic inputs: the interleaving of the replays, the
bootstrap interval of the measurement, the prediction interval over several
calibrations, the set-aside of disturbed replays, and the report's columns and
summary sentence (no broker is started; `hop validate`'s replays, analyses and
predictions are stand-ins that record what they were asked)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import monitor.analysis
import monitor.predict
import monitor.replay
import monitor.report
import monitor.spark
from monitor.errors import InputError
from monitor.hostload import OTHER_CPU_LIMIT_CORES, Sample, host_load, phase_cores
from monitor.repeats import (
    bootstrap_median_interval,
    measured_summary,
    predicted_summary,
    spread_percent,
)
from monitor.report import ReportError, render
from monitor.report.comparison import compare
from monitor.report.figures import figure_topology
from monitor.report.inputs import TABLES, Layout, Run, other_load, saturation, trace_findings
from monitor.report.text import (
    HostLoadSummary,
    percent_text,
    predictions_section,
    saturation_sentence,
    simulation_rows,
    summary_sentence,
)
from monitor.spark import C1_ONLY
from monitor.validate import (
    QUICK,
    SIMULATION_S,
    Step,
    phase_lengths,
    run_replays,
    schedule,
    validate,
)
from topologies import Workload

REPO = Path(__file__).resolve().parent.parent
STUDY = REPO / "topologies" / "tree7.toml"


# -- interleaving -------------------------------------------------------------------------


def test_schedule_alternates_calibration_sets_and_measurements() -> None:
    steps = schedule(3, (0.3, 0.6), 1)
    assert [(s.repetition, s.kind, s.fraction) for s in steps] == [
        (1, "calibration", 0.3),
        (1, "calibration", 0.6),
        (1, "measurement", 1.0),
        (2, "calibration", 0.3),
        (2, "calibration", 0.6),
        (2, "measurement", 1.0),
        (3, "calibration", 0.3),
        (3, "calibration", 0.6),
        (3, "measurement", 1.0),
    ]
    # Repetition 1 keeps the folder names of a single validation.
    assert [s.name for s in steps[:3]] == ["calibration", "calibration-0.6-1", "measurement"]
    assert [s.name for s in steps[3:6]] == [
        "calibration-r2",
        "calibration-0.6-1-r2",
        "measurement-r2",
    ]
    assert len({s.name for s in steps}) == len(steps)


def test_schedule_with_repeated_calibrations() -> None:
    names = [s.name for s in schedule(2, (0.3, 0.6), 2)]
    assert names == [
        "calibration",
        "calibration-0.6-1",
        "calibration-0.3-2",
        "calibration-0.6-2",
        "measurement",
        "calibration-r2",
        "calibration-0.6-1-r2",
        "calibration-0.3-2-r2",
        "calibration-0.6-2-r2",
        "measurement-r2",
    ]


class Recorder:
    """Stand-ins for replay, analyze, predict and render that log their calls."""

    def __init__(self, disturbed_first: int = 0) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.lengths: list[tuple[float, float | None]] = []  # each replay's duration and warm-up
        self.disturbed_left = disturbed_first
        self.sim_seconds: list[float] = []  # each prediction's limit for the simulation
        self.java_options: list[str] = []  # of each Spark session started

    def spark_session(self, master: str | None = None, java_options: str = "") -> Recorder:
        self.java_options.append(java_options)
        return self  # as the session: its stop() is logged

    def stop(self) -> None:
        self.calls.append(("stop", None))

    def replay(self, study: Path, run_dir: Path, rate_scale: float = 1.0, **kw: Any) -> None:
        self.calls.append(("replay", (run_dir.name, round(rate_scale, 6), kw["duration_s"])))
        self.lengths.append((kw["duration_s"], kw.get("warmup_s")))
        run_dir.mkdir(parents=True)
        disturbed = self.disturbed_left > 0
        self.disturbed_left -= 1
        (run_dir / "manifest.json").write_text(json.dumps({"host_load": {"disturbed": disturbed}}))

    def analyze(self, run_dir: Path, **kw: Any) -> None:
        self.calls.append(("analyze", run_dir.name))

    def predict(self, run_dir: Path, **kw: Any) -> None:
        others = [p.name for p in kw["other_runs"]]
        self.calls.append(("predict", (run_dir.name, others, kw["rate_scale"])))
        self.sim_seconds.append(kw["max_wall_s"])

    def render(self, run_dir: Path) -> tuple[Path, Path, str]:
        self.calls.append(("render", run_dir.name))
        return run_dir / "report.html", run_dir / "report.md", "summary"


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(monitor.replay, "replay", rec.replay)
    monkeypatch.setattr(monitor.analysis, "analyze", rec.analyze)
    monkeypatch.setattr(monitor.predict, "predict", rec.predict)
    monkeypatch.setattr(monitor.report, "render", rec.render)
    monkeypatch.setattr(monitor.spark, "spark_session", rec.spark_session)
    return rec


def test_validate_runs_calibrations_and_measurements_in_alternation(
    recorder: Recorder, tmp_path: Path
) -> None:
    validate(STUDY, tmp_path, quick=True, repeats=2, quiet=True, load_scale=2.0)
    replays = [args for name, args in recorder.calls if name == "replay"]
    assert replays == [
        ("calibration", 0.6, pytest.approx(10 / 0.3)),
        ("calibration-0.6-1", 1.2, pytest.approx(10 / 0.6)),
        ("measurement", 2.0, 10.0),
        ("calibration-r2", 0.6, pytest.approx(10 / 0.3)),
        ("calibration-0.6-1-r2", 1.2, pytest.approx(10 / 0.6)),
        ("measurement-r2", 2.0, 10.0),
    ]
    # Every replay runs before any analysis; each repetition predicts from its own
    # calibrations; repetition 1 is analysed with Spark.
    names = [name for name, _ in recorder.calls]
    assert names.index("analyze") > max(i for i, n in enumerate(names) if n == "replay")
    predicts = [args for name, args in recorder.calls if name == "predict"]
    assert predicts == [
        ("calibration", ["calibration-0.6-1"], pytest.approx(1 / 0.3)),
        ("calibration-r2", ["calibration-0.6-1-r2"], pytest.approx(1 / 0.3)),
    ]
    assert [a for n, a in recorder.calls if n == "analyze"] == ["calibration", "measurement"]
    assert recorder.java_options == [C1_ONLY]  # one session, for runs without hop rows
    assert names[-3:] == ["analyze", "stop", "render"]  # stopped once the analyses are done
    record = json.loads((tmp_path / "validation.json").read_text())
    assert record["repetitions"] == [
        {"calibrations": ["calibration", "calibration-0.6-1"], "measurement": "measurement"},
        {
            "calibrations": ["calibration-r2", "calibration-0.6-1-r2"],
            "measurement": "measurement-r2",
        },
    ]
    assert record["order"] == [r[0] for r in replays]


def test_phase_lengths_given_then_quick_then_the_workloads() -> None:
    workload = Workload(duration_s=60.0, warmup_s=5.0)
    assert phase_lengths(workload, 1.0) == (60.0, 5.0)
    assert phase_lengths(workload, 0.5) == (120.0, 10.0)  # the same events, slower
    assert phase_lengths(workload, 1.0, quick=True) == (QUICK["duration_s"], QUICK["warmup_s"])
    assert phase_lengths(workload, 0.5, True, duration_s=2.0) == (4.0, 2 * QUICK["warmup_s"])
    assert phase_lengths(workload, 1.0, True, warmup_s=0.0) == (QUICK["duration_s"], 0.0)
    assert phase_lengths(workload, 1.0, False, 3.0, 0.5) == (3.0, 0.5)
    with pytest.raises(InputError, match="duration must be"):
        phase_lengths(workload, 1.0, duration_s=0.0)
    with pytest.raises(InputError, match="warm-up must be"):
        phase_lengths(workload, 1.0, warmup_s=float("nan"))


def test_validate_passes_the_warm_up_to_every_replay(recorder: Recorder, tmp_path: Path) -> None:
    validate(STUDY, tmp_path, quick=True, duration_s=2.0, warmup_s=0.5, quiet=True)
    assert recorder.lengths == [
        pytest.approx((2 / 0.3, 0.5 / 0.3)),
        pytest.approx((2 / 0.6, 0.5 / 0.6)),
        (2.0, 0.5),
    ]


def test_validate_refuses_bad_repeats(recorder: Recorder, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="repeats must be at least 1"):
        validate(STUDY, tmp_path, repeats=0, quiet=True)
    with pytest.raises(InputError, match="disturbed retries"):
        validate(STUDY, tmp_path, disturbed_retries=-1, quiet=True)
    with pytest.raises(InputError, match="warm-up must be"):
        validate(STUDY, tmp_path, warmup_s=-1.0, quiet=True)
    with pytest.raises(InputError, match="simulation seconds must be"):
        validate(STUDY, tmp_path, sim_seconds=0.0, quiet=True)
    assert recorder.calls == []


def test_validate_gives_every_prediction_the_simulations_seconds(
    recorder: Recorder, tmp_path: Path
) -> None:
    validate(STUDY, tmp_path, quick=True, repeats=2, quiet=True, sim_seconds=3.5)
    assert recorder.sim_seconds == [3.5, 3.5]
    validate(STUDY, tmp_path / "default", quick=True, quiet=True)
    assert recorder.sim_seconds[2:] == [SIMULATION_S]


def test_disturbed_replays_are_set_aside_and_run_again_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    rec = Recorder(disturbed_first=2)
    steps = [Step(1, "calibration", 0.5, "calibration"), Step(1, "measurement", 1.0, "measurement")]

    def replay_step(step: Step, folder: Path) -> None:
        rec.replay(STUDY, folder, step.fraction, duration_s=1.0)

    record = run_replays(steps, tmp_path, replay_step, 1, lambda _: None)
    # The calibration was disturbed twice: once set aside, then kept (retries spent);
    # the measurement ran once, quiet.
    assert record == {
        "order": ["calibration", "calibration", "measurement"],
        "set_aside": ["calibration-disturbed-1"],
        "disturbed": ["calibration"],
    }
    assert (tmp_path / "calibration-disturbed-1" / "manifest.json").exists()
    assert (tmp_path / "calibration" / "manifest.json").exists()

    rec = Recorder(disturbed_first=1)
    record = run_replays(steps, tmp_path / "again", replay_step, 2, lambda _: None)
    assert record["set_aside"] == ["calibration-disturbed-1"] and record["disturbed"] == []


@pytest.mark.parametrize(
    ("manifest", "said"),
    [
        ({"host_load": {"disturbed": "yes"}}, "host_load.disturbed must be"),
        (None, "manifest.json: unreadable"),
    ],
)
def test_a_replay_manifest_validate_cannot_read_is_named(
    tmp_path: Path, manifest: dict[str, Any] | None, said: str
) -> None:
    """Whether a replay was disturbed decides whether it runs again: a field that is not
    a flag is refused, naming the file and the field, not taken as true."""

    def replay_step(step: Step, folder: Path) -> None:
        folder.mkdir()
        (folder / "manifest.json").write_text("" if manifest is None else json.dumps(manifest))

    steps = [Step(1, "calibration", 0.5, "calibration")]
    with pytest.raises(InputError, match=said) as raised:
        run_replays(steps, tmp_path, replay_step, 1, lambda _: None)
    assert str(tmp_path / "calibration" / "manifest.json") in str(raised.value)


# -- measurement and prediction intervals -------------------------------------------------


def test_bootstrap_interval_of_the_median() -> None:
    rng = np.random.default_rng(7)
    values = rng.normal(10.0, 1.0, size=100)
    lo, hi = bootstrap_median_interval(values)
    assert lo < np.median(values) < hi
    # The median of 100 normal values has a standard error of about 1.2533 / 10.
    assert 0.3 < hi - lo < 0.7
    # Two runs: the interval is their range; one run has none.
    assert bootstrap_median_interval([3.0, 5.0]) == (3.0, 5.0)
    assert all(np.isnan(bootstrap_median_interval([3.0])))


def test_percentages_in_the_summary_keep_small_spreads_but_not_rounding() -> None:
    assert [percent_text(v) for v in (12.345, 0.1, 0.034, -0.034)] == [
        "12.3",
        "0.1",
        "0.034",
        "-0.034",
    ]
    # an unsaturated M/M/1 throughput is the measured rate itself: its error is rounding
    assert [percent_text(v) for v in (1e-9, 0.0, -4e-7)] == ["0.0", "0.0", "0.0"]


def test_spread_is_the_furthest_run_from_the_median() -> None:
    assert spread_percent([10.0, 11.0, 13.0]) == pytest.approx(2 / 11 * 100)
    assert np.isnan(spread_percent([4.0]))


def test_measured_summary_over_repetitions() -> None:
    reps = [
        pd.Series({"a": 2.0, "b": 10.0}),
        pd.Series({"a": 3.0, "b": 10.0}),
        pd.Series({"a": 4.0}),
    ]
    out = measured_summary(reps).set_index("entity")
    assert out.loc["a", "measured"] == 3.0 and out.loc["a", "runs"] == 3
    assert out.loc["a", "spread_%"] == pytest.approx(100 / 3)
    assert out.loc["a", "meas_ci_low"] >= 2.0 and out.loc["a", "meas_ci_high"] <= 4.0
    assert out.loc["b", "measured"] == 10.0 and out.loc["b", "runs"] == 2


def _prediction(predicted: float, half: float | None) -> pd.DataFrame:
    low = None if half is None else predicted - half
    high = None if half is None else predicted + half
    return pd.DataFrame(
        {"entity": ["p"], "predicted": [predicted], "ci_low": [low], "ci_high": [high]}
    )


def test_prediction_interval_covers_the_calibrations_and_the_sampling_error() -> None:
    reps = [_prediction(2.0, 0.05), _prediction(2.3, 0.05), _prediction(2.1, 0.04)]
    row = predicted_summary(reps, "sim").iloc[0]
    assert row["sim"] == pytest.approx(2.1)  # the median prediction
    assert row["sim_ci_low"] == pytest.approx(1.95)  # lowest prediction's own interval
    assert row["sim_ci_high"] == pytest.approx(2.35)
    # Without sampling error (mm1), the interval is the predictions' range...
    row = predicted_summary([_prediction(x, None) for x in (2.0, 2.3, 2.1)], "mm1").iloc[0]
    assert (row["mm1_ci_low"], row["mm1"], row["mm1_ci_high"]) == pytest.approx((2.0, 2.1, 2.3))
    # ... and one calibration gives the simulation's own interval, or a point.
    row = predicted_summary([_prediction(2.0, 0.05)], "sim").iloc[0]
    assert (row["sim_ci_low"], row["sim_ci_high"]) == pytest.approx((1.95, 2.05))
    row = predicted_summary([_prediction(2.0, None)], "mm1").iloc[0]
    assert np.isnan(row["mm1_ci_low"]) and np.isnan(row["mm1_ci_high"])


# -- the report ---------------------------------------------------------------------------


def _predictions(broker: float, pairs: dict[str, float]) -> pd.DataFrame:
    rows = [("broker", "1", "throughput", broker)]
    rows += [("pair", entity, "latency_ms", value) for entity, value in pairs.items()]
    frame = pd.DataFrame(rows, columns=["kind", "entity", "metric", "predicted"])
    frame["method"] = "sim"
    frame["ci_low"] = frame["predicted"] * 0.99
    frame["ci_high"] = frame["predicted"] * 1.01
    return frame


def _measurement(broker: float, pairs: dict[str, float]) -> tuple[pd.Series, pd.Series]:
    return pd.Series({"1": broker}), pd.Series(pairs)


PAIRS = pd.DataFrame(
    {
        "publisher": ["pub1", "pub2", "pub3"],
        "subscriber": ["sub1", "sub1", "sub1"],
        "deliveries": [100, 80, 60],
        "hops": [1, 3, 3],
    }
)


def test_report_says_whether_each_prediction_lies_inside_the_measurement_interval() -> None:
    # pub1>sub1 measured 2.0, 2.2, 2.4 (spread 9.1 %), predicted 2.25: inside, within.
    # pub2>sub1 measured 3.0, 3.1, 3.2 (spread 3.2 %), predicted 4.0: outside.
    # pub3>sub1 measured 1.0, 1.5, 2.0 (spread 33 %), predicted 1.4: inside, within.
    measurements = [
        _measurement(50.0, {"pub1>sub1": 2.0, "pub2>sub1": 3.0, "pub3>sub1": 1.0}),
        _measurement(51.0, {"pub1>sub1": 2.2, "pub2>sub1": 3.1, "pub3>sub1": 1.5}),
        _measurement(52.0, {"pub1>sub1": 2.4, "pub2>sub1": 3.2, "pub3>sub1": 2.0}),
    ]
    predictions = [
        _predictions(51.2, {"pub1>sub1": 2.25, "pub2>sub1": 3.9, "pub3>sub1": 1.4}),
        _predictions(51.0, {"pub1>sub1": 2.2, "pub2>sub1": 4.0, "pub3>sub1": 1.3}),
        _predictions(51.3, {"pub1>sub1": 2.3, "pub2>sub1": 4.1, "pub3>sub1": 1.5}),
    ]
    comparison = compare(predictions, measurements, PAIRS)
    lat = comparison.latency.set_index("entity")
    assert lat.loc["pub1>sub1", "measured"] == pytest.approx(2.2)
    assert lat.loc["pub1>sub1", "spread_%"] == pytest.approx(0.2 / 2.2 * 100)
    assert lat.loc["pub1>sub1", "sim"] == pytest.approx(2.25)
    assert lat.loc["pub1>sub1", "sim_in_meas_ci"] == "yes"
    assert lat.loc["pub2>sub1", "sim_in_meas_ci"] == "no"
    assert lat.loc["pub2>sub1", "sim_ci_low"] == pytest.approx(3.9 * 0.99)
    assert comparison.throughput.iloc[0]["sim_in_meas_ci"] == "yes"
    s = comparison.summary
    assert s["latency_sim_within_spread"] == 2 and s["latency_sim_inside"] == 2
    sentence = summary_sentence(comparison, "s1")
    assert "medians of 3 interleaved repetitions" in sentence
    assert "within the measurement's own run-to-run spread (mean 15.2 %) for 2 of 3 pairs" in (
        sentence
    )
    assert "inside its 95 % interval for 2 of 3" in sentence
    assert "throughput 1.95 %" in sentence  # the thesis' figure stays beside


def test_one_measurement_gives_no_verdict() -> None:
    comparison = compare(
        [_predictions(51.0, {"pub1>sub1": 2.2, "pub2>sub1": 3.3, "pub3>sub1": 1.0})],
        [_measurement(50.0, {"pub1>sub1": 2.0, "pub2>sub1": 3.0, "pub3>sub1": 1.0})],
        PAIRS,
    )
    assert "spread_%" not in comparison.latency and "sim_in_meas_ci" not in comparison.latency
    assert comparison.latency.set_index("entity").loc["pub2>sub1", "sim_err_%"] == (
        pytest.approx(10.0)
    )
    sentence = summary_sentence(comparison, None)
    assert "its run-to-run spread is unknown" in sentence
    assert "neither confirm nor refute" in sentence


def _manifest(other: float) -> dict[str, Any]:
    t0 = 1_000_000_000_000
    samples = [Sample(t0, 0.0, 0.0), Sample(t0 + 10**10, 10 * (0.5 + other), 5.0, 0.1)]
    bounds = {"warmup": (t0, t0 + 2 * 10**9), "measure": (t0 + 2 * 10**9, t0 + 10**10)}
    return {"host_load": host_load(samples, bounds)}


def test_host_load_from_samples_and_the_disturbed_mark() -> None:
    quiet, busy = _manifest(0.05)["host_load"], _manifest(0.8)["host_load"]
    assert quiet["phases"]["measure"] == {
        "seconds": 8.0,
        "host_cores": pytest.approx(0.55),
        "run_cores": pytest.approx(0.5),
        "other_cores": pytest.approx(0.05),
        "steal_cores": pytest.approx(0.01),
    }
    assert quiet["disturbed"] is False and busy["disturbed"] is True
    assert busy["phases"]["warmup"]["other_cores"] == pytest.approx(0.8)
    edge = _manifest(OTHER_CPU_LIMIT_CORES + 0.01)["host_load"]
    assert edge["disturbed"] is True
    # Not judged (an attached run): recorded, no mark.
    samples = [Sample(0, 0.0, 0.0), Sample(10**9, 1.0, 0.0)]
    assert host_load(samples, {"measure": (0, 10**9)}, judge=False)["disturbed"] is None


@given(
    st.lists(
        st.tuples(st.integers(1, 10**9), st.floats(0, 2), st.floats(0, 1), st.floats(0, 0.1)),
        min_size=2,
        max_size=8,
    ),
    st.floats(0, 1),
    st.floats(0, 1),
)
def test_a_phase_reads_the_counters_by_linear_interpolation(
    steps: list[tuple[int, float, float, float]], a: float, b: float
) -> None:
    """Between samples at any times, as numpy's `interp` reads them."""
    t, host, run, steal = [10**12], [0.0], [0.0], [0.0]
    for gap, host_step, run_step, steal_step in steps:
        t.append(t[-1] + gap)
        host.append(host[-1] + host_step)
        run.append(run[-1] + min(run_step, host_step))
        steal.append(steal[-1] + min(steal_step, host_step))
    samples = [Sample(*sample) for sample in zip(t, host, run, steal, strict=True)]
    span = t[-1] - t[0]
    start = t[0] + int((span - 1) * min(a, b))
    end = max(t[0] + int(span * max(a, b)), start + 1)
    cores = phase_cores(samples, start, end)
    assert cores is not None
    seconds = (end - start) / 1e9

    def expected(values: list[float]) -> float:
        at = np.interp([start, end], t, values)
        return float(at[1] - at[0]) / seconds

    assert cores["host_cores"] == pytest.approx(round(expected(host), 3), abs=2e-3, rel=1e-6)
    assert cores["run_cores"] == pytest.approx(round(expected(run), 3), abs=2e-3, rel=1e-6)
    assert cores["steal_cores"] == pytest.approx(round(expected(steal), 3), abs=2e-3, rel=1e-6)
    assert phase_cores(samples, t[0] - 1, end) is None
    assert phase_cores(samples, start, start) is None


def _run_folder(
    path: Path,
    rate: float,
    target: float | None,
    same: bool | None,
    asked: dict[str, Any] | None = None,
) -> Path:
    """A run folder with what `other_load` reads: the manifest's nominal total rate and,
    unless `target` is None, a predictions summary for `target` events/s (`same`: its
    `same_as_run`, `asked`: its `target`, each left out when None)."""
    (path / "analysis").mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"total_rate": rate}))
    if target is not None:
        summary: dict[str, Any] = {"target_rates": {"pub1": target / 4, "pub2": target * 3 / 4}}
        if same is not None:
            summary["same_as_run"] = same
        if asked is not None:
            summary["target"] = asked
        (path / "analysis" / "predictions_summary.json").write_text(json.dumps(summary))
    return path


def test_predictions_are_compared_only_with_a_measurement_of_their_load(tmp_path: Path) -> None:
    def single(name: str, rate: float, target: float | None, same: bool | None) -> Any:
        run = _run_folder(tmp_path / name, rate, target, same)
        return other_load(Layout([run], [[]], [run]))

    assert single("own", 45.0, 45.0, True) is None
    assert single("double", 45.0, 90.0, False) == (90.0, 45.0)
    assert single("reached", 45.0, 47.3, True) is None  # --measured-rates: its own load
    assert single("older", 45.0, 90.0, None) == (90.0, 45.0)  # a summary without the flag
    assert single("unpredicted", 45.0, None, None) is None

    def validated(name: str, target: float, asked: dict[str, Any] | None) -> Any:
        """A hop validate folder: the calibration at 0.3 of the measurement's 45/s."""
        calibration = _run_folder(tmp_path / name / "calibration", 13.5, target, False, asked)
        measurement = _run_folder(tmp_path / name / "measurement", 45.0, None, None)
        return other_load(Layout([calibration], [[]], [measurement]))

    # As hop validate predicts: the rates the calibration reached (so not the nominal
    # ones exactly), scaled by 1/0.3.
    by_validate = {"workload": None, "scenario": None, "rate_scale": 1 / 0.3}
    assert validated("v", 47.5, {**by_validate, "measured_rates": True}) is None
    assert validated("older-v", 47.5, None) is None  # a summary without the record
    # hop predict run again on the calibration, for another load:
    double = {**by_validate, "scenario": "double", "rate_scale": 1.0, "measured_rates": False}
    assert validated("again", 27.0, double) == (27.0, 45.0)
    scaled = {**by_validate, "rate_scale": 2 / 0.3, "measured_rates": True}
    assert validated("scaled", 95.0, scaled) == (95.0, 45.0)


def test_the_summary_says_when_the_model_finds_the_host_saturated(tmp_path: Path) -> None:
    def layout(name: str, methods: dict[str, Any] | None) -> Layout:
        path = tmp_path / name
        (path / "analysis").mkdir(parents=True)
        if methods is not None:
            summary = json.dumps({"methods": methods})
            (path / "analysis" / "predictions_summary.json").write_text(summary)
        return Layout([path], [[]], [path])

    full = {"bottleneck": "3", "saturated_hosts": ["host"]}
    assert saturation(layout("both", {"mm1": full, "sim": full})) == "3"
    assert saturation(layout("sim", {"mm1": {"bottleneck": "1"}, "sim": full})) == "3"
    assert saturation(layout("neither", {"mm1": {**full, "saturated_hosts": []}})) is None
    assert saturation(layout("unpredicted", None)) is None
    with pytest.raises(ReportError, match="methods.mm1.saturated_hosts must be a list"):
        saturation(layout("bad", {"mm1": {**full, "saturated_hosts": "host"}}))
    assert "saturated (bottleneck: broker 3): M/M/1 has no steady state" in (
        saturation_sentence("3")
    )


def test_the_header_says_how_each_repetitions_simulation_ended(tmp_path: Path) -> None:
    def calibration(name: str, sim: dict[str, Any] | None) -> Path:
        path = tmp_path / name
        (path / "analysis").mkdir(parents=True)
        methods = {"mm1": {"bottleneck": "1"}, **({} if sim is None else {"sim": sim})}
        summary = {"methods": methods}
        (path / "analysis" / "predictions_summary.json").write_text(json.dumps(summary))
        return path

    converged = {"stop_reason": "precision", "limit_s": 20.0, "max_relative_ci": 0.0193}
    at_limit = {"stop_reason": "max_wall_s", "limit_s": 5.0, "max_relative_ci": 0.0735}
    unknown = {"stop_reason": "max_wall_s", "limit_s": 0.01, "max_relative_ci": None}
    runs = [
        calibration("calibration", converged),
        calibration("calibration-r2", at_limit),
        calibration("calibration-r3", unknown),
        calibration("calibration-r4", {"bottleneck": "1"}),  # written before it was recorded
        calibration("calibration-r5", None),  # --method mm1
        tmp_path / "unpredicted",
    ]
    layout = Layout(runs, [[] for _ in runs], runs)
    assert simulation_rows(layout) == [
        ("simulation", "converged; widest 95 % interval +/-1.9 % of its value"),
        (
            "simulation (calibration-r2)",
            "stopped at its 5 s limit; widest 95 % interval +/-7.3 % of its value",
        ),
        (
            "simulation (calibration-r3)",
            "stopped at its 0.01 s limit; no interval for some figures: too short a run "
            "(hop predict --sim-seconds)",
        ),
    ]


def test_predictions_at_another_load_are_shown_per_broker_in_order_and_per_pair() -> None:
    rows = [
        {"kind": "broker", "entity": str(b), "metric": metric, "method": m, "predicted": b}
        for b in (10, 2, 1)
        for m in ("mm1", "sim", "mm1-ps")
        for metric in ("throughput", "utilization")
    ]
    rows += [
        {
            "kind": "pair",
            "entity": "pub1>sub1",
            "metric": "latency_ms",
            "method": m,
            "predicted": 1.5,
        }
        for m in ("mm1", "sim")
    ]
    section = predictions_section(pd.DataFrame(rows), 90.0)
    assert section.title == "Predictions at 90.0 events/s"
    assert section.table is not None
    assert list(section.table.columns) == ["kind", "entity", "predicted", "mm1", "sim"]
    assert list(section.table["entity"]) == ["1", "2", "10", "pub1>sub1"]
    assert list(section.table["sim"]) == [1.0, 2.0, 10.0, 1.5]


def test_report_lists_what_the_analysis_could_not_read_per_run(tmp_path: Path) -> None:
    """A report built on traces the analysis read only in part says so, run by run."""
    runs = {"calibration": ["hops-broker3-1.arrow: truncated after 100 rows (...)"], "m": []}
    for name, problems in runs.items():
        (tmp_path / name / "analysis").mkdir(parents=True)
        summary = {"problems": problems, "warnings": [f"class (t, pub1) at broker 2: {name}"]}
        (tmp_path / name / "analysis" / "summary.json").write_text(json.dumps(summary))
    layout = Layout([tmp_path / "calibration"], [[]], [tmp_path / "m"])
    findings = trace_findings(layout)
    assert findings is not None
    assert findings.values.tolist() == [
        ["calibration run", "problem", "hops-broker3-1.arrow: truncated after 100 rows (...)"],
        ["calibration run", "warning", "class (t, pub1) at broker 2: calibration"],
        ["measurement run", "warning", "class (t, pub1) at broker 2: m"],
    ]
    for name in runs:
        (tmp_path / name / "analysis" / "summary.json").write_text(
            json.dumps({"problems": [], "warnings": []})
        )
    assert trace_findings(layout) is None


def test_report_names_the_disturbed_replays() -> None:
    load = HostLoadSummary.of(
        [("calibration", _manifest(0.05)), ("measurement", _manifest(0.9))],
        set_aside=["measurement-disturbed-1"],
    )
    assert load is not None
    assert list(load.table["disturbed"]) == ["quiet", "DISTURBED"]
    sentence = load.sentence()
    assert "NOT quiet" in sentence and "(measurement)" in sentence
    assert "up to 0.90 cores in a phase, 0.90 on average" in sentence  # by how much
    assert "1 disturbed replays were set aside" in sentence
    quiet = HostLoadSummary.of([("calibration", _manifest(0.05))])
    assert quiet is not None and "at most 0.2 cores" in quiet.sentence()
    assert HostLoadSummary.of([("old", {})]) is None


def test_a_spread_under_a_tenth_of_a_percent_is_not_printed_as_none() -> None:
    """Throughput replays of the same events differ by hundredths of a percent: the
    sentence gives that spread in figures, beside errors that exceed it."""
    comparison = compare(
        [_predictions(50.2, {"pub1>sub1": 2.2}), _predictions(50.2, {"pub1>sub1": 2.3})],
        [_measurement(50.0, {"pub1>sub1": 2.0}), _measurement(50.03, {"pub1>sub1": 2.4})],
        PAIRS,
    )
    sentence = summary_sentence(comparison, None)
    assert (
        "throughput (sim) mean error 0.4 %, worst 0.4 %, within the measurement's own "
        "run-to-run spread (mean 0.03 %) for 0 of 1 brokers"
    ) in sentence, sentence


def test_no_spread_is_said_as_such() -> None:
    """Replays of the same events can give the very same throughput: there is then no
    spread to be within, and the sentence says so rather than 'within for 0 of 1'."""
    comparison = compare(
        [_predictions(51.0, {"pub1>sub1": 2.2}), _predictions(51.1, {"pub1>sub1": 2.3})],
        [_measurement(50.0, {"pub1>sub1": 2.0}), _measurement(50.0, {"pub1>sub1": 2.4})],
        PAIRS,
    )
    sentence = summary_sentence(comparison, None)
    assert "throughput (sim) mean error 2.1 %, worst 2.1 %, every measurement the same" in (
        sentence
    )
    assert "latency (sim) mean error 2.3 %" in sentence
    assert "within the measurement's own run-to-run spread (mean 9.1 %) for 1 of 1 pairs" in (
        sentence
    )


# -- a run folder the report cannot use ---------------------------------------------------

PHASES = {"start_ns": 1, "measure_start_ns": 10**9, "measure_end_ns": 3 * 10**9}
MANIFEST = {  # the fields hop report reads, as hop replay writes them
    "case_study": {"name": "tree7", "routing": "hierarchical"},
    "scenario": None,
    "total_rate": 45.0,
    "workload": {"warmup_s": 1.0, "duration_s": 2.0},
    "phases": {**PHASES, "drain_end_ns": 4 * 10**9, "cpu_s": {"1": 0.1}},
    "counts": {"published": 90, "delivered": 180, "lost": 0},
    "host": {"name": "vm", "cores": 2, "platform": "Linux"},
    "python": "3.11.7",
    "packages": {"pyarrow": "26.0.1"},
    "git_revision": None,
}


def _analysed_run(path: Path, **manifest: Any) -> Path:
    """A run folder as `hop report` reads it before drawing anything: a manifest (with
    `manifest`'s fields in place of `MANIFEST`'s), and each analysis table as a folder
    of one part, one row of the columns the report uses."""
    (path / "analysis").mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({**MANIFEST, **manifest}))
    for name, columns in TABLES.items():
        folder = path / "analysis" / f"{name}.parquet"
        folder.mkdir()
        frame = pd.DataFrame({column: [1] for column in columns or ("path",)})
        frame.to_parquet(folder / "part-00000.parquet")
    return path


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"case_study": 5}, "case_study must be a table (a JSON object), got 5"),
        ({"counts": "x"}, 'counts must be a table (a JSON object), got "x"'),
        ({"workload": [1]}, "workload must be a table (a JSON object), got [1]"),
        (
            {"workload": {"warmup_s": 1.0, "duration_s": "two"}},
            'workload.duration_s must be a finite number at least 0, got "two"',
        ),
        ({"total_rate": "x"}, 'total_rate must be a finite number at least 0, got "x"'),
        (
            {"phases": {**PHASES, "measure_start_ns": "soon"}},
            'phases.measure_start_ns must be a whole number of nanoseconds, got "soon"',
        ),
        (
            {"host_load": {"disturbed": "yes"}},
            'host_load.disturbed must be true or false, got "yes"',
        ),
        ({"host": {"name": "vm", "cores": 2}}, "host.platform is missing"),
    ],
)
def test_the_report_names_a_manifest_field_it_cannot_use(
    tmp_path: Path, fields: dict[str, Any], said: str
) -> None:
    run = _analysed_run(tmp_path / "run", **fields)
    with pytest.raises(InputError) as refused:
        render(run)
    assert str(refused.value) == f"{run / 'manifest.json'}: {said}"


def _cut_in_half(folder: Path) -> None:
    part = next(folder.glob("part-*"))
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])


def _emptied(folder: Path) -> None:
    for part in folder.iterdir():
        part.unlink()


@pytest.mark.parametrize(
    ("table", "damage", "said"),
    [
        ("brokers", _cut_in_half, "unreadable (Error creating dataset."),
        ("latency", lambda f: next(f.glob("part-*")).write_text("garbage"), "unreadable ("),
        (
            "routing_probabilities",
            _emptied,
            "no column from_broker, to_broker, forwarded, arrived in it; run `hop analyze",
        ),
    ],
)
def test_the_report_names_an_analysis_table_it_cannot_read(
    tmp_path: Path, table: str, damage: Any, said: str
) -> None:
    run = _analysed_run(tmp_path / "run")
    damage(run / "analysis" / f"{table}.parquet")
    with pytest.raises(ReportError) as refused:
        Run.load(run)
    assert str(refused.value).startswith(f"{run / 'analysis' / table}.parquet: {said}")
    assert "\n" not in str(refused.value)


TREE7_TEXT = STUDY.read_text()


def test_the_report_draws_the_network_of_a_copy_whose_secrets_are_elsewhere(
    tmp_path: Path,
) -> None:
    """A run folder moved to another host keeps its case study's paths, not its files."""
    run = _analysed_run(tmp_path / "run")
    copy = run / "case_study.toml"
    copy.write_text('auth_secret_file = "/on/the/lab/host/secret"\n' + TREE7_TEXT)
    assert figure_topology(Run.load(run)).startswith("data:image/png;base64,")
    copy.write_text(TREE7_TEXT.replace("[[brokers]]\nid = 1\n", "[[brokers]]\n", 1))
    with pytest.raises(ReportError) as refused:
        figure_topology(Run.load(run))
    assert str(refused.value) == f"{copy}: brokers[0].id: missing required key"


def test_the_report_names_predictions_it_cannot_read(tmp_path: Path) -> None:
    run = _analysed_run(tmp_path / "run")
    (run / "analysis" / "predictions.parquet").write_bytes(b"PAR1")
    with pytest.raises(ReportError) as refused:
        Run.load(run)
    assert str(refused.value).startswith(f"{run / 'analysis' / 'predictions.parquet'}: unreadable")
    assert str(refused.value).endswith(f"run `hop predict {run}` again")


def _summaries(run: Path) -> Layout:
    return Layout([run], [[]], [run])


@pytest.mark.parametrize(
    ("file", "text", "read", "said"),
    [
        ("summary.json", "", trace_findings, "unreadable (Expecting value"),
        ("summary.json", '{"problems": "x"}', trace_findings, 'problems must be a list, got "x"'),
        ("predictions_summary.json", "junk", other_load, "unreadable (Expecting value"),
        ("predictions_summary.json", "[1, 2]", other_load, "not a JSON object (got [1, 2])"),
        (
            "predictions_summary.json",
            '{"target_rates": {"pub1": "x"}}',
            other_load,
            'target_rates.pub1 must be a finite number at least 0, got "x"',
        ),
        (
            "predictions_summary.json",
            '{"methods": {"sim": {"stop_reason": "precision"}}}',
            simulation_rows,
            "methods.sim.limit_s is missing",
        ),
    ],
)
def test_the_report_names_an_analysis_summary_it_cannot_read(
    tmp_path: Path, file: str, text: str, read: Any, said: str
) -> None:
    run = _run_folder(tmp_path / "run", 45.0, None, None)
    (run / "analysis" / file).write_text(text)
    with pytest.raises(ReportError) as refused:
        read(_summaries(run))
    assert str(refused.value).startswith(f"{run / 'analysis' / file}: {said}")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{", "unreadable (Expecting property name"),
        ('{"repetitions": []}', "repetitions must be a list of at least 1 items, got []"),
        (
            '{"repetitions": [{"calibrations": ["c"]}]}',
            "repetitions[0].measurement is missing",
        ),
    ],
)
def test_the_report_names_a_validation_record_it_cannot_read(
    tmp_path: Path, text: str, said: str
) -> None:
    (tmp_path / "validation.json").write_text(text)
    with pytest.raises(ReportError) as refused:
        Layout.of(tmp_path)
    assert str(refused.value).startswith(f"{tmp_path / 'validation.json'}: {said}")
