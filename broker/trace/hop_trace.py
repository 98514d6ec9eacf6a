"""The broker's `hops` recorder: a small cost per event in the broker, the rest in a
writer process of its own (`broker.trace.hop_writer`).

Tracing must cost little (target: at most 5 % of a broker's throughput, measured by
`python -m bench.tracing_overhead`, docs/performance.md), and in CPython each value
touched per event costs tens of nanoseconds. So the broker keeps only what it alone
knows and ships it as it is:

* per event it handled, the ints of `EVENT_FIELDS` (one wall-clock read, no CPU
  clock), packed into 32 bytes (`EVENT_ROW`) appended to one bytearray per read: no
  Python object outlives the event (thousands of objects kept per event made each
  garbage collection slower, and reading them back out of the cache to ship them cost
  more than all the rest; packing costs less than a list append and `array.extend`
  together). A bytes object kept per event instead takes scattered small-object
  memory, and memory kept is memory the broker's own working set loses from the CPU
  caches: `python -m bench.tracing_cache` counts the data-cache misses tracing adds.
  The links an event went to are an `outcome` code, one per distinct tuple of link
  ids;
* notes on the rare rest, as flat (kind, batch_index, value) triples: when a control
  message began (`MARK`, also for the read's end), when an event that then waited for
  room in a full queue had been routed (`BLOCKED`), why an event missed targets
  (`DROPPED`). An event is done when the broker turns to its next message, so its
  `t_done_ns` is the start of what follows it in the read: the next event, or a mark;
* per read, the values of `READ_FIELDS` the read's events share, with the CPU time of
  the whole read (two `time.thread_time_ns()` calls), and the read's frames as
  received (`Connection(keep_frames=True)`): the writer reads them again for what the
  event itself says (id, type, publisher, path, size), so the broker never copies it.

`flush` marshals the little that is not bytes (reads' values, notes, link names) and
hands it, each read's packed rows and frames (as they are, not joined) to a thread that
writes them to the writer process's stdin with `os.writev` (the GIL released: the
broker's thread never copies the bulk of it); the writer builds the Arrow columns and
writes a record batch per blob. A blob goes at least every `flush_rows` events or
`flush_bytes` of frames, and once a second from the broker's flush task. Handing a
blob over costs a saturated broker more than copying its bytes would explain, so blobs
are few and large (65,536 events by default), and a read's rows are kept as they are
rather than joined (`bench.tracing_overhead` measures the difference). The price: a
trace up to about half a second behind a saturated broker, which holds some 12 MB of
150-byte events' frames meanwhile. `close` ships the rest, and waits for the writer to
finish the file: a broker stopped with SIGTERM or Ctrl-C leaves a complete trace. The writer ignores
those signals and ends at the end of its input, so it also finishes the file when the
broker is killed (losing only what the broker had not shipped).

If the writer falls behind by more than `queue_bytes` of blobs, or is gone, blobs are
dropped and counted (`rows_lost`, logged once): the broker keeps routing either way.
A writer that cannot write its file (a full disk) says so in one line and ends; the
rows it was handed and did not write count as lost too.
The writer reports the rows in its file after each blob (`rows_written`), so the
broker's stats tell when every row recorded by then is in the file (`rows_recorded`).
"""

from __future__ import annotations

import contextlib
import fcntl
import marshal
import os
import queue
import select
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import structlog

from broker.forkserver import PipedChild, fork_module, forked_from_server
from broker.trace.files import trace_path

log = structlog.get_logger("hop.trace")

EVENT_FIELDS = (
    "t_start_ns",
    "outcome",  # code of the link ids it was sent to (`HopRecorder.outcome_of`)
    "filters_matched",
    "bytes_out",
)
"""The ints the broker records per event, in this order. Its position in the read
(`batch_index`) is not among them: the read's messages are events (a row each, in
order) but for its control messages, which the notes mark."""
WIDTH = len(EVENT_FIELDS)
EVENT_ROW = struct.Struct(f"={WIDTH}q")
"""How they are packed (native byte order: the bytes only cross a pipe)."""

