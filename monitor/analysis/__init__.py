"""`hop analyze RUN_DIR`: the Spark characterization of a run (docs/traces.md).

Reads RUN_DIR/traces/ (staged to Parquet first, see `staging`), keeps the events
published in the window (see `window`), and writes Parquet under RUN_DIR/analysis/;
a class is (event_type, publisher). RUN_DIR may also be a brokers' trace folder
(``--trace-dir`` of `hop net` or `hop broker`, no manifest): its hops files are read,
the publications taken from them, and the window is all they recorded (from the first
publication to the end of the last routing); its latency is the brokers' part of it
(from the home broker's read to the delivering broker's sends), as no client recorded
there.

routing_probabilities.parquet, one row per class x (from_broker, to_broker) edge used:
    forwarded, arrived (events of the class at from_broker), probability = their ratio
visit_ratios.parquet, one row per class x broker:
    visit_ratio_solved (V = e + V nu), visit_ratio_counted (visits / publications),
    arrival_rate (lambda V_solved), arrival_rate_counted (visits / window), visits,
    entered, publications, publication_rate, relative_difference
paths.parquet, one row per class x distinct delivery path:
    path (brokers, publisher's first), subscriber_broker, events, share (of the
    class's publications), hops (brokers on the path), publications
trees.parquet, one row per class x distinct dissemination tree:
    home_broker, tree (sorted "from>to" edges), events, share, share_independent
    (the tree's probability if brokers routed independently, thesis eq. 4.18),
    edges, publications
brokers.parquet, one row per broker x event_type:
    arrivals, throughput, cpu_mean_ns, cpu_p50_ns, cpu_p90_ns, utilization,
    mean_fanout (forwards + local deliveries per event), mean_forwards,
    mean_deliveries, cpu_total_ns, cpu_base_ns + cpu_per_send_ns (S = a + n b),
    wait_mean_ns, residence_mean_ns
latency.parquet, one row per (publisher, subscriber):
    deliveries, mean_ms, p50_ms, p90_ms, p99_ms, std_ms, hops (brokers on the
    path), hops_min, publisher_broker, subscriber_broker

plus summary.json (what `analyze` returns) and staged_traces/ (the traces as
Parquet, for further queries). Every table is computed with Spark DataFrame
operations; only the small per-class linear systems for the visit ratios are solved
on the driver (`visits`). Rates divide by the window's length.

Run it as `hop analyze RUN_DIR [--master URL] [--window measure|all]`, as
`python -m monitor.analysis RUN_DIR ...`, or with spark-submit (then spark-submit's
`--master`, `--conf` and `--driver-memory` apply; on a cluster of several hosts
RUN_DIR must be on storage that every executor reads):

    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/spark-submit \\
        --master spark://HOST:7077 monitor/analysis/__main__.py RUN_DIR
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from broker import logs
from monitor.analysis import queries
from monitor.analysis.staging import (
    repeated_event_ids,
    several_runs,
    stage_broker_traces,
    stage_traces,
    staged_publications,
)
from monitor.analysis.visits import ClassRouting, solve_visit_ratios
from monitor.analysis.window import WINDOWS, Window, recording_window, run_window
from monitor.cli import ANALYZED_FOLDER_HELP, OUT_HELP, WINDOW_HELP
from monitor.errors import InputError, write_output, writing
from monitor.run_view import linked_run
from monitor.runfiles import local_path
from monitor.spark import (
    jit_options,
    jvm_io_failure,
    session_jit,
    spark_session,
    stopped_at_end,
)
from monitor.spark_master import master_url
from monitor.traces import TraceError, is_broker_trace_folder

__all__ = ["TOLERANCE", "TraceError", "analyze", "findings", "main"]

TOLERANCE = 0.05  # solved vs counted visit ratios further apart than this are reported
STAGED = "staged_traces"
LATENCY_END_TO_END = "publication to delivery, at the clients"
LATENCY_AT_BROKERS = "the home broker's read to the delivering broker's sends"
SORT = {
    "routing_probabilities": [*queries.CLASS, "from_broker", "to_broker"],
    "visit_ratios": [*queries.CLASS, "broker"],
    "paths": [*queries.CLASS, "subscriber_broker", "path"],
    "trees": [*queries.CLASS, "tree"],
    "brokers": ["broker", "event_type"],
    "latency": ["publisher", "subscriber"],
}


def analyze(
    run_dir: Path,
    master: str | None = None,
    window: str | None = None,
    spark: SparkSession | None = None,
    progress: Callable[[str], None] | None = None,
    out: Path | None = None,
) -> dict[str, Any]:
    """Characterize the run in `run_dir`; returns the summary also written to
    analysis/summary.json (table row counts, warnings, problems, timings) of the run
    folder, where `hop predict` and `hop report` read the tables. The run folder is
    `run_dir`, or `out` made one whose inputs are links to `run_dir`'s
    (`monitor.run_view`: InputError when it cannot be), leaving `run_dir` as it is.

    Uses `spark` if given (and leaves it running), else starts a session on `master`
    (default local[*]) and stops it. `progress` gets a line per finished step. Raises
    TraceError on bad input: no traces, a trace of another schema version, no usable
    manifest.
    """
    say = progress or (lambda line: None)
    run_dir = Path(run_dir)
    started = time.perf_counter()
    brokers_only = is_broker_trace_folder(run_dir)
    if brokers_only and window == "measure":
        raise TraceError(
            f"{run_dir}: brokers' traces without a replay's manifest have no measurement "
            "phase; their window is all they recorded (--window all)"
        )
    run_span = None if brokers_only else run_window(run_dir, window or "measure")
    out = (run_dir if out is None else linked_run(run_dir, Path(out))) / "analysis"
    if run_span is None:
        staged = stage_broker_traces(run_dir, out / STAGED)
        published = staged_publications(staged.root)
        span = recording_window(published, staged.root, run_dir)
        warnings = several_runs(published)
    else:
        staged = stage_traces(run_dir, out / STAGED)
        published = staged_publications(staged.root)
        span = run_span
        warnings = []
    warnings += repeated_event_ids(published)
    timings = {"stage_s": round(time.perf_counter() - started, 3)}
    say(f"staged {staged.rows['hops']} hop rows as Parquet ({timings['stage_s']} s)")
    own_session = spark is None
    if spark is None:
        say(f"starting Spark ({master or 'local[*]'})")
        spark = spark_session(master, java_options=jit_options(staged.rows["hops"]))
    with stopped_at_end(spark) if own_session else contextlib.nullcontext():
        hops, solve_warnings = _write_tables(
            spark, staged.root, span, out, timings, say, latency_at_brokers=run_span is None
        )
        master_url = spark.sparkContext.master
        jit = session_jit(spark)
    visit_ratios = pq.read_table(local_path(out / "visit_ratios.parquet")).to_pylist()
    events = sum(
        {(r["event_type"], r["publisher"]): r["publications"] for r in visit_ratios}.values()
    )
    if not events:
        warnings.append(f"no events were published in the {span.name} window")
    summary: dict[str, Any] = {
        "run_dir": str(run_dir),
        "outputs": str(out),
        "spark_master": master_url,
        "spark_jit": jit,  # the driver JVM's: "c1-only" or "tiered" (monitor.spark)
        "window": {
            "name": span.name,
            "start_ns": span.start_ns,
            "end_ns": span.end_ns,
            "seconds": span.seconds,
        },
        "latency_from": LATENCY_AT_BROKERS if run_span is None else LATENCY_END_TO_END,
        "trace_files": staged.files,
        "trace_rows": staged.rows,
        "used": {"events": events, "hops": hops},
        "tables": {
            name: ds.dataset(local_path(out / f"{name}.parquet")).count_rows() for name in SORT
        },
        "warnings": warnings + solve_warnings + _visit_ratio_warnings(visit_ratios),
        "problems": staged.problems,
        "timings": {**timings, "total_s": round(time.perf_counter() - started, 3)},
    }
    write_output(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


def _write_table(spark: SparkSession, df: DataFrame, out: Path, name: str) -> None:
    """`df` as OUT/NAME.parquet; OutputError naming it when the JVM cannot write it."""
    path = out / f"{name}.parquet"
    with writing(path):
        if path.is_dir():  # the last analysis's: Spark would not say why it cannot clear it
            shutil.rmtree(path)
        try:
            df.write.mode("overwrite").parquet(local_path(path))
        except Exception as exc:  # (py4j's and PySpark's errors share no base but this)
            failure = jvm_io_failure(spark, exc)
            if failure is None:
                raise
            raise failure from None


def _write_tables(
    spark: SparkSession,
    root: Path,
    span: Window,
    out: Path,
    timings: dict[str, float],
    say: Callable[[str], None],
    latency_at_brokers: bool,
) -> tuple[int, list[str]]:
    """Compute the tables and write each to OUT/NAME.parquet, timing each step; the
    window's hop rows and the warnings. What was cached is unpersisted at the end."""
    cached: list[DataFrame] = []
    try:
        t = time.perf_counter()
        tables, hops, warnings = _characterize(spark, root, span, cached, latency_at_brokers)
        timings["solve_s"] = round(time.perf_counter() - t, 3)
        say(f"counted routing decisions and solved the visit ratios ({timings['solve_s']} s)")
        for name, df in tables.items():
            t = time.perf_counter()
            _write_table(spark, df.repartition(1).sortWithinPartitions(*SORT[name]), out, name)
            timings[f"{name}_s"] = round(time.perf_counter() - t, 3)
            say(f"wrote {name}.parquet ({timings[f'{name}_s']} s)")
    except BaseException:
        for df in cached:  # (an error here would hide the one that tells what happened)
            with contextlib.suppress(Exception):
                df.unpersist()
        raise
    for df in cached:
        df.unpersist()
    return hops, warnings


