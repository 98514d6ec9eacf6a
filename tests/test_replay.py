"""`hop replay` end to end, checked from the Arrow trace files alone."""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
import trio

import client
from broker.local_network import REPO, Network, free_base_port
from broker.trace.schema import HOPS
from monitor.characterize import characterize
from monitor.replay import write_copy
from monitor.traces import TraceError, count_rows, read_table
from monitor.tracing import attributes_from_json
from routing import parse_filter
from topologies import CaseStudy, Deployment, load_case_study, publisher_name, subscriber_name
from topologies.generators import to_toml

pytestmark = pytest.mark.integration


def small_study(tmp_path: Path, routing: str) -> tuple[Path, CaseStudy]:
    """tree7 on free ports with the given strategy and a short workload."""
    study = load_case_study(REPO / "topologies" / "tree7.toml")
    base = free_base_port(7)
    topology = dataclasses.replace(
        study.topology,
        routing=routing,
        base_port=base,
        brokers={
            b: dataclasses.replace(s, port=base + b) for b, s in study.topology.brokers.items()
        },
    )
    workload = dataclasses.replace(study.workload, duration_s=2.0, warmup_s=0.5, drain_s=1.0)
    # A process per home broker (4, not 12): what these tests check does not depend on
    # the placement, and each process costs a start; tests/test_replay_deployment.py
    # replays every placement, the default included.
    deployment = Deployment(clients="broker")
    study = dataclasses.replace(study, topology=topology, workload=workload, deployment=deployment)
    path = tmp_path / f"tree7-{routing}.toml"
    path.write_text(to_toml(study))
    return path, load_case_study(path)


def run_replay(
    path: Path, out: Path, preexec_fn: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hop", "replay", str(path), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        preexec_fn=preexec_fn,
        check=False,
    )


def must_visit(study: CaseStudy, home: int, targets: set[int]) -> set[int]:
    """The brokers an event from `home` must visit to reach brokers `targets`."""
    topology = study.topology
    if topology.routing == "flooding":
        return set(topology.brokers)
    if topology.routing == "hierarchical":  # up to the root, then down to each target
        root = topology.root()
        visits = set(topology.tree_path(home, root))
        for target in targets:
            visits |= set(topology.tree_path(target, root))
        return visits
    visits = {home}  # acyclic: along the tree paths towards the targets only
    for target in targets:
        visits |= set(topology.tree_path(home, target))
    return visits


