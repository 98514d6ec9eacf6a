"""`hop analyze` (monitor.analysis): every table against an independent computation.

`reference()` recomputes all six tables from the Arrow trace files with plain Python
and numpy (visit ratios by fixed-point iteration instead of a linear solve,
percentiles by numpy's nearest-rank method, the service-time fit by np.polyfit), and
the tests compare Spark's Parquet output with it cell by cell, on hand-built traces
with answers worked out by hand, on a truncated trace, on a real replay, and on a
Spark standalone cluster started on loopback.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from broker.local_network import REPO, Network
from broker.trace.schema import DELIVERIES, HOPS, PUBLICATIONS
from client import Client
from hop.command import run_hop
from monitor.analysis import analyze, main
from monitor.analysis.staging import (
    repeated_event_ids,
    several_runs,
    stage_broker_traces,
    stage_traces,
    staged_publications,
)
from monitor.errors import OutputError
from monitor.predict import predict
from monitor.report import ReportError, render
from monitor.spark import C1_ONLY, C1_UP_TO_HOP_ROWS, jit_options, session_jit
from monitor.traces import TraceError, read_file, read_table
from tests.test_replay import run_replay, small_study
from topologies import to_toml

S = 1_800_000_000 * 10**9  # the measurement window: [S, E)
E = S + 10 * 10**9
PHASES = {
    "start_ns": S - 2 * 10**9,
    "measure_start_ns": S,
    "measure_end_ns": E,
    "drain_end_ns": E + 2 * 10**9,
}
MS = 1_000_000
KEYS = {
    "routing_probabilities": ["event_type", "publisher", "from_broker", "to_broker"],
    "visit_ratios": ["event_type", "publisher", "broker"],
    "paths": ["event_type", "publisher", "path", "subscriber_broker"],
    "trees": ["event_type", "publisher", "home_broker", "tree"],
    "brokers": ["broker", "event_type"],
    "latency": ["publisher", "subscriber"],
}


# -- hand-built traces ----------------------------------------------------------------


@dataclass
class Hop:
    broker: str
    from_node: str
    to_nodes: list[str] = field(default_factory=list)
    delivered_to: list[str] = field(default_factory=list)
    cpu_ns: int = 100_000


@dataclass
class Event:
    event_id: str
    publisher: str
    t_publish_ns: int
    hops: list[Hop]
    event_type: str = "callForOffers"


def hop(broker: str, sender: str, to: str = "", deliver: str = "", cpu_us: int = 100) -> Hop:
    """A hop row in short: `to` and `deliver` are space-separated lists."""
    return Hop(broker, sender, to.split(), deliver.split(), cpu_us * 1000)


# Brokers: 1 is the root, 2 and 3 its children, 4 and 5 children of 2. pubA publishes at
# broker 4, pubB at broker 3. e4 forks at broker 2 into two branches (to 4 and 5).
EVENTS = [
    Event(
        "pubA:1",
        "pubA",
        S + 1 * 10**9,
        [
            hop("4", "client:pubA", to="2", cpu_us=100),
            hop("2", "4", to="1", deliver="sub2a", cpu_us=210),
            hop("1", "2", to="3", cpu_us=300),
            hop("3", "1", deliver="sub3a sub3b", cpu_us=400),
        ],
    ),
    Event(
        "pubA:2",
        "pubA",
        S + 2 * 10**9,
        [
            hop("4", "client:pubA", to="2", cpu_us=120),
            hop("2", "4", to="1", deliver="sub2a", cpu_us=220),
            hop("1", "2", cpu_us=310),
        ],
    ),
    Event(
        "pubA:3",
        "pubA",
        S + 3 * 10**9,
        [
            hop("4", "client:pubA", to="2", deliver="sub4a", cpu_us=130),
            hop("2", "4", to="1", cpu_us=230),
            hop("1", "2", to="3", cpu_us=320),
            hop("3", "1", deliver="sub3a", cpu_us=410),
        ],
    ),
    Event(
        "pubB:1",
        "pubB",
        S + 4 * 10**9,
        [
            hop("3", "client:pubB", to="1", cpu_us=140),
            hop("1", "3", to="2", cpu_us=330),
            hop("2", "1", to="4 5", deliver="sub2a", cpu_us=240),
            hop("4", "2", deliver="sub4a", cpu_us=150),
            hop("5", "2", deliver="sub5a", cpu_us=500),
        ],
    ),
    Event(  # published during the warm-up
        "pubA:0",
        "pubA",
        S - 1 * 10**9,
        [hop("4", "client:pubA", to="2", cpu_us=160), hop("2", "4", deliver="sub2a", cpu_us=250)],
    ),
    Event(  # published after the window, delivered in the drain
        "pubB:2",
        "pubB",
        E + 5 * 10**8,
        [hop("3", "client:pubB", deliver="sub3a", cpu_us=170)],
    ),
]


def path_to(event: Event, broker: str) -> list[str]:
    """Brokers from the event's home broker to `broker`, following from_node back."""
    by_broker = {h.broker: h for h in event.hops}
    path = [broker]
    while not by_broker[path[0]].from_node.startswith("client:"):
        path.insert(0, by_broker[path[0]].from_node)
    return path