MARK, BLOCKED, DROPPED = "mark", "blocked", "dropped"
"""Kinds of notes: a time the broker turned to a control message or ended the read; the
time an event that then waited for queue room had been routed; why an event missed
targets (a string)."""


READ_FIELDS = (
    "from_node",
    "t_arrival_ns",  # the read returned
    "batch",  # messages in the read
    "cpu_ns",  # the thread's CPU time handling the read, control messages excluded
    "subscriptions",  # in the broker's table after the read
    "queue_len",  # frames waiting in the broker's outgoing queues when the read came
)
"""The values an event shares with the others of its read, in this order."""

PIPE_BYTES = 1 << 20  # the default limit of a pipe's size on Linux
WRITER_READY = b"ready\n"  # what the writer prints once it can take blobs
WRITER_WROTE = "{}\n"
"""What the writer prints after each blob it has written: the rows in its file so far."""
WRITER_START_S = 60.0
TRACE_WRITER = "broker.trace.hop_writer"  # the writer's module

BLOB_HEADER = struct.Struct(">II")
"""Each blob on the writer's stdin: this header (the lengths of the two parts that
follow it), a marshal of (the links named and the outcomes coded since the last blob,
and per read: its `READ_FIELDS`, the length of its frames, its number of events, its
notes), the events' rows, then the frames of each read one after the other."""


