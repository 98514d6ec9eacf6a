"""Reading a run's traces back: every file of one table, checked and concatenated;
and its manifest, the fields a command reads checked.

A file cut short (a broker killed mid-write) still yields its complete record
batches; what could not be read is reported, not hidden. A file of another
schema version is refused with a message naming it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from broker.trace.schema import SCHEMAS, TABLE_KEY, TRACE_VERSION, VERSION_KEY
from monitor.errors import InputError
from monitor.runfiles import (
    AMOUNT,
    CORES,
    COUNT,
    FLAG,
    NS,
    NUMBER,
    TEXT,
    Field,
    or_null,
    problem,
    read_json,
    table_of,
)


class TraceError(InputError):
    """The traces of a run cannot be used (missing, or of another schema version)."""


@dataclass
class TraceRead:
    table: pa.Table
    files: list[Path]
    problems: list[str] = field(default_factory=list)  # truncated files and what was kept


MANIFEST_FIELDS: dict[str, Field] = {
    # the phases' bounds (ns since the epoch) and each process's CPU seconds in the
    # measurement window (by broker id, and "clients")
    "phases.start_ns": Field(NS),
    "phases.measure_start_ns": Field(NS),
    "phases.measure_end_ns": Field(NS),
    "phases.drain_end_ns": Field(NS),
    "phases.cpu_s": Field(table_of(AMOUNT), optional=True),
    # the nominal rates (events/s) by publisher id, and their sum
    "rates": Field(table_of(AMOUNT, ("a publisher id", str.isdigit))),
    "total_rate": Field(AMOUNT),
    "workload.warmup_s": Field(AMOUNT),
    "workload.duration_s": Field(AMOUNT),
    "counts.published": Field(COUNT),
    "counts.delivered": Field(COUNT),
    "counts.lost": Field(COUNT),
    "case_study.name": Field(TEXT),
    "case_study.routing": Field(TEXT),
    "scenario": Field(or_null(TEXT), optional=True),
    "host.name": Field(TEXT),
    "host.cores": Field(CORES),
    "host.platform": Field(TEXT),
    "python": Field(TEXT),
    "packages": Field(table_of(TEXT)),
    "git_revision": Field(or_null(TEXT), optional=True),
    # other processes' load per phase (`monitor.hostload`): a phase or a figure not
    # recorded is null, and a figure is a difference of two measurements (it may be
    # a little below 0)
    "host_load.disturbed": Field(or_null(FLAG), optional=True),
    "host_load.phases": Field(or_null(table_of(or_null(table_of(or_null(NUMBER))))), optional=True),
}
"""Every manifest field a command reads (dotted paths), and what it must hold: each
command checks those it reads (`read_manifest`), in one place, before using them."""

MEASURE_WINDOW = ("phases.measure_start_ns", "phases.measure_end_ns")
WHOLE_RUN = ("phases.start_ns", "phases.drain_end_ns")
WINDOWS = (MEASURE_WINDOW, WHOLE_RUN)  # (start, end) pairs: a window must not be empty


def read_manifest(run_dir: Path, fields: Iterable[str] = MEASURE_WINDOW) -> dict[str, Any]:
    """RUN_DIR's manifest.json, its `fields` (of `MANIFEST_FIELDS`; by default the
    measurement window) checked; TraceError naming the file and the field when it is
    missing or unusable."""
    if is_broker_trace_folder(run_dir):
        raise TraceError(f"{run_dir}: {BROKER_TRACES}")
    if (run_dir / "validation.json").exists():
        runs = sorted(path.parent.name for path in run_dir.glob("*/manifest.json"))
        raise TraceError(
            f"{run_dir}: a validation folder (hop validate), whose runs are its folders "
            f"{', '.join(runs) or '(none yet)'}: give one of them (hop report takes the "
            "validation folder)"
        )
    manifest = read_json(run_dir / "manifest.json", TraceError, "hop replay writes it")
    return check_manifest(manifest, run_dir, fields)


def check_manifest(manifest: Any, run_dir: Path, fields: Iterable[str]) -> dict[str, Any]:
    """`manifest`, RUN_DIR's as read, if its `fields` (of `MANIFEST_FIELDS`) are as
    they must be, else TraceError naming the file and the field: for a reader of
    fields that the command which read the manifest did not check."""
    names = tuple(fields)
    wrong = problem(manifest, MANIFEST_FIELDS, names) or _empty_window(manifest, names)
    if wrong is not None:
        raise TraceError(f"{run_dir / 'manifest.json'}: {wrong}")
    return manifest  # a JSON object: `problem` checked it


def _empty_window(manifest: dict[str, Any], names: tuple[str, ...]) -> str | None:
    """What is wrong with a window whose bounds are both in `names` (and checked): an
    end not after its start (every rate would divide by a length of 0 or less)."""
    phases = manifest.get("phases", {})
    for start, end in WINDOWS:
        if start in names and end in names:
            lo, hi = (phases[name.removeprefix("phases.")] for name in (start, end))
            if hi <= lo:
                return f"{end} ({hi}) is not after {start} ({lo}): an empty window"
    return None


def traces_of(run_dir: Path) -> Path:
    """Where a folder's trace files are: RUN_DIR/traces/ of a replay's run, the folder
    itself for brokers' traces (`is_broker_trace_folder`)."""
    return run_dir if is_broker_trace_folder(run_dir) else run_dir / "traces"