def write_stream(path: Path, rows: list[dict[str, Any]], schema: pa.Schema, batch: int) -> None:
    with pa.ipc.new_stream(str(path), schema) as writer:
        writer.write_table(pa.Table.from_pylist(rows, schema=schema), max_chunksize=batch)


def write_run(run_dir: Path, events: list[Event], batch: int = 1000) -> Path:
    """Trace files as `hop replay` writes them (one hops file per broker), and a manifest.
    A hop arrives 1 ms per broker after publication; a delivery takes 1 ms per broker
    on its path plus 10 us per place in the broker's delivery list."""
    traces = run_dir / "traces"
    traces.mkdir(parents=True)
    hops: dict[str, list[dict[str, Any]]] = defaultdict(list)
    deliveries, publications = [], []
    for event in events:
        home = next(h.broker for h in event.hops if h.from_node.startswith("client:"))
        publications.append(
            {
                "run_id": "hand",
                "event_id": event.event_id,
                "publisher": event.publisher,
                "broker": home,
                "event_type": event.event_type,
                "t_publish_ns": event.t_publish_ns,
                "size_bytes": 100,
                "attributes": "{}",
            }
        )
        for h in event.hops:
            path = path_to(event, h.broker)
            t_arrival = event.t_publish_ns + len(path) * MS
            hops[h.broker].append(
                {
                    "run_id": "hand",
                    "event_id": event.event_id,
                    "event_type": event.event_type,
                    "publisher": event.publisher,
                    "broker": h.broker,
                    "from_node": h.from_node,
                    "to_nodes": h.to_nodes,
                    "delivered_to": h.delivered_to,
                    "decision": "routed",
                    "drop_reason": "",
                    "t_arrival_ns": t_arrival,
                    "t_start_ns": t_arrival + 10_000,
                    "t_done_ns": t_arrival + 10_000 + h.cpu_ns + 20_000,
                    "wait_ns": 10_000,
                    "cpu_ns": h.cpu_ns,
                    "hops_before": len(path) - 1,
                }
            )
            for place, subscriber in enumerate(h.delivered_to):
                deliveries.append(
                    {
                        "run_id": "hand",
                        "event_id": event.event_id,
                        "publisher": event.publisher,
                        "subscriber": subscriber,
                        "subscription_ids": [1],
                        "broker": h.broker,
                        "path": path,
                        "t_publish_ns": event.t_publish_ns,
                        "t_deliver_ns": event.t_publish_ns + len(path) * MS + place * 10_000,
                    }
                )
    for broker, rows in hops.items():
        write_stream(traces / f"hops-broker{broker}-1.arrow", rows, HOPS, batch)
    write_stream(traces / "deliveries-clients-1.arrow", deliveries, DELIVERIES, batch)
    write_stream(traces / "publications-clients-1.arrow", publications, PUBLICATIONS, batch)
    (run_dir / "manifest.json").write_text(json.dumps({"phases": PHASES}))
    return run_dir


# -- the independent computation ------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q, method="inverted_cdf"))


