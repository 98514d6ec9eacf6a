"""Reading a run's traces back: every file of one table, checked and concatenated.

A file cut short (a broker killed mid-write) still yields its complete record
batches; what could not be read is reported, not hidden. A file of another
schema version is refused with a message naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from broker.trace.schema import SCHEMAS, TABLE_KEY, TRACE_VERSION, VERSION_KEY
from monitor.errors import InputError


class TraceError(InputError):
    """The traces of a run cannot be used (missing, or of another schema version)."""


@dataclass
class TraceRead:
    table: pa.Table
    files: list[Path]
    problems: list[str] = field(default_factory=list)  # truncated files and what was kept


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """RUN_DIR's manifest.json, with its measurement phases; TraceError naming the file
    when it is missing or unusable."""
    path = run_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise TraceError(f"{path}: missing (hop replay writes it)") from None
    except (OSError, ValueError) as exc:
        raise TraceError(f"{path}: unreadable ({exc})") from None
    phases = manifest.get("phases") if isinstance(manifest, dict) else None
    if not isinstance(phases, dict):
        raise TraceError(f"{path}: no phases (not written by hop replay?)")
    return manifest


def trace_files(run_dir: Path, table: str) -> list[Path]:
    return sorted((run_dir / "traces").glob(f"{table}-*.arrow"))


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
    """The rows of `table` in RUN_DIR/traces/ that `read_table` would read (the files
    are memory-mapped: only the batches' headers are read)."""
    return sum(
        batch.num_rows
        for path in trace_files(run_dir, table)
        for batch in read_file(path, table)[0]
    )


def read_table(run_dir: Path, table: str) -> TraceRead:
    """All rows of `table` (hops, deliveries, publications) in RUN_DIR/traces/."""
    if table not in SCHEMAS:
        raise TraceError(f"unknown trace table {table!r}; known: {sorted(SCHEMAS)}")
    files = trace_files(run_dir, table)
    if not files:
        raise TraceError(f"{run_dir / 'traces'}: no {table} trace files ({table}-*.arrow)")
    batches: list[pa.RecordBatch] = []
    problems = []
    for path in files:
        file_batches, problem = read_file(path, table)
        batches += file_batches
        if problem:
            problems.append(problem)
    return TraceRead(pa.Table.from_batches(batches, schema=SCHEMAS[table]), files, problems)