def _to_normal_priority(pid: int) -> None:
    """Give the writer process `pid` normal CPU priority back for its last rows.

    It runs at idle priority (`broker.trace.hop_writer`), which on a host whose cores
    other processes keep busy gets next to no CPU: the broker, waiting for it to finish
    the file, would outlast its stop's timeout and be killed with rows unwritten.
    Leaving idle priority needs CAP_SYS_NICE or an RLIMIT_NICE of 20 (`ulimit -e 20`);
    without either the writer stays as it is."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, not permitted, or gone
        os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, pid, 0)


class HopRecorder:
    """`hops` rows of one broker to RUN_DIR/traces/hops-brokerID-PID.arrow, written by a
    `broker.trace.hop_writer` process."""

    def __init__(
        self,
        trace_dir: Path,
        run_id: str,
        broker: str,
        flush_rows: int = 65536,
        flush_bytes: int = 16 << 20,
        queue_bytes: int = 256 << 20,
    ) -> None:
        self.path = trace_path(trace_dir, "hops", f"broker{broker}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush_rows = flush_rows
        self.flush_bytes = flush_bytes
        self.queue_bytes = queue_bytes
        self.rows_shipped = 0  # handed to the writer process
        self._rows_dropped = 0  # not shipped: the writer was too slow or gone
        self.rows_written = 0  # in the file, as the writer process last reported
        self._writer_ended = False  # its reports all read: `rows_written` is final
        self._loss_told = False
        self._reports: threading.Thread | None = None
        self._rows_flushed = 0  # handed over or lost, by `flush`
        #: outcome code of each tuple of link ids an event was sent to (codes from 1)
        self.outcomes: dict[tuple[str, ...], int] = {}
        self._names: dict[str, tuple[str, str]] = {}  # links named since the last blob
        self._new_outcomes: dict[int, tuple[str, ...]] = {}  # likewise coded
        self._reads: list[tuple[Any, ...]] = []
        self._frames: list[bytes | bytearray] = []  # of each read
        self._frame_bytes = 0
        self._rows: list[bytes | bytearray] = []  # of each read: an EVENT_ROW per event
        self._row_bytes = 0
        self._writer = _start_writer([str(self.path), run_id, broker])
        self._widen_pipe()
        self._await_writer(WRITER_START_S)
        self._blobs: queue.Queue[tuple[int, int, list[bytes | bytearray]] | None] = queue.Queue()
        self._queued = 0  # bytes of the blobs in `_blobs`
        self._queued_lock = threading.Lock()
        self._shipper = threading.Thread(target=self._ship, name="hop-trace", daemon=True)
        self._shipper.start()
        self._closed = False

    @property
    def buffered(self) -> int:
        """Rows not shipped yet."""
        return self._row_bytes // EVENT_ROW.size

    @property
    def rows_lost(self) -> int:
        """Rows that will never be in the file: those dropped before shipping (the writer
        too slow or gone), and once the writer has ended, those it was handed and did
        not write (it failed: a full disk, say)."""
        unwritten = self.rows_shipped - self.rows_written if self._writer_ended else 0
        return self._rows_dropped + unwritten

    @property
    def rows_recorded(self) -> int:
        """Every row recorded so far. Each ends up written or lost: once
        `rows_written + rows_lost` reaches this, the file holds all of them that it ever
        will (a broker that keeps running, and whose file is never closed, is copied
        then)."""
        return self._rows_flushed + self.buffered

    def name_link(self, link_id: str, node: str, kind: str) -> None:
        """How the `to_nodes` (kind "broker") or `delivered_to` (other kinds) column
        names a link id; a link never named counts as a client, named by its id."""
        self._names[link_id] = (node, kind)

    def outcome_of(self, links: tuple[str, ...]) -> int:
        """The code of a tuple of link ids, new or known."""
        code = self.outcomes.get(links)
        if code is None:
            code = self.outcomes[links] = len(self.outcomes) + 1
            self._new_outcomes[code] = links
        return code

    def add_read(
        self,
        read: tuple[Any, ...],
        frames: bytes | bytearray,
        rows: bytes | bytearray,
        notes: list[Any],
    ) -> None:
        """Buffer the rows of the events handled from one read: `read` holds the values
        of `READ_FIELDS`, `frames` the read's frames (its messages', in order), `rows`
        the `EVENT_ROW` of each event, one event after the other, and `notes` the
        read's notes (see the module doc; a MARK at index `batch` for its end)."""
        self._rows.append(rows)  # kept as it is, not copied: see `flush`
        self._row_bytes += len(rows)
        self._reads.append((read, len(frames), len(rows) // EVENT_ROW.size, notes))
        self._frames.append(frames)
        self._frame_bytes += len(frames)
        if self.buffered >= self.flush_rows or self._frame_bytes >= self.flush_bytes:
            self.flush()

    def flush(self) -> None:
        """Hand what is buffered to the writer process."""
        if not self._row_bytes and not self._names:
            return
        rows = self.buffered
        self._rows_flushed += rows
        meta = marshal.dumps((self._names, self._new_outcomes, self._reads))
        header = BLOB_HEADER.pack(len(meta), self._row_bytes)
        blob = [header, meta, *self._rows, *self._frames]
        size = len(meta) + self._row_bytes + self._frame_bytes
        self._names, self._new_outcomes, self._reads = {}, {}, []
        self._rows, self._row_bytes, self._frames, self._frame_bytes = [], 0, [], 0
        with self._queued_lock:
            room = self._queued + size <= self.queue_bytes
            if room:
                self._queued += size
        if room:
            self._blobs.put((rows, size, blob))
        else:
            self._lose(rows, "the trace writer is behind")

    def close(self, timeout_s: float = 60.0) -> int | None:
        """Ship the rest and wait for the writer to finish the file; its exit status
        (None if it did not end in time)."""
        if self._closed:
            return self._writer.returncode
        self._closed = True
        _to_normal_priority(self._writer.pid)
        self.flush()
        self._blobs.put(None)
        self._shipper.join(timeout_s)
        try:
            status = self._writer.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.error("trace_writer_stuck", path=str(self.path), pid=self._writer.pid)
            return None
        if self._reports is not None:
            self._reports.join(timeout_s)  # its last reports read: `rows_lost` is final
        return status

    def _widen_pipe(self) -> None:
        """Let the pipe to the writer hold a whole blob where Linux allows (its default
        64 KiB took ~25 writes and as many wake-ups of the writer per blob, each write
        needing the GIL back); `/proc/sys/fs/pipe-max-size` may set a lower limit."""
        pipe = self._writer.stdin
        assert pipe is not None
        for size in (PIPE_BYTES, 256 << 10):
            try:
                fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, size)
                return
            except (AttributeError, OSError):  # not Linux, or above the limit
                continue

    def _await_writer(self, timeout_s: float) -> None:
        """Wait until the writer has started (imported pyarrow, opened the file), so that
        its start-up does not compete with the traffic the broker is about to trace; a
        writer that fails to start is reported, and its rows will be counted as lost."""
        out = self._writer.stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], timeout_s)
        line = out.readline() if ready else b""
        if line == WRITER_READY:
            self._reports = threading.Thread(
                target=self._count_written, name="hop-trace-written", daemon=True
            )
            self._reports.start()
            return
        out.close()
        with contextlib.suppress(ValueError, OSError):
            log.error("trace_writer_not_ready", path=str(self.path), pid=self._writer.pid)

    def _count_written(self) -> None:
        """The thread that keeps `rows_written` as the writer reports it, until the
        writer ends."""
        out = self._writer.stdout
        assert out is not None
        with out:
            for line in out:
                self.rows_written = int(line)
        self._writer_ended = True
        if self.rows_shipped > self.rows_written:
            self._tell_loss("the trace writer ended before writing them")

    def _ship(self) -> None:
        """The thread that writes blobs to the writer process (pipe writes release the
        GIL, and a slow writer never blocks the broker's loop)."""
        pipe = self._writer.stdin
        assert pipe is not None
        broken = False
        while (item := self._blobs.get()) is not None:
            rows, size, blob = item
            with self._queued_lock:
                self._queued -= size
            if broken:
                self._lose(rows, "the trace writer is gone")
                continue
            try:
                _write_all(pipe.fileno(), blob)
                self.rows_shipped += rows
            except OSError:  # BrokenPipeError: the writer died
                broken = True
                self._lose(rows, "the trace writer is gone")
        with contextlib.suppress(OSError):
            pipe.close()

    def _lose(self, rows: int, why: str) -> None:
        self._rows_dropped += rows
        self._tell_loss(why)

    def _tell_loss(self, why: str) -> None:
        """Log the first loss of rows (the stats count them all)."""
        if self._loss_told:
            return
        self._loss_told = True
        with contextlib.suppress(ValueError, OSError):  # the log stream may be gone
            log.error("trace_rows_lost", why=why, path=str(self.path))


def _start_writer(args: list[str]) -> subprocess.Popen[bytes] | PipedChild:
    """The writer process, on pipes: forked from this broker when the broker is a fork
    server's child that has the writer imported (a replay's brokers: pyarrow and numpy
    are not imported again, ~0.3 s of CPU per broker), else started by its command."""
    module = sys.modules.get(TRACE_WRITER)
    if module is not None and forked_from_server() and threading.active_count() == 1:
        return fork_module(module, args)
    return subprocess.Popen(
        [sys.executable, "-m", TRACE_WRITER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )


_IOV_MAX = os.sysconf("SC_IOV_MAX")


def _write_all(fd: int, parts: list[bytes | bytearray]) -> None:
    """Write `parts` one after the other to `fd` (blocking), in as few system calls as
    the limit of buffers per `writev` allows."""
    views = [memoryview(p) for p in parts if p]
    first = 0
    while first < len(views):
        written = os.writev(fd, views[first : first + _IOV_MAX])
        while written and written >= len(views[first]):
            written -= len(views[first])
            first += 1
        if written:  # a part written in part
            views[first] = views[first][written:]