def reference(run_dir: Path, window: str = "measure") -> dict[str, dict[tuple, dict]]:
    """All six tables, keyed like KEYS, from the Arrow files with Python and numpy."""
    phases = json.loads((run_dir / "manifest.json").read_text())["phases"]
    start, end = (
        (phases["measure_start_ns"], phases["measure_end_ns"])
        if window == "measure"
        else (phases["start_ns"], phases["drain_end_ns"])
    )
    seconds = (end - start) / 1e9
    events = {
        p["event_id"]: p
        for p in read_table(run_dir, "publications").table.to_pylist()
        if start <= p["t_publish_ns"] < end
    }
    hops = [h for h in read_table(run_dir, "hops").table.to_pylist() if h["event_id"] in events]
    deliveries = [
        d for d in read_table(run_dir, "deliveries").table.to_pylist() if d["event_id"] in events
    ]
    published = Counter((p["event_type"], p["publisher"]) for p in events.values())

    arrived: Counter[tuple] = Counter()
    entered: Counter[tuple] = Counter()
    forwarded: Counter[tuple] = Counter()
    for h in hops:
        cls = (h["event_type"], h["publisher"])
        arrived[(*cls, h["broker"])] += 1
        entered[(*cls, h["broker"])] += h["from_node"].startswith("client:")
        for to in h["to_nodes"]:
            forwarded[(*cls, h["broker"], to)] += 1
    routing = {
        key: {"forwarded": n, "arrived": arrived[key[:3]], "probability": n / arrived[key[:3]]}
        for key, n in forwarded.items()
    }

    visit_ratios = {}
    for cls in {key[:2] for key in arrived}:
        brokers = sorted(
            {k[2] for k in arrived if k[:2] == cls} | {k[3] for k in routing if k[:2] == cls}
        )
        index = {b: i for i, b in enumerate(brokers)}
        nu = np.zeros((len(brokers), len(brokers)))
        for (*c, i, j), row in routing.items():
            if tuple(c) == cls:
                nu[index[i], index[j]] = row["probability"]
        e = np.array([entered[(*cls, b)] for b in brokers], dtype=float)
        e /= e.sum()
        v = e.copy()
        for _ in range(len(brokers) + 1):  # acyclic: exact after depth iterations
            v = e + v @ nu
        rate = published[cls] / seconds
        for b in brokers:
            visits = arrived[(*cls, b)]
            visit_ratios[(*cls, b)] = {
                "visit_ratio_solved": v[index[b]],
                "visit_ratio_counted": visits / published[cls],
                "arrival_rate": rate * v[index[b]],
                "arrival_rate_counted": visits / seconds,
                "visits": visits,
                "publications": published[cls],
            }

    brokers = {}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for h in hops:
        groups[(h["broker"], h["event_type"])].append(h)
    for key, rows in groups.items():
        cpu = np.array([r["cpu_ns"] for r in rows], dtype=float)
        sends = np.array([len(r["to_nodes"]) + len(r["delivered_to"]) for r in rows], float)
        row = {
            "arrivals": len(rows),
            "throughput": len(rows) / seconds,
            "cpu_mean_ns": cpu.mean(),
            "cpu_p50_ns": pct(cpu, 50),
            "cpu_p90_ns": pct(cpu, 90),
            "utilization": cpu.sum() / (end - start),
            "mean_fanout": sends.mean(),
            "mean_forwards": np.mean([len(r["to_nodes"]) for r in rows]),
            "wait_mean_ns": np.mean([r["wait_ns"] for r in rows]),
            "residence_mean_ns": np.mean([r["t_done_ns"] - r["t_arrival_ns"] for r in rows]),
        }
        if sends.var() > 0:
            row["cpu_per_send_ns"], row["cpu_base_ns"] = np.polyfit(sends, cpu, 1)
        brokers[key] = row

    per_event: dict[str, list[dict]] = defaultdict(list)
    for h in hops:
        per_event[h["event_id"]].append(h)
    tree_events: Counter[tuple] = Counter()
    for rows in per_event.values():
        home = next(r["broker"] for r in rows if r["from_node"].startswith("client:"))
        tree = tuple(sorted(f"{r['broker']}>{to}" for r in rows for to in r["to_nodes"]))
        tree_events[(rows[0]["event_type"], rows[0]["publisher"], home, tree)] += 1
    trees = {}
    for (et, pub, home, tree), n in tree_events.items():
        p = 1.0
        for broker in {home} | {edge.split(">")[1] for edge in tree}:
            for (*c, i, j), row in routing.items():
                if c == [et, pub] and i == broker:
                    nu = row["probability"]
                    p *= nu if f"{i}>{j}" in tree else 1 - nu
        trees[(et, pub, home, tree)] = {
            "events": n,
            "share": n / published[(et, pub)],
            "share_independent": p,  # one home broker per class here
            "edges": len(tree),
        }

    path_events: dict[tuple, set] = defaultdict(set)
    pair_latency: dict[tuple, list] = defaultdict(list)
    pair_hops: dict[tuple, list] = defaultdict(list)
    for d in deliveries:  # the paths the events recorded on their way
        key = (events[d["event_id"]]["event_type"], d["publisher"], tuple(d["path"]), d["broker"])
        path_events[key].add(d["event_id"])
        pair_latency[(d["publisher"], d["subscriber"])].append(
            (d["t_deliver_ns"] - d["t_publish_ns"]) / 1e6
        )
        pair_hops[(d["publisher"], d["subscriber"])].append(len(d["path"]))
    paths = {
        key: {"events": len(ids), "share": len(ids) / published[key[:2]], "hops": len(key[2])}
        for key, ids in path_events.items()
    }
    latency = {
        key: {
            "deliveries": len(ms),
            "mean_ms": np.mean(ms),
            "p50_ms": pct(ms, 50),
            "p90_ms": pct(ms, 90),
            "p99_ms": pct(ms, 99),
            "std_ms": np.std(ms),
            "hops": max(pair_hops[key]),
            "hops_min": min(pair_hops[key]),
        }
        for key, ms in pair_latency.items()
    }
    return {
        "routing_probabilities": routing,
        "visit_ratios": visit_ratios,
        "paths": paths,
        "trees": trees,
        "brokers": brokers,
        "latency": latency,
    }


# -- comparing ------------------------------------------------------------------------


def output(run_dir: Path, name: str) -> list[dict[str, Any]]:
    return pq.read_table(run_dir / "analysis" / f"{name}.parquet").to_pylist()