def _characterize(
    spark: SparkSession,
    root: Path,
    window: Window,
    cached: list[DataFrame],
    latency_at_brokers: bool,
) -> tuple[dict[str, DataFrame], int, list[str]]:
    """The six tables as DataFrames, the number of hops in the window, and the problems
    of the visit-ratio solves. Small tables used several times go into `cached`. With
    `latency_at_brokers` (a brokers' trace folder, where no subscriber recorded), the
    latency is the brokers' part of it (`queries.deliveries_at_brokers`)."""
    loaded = queries.load(spark, root)
    traces = queries.in_window(loaded, window)
    deliveries = (
        queries.deliveries_at_brokers(loaded.hops, traces.publications)
        if latency_at_brokers
        else traces.deliveries
    )
    per_class = queries.publications_per_class(traces.publications, window)
    decisions = queries.decisions(traces.hops)
    cached += [per_class.persist(), decisions.persist()]
    arrivals = queries.arrivals(decisions)
    forwards = queries.forwards(decisions)
    solved, hops, warnings = _solve(spark, arrivals, forwards)
    routing = queries.routing_probabilities(forwards, arrivals)
    shapes = queries.spell_out(queries.shapes(traces.hops), traces.hops)
    cached += [routing.persist(), shapes.persist()]
    tables = {
        "routing_probabilities": routing,
        "visit_ratios": queries.visit_ratios(solved, arrivals, per_class, window),
        "paths": queries.paths(shapes, per_class),
        "trees": queries.independent_shares(queries.trees(shapes, per_class), routing),
        "brokers": queries.brokers(decisions, traces.hops, window),
        "latency": queries.latency(deliveries),
    }
    return tables, hops, warnings