@pytest.mark.parametrize("routing", ["hierarchical", "acyclic", "flooding"])
def test_replay_traces_show_every_routing_decision(tmp_path: Path, routing: str) -> None:
    path, study = small_study(tmp_path, routing)
    out = tmp_path / "run"
    result = run_replay(path, out)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "lost 0" in result.stdout

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["lost"] == 0
    phases = manifest["phases"]
    assert phases["start_ns"] < phases["measure_start_ns"] < phases["measure_end_ns"]
    assert phases["measure_end_ns"] <= phases["drain_end_ns"]
    # The CPU of every process in the window: how busy the host was (monitor.carry)
    assert set(phases["cpu_s"]) == {str(b) for b in study.topology.brokers} | {"clients"}
    window_s = (phases["measure_end_ns"] - phases["measure_start_ns"]) / 1e9
    busy = characterize(out).busy_cores
    assert busy == pytest.approx(sum(phases["cpu_s"].values()) / window_s)
    assert 0 < busy <= os.cpu_count()
    offsets = manifest["clock_offsets_ns"]
    assert sorted(offsets, key=int) == [str(b) for b in sorted(study.topology.brokers)]
    for estimate in offsets.values():  # one host, one clock: off by at most half the RTT
        assert abs(estimate["offset_ns"]) <= estimate["rtt_ns"] // 2 + 1
        assert abs(estimate["offset_ns"]) < 5_000_000

    publications = read_table(out, "publications").table.to_pylist()
    hops = read_table(out, "hops").table.to_pylist()
    deliveries = read_table(out, "deliveries").table.to_pylist()
    assert len(publications) > 20
    home = {publisher_name(p.id): p.broker for p in study.publishers.values()}
    filters = {
        subscriber_name(s.id): (s.broker, [parse_filter(f) for f in s.filters])
        for s in study.subscribers.values()
    }

    hops_by_event: dict[str, list[dict]] = defaultdict(list)
    for row in hops:
        hops_by_event[row["event_id"]].append(row)
        assert row["decision"] == "routed"
        assert row["t_arrival_ns"] <= row["t_start_ns"] <= row["t_done_ns"]
        assert row["wait_ns"] == row["t_start_ns"] - row["t_arrival_ns"]
        assert row["run_id"] == manifest["run_id"] and row["event_type"] == "callForOffers"
        assert row["publisher"].startswith("pub") and row["hops_before"] >= 0
        assert row["bytes_out"] >= 0 and row["filters_matched"] >= len(row["delivered_to"])
        assert row["cpu_ns"] > 0 and row["bytes_in"] > 0
    delivered = Counter((d["event_id"], d["subscriber"]) for d in deliveries)
    for pub in publications:
        event = attributes_from_json(pub["attributes"])
        wanted = {name for name, (_, fs) in filters.items() if any(f.matches(event) for f in fs)}
        targets = {filters[name][0] for name in wanted}
        rows = hops_by_event[pub["event_id"]]
        # Rows exactly at the brokers the strategy must visit, once each.
        visited = Counter(int(r["broker"]) for r in rows)
        assert set(visited) == must_visit(study, home[pub["publisher"]], targets), pub
        assert max(visited.values()) == 1
        # Every forward has a row at its target that points back.
        by_broker = {r["broker"]: r for r in rows}
        for r in rows:
            for target in r["to_nodes"]:
                assert by_broker[target]["from_node"] == r["broker"]
        # Deliveries are exactly the matching subscribers, once each.
        got = {s for (e, s) in delivered if e == pub["event_id"]}
        assert got == wanted, pub["event_id"]
        assert all(delivered[(pub["event_id"], s)] == 1 for s in got)
        local = [r for r in rows if r["from_node"].startswith("client:")]
        assert len(local) == 1 and local[0]["broker"] == str(home[pub["publisher"]])


def test_sigterm_flushes_a_broker_trace(tmp_path: Path) -> None:
    net = Network.from_file("chain5", tmp_path)
    traces = tmp_path / "traces"
    net.procs.extra_args = ["--trace-dir", str(traces), "--run-id", "sigterm"]
    net.start()
    try:

        async def publish() -> None:
            async with (
                client.open_client(*net.address(1), name="sink") as sub_client,
                client.open_client(*net.address(5), name="src") as pub,
            ):
                sub = await sub_client.subscribe("n exists")
                for i in range(500):
                    await pub.publish({"n": i})
                await pub.flush()
                for _ in range(500):
                    await sub.next_delivery()

        trio.run(publish)
        # SIGTERM well within the 1 s flush interval: rows are still buffered.
        net.procs.kill(3, sig=15)
        assert net.procs.procs[3].returncode == 0
        brokers = read_table(tmp_path, "hops").table.column("broker").to_pylist()
        assert brokers.count("3") == 500
    finally:
        net.stop()


def test_truncated_and_foreign_traces(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    rows = [{name: None for name in HOPS.names} for _ in range(10)]
    batch = pa.RecordBatch.from_pylist(rows, schema=HOPS)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, HOPS) as writer:
        writer.write_batch(batch)
        writer.write_batch(batch)
    data = sink.getvalue().to_pybytes()
    (traces / "hops-broker1-1.arrow").write_bytes(data[: len(data) - 40])  # cut mid-batch
    (traces / "hops-broker3-1.arrow").write_bytes(data)
    read = read_table(tmp_path, "hops")
    assert read.table.num_rows == 30
    assert "truncated after 10 rows" in read.problems[0]
    assert count_rows(tmp_path, "hops") == 30
    assert count_rows(tmp_path, "deliveries") == 0

    other = HOPS.with_metadata({b"hop.trace.version": b"0", b"hop.trace.table": b"hops"})
    with pa.ipc.new_stream(str(traces / "hops-broker2-1.arrow"), other) as writer:
        writer.write_batch(batch.replace_schema_metadata(other.metadata))
    with pytest.raises(TraceError, match="schema version 0"):
        read_table(tmp_path, "hops")
    with pytest.raises(TraceError, match="no deliveries trace files"):
        read_table(tmp_path, "deliveries")


