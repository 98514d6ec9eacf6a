"""Who reads a client's socket: its reader task, or a consumer waiting for a delivery.

A delivery that the client's reader task decodes reaches a consumer parked in
``next_batch`` only in trio's next pass of its run loop: at low rates that hand-off
between tasks is a tenth of an event's latency (docs/performance.md). So a consumer
that finds nothing queued reads the socket itself (`SocketReader.read_until`): the
reader task's wait for data is cancelled and it waits to be given the socket back;
the consumer reads and acts on every message as the reader task would (deliveries
for other subscriptions, answers, pings) until a delivery of its own is queued, then
gives the socket back.

What ends the connection during a consumer's turn (the end of data, a failed read,
a protocol violation) is left to the reader task, which meets it as if it had read
it itself: the client's way of losing a connection stays in one place.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sized

import trio

from broker.protocol import ProtocolError


class ReadFailed(Exception):
    """Reading the socket failed with ``error`` (its OSError, or trio's for a socket
    closed meanwhile): the connection's end. Told apart from what acting on the data
    raises, so that an OSError of the client's user (a handler writing to a closed
    pipe) is not taken for the connection's."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


class SocketReader:
    """The reading side of one connection's socket ``fd``: ``received`` acts on each
    chunk read (and raises ProtocolError on a violation)."""

    def __init__(self, fd: int, size: int, received: Callable[[bytes], None]) -> None:
        self.fd = fd
        self._size = size  # bytes per read
        self._received = received
        self._lent = False  # a consumer has the socket
        self._wait: trio.CancelScope | None = None  # the reader task's wait for data
        self._aside: trio.lowlevel.Task | None = None  # the reader task, standing aside
        self._eof = False  # a consumer read the end of data
        self._failure: ReadFailed | ProtocolError | None = None  # what a consumer's read met

    @property
    def available(self) -> bool:
        """Whether a consumer may take the socket now: nobody else has it, and no
        consumer met the connection's end that the reader task has yet to act on."""
        return not self._lent and not self._eof and self._failure is None

    async def run(self) -> None:
        """The reader task: read until the end of data (return) or a failure (raise
        ReadFailed for the read's, the ProtocolError or anything else ``received``
        raises as it is), standing aside while a consumer reads."""
        read, fd, size, received = os.read, self.fd, self._size, self._received
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._lent:
                await self._stand_aside()
                continue
            if self._eof:
                return
            if self._failure is not None:
                raise self._failure
            try:
                data = read(fd, size)
            except BlockingIOError:  # (also when woken without data)
                await self._wait_readable()
                continue
            except OSError as exc:
                raise ReadFailed(exc) from exc
            if not data:
                return
            received(data)
            if len(data) < size:
                # The read did not fill the buffer: the socket is drained, so wait
                # for data rather than make a read that finds none.
                await self._wait_readable()
            else:  # more may be waiting: let the other tasks run first
                await trio.lowlevel.cancel_shielded_checkpoint()

    async def _stand_aside(self) -> None:
        """The reader task waits for the socket to be given back (`_give_back`)."""
        self._aside = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._aside = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def _give_back(self) -> None:
        """End a consumer's turn. (The reader task is woken directly rather than
        through a ParkingLot: this runs on the way of every delivery to a consumer at
        low rates, and a lot's unpark is several calls more.)"""
        self._lent = False
        task = self._aside
        if task is not None:
            self._aside = None
            trio.lowlevel.reschedule(task)

    async def _wait_readable(self) -> None:
        """Wait for data, in a cancel scope a consumer cancels to take the socket
        (trio takes the task off the socket at once, so the consumer can wait on it)."""
        with trio.CancelScope() as self._wait:
            try:
                await trio.lowlevel.wait_readable(self.fd)
            except (OSError, trio.ClosedResourceError) as exc:
                raise ReadFailed(exc) from exc
        self._wait = None

    async def read_until(self, arrived: Sized, usable: Callable[[], bool]) -> None:
        """A consumer's turn (only when `available`): wait for data, read and act on it
        until ``arrived`` is not empty, ``usable()`` is false (the connection is ending
        or replaced) or the read ends the connection; then give the socket back.
        Always a schedule point: it waits for data before each read."""
        self._lent = True
        if self._wait is not None:
            self._wait.cancel()
        read, fd, size, received = os.read, self.fd, self._size, self._received
        try:
            while not arrived and usable():
                try:
                    await trio.lowlevel.wait_readable(fd)
                except trio.ClosedResourceError:  # closed by the client: it knows why
                    return
                try:
                    data = read(fd, size)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    self._failure = ReadFailed(exc)
                    return
                if not data:
                    self._eof = True
                    return
                received(data)
        except ProtocolError as exc:
            self._failure = exc
        finally:
            self._give_back()