def trace_files(run_dir: Path, table: str) -> list[Path]:
    return sorted(traces_of(run_dir).glob(f"{table}-*.arrow"))


BROKER_TRACES = (
    "brokers' traces (--trace-dir) without a replay's manifest: hop analyze and hop report "
    "read them, a prediction needs a replay's run folder (hop replay, or hop replay "
    "--attach to drive brokers already running)"
)


def is_broker_trace_folder(folder: Path) -> bool:
    """Whether `folder` is where brokers started with ``--trace-dir`` (`hop net`,
    `hop broker`) wrote their hops files, rather than a replay's run folder: hops files
    in it, and no manifest.json."""
    return not (folder / "manifest.json").exists() and any(folder.glob("hops-*.arrow"))


def read_file(path: Path, table: str) -> tuple[list[pa.RecordBatch], str | None]:
    """The complete batches of one file, and a problem description if it is damaged."""
    schema = SCHEMAS[table]
    try:
        reader = pa.ipc.open_stream(pa.memory_map(str(path)))
    except (pa.ArrowInvalid, OSError) as exc:
        return [], f"{path.name}: unreadable ({exc}); no rows used"
    metadata = reader.schema.metadata or {}
    if metadata.get(VERSION_KEY) != TRACE_VERSION.encode() or metadata.get(TABLE_KEY) != (
        table.encode()
    ):
        version = metadata.get(VERSION_KEY, b"none").decode()
        raise TraceError(
            f"{path}: trace schema version {version} for table "
            f"{metadata.get(TABLE_KEY, b'?').decode()!r}; this version reads "
            f"version {TRACE_VERSION} {table!r}"
        )
    batches: list[pa.RecordBatch] = []
    while True:
        try:
            batches.append(reader.read_next_batch())
        except StopIteration:
            return [b.cast(schema) if b.schema != schema else b for b in batches], None
        except (pa.ArrowInvalid, OSError) as exc:
            rows = sum(b.num_rows for b in batches)
            return batches, f"{path.name}: truncated after {rows} rows ({exc}); rows kept"


def count_rows(run_dir: Path, table: str) -> int:
    """The rows of `table` in the folder's traces (`traces_of`) that `read_table` reads
    (the files are memory-mapped: only the batches' headers are read)."""
    return sum(
        batch.num_rows
        for path in trace_files(run_dir, table)
        for batch in read_file(path, table)[0]
    )


def read_table(run_dir: Path, table: str) -> TraceRead:
    """All rows of `table` (hops, deliveries, publications) in the folder's traces
    (`traces_of`: RUN_DIR/traces/, or a brokers' trace folder itself)."""
    if table not in SCHEMAS:
        raise TraceError(f"unknown trace table {table!r}; known: {sorted(SCHEMAS)}")
    files = trace_files(run_dir, table)
    if not files:
        raise TraceError(f"{traces_of(run_dir)}: no {table} trace files ({table}-*.arrow)")
    batches: list[pa.RecordBatch] = []
    problems = []
    for path in files:
        file_batches, problem = read_file(path, table)
        batches += file_batches
        if problem:
            problems.append(problem)
    return TraceRead(pa.Table.from_batches(batches, schema=SCHEMAS[table]), files, problems)
