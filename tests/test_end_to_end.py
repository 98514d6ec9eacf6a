"""The pipelines end to end, as a user runs them: `hop` processes (`hop.command.HOP`),
every network on 127.0.0.1, every process stopped by its PID.

The SPECjms2007 case study goes through `hop replay` (base5, a few seconds), `hop
analyze`, `hop predict` and `hop report`; the run is made and analysed once per
session (in this process, with the session's Spark: `hop analyze` runs as a process
against a standalone master) and copied where a test writes into it.
Beside it: `hop sub` and `hop pub` through a `hop net`, `hop predict` for another
scenario and rate scale against the operational-analysis arithmetic, and `hop analyze
--master` against a standalone Spark master and worker started here.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from broker.local_network import Network, on_free_ports
from broker.probe import fetch_stats
from hop.command import REPO, start_hop, stop
from hop.command import run_hop as hop
from monitor.analysis import analyze
from monitor.predict import METHODS, PREDICTIONS
from tests import test_analysis
from topologies import load_case_study, publisher_name

pytestmark = pytest.mark.integration

SPECJMS = REPO / "topologies" / "specjms_vertical.toml"
SCENARIO = "base5"
REPLAY_S, WARMUP_S = 3.0, 0.5
# The frequent event types of the case study (statInfoSM alone is 40 % of the events):
# a replay of a few seconds at base5 publishes each of them many times.
FREQUENT = {"statInfoSM", "inventoryInfo", "order", "orderConf", "callForOffers"}


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args}\n{result.stderr[-3000:]}"
    return result


def _copy_run(run: Path, to: Path) -> Path:
    """A run folder's traces, manifest and case study (not its analysis) at `to`."""
    shutil.copytree(run / "traces", to / "traces")
    for name in ("manifest.json", "case_study.toml"):
        shutil.copy(run / name, to / name)
    return to


def _table(run: Path, name: str) -> pd.DataFrame:
    return pq.read_table(run / "analysis" / f"{name}.parquet").to_pandas()


@pytest.fixture(scope="session")
def specjms_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`hop replay` of SPECjms2007 (base5, on free ports), analysed in this process with
    the session's Spark (`hop analyze` is a process of its own in
    `test_hop_analyze_on_a_standalone_master_matches_local_mode`: a Spark session
    takes 10-15 s to start, and more on a busy host)."""
    tmp = tmp_path_factory.mktemp("specjms")
    # The workload's seed is fixed: every replay publishes the same events, so each
    # broker (an SP's, ~2 events/s at base5) handles some in the measured window.
    study = on_free_ports(SPECJMS, tmp / "specjms.toml")
    run = tmp / "run"
    replayed = _ok(
        hop(
            "replay", str(study), "--out", str(run), "--scenario", SCENARIO,
            "--duration", str(REPLAY_S), "--warmup", str(WARMUP_S), "--quiet",
            timeout=180,
        )
    )  # fmt: skip
    assert "lost 0, unexpected 0" in replayed.stdout
    summary = analyze(run, spark=spark)
    assert summary["problems"] == [] and summary["warnings"] == []
    return run


@pytest.fixture(scope="session")
def specjms_predicted(specjms_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the analysed run with `hop predict` (every method) of its own workload.

    Its folder is named with a colon and given relative: pyarrow and Spark take such a
    path for a URI of the scheme ``run:`` unless given it absolute."""
    run = tmp_path_factory.mktemp("specjms-predicted") / "run:1"
    shutil.copytree(specjms_run, run)
    limit = "5"  # a quarter of the default: these tests check the tables, not precision
    predicted = hop("predict", run.name, "--sim-seconds", limit, timeout=300, cwd=run.parent)
    summary = json.loads(_ok(predicted).stdout)
    assert set(summary["methods"]) == set(METHODS)
    assert summary["methods"]["sim"]["limit_s"] == float(limit)
    return run


