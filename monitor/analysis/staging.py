"""Arrow IPC trace files -> Parquet that Spark reads.

Spark has no Arrow IPC reader. Two ways in were possible: a PySpark Python data
source reading the IPC files in Python workers, or converting to Parquet once with
pyarrow. Converting wins here:

* the checks already written for the trace files (`monitor.traces.read_file`: schema
  version, truncated files whose complete batches are kept, the loss reported) run
  once, on the driver, where their messages can be reported; a data source would
  repeat them in every worker and could only fail the job, not report;
* Spark then reads Parquet natively (JVM, columnar, column pruning, splittable), while
  a Python data source pushes every row through a Python worker on every pass;
* the staged copy is plain Parquet that any tool can open.

The cost is one pass with pyarrow, a file per thread: about a sixth of the analysis
time (bench/analyze_scaling.py: 25 s of 155 s for 16M hop rows on 2 cores). Hops
are partitioned by broker (hive style, `hops/broker=3/`), one file per trace file;
the clients' tables are one file per trace file. For a cluster of several hosts
RUN_DIR must be on storage every executor can read.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from broker.trace.schema import PUBLICATIONS, SCHEMAS
from monitor.errors import writing
from monitor.runfiles import local_path
from monitor.traces import TraceError, read_file, trace_files

TABLES = ("hops", "deliveries", "publications")


@dataclass
class Staged:
    root: Path  # root / TABLE holds the Parquet files of TABLE
    rows: dict[str, int] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def stage_traces(run_dir: Path, root: Path) -> Staged:
    """Convert RUN_DIR/traces/*.arrow into Parquet under `root` (replacing it).

    Files are converted in parallel threads (pyarrow releases the GIL while it reads
    and writes). Raises TraceError when a table has no trace files, a file is of
    another schema version, or no hop row at all could be read.
    """
    files = {table: trace_files(run_dir, table) for table in TABLES}
    missing = [table for table, paths in files.items() if not paths]
    if missing:
        raise TraceError(
            f"{run_dir / 'traces'}: no trace files for {', '.join(missing)} "
            f"(expected {', '.join(f'{t}-*.arrow' for t in missing)}; does `hop replay` "
            "write into this RUN_DIR?)"
        )
    return _stage(files, root, run_dir / "traces", publications_from_hops=False)


def stage_broker_traces(folder: Path, root: Path) -> Staged:
    """Convert the hops files of a brokers' trace folder (``--trace-dir``) into Parquet
    under `root` (replacing it), with the publications read off them.

    Only brokers record there. An event's row at its home broker (the one it came to
    from a client) gives its publication: publisher, class, the broker, and as its
    time the moment that broker read it (a replay's publishers record theirs a few
    microseconds earlier). The deliveries table is empty: no subscriber recorded.
    """
    files = {"hops": trace_files(folder, "hops"), "deliveries": [], "publications": []}
    return _stage(files, root, folder, publications_from_hops=True)


def _stage(
    files: dict[str, list[Path]], root: Path, folder: Path, publications_from_hops: bool
) -> Staged:
    shutil.rmtree(root, ignore_errors=True)
    jobs = [(table, path) for table, paths in files.items() for path in paths]

    def convert(job: tuple[str, Path]) -> tuple[dict[str, int], str | None]:
        return _convert(*job, root, publications_from_hops)

    with ThreadPoolExecutor(os.cpu_count()) as pool:
        results = list(pool.map(convert, jobs))
    staged = Staged(root)
    for table in TABLES:
        staged.files[table] = len(files[table])
        staged.rows[table] = sum(rows.get(table, 0) for rows, _ in results)
    staged.problems = [problem for _, problem in results if problem]
    if staged.rows["hops"] == 0:
        raise TraceError(f"{folder}: no complete hop rows in any hops file")
    for table in TABLES:
        if staged.rows[table] == 0:  # still a table Spark can read, with no rows
            with writing(root / table):
                (root / table).mkdir(parents=True, exist_ok=True)
                empty = SCHEMAS[table].empty_table()
                pq.write_table(empty, local_path(root / table / "empty.parquet"))
    return staged


def _convert(
    table: str, path: Path, root: Path, publications_from_hops: bool
) -> tuple[dict[str, int], str | None]:
    """One trace file to Parquet (and, from a hops file, its publications when
    `publications_from_hops`): the rows written per table, and the problem met."""
    batches, problem = read_file(path, table)
    data = pa.Table.from_batches(batches, schema=SCHEMAS[table])
    if not data.num_rows:
        return {}, problem
    written = {table: data.num_rows}
    with writing(root / table):
        if table == "hops":
            ds.write_dataset(
                data,
                local_path(root / table),
                format="parquet",
                partitioning=["broker"],
                partitioning_flavor="hive",
                basename_template=f"{path.stem}-{{i}}.parquet",
                existing_data_behavior="overwrite_or_ignore",
            )
        else:
            _write_file(data, root / table, path.stem)
    if publications_from_hops:
        publications = publications_of(data)
        if publications.num_rows:
            with writing(root / "publications"):
                _write_file(publications, root / "publications", path.stem)
            written["publications"] = publications.num_rows
    return written, problem


def _write_file(data: pa.Table, folder: Path, stem: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, local_path(folder / f"{stem}.parquet"))


def publications_of(hops: pa.Table) -> pa.Table:
    """The publications table of the events whose home broker's rows are in `hops`:
    one row per row whose event came from a client. Size and attributes are not
    recorded by brokers and stay null."""
    entered = hops.filter(pc.starts_with(hops["from_node"], "client:"))
    rows = entered.num_rows
    columns = {
        "run_id": entered["run_id"],
        "event_id": entered["event_id"],
        "publisher": entered["publisher"],
        "broker": entered["broker"],
        "event_type": entered["event_type"],
        "t_publish_ns": entered["t_arrival_ns"],
        "size_bytes": pa.nulls(rows, pa.int32()),
        "attributes": pa.nulls(rows, pa.string()),
    }
    return pa.table(columns, schema=PUBLICATIONS)


def staged_publications(root: Path) -> pa.Table:
    """The staged publications' columns that the checks below and the recording's
    window read, read once."""
    return ds.dataset(local_path(root / "publications")).to_table(
        columns=["run_id", "publisher", "event_id", "t_publish_ns"]
    )


def repeated_event_ids(published: pa.Table) -> list[str]:
    """A line per publisher whose event ids in the staged publications repeat: clients
    sharing a name, or one that started again and counted its events from 1 anew. The
    analysis takes the events of one id for one event, so their trees and paths merge."""
    counts = published.group_by(["publisher", "event_id"]).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts["count_all"], 1))
    per_publisher = repeated.group_by("publisher").aggregate([([], "count_all")])
    return [
        f"publisher {row['publisher']!r}: {row['count_all']} event id(s) published more than "
        "once (clients sharing the name, or one started again); the events of one id are "
        "taken for one, so their trees and paths merge"
        for row in per_publisher.sort_by("publisher").to_pylist()
    ]


def several_runs(published: pa.Table) -> list[str]:
    """A line if the staged publications carry more than one run id: a brokers' trace
    folder that several recordings wrote into (`--run-id` differed), read as one, its
    rates over the span from the first to the last, gaps included."""
    names = sorted(pc.unique(published["run_id"]).to_pylist())
    if len(names) < 2:
        return []
    return [
        f"the traces hold {len(names)} run ids ({', '.join(map(repr, names))}), read as one "
        "recording whose rates span them all, gaps included; give each recording its own "
        "--trace-dir folder"
    ]
