"""How `hop analyze` scales with the size of the traces (docs/performance.md).

Writes synthetic runs of 1M, 4M and 16M hop rows and times `monitor.analysis.analyze`
on each with one shared Spark session (its start-up, and a first warm-up analysis,
are reported separately), as JSON in bench/results/analyze_scaling.json, with the
CPU time used (robust to other processes sharing the machine) beside wall time.
Target: growth no worse than linear, and 16M rows in under 5 minutes on 2 cores.

The traces have the shape of the thesis' case study as `hop replay` writes it: the
15-broker binary tree with hierarchical routing (up to the root, down to every
leaf with an interested subscriber), a publisher on each leaf, two subscribers per
leaf each wanting an event with probability 0.3, one Arrow IPC stream file per
broker written in batches of 4096 rows, deliveries and publications from one
client process, and a manifest with a warm-up and drain phase.

Run: ``python -m bench.analyze_scaling [--sizes 1000000 4000000 16000000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.common import write_result
from broker.process import process_cpu_s, unwind_on_termination
from broker.trace.schema import DELIVERIES, HOPS, PUBLICATIONS

BROKERS = range(1, 16)
LEAVES = list(range(8, 16))  # publisher k and subscribers 2k-1, 2k sit on leaf 7 + k
RATES = np.array([12.0, 14.0, 10.0, 13.0, 9.0, 11.0, 15.0, 10.5])  # events/s per publisher
SUBSCRIBER_P = 0.3  # chance that a subscriber's filters match an event
BATCH_ROWS = 4096  # the broker's flush size
EVENT_TYPE = "callForOffers"
RUN_ID = "siena15-bench"


def parent(broker: int) -> int:
    return broker // 2


def tree_path(a: int, b: int) -> list[int]:
    """Brokers from `a` to `b` in the binary tree (both included)."""
    up, down = [a], [b]
    while up[-1] != down[-1]:
        if up[-1] > down[-1]:
            up.append(parent(up[-1]))
        else:
            down.append(parent(down[-1]))
    return up + down[-2::-1]


@dataclass
class Templates:
    """One group of hop rows per (publisher, set of target leaves): hierarchical routing."""

    start: np.ndarray  # first row of template t
    length: np.ndarray  # rows of template t
    broker: np.ndarray  # per template row
    sender: np.ndarray  # per template row: sending broker, 0 for the publisher client
    depth: np.ndarray  # per template row: brokers passed before
    to_nodes: pa.ListArray  # per template row


def build_templates() -> Templates:
    brokers, senders, depths, to_nodes, lengths = [], [], [], [], []
    for home in LEAVES:
        up = tree_path(home, 1)
        for mask in range(256):
            targets = [leaf for i, leaf in enumerate(LEAVES) if mask >> i & 1]
            edges = {(a, b) for a, b in zip(up, up[1:], strict=False)}
            for target in targets:
                path = tree_path(home, target)
                edges |= set(zip(path, path[1:], strict=False))
            depth = {home: 0}
            order = [home]
            for node in order:  # breadth first from the home broker
                for a, b in sorted(edges):
                    if a == node and b not in depth:
                        depth[b] = depth[a] + 1
                        order.append(b)
            sender = {b: a for a, b in edges}
            lengths.append(len(order))
            for node in order:
                brokers.append(node)
                senders.append(sender.get(node, 0))
                depths.append(depth[node])
                to_nodes.append(sorted(str(b) for a, b in edges if a == node))
    length = np.array(lengths)
    return Templates(
        start=np.concatenate([[0], np.cumsum(length)[:-1]]),
        length=length,
        broker=np.array(brokers),
        sender=np.array(senders),
        depth=np.array(depths),
        to_nodes=pa.array(to_nodes, type=pa.list_(pa.string())),
    )


def categorical(codes: np.ndarray, values: list[str]) -> pa.Array:
    """Strings from small-integer codes, fast (dictionary decoded to plain strings)."""
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), values).cast(pa.string())


def write_stream(path: Path, table: pa.Table) -> None:
    with pa.ipc.new_stream(str(path), table.schema) as writer:
        writer.write_table(table, max_chunksize=BATCH_ROWS)


@dataclass
class Events:
    publisher: np.ndarray  # 0..7
    t_publish: np.ndarray  # ns
    subscribers: np.ndarray  # bool, events x 16
    template: np.ndarray  # template id
    event_id: pa.Array


def draw_events(n: int, rng: np.random.Generator, t0: int) -> Events:
    publisher = rng.choice(len(RATES), size=n, p=RATES / RATES.sum())
    gaps = rng.exponential(1e9 / RATES.sum(), size=n).astype(np.int64)
    t_publish = t0 + np.cumsum(gaps)
    subscribers = rng.random((n, 2 * len(LEAVES))) < SUBSCRIBER_P
    leaf_mask = (subscribers[:, 0::2] | subscribers[:, 1::2]) @ (1 << np.arange(len(LEAVES)))
    order = np.argsort(publisher, kind="stable")  # per-publisher sequence numbers
    seq = np.empty(n, dtype=np.int64)
    counts = np.bincount(publisher, minlength=len(RATES))
    seq[order] = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts) + 1
    names = categorical(publisher, [f"pub{k + 1}" for k in range(len(RATES))])
    event_id = pc.binary_join_element_wise(names, pc.cast(pa.array(seq), pa.string()), ":")
    return Events(publisher, t_publish, subscribers, publisher * 256 + leaf_mask, event_id)


def write_hops(traces: Path, events: Events, tpl: Templates, rng: np.random.Generator) -> int:
    lengths = tpl.length[events.template]
    event = np.repeat(np.arange(len(lengths)), lengths)
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)
    row = tpl.start[events.template][event] + np.arange(len(event)) - first
    broker = tpl.broker[row]
    for b in BROKERS:
        idx = np.flatnonzero(broker == b)
        ev, r = event[idx], row[idx]
        n = len(idx)
        to_nodes = tpl.to_nodes.take(pa.array(r))
        sends = pc.list_value_length(to_nodes).to_numpy(zero_copy_only=False)
        delivered = delivered_to(b, events.subscribers[ev])
        sends = sends + pc.list_value_length(delivered).to_numpy(zero_copy_only=False)
        depth = tpl.depth[r]
        t_arrival = events.t_publish[ev] + 300_000 + depth * 1_200_000
        t_arrival += rng.exponential(200_000, n).astype(np.int64)
        wait = rng.exponential(60_000, n).astype(np.int64)
        cpu = (rng.lognormal(np.log(110_000), 0.35, n) + 30_000 * sends).astype(np.int64)
        sender = tpl.sender[r]
        from_codes = np.where(sender == 0, 15 + events.publisher[ev], sender - 1)
        from_values = [str(x) for x in BROKERS] + [f"client:pub{k + 1}" for k in range(8)]
        columns = {
            "run_id": categorical(np.zeros(n, np.int32), [RUN_ID]),
            "event_id": events.event_id.take(pa.array(ev)),
            "event_type": categorical(np.zeros(n, np.int32), [EVENT_TYPE]),
            "publisher": categorical(events.publisher[ev], [f"pub{k + 1}" for k in range(8)]),
            "broker": categorical(np.zeros(n, np.int32), [str(b)]),
            "from_node": categorical(from_codes, from_values),
            "to_nodes": to_nodes,
            "delivered_to": delivered,
            "decision": categorical(np.zeros(n, np.int32), ["routed"]),
            "drop_reason": categorical(np.zeros(n, np.int32), [""]),
            "t_arrival_ns": t_arrival,
            "t_start_ns": t_arrival + wait,
            "t_done_ns": t_arrival + wait + cpu + 20_000,
            "wait_ns": wait,
            "cpu_ns": cpu,
            "batch": np.ones(n, np.int32),
            "batch_index": np.zeros(n, np.int32),
            "queue_len": np.zeros(n, np.int32),
            "bytes_in": np.full(n, 1400, np.int32),
            "bytes_out": 1400 * sends.astype(np.int64),
            "filters_matched": sends.astype(np.int32),
            "subscriptions": np.full(n, 4, np.int32),
            "hops_before": depth.astype(np.int32),
        }
        write_stream(traces / f"hops-broker{b}-{1000 + b}.arrow", pa.table(columns, schema=HOPS))
    return len(event)


def delivered_to(broker: int, subscribers: np.ndarray) -> pa.ListArray:
    """The subscribers of `broker` (a leaf) that want each event; empty lists elsewhere."""
    if broker not in LEAVES:
        return pa.array([[]] * len(subscribers), type=pa.list_(pa.string()))
    first = 2 * (broker - 8)  # column of subscriber 2k-1 (0-based), k = broker - 7
    code = subscribers[:, first].astype(np.int32) + 2 * subscribers[:, first + 1]
    a, b = f"sub{first + 1}", f"sub{first + 2}"
    combos = pa.array([[], [a], [b], [a, b]], type=pa.list_(pa.string()))
    return combos.take(pa.array(code))


def write_clients(traces: Path, events: Events, rng: np.random.Generator) -> int:
    n = len(events.publisher)
    home = np.array(LEAVES)[events.publisher]
    publications = {
        "run_id": categorical(np.zeros(n, np.int32), [RUN_ID]),
        "event_id": events.event_id,
        "publisher": categorical(events.publisher, [f"pub{k + 1}" for k in range(8)]),
        "broker": categorical(home - 1, [str(b) for b in BROKERS]),
        "event_type": categorical(np.zeros(n, np.int32), [EVENT_TYPE]),
        "t_publish_ns": events.t_publish,
        "size_bytes": np.full(n, 1382, np.int32),
        "attributes": categorical(
            rng.integers(0, 40, n), [f'{{"family": {f}}}' for f in range(40)]
        ),
    }
    write_stream(traces / "publications-clients-999.arrow", pa.table(publications, PUBLICATIONS))
    ev, sub = np.nonzero(events.subscribers)
    m = len(ev)
    leaf = 8 + sub // 2
    paths = [[str(b) for b in tree_path(h, t)] for h in LEAVES for t in LEAVES]
    path_code = (home[ev] - 8) * 8 + (leaf - 8)
    hops = np.array([len(p) for p in paths])[path_code]
    t_deliver = events.t_publish[ev] + 500_000 + hops * 1_300_000
    t_deliver += rng.exponential(400_000, m).astype(np.int64)
    deliveries = {
        "run_id": categorical(np.zeros(m, np.int32), [RUN_ID]),
        "event_id": events.event_id.take(pa.array(ev)),
        "publisher": categorical(events.publisher[ev], [f"pub{k + 1}" for k in range(8)]),
        "subscriber": categorical(sub, [f"sub{s + 1}" for s in range(16)]),
        "subscription_ids": pa.array([[1]], pa.list_(pa.int64())).take(pa.array(np.zeros(m, int))),
        "broker": categorical(leaf - 1, [str(b) for b in BROKERS]),
        "path": pa.array(paths, pa.list_(pa.string())).take(pa.array(path_code)),
        "t_publish_ns": events.t_publish[ev],
        "t_deliver_ns": t_deliver,
    }
    write_stream(traces / "deliveries-clients-999.arrow", pa.table(deliveries, DELIVERIES))
    return m


def synthetic_run(run_dir: Path, hop_rows: int, seed: int = 5) -> dict[str, int]:
    """A run directory with about `hop_rows` hop rows; the row counts written."""
    rng = np.random.default_rng(seed)
    tpl = build_templates()
    sample = draw_events(20_000, rng, 0)
    per_event = tpl.length[sample.template].mean()
    n_events = int(round(hop_rows / per_event))
    t0 = 1_800_000_000 * 10**9
    events = draw_events(n_events, rng, t0)
    traces = run_dir / "traces"
    traces.mkdir(parents=True)
    hops = write_hops(traces, events, tpl, rng)
    deliveries = write_clients(traces, events, rng)
    end = int(events.t_publish[-1]) + 1
    span = end - t0
    phases = {
        "start_ns": t0,
        "measure_start_ns": t0 + span // 20,
        "measure_end_ns": end - span // 20,
        "drain_end_ns": end + 2 * 10**9,
    }
    manifest = {
        "run_id": RUN_ID,
        "phases": phases,
        "rates": {str(k + 1): r for k, r in enumerate(RATES)},
        "host": {"cores": 2},
        "synthetic": True,
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return {"hops": hops, "events": n_events, "deliveries": deliveries}


def cpu_seconds(jvm_pid: int) -> float:
    """CPU time so far of this process (pyarrow staging) and of the Spark driver JVM
    (which runs the tasks in local mode): unlike wall time, not inflated by other
    processes competing for the cores."""
    return time.process_time() + process_cpu_s(jvm_pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 4_000_000, 16_000_000])
    parser.add_argument(
        "--workdir", type=Path, help="where to write the runs (default: a temp dir)"
    )
    parser.add_argument("--master", help="Spark master (default: local[*])")
    parser.add_argument(
        "--warmup-rows",
        type=int,
        default=100_000,
        help="hop rows of the first analysis, which warms the JVM up (default: 100000)",
    )
    parser.add_argument("--java-options", default="", help="for the driver JVM (see monitor.spark)")
    parser.add_argument("--out", type=Path, help="result JSON (default: bench/results/)")
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop what it started also when killed with SIGTERM

    from monitor.analysis import analyze
    from monitor.spark import spark_session

    workdir = Path(tempfile.mkdtemp(prefix="analyze-scaling-", dir=args.workdir))
    start = time.perf_counter()
    spark = spark_session(args.master, java_options=args.java_options)
    startup_s = time.perf_counter() - start
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # set while a SparkContext is running, as spark_session's is
    jvm_pid = jvm.java.lang.ProcessHandle.current().pid()
    runs = []
    try:
        # The first analysis in a JVM pays for class loading and JIT compilation; a
        # small run first keeps that out of the sizes compared.
        warmup = workdir / "warmup"
        synthetic_run(warmup, args.warmup_rows)
        start = time.perf_counter()
        analyze(warmup, spark=spark)
        warmup_s = time.perf_counter() - start
        shutil.rmtree(warmup)
        for size in args.sizes:
            run_dir = workdir / f"run-{size}"
            start = time.perf_counter()
            rows = synthetic_run(run_dir, size)
            generate_s = time.perf_counter() - start
            load_before = os.getloadavg()[0]
            cpu_before = cpu_seconds(jvm_pid)
            start = time.perf_counter()
            summary = analyze(run_dir, spark=spark)
            seconds = time.perf_counter() - start
            cpu = cpu_seconds(jvm_pid) - cpu_before
            runs.append(
                {
                    "hop_rows": rows["hops"],
                    "events": rows["events"],
                    "delivery_rows": rows["deliveries"],
                    "generate_s": round(generate_s, 2),
                    "analyze_s": round(seconds, 2),
                    "steps_s": summary["timings"],
                    "us_per_hop_row": round(seconds / rows["hops"] * 1e6, 3),
                    "cpu_s": round(cpu, 2),  # this process and the Spark JVM, all threads
                    "tables": summary["tables"],
                    # other processes on the machine share its cores: 1-minute load
                    "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                }
            )
            print(json.dumps(runs[-1]), flush=True)
            shutil.rmtree(run_dir)
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    first, last = runs[0], runs[-1]
    rows = last["hop_rows"] / first["hop_rows"]
    growth = (last["analyze_s"] / first["analyze_s"]) / rows
    cpu_growth = (last["cpu_s"] / first["cpu_s"]) / rows
    result = {
        "spark_master": args.master or "local[*]",
        "spark_startup_s": round(startup_s, 2),
        "warmup_analysis_s": round(warmup_s, 2),  # the first analysis, before the runs
        "warmup_rows": args.warmup_rows,
        "java_options": args.java_options,
        "runs": runs,
        "growth_vs_linear": round(growth, 3),  # <= 1: no worse than linear
        "cpu_growth_vs_linear": round(cpu_growth, 3),
        "target": "growth <= 1 and 16M hop rows in < 300 s on 2 cores",
    }
    path = write_result("analyze_scaling", result, args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