def test_specjms_analysis_names_its_brokers_and_classes(specjms_run: Path) -> None:
    study = load_case_study(SPECJMS)
    manifest = json.loads((specjms_run / "manifest.json").read_text())
    assert manifest["case_study"]["name"] == "specjms_vertical"
    assert manifest["scenario"] == SCENARIO
    counts = manifest["counts"]
    assert counts["published"] > 0 and counts["delivered"] == counts["expected_deliveries"]

    types = {kind.type for p in study.publishers.values() for kind in p.events}
    publishers = {publisher_name(p) for p in study.publishers}
    brokers = _table(specjms_run, "brokers")
    # every broker handles events at base5 (an SP's broker ~2 a second)
    assert set(brokers["broker"].astype(str)) == {str(b) for b in study.topology.brokers}
    assert FREQUENT <= set(brokers["event_type"]) <= types
    assert (brokers["throughput"] > 0).all() and (brokers["cpu_mean_ns"] > 0).all()
    visits = _table(specjms_run, "visit_ratios")
    assert set(visits["publisher"]) <= publishers
    assert set(visits["event_type"]) >= FREQUENT
    trees = _table(specjms_run, "trees")
    for _, share in trees.groupby(["event_type", "publisher"])["share"]:
        assert share.sum() == pytest.approx(1.0)
    latency = _table(specjms_run, "latency")
    assert len(latency) > 0 and (latency["mean_ms"] > 0).all()
    # statInfoSM: every SM's publisher reaches the HQ's subscriber
    hq = {publisher_name(p) for p, spec in study.publishers.items() if spec.broker in range(4, 14)}
    assert hq <= set(latency["publisher"])


def test_hop_predict_covers_every_measured_broker_and_pair(specjms_predicted: Path) -> None:
    rows = _table(specjms_predicted, "predictions")
    assert pq.read_schema(specjms_predicted / "analysis" / "predictions.parquet").equals(
        PREDICTIONS, check_metadata=False
    )
    brokers = set(_table(specjms_predicted, "brokers")["broker"].astype(str))
    latency = _table(specjms_predicted, "latency")
    pairs = set(latency["publisher"] + ">" + latency["subscriber"])
    for method in METHODS:
        mine = rows[rows["method"] == method]
        by_broker = mine[mine["kind"] == "broker"]
        assert set(by_broker["entity"]) == brokers, method
        assert set(by_broker["metric"]) == {"throughput", "utilization", "response_ms"}
        assert set(mine[mine["kind"] == "pair"]["entity"]) == pairs, method
        assert (mine["predicted"] > 0).all(), method
        # its own workload: each throughput and latency beside the run's measurement
        compared = mine[mine["metric"].isin(["throughput", "latency_ms"])]
        assert compared["measured"].notna().all(), method
        error = compared["predicted"] / compared["measured"] - 1
        assert compared["rel_error"].to_numpy() == pytest.approx(error.to_numpy())
    sim = rows[rows["method"] == "sim"]
    assert (sim["ci_low"] <= sim["predicted"]).all() and (sim["predicted"] <= sim["ci_high"]).all()


def test_hop_report_names_the_case_study_and_its_brokers(specjms_predicted: Path) -> None:
    run = specjms_predicted
    result = _ok(hop("report", run.name, timeout=120, cwd=run.parent))  # (see its fixture)
    assert result.stdout.startswith("Prediction vs measurement: throughput (sim) mean error")
    html, md = run / "report.html", run / "report.md"
    assert result.stdout.split()[-2:] == [f"{run.name}/report.html", f"{run.name}/report.md"]
    text = md.read_text()
    assert text.startswith(f"# hop validation report: specjms_vertical ({SCENARIO})")
    assert "specjms_vertical" in html.read_text()
    table = text.split("## Broker throughput (Table 6.1 form)", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("|")]
    assert rows[2:] == [str(b) for b in range(1, 19)]  # header, rule, then every broker