def test_replay_refuses_a_run_dir_with_traces(tmp_path: Path) -> None:
    path, _ = small_study(tmp_path, "hierarchical")
    (tmp_path / "run" / "traces").mkdir(parents=True)
    (tmp_path / "run" / "traces" / "hops-x-1.arrow").write_bytes(b"")
    result = run_replay(path, tmp_path / "run")
    assert result.returncode == 2 and "already holds traces" in result.stderr  # the user's


def test_a_case_study_naming_its_secrets_relative_to_its_folder_replays(tmp_path: Path) -> None:
    """The brokers and clients read the run's copy in RUN_DIR, not the file's folder:
    the copy names the same secret files, by absolute path."""
    path, study = small_study(tmp_path, "hierarchical")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "network").write_text("for brokers\n")
    (tmp_path / "keys" / "clients").write_text("for clients\n")
    secured = 'auth_secret_file = "keys/network"\nclient_secret_file = "keys/clients"\n'
    path.write_text(secured + path.read_text())
    out = tmp_path / "run"
    result = run_replay(path, out)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "lost 0" in result.stdout
    copy = out / "case_study.toml"
    assert copy.read_text().startswith(f"# {path.name} as `hop replay` ran it")
    assert load_case_study(copy) == load_case_study(path)
    assert load_case_study(copy).topology.security.client_secret_file == (
        tmp_path.resolve() / "keys" / "clients"
    )


def test_a_case_study_naming_no_files_is_copied_as_it_is(tmp_path: Path) -> None:
    path, study = small_study(tmp_path, "hierarchical")
    write_copy(study, path, tmp_path / "copy.toml")
    assert (tmp_path / "copy.toml").read_bytes() == path.read_bytes()


def files_up_to(kb: int) -> Callable[[], None]:
    """A limit on the size of every file the replay's processes write (inherited by the
    brokers and their trace writers), set in the child before it runs: as a disk that
    fills up, for the files that outgrow it."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (kb << 10, kb << 10))


def test_a_replay_whose_brokers_could_not_write_their_traces_fails_saying_so(
    tmp_path: Path,
) -> None:
    path, _ = small_study(tmp_path, "hierarchical")
    out = tmp_path / "run"
    # A busy broker's trace outgrows 24 KB (some 30 KB here); the manifest and the
    # clients' traces do not.
    result = run_replay(path, out, preexec_fn=files_up_to(24))
    assert result.returncode == 1, result.stderr[-3000:]
    assert "hop replay: brokers' traces incomplete (broker 1: " in result.stderr
    assert "rows in its file" in result.stderr and "their trace writers failed" in result.stderr
    assert json.loads((out / "manifest.json").read_text())["counts"]["lost"] == 0
    logs = "".join(p.read_text() for p in (out / "logs").glob("broker-1*.log"))
    assert "File too large after" in logs  # the writer's one line, no traceback
    assert "Traceback" not in logs


def test_a_client_process_that_cannot_write_its_trace_ends_the_replay_in_one_line(
    tmp_path: Path,
) -> None:
    path, _ = small_study(tmp_path, "hierarchical")
    out = tmp_path / "run"
    result = run_replay(path, out, preexec_fn=files_up_to(8))  # a subscriber's trace outgrows it
    assert result.returncode == 1, result.stderr[-3000:]
    said = result.stderr.splitlines()[-1]
    assert " ended unexpectedly (exit code 1, " in said
    assert "; its log ends: hop client process: " in said
    assert ".arrow: File too large (what was recorded is in " in said
    assert "Traceback" not in said


def test_a_publisher_at_rate_0_connects_and_publishes_nothing(tmp_path: Path) -> None:
    """As a scenario turns one off: the others publish, and the run is whole."""
    path, study = small_study(tmp_path, "hierarchical")
    publishers = {**study.publishers, 1: dataclasses.replace(study.publishers[1], rate=0.0)}
    path.write_text(to_toml(dataclasses.replace(study, publishers=publishers)))
    out = tmp_path / "run"
    result = run_replay(path, out)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "lost 0, unexpected 0" in result.stdout
    published = Counter(read_table(out, "publications").table.column("publisher").to_pylist())
    assert published["pub1"] == 0 and min(published[f"pub{p}"] for p in (2, 3, 4)) > 0
