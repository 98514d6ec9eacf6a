"""Buffered writers of trace rows to Arrow IPC stream files.

Rows are appended as tuples (cheap on the hot path) and turned into one record
batch when `flush_rows` rows are buffered or `flush_interval_s` has passed since the
last write; each batch is flushed to the file at once, so a process killed with
SIGKILL loses at most its unwritten buffer, and a reader still gets every complete
batch of a truncated file.

Columns that hold one value for the whole file (`constants`, e.g. the run id and
the broker) are not passed per row: they are filled in when a batch is built.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

_NUMPY_TYPES = {pa.int64(): np.int64, pa.int32(): np.int32}


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import finder that refuses pandas (`without_pandas`)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError("this process writes traces without pandas", name=name)
        return None


def without_pandas() -> None:
    """Make pandas unimportable in this process, for a process whose use of pyarrow is
    writing traces (a broker's trace writer, a replay's client process). pyarrow
    imports pandas, when it is installed, at its first conversion of any value (to
    recognise pandas objects): about 0.55 s of CPU per process, paid by each of the
    many such processes a replay starts at once on a few cores. pyarrow does without
    it. (A None in `sys.modules` does not do: pyarrow's compiled import takes the None
    for pandas.)"""
    if "pandas" not in sys.modules:
        sys.meta_path.insert(0, _NoPandas())


class TraceFileError(OSError):
    """A trace file that cannot be written (a full disk, a file-size limit); its text
    names the file and why. The writer is closed: what it wrote before stays readable."""


class TraceWriter:
    """Rows of one table (a schema of `broker.trace.schema`) to one IPC stream file."""

    def __init__(
        self,
        path: Path,
        schema: pa.Schema,
        constants: Mapping[str, Any] | None = None,
        flush_rows: int = 4096,
        flush_interval_s: float = 1.0,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.schema = schema
        self.constants = dict(constants or {})
        unknown = set(self.constants) - set(schema.names)
        if unknown:
            raise ValueError(f"constants for unknown columns {sorted(unknown)}")
        #: the columns each appended row holds, in order
        self.row_fields = [f for f in schema if f.name not in self.constants]
        self.flush_rows = flush_rows
        self.flush_interval_s = flush_interval_s
        self.rows: list[tuple[Any, ...]] = []
        try:
            self._sink = pa.OSFile(str(path), "wb")
            self._writer: pa.RecordBatchStreamWriter | None = pa.ipc.new_stream(self._sink, schema)
        except OSError as exc:
            raise TraceFileError(f"{path}: {_reason(exc)}") from None
        # pyarrow initialises its conversions on first use (~0.5 s here, most of it
        # importing pandas when it is installed and not refused by `without_pandas`):
        # pay that now, not in the middle of a measurement.
        self._batch([])
        self._deadline = time.monotonic() + flush_interval_s

    def append(self, row: tuple[Any, ...]) -> None:
        """Buffer one row: the values of `row_fields`, in order."""
        self.rows.append(row)
        if len(self.rows) >= self.flush_rows or time.monotonic() >= self._deadline:
            self.flush()

    def _batch(self, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
        columns = dict(zip(self.row_fields, zip(*rows, strict=True), strict=False))
        arrays = []
        for field in self.schema:
            if field.name in self.constants:
                value = pa.scalar(self.constants[field.name], type=field.type)
                arrays.append(pa.repeat(value, len(rows)))
            elif rows and field.type in _NUMPY_TYPES:  # ints convert fastest via numpy
                values = np.fromiter(columns[field], _NUMPY_TYPES[field.type], len(rows))
                arrays.append(pa.array(values, type=field.type))
            else:
                arrays.append(pa.array(columns.get(field, ()), type=field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def flush(self) -> None:
        """Write the buffered rows as one record batch and push it to the file."""
        self._deadline = time.monotonic() + self.flush_interval_s
        if not self.rows or self._writer is None:
            return
        self.write_batch(self._batch(self.rows))
        self.rows = []

    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Write a batch built elsewhere (with this writer's schema) and push it out."""
        if self._writer is None:
            raise ValueError(f"{self.path}: the trace file is closed")
        with self._writing():
            self._writer.write_batch(batch)
            self._sink.flush()

    def close(self) -> None:
        """Flush and close the file (idempotent)."""
        if self._writer is None:
            return
        self.flush()
        with self._writing():
            self._writer.close()
            self._sink.close()
        self._writer = None

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Raise what cannot be written to the file as a TraceFileError, and close the
        file then: nothing more is written, and `close` has nothing left to do."""
        try:
            yield
        except OSError as exc:
            self._writer = None
            with contextlib.suppress(OSError):
                self._sink.close()
            raise TraceFileError(f"{self.path}: {_reason(exc)}") from None


def _reason(error: OSError) -> str:
    """Why a file could not be written, as the system says it (pyarrow's own text
    wraps that in a sentence of its own)."""
    return os.strerror(error.errno) if error.errno else str(error)
