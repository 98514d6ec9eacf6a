"""The broker's `hops` recorder, built for a small cost per event.

A broker handles events in reads: one `receive_some` returns bytes holding one or
more frames, decoded together and routed one after the other without yielding to
other tasks. The recorder follows that shape so the per-event work stays small:

* per event, the broker extends a flat list with the values of `EVENT_FIELDS` (two
  wall-clock reads, no CPU clock; a flat list because turning it into columns is
  then slicing, where a list of row tuples would need a transposition);
* per read, it calls `add_read` with the values shared by the read's events (the
  peer, the arrival time, the batch size, the subscription count) and the thread's
  CPU time for the whole read, from two `time.thread_time_ns()` calls;
* at flush, the columns of `monitor.schema.HOPS` are built with numpy and pyarrow:
  per-read values repeated over their events, `wait_ns` computed, and the read's
  CPU time shared among its events in proportion to their routing wall time.

So `cpu_ns` is this thread's CPU time for decoding and routing the read the event
came in (tracing included; control messages and time spent blocked excluded),
apportioned by routing time. Reading the CPU clock per event instead costs two
system calls (about 1 us here), a large share of an event's cost at saturation.

Rare rows (events dropped) are appended whole with `dropped` and written as a
batch of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from monitor.recorder import TraceWriter
from monitor.schema import HOPS
from monitor.tracing import trace_path

EVENT_FIELDS = (
    "event_id",
    "event_type",
    "publisher",
    "to_nodes",  # tuple of the broker links' ids (named through `HopRecorder.peers`)
    "delivered_to",  # tuple of the client links' ids (likewise)
    "t_start_ns",
    "t_routed_ns",  # routing done, before waiting for room in full queues
    "t_done_ns",
    "batch_index",
    "queue_len",
    "bytes_in",
    "bytes_out",
    "filters_matched",
    "hops_before",
)
"""What the broker appends per event, in this order."""
WIDTH = len(EVENT_FIELDS)

_FIRST_INT = EVENT_FIELDS.index("t_start_ns")
_INT_FIELDS = EVENT_FIELDS[_FIRST_INT:]
_EVENT_INT_COLUMNS = tuple(f for f in _INT_FIELDS if f != "t_routed_ns")  # t_routed: CPU shares


class HopRecorder:
    """`hops` rows of one broker to RUN_DIR/traces/hops-brokerID-PID.arrow."""

    def __init__(self, trace_dir: Path, run_id: str, broker: str, flush_rows: int = 8192) -> None:
        self.writer = TraceWriter(
            trace_path(trace_dir, "hops", f"broker{broker}"),
            HOPS,
            constants={"run_id": run_id, "broker": broker},
        )
        self.flush_rows = flush_rows
        #: how the `to_nodes` and `delivered_to` columns name each link id (the broker
        #: fills it in as links come up); ids not in it are written as they are
        self.peers: dict[str, str] = {}
        self._events: list[Any] = []  # flat: WIDTH values per event
        # per read: (from_node, t_arrival_ns, batch, events, cpu_ns, subscriptions)
        self._reads: list[tuple[str, int, int, int, int, int]] = []

    @property
    def buffered(self) -> int:
        """Rows waiting to be written."""
        return len(self._events) // WIDTH + len(self.writer.rows)

    def add_read(
        self,
        from_node: str,
        t_arrival_ns: int,
        batch: int,
        cpu_ns: int,
        subscriptions: int,
        events: list[Any],
    ) -> None:
        """Buffer the rows of the events routed from one read: `events` holds the values
        of `EVENT_FIELDS` of each event, one event after the other."""
        self._events += events
        count = len(events) // WIDTH
        self._reads.append((from_node, t_arrival_ns, batch, count, cpu_ns, subscriptions))
        if len(self._events) >= self.flush_rows * WIDTH:
            self.flush()

    def dropped(self, row: tuple[Any, ...]) -> None:
        """Buffer a whole row (the `HOPS` columns but run_id and broker) of a dropped event."""
        self.writer.rows.append(row)

    def flush(self) -> None:
        if self._events:
            self.writer.write_batch(self._batch())
            self._events, self._reads = [], []
        self.writer.flush()

    def close(self) -> None:
        self.flush()
        self.writer.close()

    def _batch(self) -> pa.RecordBatch:
        events, reads = self._events, self._reads
        n = len(events) // WIDTH
        columns = [events[k::WIDTH] for k in range(WIDTH)]
        ints = {
            name: np.fromiter(column, np.int64, n)
            for name, column in zip(_INT_FIELDS, columns[_FIRST_INT:], strict=True)
        }
        read_node, read_arrival, read_batch, read_events, read_cpu, read_subs = (
            list(c) for c in zip(*reads, strict=True)
        )
        counts = np.array(read_events, dtype=np.int64)
        which_read = np.repeat(np.arange(len(reads)), counts)
        arrival = np.repeat(np.array(read_arrival, dtype=np.int64), counts)
        values: dict[str, Any] = {name: ints[name] for name in _EVENT_INT_COLUMNS}
        values.update(
            event_id=pa.array(columns[0], pa.string()),
            event_type=_strings(columns[1]),
            publisher=pa.array(columns[2], pa.string()),
            from_node=pa.array(read_node, pa.string()).take(which_read),
            to_nodes=_string_lists(columns[3], self.peers),
            delivered_to=_string_lists(columns[4], self.peers),
            decision=pa.repeat(pa.scalar("routed"), n),
            drop_reason=pa.repeat(pa.scalar(""), n),
            t_arrival_ns=arrival,
            wait_ns=ints["t_start_ns"] - arrival,
            cpu_ns=_apportion(
                np.array(read_cpu, dtype=np.int64),
                counts,
                ints["t_routed_ns"] - ints["t_start_ns"],
            ),
            batch=np.repeat(np.array(read_batch, dtype=np.int32), counts),
            subscriptions=np.repeat(np.array(read_subs, dtype=np.int32), counts),
            run_id=pa.repeat(pa.scalar(self.writer.constants["run_id"]), n),
            broker=pa.repeat(pa.scalar(self.writer.constants["broker"]), n),
        )
        arrays = [pa.array(values[f.name], type=f.type) for f in HOPS]
        return pa.RecordBatch.from_arrays(arrays, schema=HOPS)


def _apportion(read_cpu: np.ndarray, counts: np.ndarray, routing_ns: np.ndarray) -> np.ndarray:
    """Each read's CPU time shared among its events in proportion to their routing time
    (equal shares when the read's routing times sum to zero)."""
    routing = np.maximum(routing_ns, 0).astype(np.float64)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    totals = np.add.reduceat(routing, starts) if len(routing) else routing
    per_event_total = np.repeat(totals, counts)
    per_event_cpu = np.repeat(read_cpu.astype(np.float64), counts)
    share = np.where(
        per_event_total > 0,
        routing / np.where(per_event_total > 0, per_event_total, 1.0),
        1.0 / np.repeat(counts, counts),
    )
    return np.rint(per_event_cpu * share).astype(np.int64)


def _strings(values: Sequence[Any]) -> pa.Array:
    """A string column; values that are not strings (an int `type`) are printed."""
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return pa.array([v if type(v) is str else str(v) for v in values], pa.string())


def _string_lists(values: Sequence[tuple[str, ...]], names: dict[str, str]) -> pa.Array:
    """A list<string> column from tuples that repeat a lot (one per routing outcome),
    each item renamed through `names`: each distinct tuple is converted once and then
    taken by index."""
    distinct = list(dict.fromkeys(values))
    code = {v: i for i, v in enumerate(distinct)}
    index = np.array(list(map(code.__getitem__, values)), dtype=np.int32)
    renamed = [[names.get(item, item) for item in v] for v in distinct]
    return pa.array(renamed, pa.list_(pa.string())).take(index)
