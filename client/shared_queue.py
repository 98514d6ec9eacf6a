"""A client connection's outgoing queue that another thread may write through too.

The blocking client (``client.Client``) runs the trio client in an I/O thread of its
own. Handing a publish to that thread wakes it and costs it a pass of its run loop:
~100 us of a lone event's latency at low rates (docs/performance.md). So a publish that
comes alone in time, and finds the connection idle, is written on the socket from the
caller's thread itself (`SharedOutQueue.write_from_thread`), as the trio client's own
write-through does (`OutQueue.put_through`).

Two threads writing one socket must not interleave their bytes, and a thread must not
write on a descriptor the other has closed (its number may already be reused). One
lock orders them. Whoever writes outside the writer task holds it for the whole
non-blocking write: the caller's thread in `write_from_thread`, the trio thread in
`write_through`. The trio thread also holds it while it wakes the writer task and
while it closes the queue, and the client closes the queue before the socket. The
caller's thread writes only when the writer task is parked with nothing waiting or
in flight, the queue is open, and its caller's own test (``ready``) passes. The
caller's thread only tries the lock and never waits for it, so a publish never waits
for the I/O thread. The trio thread waits for it only for as long as one
non-blocking write takes.

What the socket did not take stays the connection's: the rest is the writer's `tail`,
which it sends before anything else. Until the writer has sent it, the writer counts
as woken, so no one else writes. That rest is not counted in `queued` (the trio
thread alone updates the counts).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from broker.outgoing import Outgoing, OutQueue, SendCounters


class SharedOutQueue(OutQueue):
    """An `OutQueue` that threads other than the trio thread may write through (see
    the module doc)."""

    def __init__(
        self,
        limit: int,
        batch_limit: int,
        outgoing: Outgoing,
        counters: SendCounters,
        fd: int | None,
    ) -> None:
        super().__init__(limit, batch_limit, outgoing, counters, fd)
        # Reentrant: `close` and `write_through` wake the writer while holding it.
        self.lock = threading.RLock()

    def write_from_thread(self, frame: bytes, ready: Callable[[], bool]) -> bytes | None:
        """From a thread other than the trio thread: write ``frame`` on the socket now
        if the writer is parked with nothing waiting or in flight, the queue is open
        and ``ready()`` (called under the lock) is true. Returns None if it did not
        write (the caller queues the frame as usual), b"" if the socket took all of
        it. Otherwise returns what the socket did not take, which is then the
        writer's to send before anything else. The caller must then have the trio
        thread call `resume_writer`."""
        fd = self.fd
        if fd is None or not self.lock.acquire(blocking=False):
            return None
        try:
            if not self.writer_idle or self.frames or self.tail or self.closed or not ready():
                return None
            try:
                sent = os.write(fd, frame)
            except OSError:  # full (BlockingIOError), or an error the writer meets again
                sent = 0
            if sent == len(frame):
                return b""
            self.tail, self.tail_frames = frame[sent:], 0
            self.writer_idle = False  # the rest goes first: nobody else writes now
            return self.tail
        finally:
            self.lock.release()

    def resume_writer(self) -> None:
        """In the trio thread: wake the writer for the rest that `write_from_thread`
        left it."""
        self._frames_came.unpark()

    def _wake_writer(self) -> None:
        with self.lock:
            super()._wake_writer()

    def write_through(self) -> bool:
        with self.lock:
            return super().write_through()

    def close(self) -> None:
        with self.lock:
            super().close()