def _solve(
    spark: SparkSession, arrivals: DataFrame, forwards: DataFrame
) -> tuple[DataFrame, int, list[str]]:
    """The per-class linear systems, on the driver (a few brokers per class); also the
    number of hops and the problems met."""
    classes: dict[tuple[str, str], ClassRouting] = defaultdict(ClassRouting)
    hops = 0
    for r in arrivals.collect():
        routing = classes[(r.event_type, r.publisher)]
        routing.arrived[r.broker] = r.arrived
        hops += r.arrived
        if r.entered:
            routing.entered[r.broker] = r.entered
    for r in forwards.collect():
        classes[(r.event_type, r.publisher)].forwarded[(r.from_broker, r.to_broker)] = r.forwarded
    rows, problems = [], []
    for (event_type, publisher), routing in sorted(classes.items()):
        ratios, problem = solve_visit_ratios(routing)
        if problem:
            problems.append(f"class ({event_type}, {publisher}): {problem}")
        rows += [(event_type, publisher, b, v) for b, v in ratios.items()]
    schema = "event_type string, publisher string, broker string, visit_ratio_solved double"
    return spark.createDataFrame(rows, schema), hops, problems


def _visit_ratio_warnings(visit_ratios: list[dict[str, Any]]) -> list[str]:
    """Solved and counted visit ratios further apart than TOLERANCE (relative)."""
    return [
        f"class ({r['event_type']}, {r['publisher']}) at broker {r['broker']}: solved visit "
        f"ratio {r['visit_ratio_solved']:.4f} vs counted {r['visit_ratio_counted']:.4f}; "
        "the traces miss or repeat records (a lost or truncated trace file, forwards "
        "that their receiver never recorded), so the model's routing will not match them"
        for r in visit_ratios
        if (r["relative_difference"] or 0.0) > TOLERANCE
    ]


def findings(summary: dict[str, Any]) -> list[str]:
    """The summary's problems (trace files unreadable or cut short) and warnings, a line
    each, for the user's terminal: the tables were written, but from what could be read."""
    return [f"problem: {line}" for line in summary["problems"]] + [
        f"warning: {line}" for line in summary["warnings"]
    ]


def main(argv: list[str] | None = None) -> int:
    """Command line (also the spark-submit entry): exit 0 when done, 2 on bad input
    (with a one-line message); other errors propagate."""
    parser = argparse.ArgumentParser(prog="hop analyze", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help=ANALYZED_FOLDER_HELP)
    parser.add_argument("--master", type=master_url, help="Spark master URL (default local[*])")
    parser.add_argument("--window", choices=WINDOWS, help=WINDOW_HELP)
    parser.add_argument("--out", type=Path, help=OUT_HELP)
    args = parser.parse_args(argv)
    try:
        summary = analyze(
            args.run_dir,
            master=args.master,
            window=args.window,
            progress=logs.say,
            out=args.out,
        )
    except InputError as exc:  # (TraceError among them)
        logs.say(f"hop analyze: {exc}")
        return 2
    for name, rows in summary["tables"].items():
        print(f"{name}.parquet: {rows} rows")
    print(
        f"{summary['used']['events']} events in the {summary['window']['name']} window; "
        f"results in {summary['outputs']}"
    )
    for line in findings(summary):
        logs.say(line)
    return 0