def test_a_report_that_cannot_be_written_is_named(specjms_predicted: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(specjms_predicted, run)
    (run / "report.html").unlink(missing_ok=True)
    (run / "report.html").mkdir()  # in the way of the file
    result = hop("report", str(run), timeout=120)
    assert result.returncode == 1
    said = f"hop report: {run / 'report.html'}: cannot write it (Is a directory)"
    assert result.stderr.splitlines()[-1] == said


def _throughputs(run: Path, *options: str) -> dict[str, float]:
    """`hop predict RUN --method mm1 OPTIONS...`: the predicted events/s per broker."""
    _ok(hop("predict", str(run), "--method", "mm1", *options, timeout=120))
    rows = _table(run, "predictions")
    rows = rows[(rows["kind"] == "broker") & (rows["metric"] == "throughput")]
    return dict(zip(rows["entity"], rows["predicted"], strict=True))


def _operational(run: Path, rates: dict[int, float]) -> dict[str, float]:
    """X_b = sum over publishers of rate x visit ratio, the visit ratio counted from
    the Spark analysis' dissemination trees (events through b / events published)."""
    trees = _table(run, "trees")
    published = trees.groupby("publisher")["events"].sum()
    out: dict[str, float] = defaultdict(float)
    for row in trees.itertuples():
        visited = {row.home_broker, *(b for edge in row.tree for b in edge.split(">"))}
        rate = rates[int(row.publisher.removeprefix("pub"))]
        for broker in visited:
            out[broker] += rate * row.events / published[row.publisher]
    return dict(out)


def test_hop_predict_follows_the_scenario_and_rate_scale(specjms_run: Path, tmp_path: Path) -> None:
    study = load_case_study(SPECJMS)
    run = _copy_run(specjms_run, tmp_path / "run")
    shutil.copytree(specjms_run / "analysis", run / "analysis")
    workload = ["--workload", str(SPECJMS)]
    base5 = _throughputs(run, *workload, "--scenario", "base5")
    base1 = _throughputs(run, *workload, "--scenario", "base1")
    half = _throughputs(run, *workload, "--scenario", "base5", "--rate-scale", "0.5")
    assert set(base5) == set(base1) == set(half) == {str(b) for b in study.topology.brokers}
    for broker, x in base5.items():
        assert base1[broker] == pytest.approx(x / 5, rel=1e-9)
        assert half[broker] == pytest.approx(x / 2, rel=1e-9)
    exact = _operational(run, study.rates_for("base5"))
    assert base5 == pytest.approx(exact, rel=1e-9)
    # the HQ's broker: 8.8555 events/s per BASE (the file's header, from its rates)
    assert base1["1"] == pytest.approx(8.8555, rel=0.1)
    # The last prediction (half the load) is not compared with the run's measurement.
    rate = json.loads((run / "manifest.json").read_text())["total_rate"]
    reported = _ok(hop("report", str(run), timeout=120)).stdout
    assert reported.startswith(
        f"Predictions for {rate / 2:.1f} events/s beside a run measured at {rate:.1f} events/s"
    )
    text = (run / "report.md").read_text()
    assert f"## Predictions at {rate / 2:.1f} events/s" in text
    assert "Table 6.1 form" not in text and "_err_%" not in text


def test_a_run_that_cannot_be_written_is_analysed_predicted_and_reported_in_a_folder_of_links(
    specjms_run: Path, spark: Any, tmp_path: Path
) -> None:
    """`hop analyze RUN --out DIR` on an immutable RUN (as root, whom file permissions
    do not stop): DIR links to RUN's files, holds the tables, and `hop predict DIR` and
    `hop report DIR` work on it as on a run folder."""
    run = _copy_run(specjms_run, tmp_path / "run")
    mine = tmp_path / "mine"
    subprocess.run(["chattr", "-R", "+i", str(run)], check=True, timeout=10)
    try:
        summary = analyze(run, spark=spark, out=mine)
        assert summary["outputs"] == str(mine / "analysis")
        for name in ("trees", "latency"):  # (sums in Spark's order: to the last bits)
            pd.testing.assert_frame_equal(_table(mine, name), _table(specjms_run, name))
        _ok(hop("predict", str(mine), "--method", "mm1", timeout=120))
        reported = _ok(hop("report", str(mine), timeout=120)).stdout
        analyze(run, spark=spark, out=mine)  # again: the links are DIR's own
    finally:
        subprocess.run(["chattr", "-R", "-i", str(run)], check=True, timeout=10)
    assert sorted(p.name for p in run.iterdir()) == ["case_study.toml", "manifest.json", "traces"]
    assert {p.name: p.readlink() for p in mine.iterdir() if p.is_symlink()} == {
        name: run / name for name in ("case_study.toml", "manifest.json", "traces")
    }
    assert (mine / "analysis" / "predictions.parquet").exists()
    assert reported.endswith(f"{mine / 'report.html'}\n{mine / 'report.md'}\n")

    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text("{}")  # another run's, say
    result = hop("analyze", str(run), "--out", str(other), "--quiet", timeout=60)
    assert result.returncode == 2
    assert f"--out {other}: manifest.json is in the way" in result.stderr


# -- hop sub and hop pub through a hop net ---------------------------------------------


@contextlib.contextmanager
def running(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """`proc` stopped on the way out: SIGTERM, then SIGKILL after 20 s; reaped."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            stop(proc)


def _wait(condition: object, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    """Poll `condition()` (OSError: not yet) until true; `proc` must keep running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        with contextlib.suppress(OSError):
            if condition():  # type: ignore[operator]
                return
        time.sleep(0.1)
    raise TimeoutError(f"not ready after {timeout} s")


def _linked(net: Network, broker: int) -> bool:
    return bool(fetch_stats(*net.address(broker), timeout=1)["parent_connected"])


def test_hop_sub_prints_exactly_the_events_hop_pub_sent_that_match(tmp_path: Path) -> None:
    net = Network.from_file("chain5", tmp_path)  # brokers 1 (root) .. 5 in a line
    root, leaf = (f"{h}:{p}" for h, p in (net.address(1), net.address(5)))
    with running(start_hop("net", str(net.file))) as hop_net:
        _wait(lambda: all(_linked(net, b) for b in range(2, 6)), hop_net)
        with running(start_hop("sub", leaf, "family = 7", "--count", "3")) as sub:
            # the subscription has travelled up the chain to the root
            _wait(lambda: fetch_stats(*net.address(1), timeout=1)["subscriptions"] >= 1, sub)
            _ok(hop("pub", root, "family=8", "tag=other", "--count", "4"))
            _ok(hop("pub", root, 'family="7"', "tag=text", "--count", "2"))
            _ok(hop("pub", root, "family=7", "tag=match", "--count", "3"))
            out, err = sub.communicate(timeout=30)
    assert sub.returncode == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [{"family": 7, "tag": "match"}] * 3


# -- hop analyze --master --------------------------------------------------------------


def test_hop_analyze_on_a_standalone_master_matches_local_mode(
    specjms_run: Path, standalone_cluster: str, tmp_path: Path
) -> None:
    run = _copy_run(specjms_run, tmp_path / "run")
    result = _ok(hop("analyze", str(run), "--master", standalone_cluster, timeout=300))
    assert "log level" not in result.stderr, result.stderr[-3000:]
    progress = [line for line in result.stderr.splitlines() if line.startswith("hop analyze: ")]
    assert progress[0].startswith("hop analyze: staged ")  # each step as it ends
    assert progress[1] == f"hop analyze: starting Spark ({standalone_cluster})"
    assert progress[-1].startswith("hop analyze: wrote latency.parquet ("), progress
    summary = json.loads(result.stdout)
    assert summary["spark_master"] == standalone_cluster
    local = json.loads((specjms_run / "analysis" / "summary.json").read_text())
    assert summary["tables"] == local["tables"] and summary["used"] == local["used"]
    test_analysis.assert_same_outputs(specjms_run, run)
