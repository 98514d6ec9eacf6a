"""The writer process of a broker's `hops` trace (started by `broker.trace.hop_trace`).

``python -m broker.trace.hop_writer PATH RUN_ID BROKER`` reads blobs from stdin until it
ends (their layout: `broker.trace.hop_trace.BLOB_HEADER`) and writes each as one record
batch of `broker.trace.schema.HOPS` to PATH, flushed at once. It ignores SIGINT, SIGTERM
and SIGHUP (Ctrl-C and a terminal's hangup reach the broker's whole process group): the
broker's end (clean or not) ends its input, and it then closes the file. On stdout it
prints `WRITER_READY` once it can take blobs, then after each blob the number of rows
in the file so far (`WRITER_WROTE`), from which the broker tells anyone asking how far
its trace has been written.

Each row is built from four sources:

* the event's packed ints (`broker.trace.hop_trace.EVENT_FIELDS`), and its links' names
  from its outcome code;
* the event's own fields (`event_id`, `event_type`, `publisher`, `hops_before`,
  `bytes_in`), read again from its frame among the reads' frames: in bulk
  (`broker.publish_fields`), or one msgpack decoding per event when that cannot;
* the per-read values, repeated over the read's events, and the read's notes: the
  events' positions (`batch_index`), when each was done (`t_done_ns`: the start of what
  the broker handled next), drops; `wait_ns` is the event's start minus the read's
  arrival;
* `cpu_ns`: the read's CPU time (decoding and routing its events, tracing included;
  control messages and time spent blocked excluded) shared among its events in
  proportion to their routing wall time. Reading the CPU clock per event instead costs
  two system calls (about 0.6 us here), a large share of an event's cost at saturation.

The writer runs beside the broker, so its CPU time per event matters too: columns are
computed for a whole blob at once where they can be (reads that hold only events), not
event by event.
"""

from __future__ import annotations

import argparse
import marshal
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import pyarrow as pa

from broker.messages import publish_summary
from broker.protocol import ProtocolError, frame_starts
from broker.publish_fields import publish_fields
from broker.trace.arrow_writer import TraceFileError, TraceWriter, without_pandas
from broker.trace.hop_trace import (
    BLOB_HEADER,
    BLOCKED,
    DROPPED,
    EVENT_FIELDS,
    MARK,
    READ_FIELDS,
    WIDTH,
    WRITER_READY,
    WRITER_WROTE,
)
from broker.trace.schema import HOPS


