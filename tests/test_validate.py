"""`hop validate --quick --repeats 2` end to end on tree7 (its phases cut further by
--duration and --warmup): the replays run interleaved,
the report agrees with the Parquet outputs and the runs' own figures (medians over the
repetitions, intervals, whether each prediction lies inside the measurement's
interval), and it renders in a real browser (headless Chromium) with every figure."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from hop.command import run_hop
from monitor.report.comparison import measurement_of
from tests.capabilities import chromium_path
from tests.test_replay import small_study

pytestmark = [pytest.mark.integration, pytest.mark.needs("java")]  # hop validate runs Spark

SIM_SECONDS = 5.0
"""The simulation's limit per prediction (a quarter of the default: these tests check
what the report makes of the predictions, not their precision)."""


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("validate")
    study, _ = small_study(tmp, "hierarchical")
    out = tmp / "run"
    result = subprocess.run(
        [sys.executable, "-m", "hop", "validate", str(study), "--out", str(out),
         "--quick", "--duration", "2", "--warmup", "0.5", "--load-scale", "2", "--quiet",
         "--repeats", "2", "--disturbed-retries", "0", "--sim-seconds", str(SIM_SECONDS)],
        capture_output=True, text=True, timeout=600, check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Prediction vs measurement" in result.stdout
    return out


def _md_table(md: str, heading: str) -> list[list[str]]:
    """The rows of the first table after `heading` in report.md (header first)."""
    rows: list[list[str]] = []
    for line in md.split(f"## {heading}", 1)[1].splitlines():
        if not line.startswith("|"):
            if rows:
                return rows
            continue
        if not set(line) <= {"|", "-"}:
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_prediction_pools_both_calibrations(validated: Path) -> None:
    """`hop validate` replays the calibration at 0.3 and 0.6 of the load; the
    prediction uses both (pooled, the default trend), and the report's header lists
    both."""
    second = validated / "calibration-0.6-1"
    summary = json.loads(
        (validated / "calibration" / "analysis" / "predictions_summary.json").read_text()
    )
    assert summary["other_runs"] == [str(second)]
    assert summary["trend"] == "none"
    assert json.loads((validated / "validation.json").read_text())["trend"] == "none"
    rates = [
        json.loads((validated / run / "manifest.json").read_text())["total_rate"]
        for run in ("calibration", second.name, "measurement")
    ]
    assert rates[0] < rates[1] < rates[2]
    assert "also used: calibration-0.6-1" in (validated / "report.md").read_text()


def test_each_prediction_says_how_its_simulation_stopped(validated: Path) -> None:
    """The simulation ran under the limit given (`--sim-seconds`); each repetition's
    summary and the report's header say whether it converged or ran out of time, and
    how wide its widest interval was."""
    for calibration in ("calibration", "calibration-r2"):
        summary = json.loads(
            (validated / calibration / "analysis" / "predictions_summary.json").read_text()
        )
        sim = summary["methods"]["sim"]
        assert sim["limit_s"] == SIM_SECONDS
        assert sim["stop_reason"] in ("precision", "max_wall_s")
        assert sim["max_relative_ci"] > 0
        assert "stop_reason" not in summary["methods"]["mm1"]
    report = (validated / "report.md").read_text()
    said = dict(re.findall(r"^\| (simulation[^|]*?) \| (.*) \|$", report, re.MULTILINE))
    for label in ("simulation", "simulation (calibration-r2)"):
        how = r"(converged|stopped at its 5 s limit)"
        precision = r"widest 95 % interval \+/-\d+\.\d % of its value"
        assert re.fullmatch(f"{how}; {precision}", said[label]), said


def test_the_repetitions_ran_interleaved_and_recorded_the_host_load(validated: Path) -> None:
    record = json.loads((validated / "validation.json").read_text())
    assert record["order"] == [
        "calibration",
        "calibration-0.6-1",
        "measurement",
        "calibration-r2",
        "calibration-0.6-1-r2",
        "measurement-r2",
    ]
    started = [
        json.loads((validated / run / "manifest.json").read_text())["phases"]["start_ns"]
        for run in record["order"]
    ]
    assert started == sorted(started)
    for run in record["order"]:
        load = json.loads((validated / run / "manifest.json").read_text())["host_load"]
        assert load["phases"]["measure"]["run_cores"] > 0
        assert isinstance(load["disturbed"], bool)
    assert "## Other load on the host" in (validated / "report.md").read_text()


def _sim(calibration: Path, kind: str, metric: str) -> pd.Series:
    predictions = pq.read_table(calibration / "analysis" / "predictions.parquet").to_pandas()
    return predictions[
        (predictions["kind"] == kind)
        & (predictions["metric"] == metric)
        & (predictions["method"] == "sim")
    ].set_index("entity")["predicted"]


def _check_row(cells: dict[str, str], measured: list[float], sim: list[float]) -> None:
    """One report row against the two repetitions' own figures (the median of two is
    their mean, and the bootstrap interval of two values their range)."""
    middle, predicted = float(np.median(measured)), float(np.median(sim))
    assert float(cells["measured"]) == pytest.approx(middle, abs=0.006)
    assert float(cells["sim"]) == pytest.approx(predicted, abs=0.006)
    error = (predicted - middle) / middle * 100
    assert float(cells["sim_err_%"]) == pytest.approx(error, abs=0.006)
    spread = max(abs(m - middle) for m in measured) / middle * 100
    assert float(cells["spread_%"]) == pytest.approx(spread, abs=0.006)
    inside = min(measured) <= predicted <= max(measured)
    assert cells["sim_in_meas_ci"] == ("yes" if inside else "no")


def test_report_tables_match_the_parquet_outputs(validated: Path) -> None:
    md = (validated / "report.md").read_text()
    runs = [measurement_of(validated / name) for name in ("measurement", "measurement-r2")]
    calibrations = [validated / name for name in ("calibration", "calibration-r2")]
    # Each run's own figures are the Spark analysis' figures.
    brokers = pq.read_table(validated / "measurement" / "analysis" / "brokers.parquet").to_pandas()
    spark = brokers.groupby(brokers["broker"].astype(str))["throughput"].sum()
    for broker, value in spark.items():
        assert runs[0][0][broker] == pytest.approx(value, abs=1e-9)
    latency = pq.read_table(validated / "measurement" / "analysis" / "latency.parquet").to_pandas()
    for row in latency.itertuples():
        mean = runs[0][1][f"{row.publisher}>{row.subscriber}"]
        assert mean == pytest.approx(row.mean_ms, abs=1e-9)

    rows = _md_table(md, "Broker throughput (Table 6.1 form)")
    header, body = rows[0], rows[1:]
    sims = [_sim(c, "broker", "throughput") for c in calibrations]
    assert len(body) == 7
    for row in body:
        cells = dict(zip(header, row, strict=True))
        broker = cells["broker"]
        _check_row(cells, [r[0][broker] for r in runs], [s[broker] for s in sims])

    rows = _md_table(md, "Delivery latency, every publisher and subscriber")
    header, body = rows[0], rows[1:]
    sims = [_sim(c, "pair", "latency_ms") for c in calibrations]
    assert len(body) == len(latency)
    for row in body:
        cells = dict(zip(header, row, strict=True))
        pair = f"{cells['publisher']}>{cells['subscriber']}"
        _check_row(cells, [r[1][pair] for r in runs], [s[pair] for s in sims])


def test_report_is_self_contained(validated: Path) -> None:
    page = (validated / "report.html").read_text()
    sources = re.findall(r"<img[^>]* src='([^']*)'", page)
    assert len(sources) >= 6
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    assert "http://" not in page and "https://" not in page


@pytest.mark.needs("chromium")
def test_report_renders_in_headless_chromium(validated: Path, tmp_path: Path) -> None:
    shot = validated / "report.png"
    chromium = chromium_path()
    assert chromium is not None
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
         f"--screenshot={shot}", "--window-size=1200,6000",
         (validated / "report.html").as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    from matplotlib.image import imread

    image = imread(shot)
    assert image.shape[0] == 6000 and image.shape[1] == 1200
    # Text, tables and figures fill the page: many rows hold dark pixels, and the
    # (coloured) plots several hundred rows; a broken image would leave them blank.
    pixels = image[:, :, :3]
    ink = (pixels.mean(axis=2) < 0.9).sum(axis=1)
    colour = ((pixels.max(axis=2) - pixels.min(axis=2)) > 0.2).sum(axis=1)
    assert (ink > 20).sum() > 1000
    assert (colour > 5).sum() > 300


def test_hop_predict_carries_costs_by_runs_at_another_rate(validated: Path, tmp_path: Path) -> None:
    """`hop predict --other-runs`: the validation's calibration and measurement are the
    same workload at two rates; runs at one rate only cannot show how costs move."""
    calibration = shutil.copytree(validated / "calibration", tmp_path / "calibration")
    measurement = validated / "measurement"
    same = run_hop("predict", str(calibration), "--other-runs", str(calibration), "--method", "mm1")
    assert same.returncode == 2 and "two different rates" in same.stderr, same.stderr
    result = run_hop(
        "predict", str(calibration), "--other-runs", str(measurement), "--method", "mm1"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["other_runs"] == [str(measurement)]
    assert json.loads(result.stdout)["trend"] == "line"
    rows = pq.read_table(calibration / "analysis" / "predictions.parquet").to_pandas()
    latency = rows[(rows["kind"] == "pair") & (rows["metric"] == "latency_ms")]
    assert len(latency) > 0 and (latency["predicted"] > 0).all()
