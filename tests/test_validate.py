"""`hop validate --quick` end to end on tree7: the report agrees with the Parquet outputs,
and it renders in a real browser (headless Chromium) with every figure."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hop.command import run_hop
from tests.capabilities import chromium_path
from tests.test_replay import small_study

pytestmark = [pytest.mark.integration, pytest.mark.needs("java")]  # hop validate runs Spark


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("validate")
    study, _ = small_study(tmp, "hierarchical")
    out = tmp / "run"
    result = subprocess.run(
        [sys.executable, "-m", "hop", "validate", str(study), "--out", str(out),
         "--quick", "--duration", "4", "--load-scale", "2", "--quiet"],
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


def test_the_prediction_carries_costs_from_the_second_calibration(validated: Path) -> None:
    """`hop validate` replays the calibration at 0.3 and 0.6 of the load; the
    prediction uses both, and the report's header lists both."""
    second = validated / "calibration-0.6-1"
    summary = json.loads(
        (validated / "calibration" / "analysis" / "predictions_summary.json").read_text()
    )
    assert summary["other_runs"] == [str(second)]
    rates = [
        json.loads((validated / run / "manifest.json").read_text())["total_rate"]
        for run in ("calibration", second.name, "measurement")
    ]
    assert rates[0] < rates[1] < rates[2]
    assert "also used: calibration-0.6-1" in (validated / "report.md").read_text()


def test_report_tables_match_the_parquet_outputs(validated: Path) -> None:
    md = (validated / "report.md").read_text()
    rows = _md_table(md, "Broker throughput (Table 6.1 form)")
    header, body = rows[0], rows[1:]
    brokers = pq.read_table(validated / "measurement" / "analysis" / "brokers.parquet").to_pandas()
    measured = brokers.groupby(brokers["broker"].astype(str))["throughput"].sum()
    predictions = pq.read_table(
        validated / "calibration" / "analysis" / "predictions.parquet"
    ).to_pandas()
    sim = predictions[
        (predictions["kind"] == "broker")
        & (predictions["metric"] == "throughput")
        & (predictions["method"] == "sim")
    ].set_index("entity")["predicted"]
    assert len(body) == 7
    for row in body:
        cells = dict(zip(header, row, strict=True))
        broker = cells["broker"]
        assert float(cells["measured"]) == pytest.approx(measured[broker], abs=0.006)
        assert float(cells["sim"]) == pytest.approx(sim[broker], abs=0.006)
        error = (sim[broker] - measured[broker]) / measured[broker] * 100
        assert float(cells["sim_err_%"]) == pytest.approx(error, abs=0.006)

    latency = pq.read_table(validated / "measurement" / "analysis" / "latency.parquet").to_pandas()
    rows = _md_table(md, "Delivery latency, every publisher and subscriber")
    header, body = rows[0], rows[1:]
    assert len(body) == len(latency)
    by_pair = latency.set_index(["publisher", "subscriber"])["mean_ms"]
    for row in body:
        cells = dict(zip(header, row, strict=True))
        mean = by_pair[(cells["publisher"], cells["subscriber"])]
        assert float(cells["measured"]) == pytest.approx(mean, abs=0.006)


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
    rows = pq.read_table(calibration / "analysis" / "predictions.parquet").to_pandas()
    latency = rows[(rows["kind"] == "pair") & (rows["metric"] == "latency_ms")]
    assert len(latency) > 0 and (latency["predicted"] > 0).all()