def _yield_cpu() -> None:
    """Run only on CPU time nobody else wants (Linux' SCHED_IDLE; else the lowest
    priority): writing the trace can wait (the broker buffers blobs for it), routing
    cannot. On a host whose cores are all busy, a writer at normal priority takes CPU
    from the brokers and clients it traces (in `bench/tracing_overhead.py` on 2 cores it
    visibly lowered the saturated broker's throughput)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


class Blob(NamedTuple):
    """What the broker shipped in one blob (`broker.trace.hop_trace.BLOB_HEADER`)."""

    names: dict[str, tuple[str, str]]
    outcomes: dict[int, tuple[str, ...]]
    reads: list[tuple[Any, ...]]  # (READ_FIELDS values, size of frames, events, notes)
    rows: bytes
    frames: bytes  # of the reads, one after the other


def read_blobs(stream: BinaryIO) -> Iterator[Blob]:
    """The blobs of `stream` until it ends; a blob cut short (the broker died while
    writing it) ends it too."""
    while len(header := stream.read(BLOB_HEADER.size)) == BLOB_HEADER.size:
        meta_size, rows_size = BLOB_HEADER.unpack(header)
        meta = stream.read(meta_size)
        rows = stream.read(rows_size)
        if len(meta) < meta_size or len(rows) < rows_size:
            return
        names, outcomes, reads = marshal.loads(meta)
        frames_size = sum(read[1] for read in reads)
        frames = stream.read(frames_size)
        if len(frames) < frames_size:
            return
        yield Blob(names, outcomes, reads, rows, frames)


def hop_batch(
    links: Links,
    reads: Sequence[Sequence[Any]],
    rows: bytes,
    frames: bytes,
    run_id: str,
    broker: str,
) -> pa.RecordBatch:
    """The `hops` rows of what a broker shipped in one blob (see `broker.trace.hop_trace`):
    `reads` as shipped, `frames` those of all the reads."""
    table = np.frombuffer(rows, np.int64).reshape(-1, WIDTH)
    n = len(table)
    column = {name: table[:, k] for k, name in enumerate(EVENT_FIELDS)}
    per_read = _PerRead(reads)
    t_start = column["t_start_ns"]
    at = _Positions(reads, per_read, t_start)
    outcomes = column["outcome"].tolist()
    arrival = per_read.repeat("t_arrival_ns", np.int64)
    values: dict[str, Any] = {
        "run_id": pa.repeat(pa.scalar(run_id), n),
        "broker": pa.repeat(pa.scalar(broker), n),
        **own_fields(frames, at.frames, at.frame_number),
        "from_node": per_read.strings("from_node"),
        "to_nodes": links.column(outcomes, brokers=True),
        "delivered_to": links.column(outcomes, brokers=False),
        "decision": pa.array(["dropped" if r else "routed" for r in at.reasons], pa.string())
        if at.reasons
        else pa.repeat(pa.scalar("routed"), n),
        "drop_reason": pa.array(at.reasons, pa.string())
        if at.reasons
        else pa.repeat(pa.scalar(""), n),
        "t_arrival_ns": arrival,
        "t_start_ns": t_start,
        "t_done_ns": at.t_done,
        "wait_ns": t_start - arrival,
        "cpu_ns": _apportion(
            per_read.values("cpu_ns", np.int64),
            per_read.counts,
            at.t_routed - t_start,
        ),
        "batch": per_read.repeat("batch", np.int32),
        "batch_index": at.batch_index,
        "queue_len": per_read.repeat("queue_len", np.int32),
        "bytes_out": column["bytes_out"],
        "filters_matched": column["filters_matched"],
        "subscriptions": per_read.repeat("subscriptions", np.int32),
    }
    arrays = [pa.array(values[f.name], type=f.type) for f in HOPS]
    return pa.RecordBatch.from_arrays(arrays, schema=HOPS)


class _Positions:
    """Where each event was in its read, and when it was done (see `_done_times`) and
    routed (the same, but for events that then waited for queue room).

    Most reads hold only events (their notes: the read's end): their columns are
    computed for all of them at once; the few others are patched one read at a time."""

    def __init__(self, reads: Sequence[Sequence[Any]], per_read: _PerRead, t_start: np.ndarray):
        counts = per_read.counts
        n = int(counts.sum())
        first_row = np.cumsum(counts) - counts
        batch = per_read.values("batch", np.int64)
        first_frame = np.cumsum(batch) - batch
        self.frames = int(batch.sum())  # messages (frames) of the reads
        read_of_row = np.repeat(np.arange(len(reads)), counts)
        self.batch_index = np.arange(n) - first_row[read_of_row]
        self.t_done = np.empty(n, np.int64)
        self.t_done[:-1] = t_start[1:]
        last = counts > 0
        self.t_done[(first_row + counts - 1)[last]] = [read[3][-1] for read in reads if read[2]]
        self.t_routed = self.t_done
        self.reasons: list[str] = []  # of drops (none: empty)
        for k, (_, _, count, notes) in enumerate(reads):
            if len(notes) > 3:  # more than the read's end
                self._patch(slice(first_row[k], first_row[k] + count), notes, t_start, n)
        self.frame_number = first_frame[read_of_row] + self.batch_index
        self.batch_index = self.batch_index.astype(np.int32)

    def _patch(self, rows: slice, notes: Sequence[Any], t_start: np.ndarray, n: int) -> None:
        marks, blocked, dropped = _notes(notes)
        index = _event_indexes(rows.stop - rows.start, marks)
        self.batch_index[rows] = index
        done = _done_times(index, t_start[rows].tolist(), marks)
        self.t_done[rows] = done
        if blocked:
            if self.t_routed is self.t_done:
                self.t_routed = self.t_done.copy()
            self.t_routed[rows] = [blocked.get(i, t) for i, t in zip(index, done, strict=True)]
        if dropped:
            self.reasons = self.reasons or [""] * n
            self.reasons[rows] = [dropped.get(i, "") for i in index]


def _notes(notes: Sequence[Any]) -> tuple[list[tuple[int, int]], dict[int, int], dict[int, str]]:
    """A read's notes: its marks as (batch_index, time) pairs, and by batch_index the
    routed times of blocked events and the reasons of dropped ones."""
    marks, blocked, dropped = [], {}, {}
    for kind, index, value in zip(notes[0::3], notes[1::3], notes[2::3], strict=True):
        if kind == MARK:
            marks.append((index, value))
        elif kind == BLOCKED:
            blocked[index] = value
        elif kind == DROPPED:
            dropped[index] = value
        else:
            raise ValueError(f"unknown kind of trace note {kind!r}")
    return marks, blocked, dropped


def _event_indexes(count: int, marks: list[tuple[int, int]]) -> list[int]:
    """The positions in their read of its `count` events: its first messages but for
    the control messages (marked)."""
    if len(marks) == 1:  # only the read's end
        return list(range(count))
    control = {index for index, _ in marks}
    return [i for i in range(count + len(control)) if i not in control][:count]


def _done_times(index: list[int], start: list[int], marks: list[tuple[int, int]]) -> list[int]:
    """When each event of a read was done: the start of whatever the broker handled
    next in the read (the next event, or a mark: a control message, the read's end)."""
    if len(marks) == 1:  # only the read's end: the events came one after the other
        return [*start[1:], marks[0][1]]
    points = sorted([*zip(index, start, strict=True), *marks])
    following = {i: points[k + 1][1] for k, (i, _) in enumerate(points[:-1])}
    return [following[i] for i in index]


class _PerRead:
    """The values events share with the others of their read (`READ_FIELDS`)."""

    def __init__(self, reads: Sequence[Sequence[Any]]) -> None:
        self.shared = [read[0] for read in reads]
        self.counts = np.fromiter((read[2] for read in reads), np.int64, len(reads))

    def values(self, field: str, dtype: type) -> np.ndarray:
        k = READ_FIELDS.index(field)
        return np.fromiter((shared[k] for shared in self.shared), dtype, len(self.shared))

    def repeat(self, field: str, dtype: type) -> np.ndarray:
        """One value per event."""
        return np.repeat(self.values(field, dtype), self.counts)

    def strings(self, field: str) -> pa.Array:
        k = READ_FIELDS.index(field)
        distinct = pa.array([shared[k] for shared in self.shared], pa.string())
        return distinct.take(np.repeat(np.arange(len(self.shared)), self.counts))


def own_fields(frames: bytes, count: int, events: Sequence[int]) -> dict[str, Any]:
    """The columns each event's own frame gives (`broker.publish_fields`): `frames`
    holds `count` frames, the events' are those numbered `events`. Frames the bulk
    reading does not take are decoded one by one, which names the one that is not an
    event."""
    try:
        bounds = [*frame_starts(frames), len(frames)]
    except ProtocolError as exc:
        raise ValueError(f"the frames of a blob: {exc.message}") from None
    if len(bounds) - 1 != count:
        raise ValueError(f"the reads have {count} messages but {len(bounds) - 1} frames")
    starts = np.array(bounds, np.int64)[np.array(events, np.int64)]
    fields = publish_fields(frames, starts)
    if fields is not None:
        return fields
    return _decoded_fields(frames, [(bounds[k], bounds[k + 1]) for k in events])


def _decoded_fields(frames: bytes, bounds: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """`own_fields`, one msgpack decoding per event (`bounds`: of each event's frame)."""
    ids, publishers, types, hops, sizes = [], [], [], [], []
    for number, (start, stop) in enumerate(bounds):
        try:
            event_id, publisher, event_type, hops_before = publish_summary(frames[start + 4 : stop])
        except ProtocolError as exc:
            raise ValueError(f"event {number} of a blob: {exc.message}") from None
        ids.append(event_id)
        publishers.append(publisher)
        types.append(event_type)
        hops.append(hops_before)
        sizes.append(stop - start)
    return {
        "event_id": pa.array(ids, pa.string()),
        "event_type": _strings(types),
        "publisher": pa.array(publishers, pa.string()),
        "hops_before": np.array(hops, np.int32),
        "bytes_in": np.array(sizes, np.int32),
    }


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


class Links:
    """What the broker said of its links: their names and kinds, and the tuples of link
    ids its outcome codes stand for (accumulated over the blobs)."""

    def __init__(self) -> None:
        self.names: dict[str, tuple[str, str]] = {}
        self.outcomes: dict[int, tuple[str, ...]] = {}

    def update(self, names: dict[str, tuple[str, str]], outcomes: dict[int, Any]) -> None:
        self.names.update(names)
        self.outcomes.update(outcomes)

    def column(self, codes: Sequence[int], brokers: bool) -> pa.Array:
        """The `to_nodes` (`brokers`) or `delivered_to` list<string> column of events with
        these outcome codes: each code's list is built once and then taken by index."""
        distinct = sorted(set(codes))
        lists = []
        for code in distinct:
            named = (self.names.get(link, (link, "client")) for link in self.outcomes[code])
            lists.append([name for name, kind in named if (kind == "broker") == brokers])
        position = {code: i for i, code in enumerate(distinct)}
        index = np.fromiter(map(position.__getitem__, codes), np.int32, len(codes))
        return pa.array(lists, pa.list_(pa.string())).take(index)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("run_id")
    parser.add_argument("broker")
    args = parser.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    without_pandas()
    _yield_cpu()
    try:
        _write_trace(args.path, args.run_id, args.broker)
    except TraceFileError as exc:  # the disk is full, the file over a size limit...
        # One line in the broker's log; the broker counts the rows not written as lost.
        print(f"hop trace writer: {exc}", file=sys.stderr)
        return 1
    return 0


def _write_trace(path: Path, run_id: str, broker: str) -> None:
    """Say ready once the file is open, then write each blob of the input as one batch
    and say how many rows the file holds; TraceFileError, saying after how many rows,
    when the file cannot be written."""
    writer = TraceWriter(path, HOPS, constants={"run_id": run_id, "broker": broker})
    report = _Progress(sys.stdout.buffer)
    report.say(WRITER_READY)
    links = Links()
    written = 0
    try:
        for blob in read_blobs(sys.stdin.buffer):
            links.update(blob.names, blob.outcomes)
            if blob.rows:
                batch = hop_batch(links, blob.reads, blob.rows, blob.frames, run_id, broker)
                writer.write_batch(batch)
                written += batch.num_rows
            report.say(WRITER_WROTE.format(written).encode())
        writer.close()
    except TraceFileError as exc:
        raise TraceFileError(f"{exc} after {written} rows") from None
    finally:
        writer.close()  # after any other error too: the file keeps the batches written


class _Progress:
    """Lines to the broker on stdout; once the broker is gone (a broken pipe) the
    writer goes on writing the file in silence."""

    def __init__(self, out: BinaryIO) -> None:
        self.out: BinaryIO | None = out

    def say(self, line: bytes) -> None:
        if self.out is None:
            return
        try:
            self.out.write(line)
            self.out.flush()
        except OSError:  # BrokenPipeError: nobody reads any more
            self.out = None


if __name__ == "__main__":
    sys.exit(main())