def keyed(run_dir: Path, name: str) -> dict[tuple, dict[str, Any]]:
    def key(value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value

    return {tuple(key(r[k]) for k in KEYS[name]): r for r in output(run_dir, name)}


def assert_matches_reference(run_dir: Path, window: str = "measure", skip: str = "") -> None:
    expected = reference(run_dir, window)
    for name, rows in expected.items():
        if name == skip:
            continue
        got = keyed(run_dir, name)
        assert set(got) == set(rows), name
        for key, values in rows.items():
            for column, value in values.items():
                assert got[key][column] == pytest.approx(value, rel=1e-9, abs=1e-9), (
                    name,
                    key,
                    column,
                )


def assert_same_outputs(a: Path, b: Path) -> None:
    for name in KEYS:
        rows_a, rows_b = output(a, name), output(b, name)
        assert len(rows_a) == len(rows_b), name
        for ra, rb in zip(rows_a, rows_b, strict=True):
            assert ra.keys() == rb.keys()
            for column, value in ra.items():
                expected = pytest.approx(value, rel=1e-12) if isinstance(value, float) else value
                assert rb[column] == expected, (name, column)


# -- tests ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hand_analysis(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The hand-built run (EVENTS) analyzed in local mode, once for this module."""
    run = write_run(tmp_path_factory.mktemp("hand") / "run", EVENTS)
    return analyze(run, spark=spark)


def test_hand_built_traces_give_the_worked_answers(
    spark: Any, hand_analysis: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = hand_analysis
    hand_run = Path(summary["run_dir"])
    assert summary["warnings"] == [] and summary["problems"] == []
    assert summary["used"] == {"events": 4, "hops": 16}
    assert summary["tables"] == {
        "routing_probabilities": 7,
        "visit_ratios": 9,
        "paths": 6,
        "trees": 3,
        "brokers": 5,
        "latency": 7,
    }
    assert_matches_reference(hand_run)

    cls = ("callForOffers", "pubA")
    routing = keyed(hand_run, "routing_probabilities")
    assert routing[(*cls, "1", "3")]["probability"] == pytest.approx(2 / 3)
    assert routing[(*cls, "4", "2")]["probability"] == 1.0
    visits = keyed(hand_run, "visit_ratios")
    assert visits[(*cls, "3")]["visit_ratio_solved"] == pytest.approx(2 / 3)
    assert visits[(*cls, "3")]["visit_ratio_counted"] == pytest.approx(2 / 3)
    assert visits[(*cls, "3")]["arrival_rate"] == pytest.approx(0.3 * 2 / 3)  # 3 events / 10 s

    trees = keyed(hand_run, "trees")
    assert trees[(*cls, "4", ("1>3", "2>1", "4>2"))]["share"] == pytest.approx(2 / 3)
    assert trees[(*cls, "4", ("2>1", "4>2"))]["share_independent"] == pytest.approx(1 / 3)
    fork = trees[("callForOffers", "pubB", "3", ("1>2", "2>4", "2>5", "3>1"))]
    assert fork["events"] == 1 and fork["share"] == 1.0

    paths = keyed(hand_run, "paths")
    b = ("callForOffers", "pubB")
    assert {k[2] for k in paths if k[:2] == b} == {
        ("3", "1", "2"),
        ("3", "1", "2", "4"),
        ("3", "1", "2", "5"),
    }
    to_3 = paths[(*cls, ("4", "2", "1", "3"), "3")]
    assert (to_3["events"], to_3["share"], to_3["hops"]) == (2, pytest.approx(2 / 3), 4)

    broker2 = keyed(hand_run, "brokers")[("2", "callForOffers")]
    assert broker2["arrivals"] == 4 and broker2["throughput"] == pytest.approx(0.4)
    assert (broker2["cpu_p50_ns"], broker2["cpu_p90_ns"]) == (220_000, 240_000)
    assert broker2["utilization"] == pytest.approx(900_000 / 10e9)
    assert broker2["mean_fanout"] == 2.0
    assert broker2["cpu_per_send_ns"] == pytest.approx(5_000)
    assert broker2["cpu_base_ns"] == pytest.approx(215_000)

    latency = keyed(hand_run, "latency")
    assert latency[("pubA", "sub3b")]["mean_ms"] == pytest.approx(4.01)
    assert latency[("pubA", "sub3a")]["hops"] == 4

    # A folder named with a colon, given relative: pyarrow and Spark would take it for
    # a URI of the scheme "all:" (and Spark's JVM resolves paths from its own folder).
    whole = tmp_path / "all:1"
    shutil.copytree(hand_run / "traces", whole / "traces")
    shutil.copy(hand_run / "manifest.json", whole)
    monkeypatch.chdir(tmp_path)
    summary = analyze(Path(whole.name), spark=spark, window="all")
    assert summary["used"]["events"] == 6
    assert_matches_reference(whole, "all")
    visits = keyed(whole, "visit_ratios")
    assert visits[(*cls, "3")]["visit_ratio_solved"] == pytest.approx(0.5)  # 3/4 * 2/3


def test_a_brokers_trace_folder_is_analysed_over_all_it_recorded(
    spark: Any, hand_analysis: dict[str, Any], tmp_path: Path
) -> None:
    """Hops files alone, as `hop net --trace-dir` leaves them: the publications are read
    off the home brokers' rows, and the routing is the run's own over its whole span."""
    hand_run = Path(hand_analysis["run_dir"])
    whole = tmp_path / "run"
    shutil.copytree(hand_run / "traces", whole / "traces")
    shutil.copy(hand_run / "manifest.json", whole)
    analyze(whole, spark=spark, window="all")
    folder = tmp_path / "brokers"
    folder.mkdir()
    for path in (hand_run / "traces").glob("hops-*.arrow"):
        shutil.copy(path, folder)

    with pytest.raises(TraceError, match="no measurement phase.*--window all"):
        analyze(folder, spark=spark, window="measure")
    summary = analyze(folder, spark=spark)

    assert summary["warnings"] == [] and summary["problems"] == []
    assert summary["trace_rows"] == {"hops": 19, "deliveries": 0, "publications": 6}
    assert summary["used"] == {"events": 6, "hops": 19}
    first = min(e.t_publish_ns for e in EVENTS) + MS  # read at the home broker 1 ms later
    done = max(h["t_done_ns"] for h in read_table(whole, "hops").table.to_pylist())
    assert summary["window"] == {
        "name": "all",
        "start_ns": first,
        "end_ns": done + 1,
        "seconds": (done + 1 - first) / 1e9,
    }
    staged = pq.read_table(folder / "analysis" / "staged_traces" / "publications").to_pylist()
    assert sorted((p["event_id"], p["publisher"], p["broker"]) for p in staged) == sorted(
        (e.event_id, e.publisher, e.hops[0].broker) for e in EVENTS
    )
    for name in ("routing_probabilities", "paths", "trees"):
        assert keyed(folder, name) == keyed(whole, name), name
    visits, whole_visits = keyed(folder, "visit_ratios"), keyed(whole, "visit_ratios")
    assert visits.keys() == whole_visits.keys()
    for key, row in visits.items():
        for column in ("visit_ratio_solved", "visit_ratio_counted", "visits", "publications"):
            assert row[column] == whole_visits[key][column], (key, column)
        assert row["publication_rate"] == pytest.approx(
            row["publications"] / summary["window"]["seconds"]
        )
    for key, row in keyed(folder, "brokers").items():
        assert row["cpu_total_ns"] == keyed(whole, "brokers")[key]["cpu_total_ns"]
        assert row["throughput"] == pytest.approx(row["arrivals"] / summary["window"]["seconds"])
    # no subscriber recorded: the brokers' part, from the home broker's read (1 ms after
    # publication here) to the delivering broker's sends (write_run's t_done_ns)
    through: dict[tuple[str, str], list[tuple[float, int, str, str]]] = defaultdict(list)
    for e in EVENTS:
        for h in e.hops:
            path = path_to(e, h.broker)
            done = e.t_publish_ns + len(path) * MS + 10_000 + h.cpu_ns + 20_000
            for subscriber in h.delivered_to:
                took = (done - e.t_publish_ns - MS) / 1e6
                through[(e.publisher, subscriber)].append((took, len(path), path[0], h.broker))
    assert summary["latency_from"] == "the home broker's read to the delivering broker's sends"
    latency = keyed(folder, "latency")
    assert latency.keys() == through.keys()
    for pair, rows in through.items():
        got = latency[pair]
        assert got["deliveries"] == len(rows)
        assert got["mean_ms"] == pytest.approx(np.mean([r[0] for r in rows]), rel=1e-9)
        assert (got["hops"], got["hops_min"]) == (max(r[1] for r in rows), min(r[1] for r in rows))
        assert (got["publisher_broker"], got["subscriber_broker"]) == rows[0][2:]

    with pytest.raises(TraceError, match="brokers' traces .*, a prediction needs a replay's run"):
        predict(folder)
    html_path, md_path, sentence = render(folder)
    assert (html_path, md_path) == (folder / "report.html", folder / "report.md")
    assert sentence == (
        "The brokers recorded 6 events from 2 publisher(s) in 2 class(es) over "
        f"{summary['window']['seconds']:.3g} s, routed by 5 broker(s); the busiest, broker 1, "
        f"routed {4 / summary['window']['seconds']:.1f} events/s with 0.011 % of a core. "
        "Nothing is predicted, and latency is the brokers' part only: no client recorded here."
    )
    page = md_path.read_text()
    assert page.startswith("# hop trace report: brokers\n")
    assert "| hop rows | 19 in 5 file(s) |" in page
    sections = [line for line in page.splitlines() if line.startswith("## ")]
    assert sections == [
        "## Broker throughput",
        "## Latency through the brokers",
        "## Visit ratios",
        "## Routing probabilities",
        "## Most frequent dissemination trees",
        "## Service times per broker",
    ]
    assert html_path.read_text().count("<img alt=") == 3


def test_the_tables_go_where_out_says_leaving_the_run_folder_untouched(
    spark: Any, hand_analysis: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hand_run = Path(hand_analysis["run_dir"])
    run = tmp_path / "run"
    shutil.copytree(hand_run / "traces", run / "traces")
    shutil.copy(hand_run / "manifest.json", run)
    elsewhere = tmp_path / "elsewhere" / "t1"
    summary = analyze(run, spark=spark, out=elsewhere)
    assert sorted(p.name for p in run.iterdir()) == ["manifest.json", "traces"]
    assert sorted(p.name for p in elsewhere.iterdir()) == ["analysis", "manifest.json", "traces"]
    assert (elsewhere / "traces").readlink() == run / "traces"
    tables = elsewhere / "analysis"
    assert summary["outputs"] == str(tables)
    assert json.loads((tables / "summary.json").read_text())["used"] == summary["used"]
    for name in KEYS:
        assert pq.read_table(tables / f"{name}.parquet") == pq.read_table(
            hand_run / "analysis" / f"{name}.parquet"
        ), name

    brokers = tmp_path / "brokers"  # a brokers' trace folder: its files are linked
    shutil.copytree(run / "traces", brokers, ignore=shutil.ignore_patterns("deliveries-*"))
    view = tmp_path / "view"
    analyze(brokers, spark=spark, out=view)
    assert {p.name for p in view.iterdir()} == {"analysis", *(p.name for p in brokers.iterdir())}
    html_path, _, sentence = render(view)
    assert html_path == view / "report.html" and sentence.startswith("The brokers recorded")

    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    assert main([str(run), "--out", str(in_the_way)]) == 2
    assert f"--out: cannot make the folder {in_the_way}" in capsys.readouterr().err


def test_hop_report_of_a_brokers_trace_folder_not_yet_analysed_names_the_command(
    tmp_path: Path,
) -> None:
    run = write_run(tmp_path / "run", EVENTS)
    folder = tmp_path / "brokers"
    shutil.copytree(
        run / "traces", folder, ignore=shutil.ignore_patterns("deliveries-*", "publications-*")
    )
    with pytest.raises(ReportError, match=f"is missing: run `hop analyze {folder}` first"):
        render(folder)


def test_a_brokers_trace_folder_without_its_publishers_home_brokers_is_refused(
    tmp_path: Path,
) -> None:
    hand_run = write_run(tmp_path / "run", EVENTS)
    folder = tmp_path / "brokers"
    folder.mkdir()
    shutil.copy(hand_run / "traces" / "hops-broker1-1.arrow", folder)  # no client's events
    with pytest.raises(TraceError, match="no hop row shows an event arriving from a client"):
        analyze(folder)


def test_event_ids_published_more_than_once_are_told_per_publisher(tmp_path: Path) -> None:
    again = [  # pubA started again at broker 5, counting from 1 anew; pubB is alone
        Event(e.event_id, e.publisher, e.t_publish_ns + 10**8, [hop("5", f"client:{e.publisher}")])
        for e in EVENTS
        if e.event_id in ("pubA:1", "pubA:2")
    ]
    run = write_run(tmp_path / "run", EVENTS + again)
    staged = stage_traces(run, tmp_path / "staged")
    assert repeated_event_ids(staged_publications(staged.root)) == [
        "publisher 'pubA': 2 event id(s) published more than once (clients sharing the "
        "name, or one started again); the events of one id are taken for one, so their "
        "trees and paths merge"
    ]
    once = stage_traces(write_run(tmp_path / "once", EVENTS), staged.root)
    assert repeated_event_ids(staged_publications(once.root)) == []


def test_a_brokers_trace_folder_of_several_recordings_is_told(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", EVENTS)
    folder = tmp_path / "brokers"
    folder.mkdir()
    for path in (run / "traces").glob("hops-*.arrow"):
        rows = pa.Table.from_batches(read_file(path, "hops")[0]).to_pylist()
        for row in rows:  # broker 3, pubB's home, recorded under another run id
            row["run_id"] = "later" if row["broker"] == "3" else row["run_id"]
        write_stream(folder / path.name, rows, HOPS, 100)
    staged = stage_broker_traces(folder, tmp_path / "staged")
    assert several_runs(staged_publications(staged.root)) == [
        "the traces hold 2 run ids ('hand', 'later'), read as one recording whose rates "
        "span them all, gaps included; give each recording its own --trace-dir folder"
    ]
    one_run = stage_broker_traces(run / "traces", staged.root)
    assert several_runs(staged_publications(one_run.root)) == []


@pytest.mark.integration
def test_the_traces_of_a_network_run_by_hand_are_analysed(spark: Any, tmp_path: Path) -> None:
    """Brokers started with --trace-dir and clients of the library, no replay."""
    traces = tmp_path / "traces"
    tracing = ["--trace-dir", str(traces), "--run-id", "by-hand"]
    net = Network.from_file("tree7", tmp_path, extra_args=tracing)
    try:
        net.start()
        with (
            Client.connect(*net.address(4), name="watcher") as watcher,
            Client.connect(*net.address(7), name="seller") as seller,
        ):
            wanted = watcher.subscribe("family = 3")
            for n in range(30):
                seller.publish({"type": "offer", "family": 3, "n": n})
                seller.publish({"type": "notice", "family": 4, "n": n})
            seller.flush()
            assert [wanted.next(timeout=10.0)["n"] for _ in range(30)] == list(range(30))
    finally:
        codes = net.stop()
    assert codes == dict.fromkeys(range(1, 8), 0), net.log_text()[-3000:]

    summary = analyze(traces, spark=spark)
    assert summary["used"]["events"] == 60 and summary["window"]["name"] == "all"
    assert summary["warnings"] == [] and summary["problems"] == []
    visits = keyed(traces, "visit_ratios")
    climbs_to_the_root = {"7", "3", "1"}  # hierarchical routing: up first, then down
    assert {k[2] for k in visits if k[0] == "offer"} == climbs_to_the_root | {"2", "4"}
    assert {k[2] for k in visits if k[0] == "notice"} == climbs_to_the_root
    assert {(r["visit_ratio_solved"], r["visit_ratio_counted"]) for r in visits.values()} == {
        (1.0, 1.0)
    }
    assert [(r["event_type"], r["path"], r["share"]) for r in output(traces, "paths")] == [
        ("offer", ["7", "3", "1", "2", "4"], 1.0)
    ]
    assert {r["publisher"] for r in visits.values()} == {"seller"}
    (through,) = output(traces, "latency")  # the brokers' part: no client recorded
    assert (through["publisher"], through["subscriber"]) == ("seller", "watcher")
    assert (through["deliveries"], through["hops"], through["publisher_broker"]) == (30, 5, "7")
    assert 0 < through["p50_ms"] < 1000


@pytest.mark.needs("immutable_folders")
def test_a_table_that_cannot_be_written_is_named(spark: Any, tmp_path: Path) -> None:
    """As on a full disk: the JVM's error of the write, named by the table's file."""
    run = write_run(tmp_path / "run", EVENTS)
    analysis = run / "analysis"
    (analysis / "staged_traces").mkdir(parents=True)  # staging writes inside it
    subprocess.run(["chattr", "+i", str(analysis)], check=True, timeout=10)
    try:
        with pytest.raises(OutputError) as refused:
            analyze(run, spark=spark)
    finally:
        subprocess.run(["chattr", "-i", str(analysis)], check=True, timeout=10)
    said = str(refused.value)
    assert said.startswith(f"{analysis / 'routing_probabilities.parquet'}: cannot write it (")
    assert said.count("\n") == 0
    outputs = [p.name for p in analysis.iterdir()]
    assert outputs == ["staged_traces"]  # nothing else could be made


@pytest.mark.needs("immutable_folders", "java")
def test_hop_analyze_names_a_table_it_cannot_write_without_the_jvms_stack_traces(
    tmp_path: Path,
) -> None:
    """Not after the JVM's log of the failed task, with its stack trace at each step
    (some 180 lines): `monitor.spark` turns those loggers off. Hadoop's committer may
    say in a line of its own what it could not make."""
    run = write_run(tmp_path / "run", EVENTS)
    analysis = run / "analysis"
    (analysis / "staged_traces").mkdir(parents=True)
    subprocess.run(["chattr", "+i", str(analysis)], check=True, timeout=10)
    try:
        result = run_hop("analyze", str(run), "--quiet", timeout=300)
    finally:
        subprocess.run(["chattr", "-i", str(analysis)], check=True, timeout=10)
    assert result.returncode == 1
    said = [line for line in result.stderr.splitlines() if "incubator modules" not in line]
    table = analysis / "routing_probabilities.parquet"
    assert said[-1].startswith(f"hop analyze: {table}: cannot write it ("), said
    assert len(said) <= 2 and not any(line.startswith("\tat ") for line in said), said


@pytest.mark.needs("immutable_folders")
def test_an_old_table_that_cannot_be_removed_is_named(spark: Any, tmp_path: Path) -> None:
    """Spark's own clearing of the last analysis's table would say only that it failed."""
    run = write_run(tmp_path / "run", EVENTS)
    stale = run / "analysis" / "trees.parquet"
    stale.mkdir(parents=True)
    (stale / "part-0.parquet").write_bytes(b"old")
    subprocess.run(["chattr", "+i", str(stale)], check=True, timeout=10)  # (root too)
    try:
        with pytest.raises(OutputError) as refused:
            analyze(run, spark=spark)
    finally:
        subprocess.run(["chattr", "-i", str(stale)], check=True, timeout=10)
    assert str(refused.value) == f"{stale}: cannot write it (Operation not permitted)"


def test_truncated_trace_keeps_complete_batches_and_warns(spark: Any, tmp_path: Path) -> None:
    run = write_run(tmp_path / "cut", EVENTS, batch=1)
    broker1 = run / "traces" / "hops-broker1-1.arrow"
    data = broker1.read_bytes()
    broker1.write_bytes(data[:-40])  # broker 1 killed while writing its last row (pubB:1)
    summary = analyze(run, spark=spark)
    [problem] = summary["problems"]
    assert "hops-broker1-1.arrow: truncated after 3 rows" in problem
    assert summary["trace_rows"]["hops"] == len([h for e in EVENTS for h in e.hops]) - 1
    assert_matches_reference(run, skip="paths")
    # The hops cannot tell how pubB:1 reached broker 2: its routes start there.
    paths = {(r["publisher"], tuple(r["path"])) for r in output(run, "paths")}
    expected = set(reference(run)["paths"])
    assert {(p, path) for _, p, path, _ in expected if p == "pubA"} <= paths
    assert {path for p, path in paths if p == "pubB"} == {("2",), ("2", "4"), ("2", "5")}
    # pubB's event was forwarded 3 -> 1, but broker 1's record of it is lost.
    assert any(
        "pubB) at broker 1: solved visit ratio 1.0000 vs counted 0.0000" in w
        for w in summary["warnings"]
    )


def test_bad_input_is_refused_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    (empty / "traces").mkdir(parents=True)
    (empty / "manifest.json").write_text(json.dumps({"phases": PHASES}))
    with pytest.raises(TraceError, match="no trace files for hops, deliveries, publications"):
        analyze(empty)
    assert main([str(empty)]) == 2
    assert "hop analyze:" in capsys.readouterr().err

    run = write_run(tmp_path / "foreign", EVENTS[:1])
    other = HOPS.with_metadata({b"hop.trace.version": b"0", b"hop.trace.table": b"hops"})
    with pa.ipc.new_stream(str(run / "traces" / "hops-broker9-1.arrow"), other) as writer:
        writer.write_table(pa.Table.from_pylist([], schema=other))
    with pytest.raises(TraceError, match="hops-broker9-1.arrow: trace schema version 0"):
        analyze(run)

    (run / "manifest.json").unlink()
    with pytest.raises(TraceError, match="manifest.json: missing"):
        analyze(run)
    validation = tmp_path / "validation"  # hop validate's: runs in folders of its own
    for name in ("calibration", "measurement"):
        write_run(validation / name, EVENTS[:1])
    (validation / "validation.json").write_text("{}")
    with pytest.raises(
        TraceError, match="a validation folder .* its folders calibration, measurement"
    ):
        analyze(validation)
    with pytest.raises(TraceError, match="unknown window"):
        analyze(run, window="warmup")


@pytest.mark.integration
def test_replay_hierarchical(spark: Any, tmp_path: Path) -> None:
    path, study = small_study(tmp_path, "hierarchical")
    run = tmp_path / "run"
    result = run_replay(path, run)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = analyze(run, spark=spark)
    assert summary["warnings"] == [] and summary["problems"] == []
    assert_matches_reference(run)

    for row in output(run, "visit_ratios"):  # the thesis' traffic equations hold exactly
        assert row["visit_ratio_solved"] == pytest.approx(row["visit_ratio_counted"], abs=1e-12)
    shares: Counter[str] = Counter()
    branching = False
    for row in output(run, "trees"):
        shares[row["publisher"]] += row["share"]
        senders = Counter(edge.split(">")[0] for edge in row["tree"])
        branching |= max(senders.values(), default=0) >= 2
    assert all(total == pytest.approx(1.0) for total in shares.values())
    assert branching  # some event forked into two branches
    topology = study.topology
    for row in output(run, "paths"):
        home, target = int(row["path"][0]), int(row["subscriber_broker"])
        assert row["path"] == [str(b) for b in topology.tree_path(home, target)]


def test_a_run_whose_events_cross_no_link_and_reach_no_one_is_predicted_and_reported(
    spark: Any, tmp_path: Path
) -> None:
    """Every client at the root broker, no filter matching: the model has no link or
    delivery delay to draw, and needs none; throughput is still predicted."""
    path, study = small_study(tmp_path, "hierarchical")
    publishers = {p: dataclasses.replace(s, broker=1) for p, s in study.publishers.items()}
    subscribers = {
        s: dataclasses.replace(spec, broker=1, filters=("family = 999",))
        for s, spec in study.subscribers.items()
    }
    study = dataclasses.replace(study, publishers=publishers, subscribers=subscribers)
    path.write_text(to_toml(study))
    run = tmp_path / "run"
    result = run_replay(path, run)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "delivered 0 of 0 expected" in result.stdout
    analyze(run, spark=spark)
    summary = predict(run, methods=("mm1", "sim"), max_wall_s=2.0)
    rows = pq.read_table(run / "analysis" / "predictions.parquet").to_pylist()
    assert {r["kind"] for r in rows} == {"broker"}  # no pair to predict a latency for
    assert {r["entity"] for r in rows if r["method"] == "sim"} == {"1"}
    assert summary["rows"] == len(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's, of an empty heatmap
        render(run)
    predict(run, rate_scale=1e6, methods=("mm1",))  # far beyond what a host can carry
    _, _, sentence = render(run)
    assert "the model finds the host's CPU saturated (bottleneck: broker 1)" in sentence


@pytest.mark.integration
@pytest.mark.slow  # make soak; make test covers a cluster through hop analyze --master
def test_spark_submit_to_a_standalone_cluster_matches_local_mode(
    hand_analysis: dict[str, Any], standalone_cluster: str, tmp_path: Path
) -> None:
    local = Path(hand_analysis["run_dir"])
    clustered = tmp_path / "cluster"
    shutil.copytree(local / "traces", clustered / "traces")
    shutil.copy(local / "manifest.json", clustered)

    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    quick_jit = C1_ONLY  # tiny data: compile quickly, not well
    result = subprocess.run(
        [
            str(submit),
            *("--master", standalone_cluster, "--conf", "spark.ui.enabled=false"),
            *("--conf", f"spark.driver.extraJavaOptions={quick_jit}"),
            *("--conf", f"spark.executor.extraJavaOptions={quick_jit}"),
            str(REPO / "monitor" / "analysis" / "__main__.py"),
            str(clustered),
        ],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((clustered / "analysis" / "summary.json").read_text())
    assert summary["spark_master"] == standalone_cluster
    assert summary["spark_jit"] == "c1-only"  # the submitter's JVM options, read back
    assert summary["tables"] == hand_analysis["tables"]
    assert_same_outputs(local, clustered)


def test_a_short_run_is_analysed_on_a_c1_only_jvm_a_long_one_on_the_default() -> None:
    assert jit_options(0) == jit_options(C1_UP_TO_HOP_ROWS) == C1_ONLY
    assert jit_options(C1_UP_TO_HOP_ROWS + 1) == jit_options(16_000_000) == ""


class _SessionWithOptions:
    """What `session_jit` reads of a session: its context's configuration."""

    def __init__(self, driver_options: str | None) -> None:
        conf = {} if driver_options is None else {"spark.driver.extraJavaOptions": driver_options}
        self.sparkContext = self
        self._conf = conf

    def getConf(self) -> _SessionWithOptions:  # noqa: N802 (PySpark's name)
        return self

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._conf.get(key, default)


@pytest.mark.parametrize(
    ("driver_options", "jit"),
    [
        (None, "tiered"),
        ("", "tiered"),
        ("-Xss4m", "tiered"),
        ("-XX:TieredStopAtLevel=4", "tiered"),
        (C1_ONLY, "c1-only"),
        (f"-Xss4m {C1_ONLY} -Dx=y", "c1-only"),
    ],
)
def test_the_summary_names_the_jit_the_driver_was_started_with(
    driver_options: str | None, jit: str
) -> None:
    assert session_jit(_SessionWithOptions(driver_options)) == jit  # type: ignore[arg-type]
