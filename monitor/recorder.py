"""Buffered writers of trace rows to Arrow IPC stream files.

Rows are appended as tuples (cheap on the hot path) and turned into one record
batch when `flush_rows` rows are buffered or `flush_interval_s` has passed since the
last write; each batch is flushed to the file at once, so a process killed with
SIGKILL loses at most its unwritten buffer, and a reader still gets every complete
batch of a truncated file.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa


class TraceWriter:
    """Rows of one table (a schema of `monitor.schema`) to one IPC stream file."""

    def __init__(
        self,
        path: Path,
        schema: pa.Schema,
        flush_rows: int = 4096,
        flush_interval_s: float = 1.0,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.schema = schema
        self.flush_rows = flush_rows
        self.flush_interval_s = flush_interval_s
        self.rows: list[tuple[Any, ...]] = []
        self.rows_written = 0
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, schema)
        # pyarrow initialises its conversions on first use (~0.5 s here): pay that now,
        # not in the middle of a measurement.
        pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
        self._deadline = time.monotonic() + flush_interval_s

    def append(self, row: tuple[Any, ...]) -> None:
        """Buffer one row, its values in the schema's column order."""
        self.rows.append(row)
        if len(self.rows) >= self.flush_rows or time.monotonic() >= self._deadline:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one record batch and push it to the file."""
        self._deadline = time.monotonic() + self.flush_interval_s
        if not self.rows or self._writer is None:
            return
        columns = list(zip(*self.rows, strict=True))
        arrays = [
            pa.array(column, type=field.type)
            for column, field in zip(columns, self.schema, strict=True)
        ]
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        self._sink.flush()
        self.rows_written += len(self.rows)
        self.rows = []

    def close(self) -> None:
        """Flush and close the file (idempotent)."""
        if self._writer is None:
            return
        self.flush()
        self._writer.close()
        self._sink.close()
        self._writer = None
