"""A link's outgoing queue, and the write-through that spares its writer task a wake-up.

Frames for a peer wait in its `OutQueue`, bounded to `limit` frames, until the link's
writer task sends them (up to `batch_limit` per `send_all`). On the way of every
event, waking that task costs the broker a pass of trio's scheduler and the latency
of one more wake-up. So while a reader handles one read (`Outgoing.handling_read`),
queuing to an idle writer does not wake it: at the read's end, `Outgoing.flush`
writes each touched queue through its socket with one non-blocking write, and wakes
a writer only for what the socket would not take. Outside a read (heartbeats, the
link's end), queuing wakes the writer at once.

Having written through at the end of a short read (`YIELD_READS_UP_TO` messages), the
broker yields the CPU once (``os.sched_yield``). A loopback write wakes the reader on
the writer's CPU when it can (the peer then waits for that CPU), and the writer's way
back to its next wait (trio's pass, the next read, the poll) would run first, on the
way of the event, for every subscriber woken so. With the yield the subscriber runs at
once and the broker's pass comes after it. A broker under load reads hundreds of
events at a time, and other processes want the CPU: a yield there would hand away the
rest of its turn, so a longer read does not yield (docs/performance.md, "Where the
subscriber woke").

A client's publish at low rate is written through the same way at once
(`OutQueue.put_through`): it has no read to wait for the end of.

A queue writes a batch of frames as ``join`` makes it of them: one after the other,
or, on a broker's link to a client, with runs of Delivers joined into `Deliveries`
frames (`broker.protocol.join_frames`).

The order of frames on a link is the queue's order either way: a write-through
happens only while the writer is parked with nothing in flight, and what it leaves
unsent (`tail`) goes out before anything still queued.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import trio


class SendCounters(Protocol):
    """Where a queue counts what it sent (a link's counters)."""

    messages_out: int
    bytes_out: int


YIELD_READS_UP_TO = 4
"""A read of at most this many messages yields the CPU after writing through (the
module doc); a longer one, a broker under load, does not."""


@dataclass(eq=False)
class Outgoing:
    """The broker's outgoing queues as a whole: the frames waiting in all of them, and
    the queues a reader queued to an idle writer during the read it is handling."""

    frames: int = 0
    deferring: bool = False  # a reader is handling a read (it never yields then, but
    # to wait for queue room: `OutQueue.put` flushes before it parks)
    touched: list[OutQueue] = field(default_factory=list)
    yielding: bool = False  # the read being handled yields the CPU at its end

    def handling_read(self, messages: int) -> Outgoing:
        """``with outgoing.handling_read(len(messages)):`` around the handling of one
        read: write through at its end. (A plain context manager: a generator-based
        one costs about a microsecond per read, and at low load a read is one event.)"""
        self.yielding = messages <= YIELD_READS_UP_TO
        return self

    def __enter__(self) -> None:
        self.deferring = True

    def __exit__(self, *exc_info: object) -> None:
        self.flush()

    def flush(self) -> None:
        """Write the touched queues through (waking writers for any rest); stop
        deferring. Having written at the end of a short read, yield the CPU once (the
        module doc)."""
        self.deferring = False
        touched, self.touched = self.touched, []
        wrote = False
        for queue in touched:
            wrote |= queue.write_through()
        if wrote and self.yielding:
            os.sched_yield()
        self.yielding = False


class OutQueue:
    """Frames waiting to be written to one peer (see the module doc).

    `queued` counts the frames not yet written: those waiting plus those in flight in
    the writer's `send_all` or in a write-through's `tail`, so it stays under
    `limit + batch_limit`.
    """

    def __init__(
        self,
        limit: int,
        batch_limit: int,
        outgoing: Outgoing,
        counters: SendCounters,
        fd: int | None,
        join: Callable[[list[bytes]], bytes] = b"".join,
    ) -> None:
        self.limit = limit
        self.join = join  # the bytes to write for a batch of frames
        self.batch_limit = batch_limit
        self.outgoing = outgoing
        self.counters = counters
        self.fd = fd  # a socket to write through, or None (TLS, in-memory streams)
        self.frames: list[bytes] = []
        self.queued = 0
        self.closed = False  # takes no more frames: the link is down or says Bye
        self.ending = False  # the writer stops once all is sent
        self.tail = b""  # the unsent rest of a write-through
        self.tail_frames = 0
        self.writer_idle = False  # the writer is parked, and nobody has woken it
        self.touched = False  # in `Outgoing.touched`
        self.send_started = 0.0  # time.monotonic() of the writer's send_all in progress
        self._frames_came = trio.lowlevel.ParkingLot()
        self._room_came = trio.lowlevel.ParkingLot()

    def put_nowait(self, frame: bytes) -> bool:
        """Queue `frame` without waiting; False when the queue is full. A closed queue
        swallows it (True)."""
        if self.closed:
            return True
        frames = self.frames
        if len(frames) >= self.limit:
            return False
        frames.append(frame)
        self.queued += 1
        outgoing = self.outgoing
        outgoing.frames += 1
        if self.writer_idle and not self.touched:
            if outgoing.deferring:
                self.touched = True
                outgoing.touched.append(self)
            else:
                self._wake_writer()
        return True

    def put_through(self, frame: bytes) -> bool:
        """`put_nowait`, but a frame that finds the writer parked with nothing waiting or
        in flight is written at once, with one non-blocking write, instead of waking
        the writer (what the socket would not take is left to it). For a lone frame,
        such as a client's publish at low rate: no pass of the writer task."""
        if self.writer_idle and not self.frames and self.fd is not None and not self.closed:
            self.frames.append(frame)
            self.queued += 1
            self.outgoing.frames += 1
            self.write_through()
            return True
        return self.put_nowait(frame)

    def _wake_writer(self) -> None:
        self.writer_idle = False
        self._frames_came.unpark()

    async def put(self, frame: bytes) -> bool:
        """Queue `frame`, waiting while the queue is full (backpressure); False when the
        queue is (or got) closed instead."""
        outgoing = self.outgoing
        while not self.closed and len(self.frames) >= self.limit:
            deferring = outgoing.deferring
            if deferring:  # others run while this reader waits: they must not defer
                outgoing.flush()
                if len(self.frames) < self.limit:  # the flush made room
                    outgoing.deferring = True
                    break
            try:
                await self._room_came.park()
            finally:
                outgoing.deferring = deferring
        if self.closed:
            return False
        return self.put_nowait(frame)

    def close(self) -> None:
        """Take no more frames; wake whoever waits on this queue."""
        self.closed = True
        self._room_came.unpark_all()
        self._wake_writer()

    async def end(self, last: bytes) -> None:
        """Queue `last` (unless empty), take nothing after it, and let the writer stop
        once everything is sent."""
        if last:
            await self.put(last)
        self.closed = self.ending = True
        self._wake_writer()

    def write_through(self) -> bool:
        """Write the queue's first batch with one non-blocking write if the writer is
        parked and nothing is in flight; leave the writer what the socket would not
        take. (A woken writer is not idle, so nothing is written ahead of its
        batch or of a `tail`.) True if it wrote anything."""
        self.touched = False
        sent = 0
        if not self.writer_idle or not self.frames:
            return False
        if self.fd is not None:
            batch, count = self._take()
            try:
                sent = os.write(self.fd, batch)
            except OSError:  # full (BlockingIOError), or an error the writer meets again
                sent = 0
            if sent == len(batch):
                self._sent(count, sent)
            else:
                self.tail, self.tail_frames = batch[sent:], count
                self.counters.bytes_out += sent
        if self.frames or self.tail:
            self._wake_writer()
        return sent > 0

    async def writer(self, stream: trio.abc.Stream) -> None:
        """The link's writer task: send in batches until `end` and all is sent."""
        while True:
            if self.tail:
                batch, count = self.tail, self.tail_frames
                self.tail, self.tail_frames = b"", 0
            elif self.frames:
                batch, count = self._take()
            elif self.ending:
                return
            else:
                self.writer_idle = True
                try:
                    await self._frames_came.park()
                finally:
                    self.writer_idle = False
                continue
            self.send_started = time.monotonic()
            await stream.send_all(batch)
            self.send_started = 0.0
            self._sent(count, len(batch))

    def _take(self) -> tuple[bytes, int]:
        """Take the first batch of frames off the queue (they stay in `queued`)."""
        frames = self.frames
        if len(frames) <= self.batch_limit:
            self.frames = []
            return self.join(frames), len(frames)
        batch = frames[: self.batch_limit]
        del frames[: self.batch_limit]
        return self.join(batch), len(batch)

    def _sent(self, count: int, size: int) -> None:
        self.queued -= count
        self.outgoing.frames -= count
        self.counters.messages_out += count
        self.counters.bytes_out += size
        if self._room_came:
            self._room_came.unpark_all()
