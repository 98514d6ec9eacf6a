"""`client.shared_queue.SharedOutQueue` on a socket pair: another thread writes a frame
at once only while the writer task is parked with nothing waiting or in flight; what
the socket did not take goes before anything queued after it; closing the queue
waits for a write in progress and ends such writes."""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from broker.outgoing import Outgoing
from client.aio import OUTGOING_FRAMES, _SendCounters
from client.shared_queue import SharedOutQueue


class _Pair:
    """A queue on one end of a socket pair (its writer task running); the test reads
    the other end."""

    def __init__(self, send_buffer: int | None = None) -> None:
        self.ours, self.theirs = socket.socketpair()
        if send_buffer is not None:
            for end, option in ((self.ours, socket.SO_SNDBUF), (self.theirs, socket.SO_RCVBUF)):
                end.setsockopt(socket.SOL_SOCKET, option, send_buffer)
        self.ours.setblocking(False)
        self.theirs.setblocking(False)
        fd = self.ours.fileno()
        self.queue = SharedOutQueue(
            OUTGOING_FRAMES, OUTGOING_FRAMES, Outgoing(), _SendCounters(), fd
        )

    def arrived(self) -> bytes:
        """Everything the other end can read now."""
        data = b""
        while True:
            try:
                chunk = self.theirs.recv(1 << 20)
            except BlockingIOError:
                return data
            if not chunk:
                return data
            data += chunk

    async def from_thread(
        self, frame: bytes, ready: Callable[[], bool] = lambda: True
    ) -> bytes | None:
        return await trio.to_thread.run_sync(self.queue.write_from_thread, frame, ready)


@asynccontextmanager
async def _pair(send_buffer: int | None = None) -> AsyncIterator[_Pair]:
    pair = _Pair(send_buffer)
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(pair.ours))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pair.queue.writer, stream)
            await trio.testing.wait_all_tasks_blocked()  # the writer is parked
            yield pair
            nursery.cancel_scope.cancel()
    finally:
        pair.theirs.close()
        pair.ours.close()


@pytest.mark.trio
async def test_another_thread_writes_at_once_while_the_writer_is_parked() -> None:
    async with _pair() as pair:
        assert pair.queue.writer_idle
        assert await pair.from_thread(b"frame-1") == b""
        assert pair.arrived() == b"frame-1"
        assert pair.queue.writer_idle  # still the writer's, parked
        pair.queue.put_nowait(b"frame-2")  # the trio side as before
        await trio.testing.wait_all_tasks_blocked()
        assert pair.arrived() == b"frame-2"


@pytest.mark.trio
@pytest.mark.parametrize("state", ["frames waiting", "writer woken", "closed", "not ready"])
async def test_another_thread_does_not_write_unless_the_socket_is_free(state: str) -> None:
    async with _pair() as pair:
        queue, ready = pair.queue, True
        if state == "frames waiting":
            queue.frames.append(b"waiting")
        elif state == "writer woken":
            queue.writer_idle = False
        elif state == "closed":
            queue.close()
        else:
            ready = False
        assert await pair.from_thread(b"frame", lambda: ready) is None
        assert pair.arrived() == b""


@pytest.mark.trio
async def test_the_rest_of_a_partial_write_goes_before_anything_queued_after_it() -> None:
    async with _pair(send_buffer=4096) as pair:
        queue = pair.queue
        big = bytes(range(256)) * 2048  # 512 KiB: more than the two buffers hold
        rest = await pair.from_thread(big)
        assert rest and len(rest) < len(big) and big.endswith(rest)
        assert not queue.writer_idle  # held for the rest: nobody else writes now
        assert await pair.from_thread(b"later") is None
        queue.put_through(b"A" * 100)  # the trio side's own write-through waits too
        queue.put_nowait(b"B" * 100)
        queue.resume_writer()
        received = b""
        while len(received) < len(big) + 200:
            await trio.sleep(0.001)
            received += pair.arrived()
        assert received == big + b"A" * 100 + b"B" * 100


@pytest.mark.parametrize("action", ["close", "write_through", "put_through"])
def test_the_trio_sides_close_and_writes_wait_for_a_write_in_progress(action: str) -> None:
    pair = _Pair()
    queue = pair.queue
    queue.writer_idle = True  # (no writer task here: as if it were parked)
    if action != "put_through":  # which writes its own frame on an empty queue
        queue.frames.append(b"queued")
    done = threading.Event()

    def act() -> None:
        if action == "put_through":
            queue.put_through(b"queued")
        else:
            getattr(queue, action)()
        done.set()

    with queue.lock:  # as `write_from_thread` holds it around its write
        other = threading.Thread(target=act)
        other.start()
        assert not done.wait(0.2)
        assert pair.arrived() == b""
    other.join(5)
    assert done.is_set()
    if action == "close":  # and no thread writes after it
        queue.frames.clear()
        queue.writer_idle = True
        assert queue.write_from_thread(b"frame", lambda: True) is None
        assert pair.arrived() == b""
    else:
        assert pair.arrived() == b"queued"
    pair.theirs.close()
    pair.ours.close()
