"""`client.socket_reader.SocketReader` on a socket pair: the reader task reads until a
consumer takes the socket, the consumer reads until its own data came, then gives
it back; what ends the connection during a consumer's turn the reader task meets."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol import ProtocolError
from client.socket_reader import SocketReader


class _Peer:
    """The reading end of a socket pair, with a SocketReader on it whose ``received``
    notes each chunk with the task that read it; ``mine`` holds the chunks a consumer
    waits for (those starting with b"mine")."""

    def __init__(self) -> None:
        self.ours, self.theirs = socket.socketpair()
        self.ours.setblocking(False)
        self.chunks: list[tuple[bytes, trio.lowlevel.Task]] = []
        self.mine: list[bytes] = []
        self.reader = SocketReader(self.ours.fileno(), 4096, self._received)
        self.outcome: Any = None  # what the reader task's run() returned or raised

    def _received(self, data: bytes) -> None:
        if data.startswith(b"bad"):
            raise ProtocolError("malformed", "bad data")
        self.chunks.append((data, trio.lowlevel.current_task()))
        if data.startswith(b"mine"):
            self.mine.append(data)

    async def run_reader(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started(trio.lowlevel.current_task())
        try:
            await self.reader.run()
            self.outcome = "ended"
        except ProtocolError as exc:
            self.outcome = exc

    async def consume(self, usable: Callable[[], bool] = lambda: True) -> trio.lowlevel.Task:
        await self.reader.read_until(self.mine, usable)
        return trio.lowlevel.current_task()

    def close(self) -> None:
        self.ours.close()
        self.theirs.close()


@asynccontextmanager
async def _peer() -> AsyncIterator[tuple[_Peer, trio.lowlevel.Task, trio.Nursery]]:
    peer = _Peer()
    try:
        async with trio.open_nursery() as nursery:
            reader_task = await nursery.start(peer.run_reader)
            await trio.testing.wait_all_tasks_blocked()
            yield peer, reader_task, nursery
            nursery.cancel_scope.cancel()
    finally:
        peer.close()


async def _quiet() -> None:
    await trio.testing.wait_all_tasks_blocked()


@pytest.mark.trio
async def test_a_consumer_takes_the_socket_from_the_waiting_reader_and_gives_it_back() -> None:
    async with _peer() as (peer, reader_task, nursery):
        peer.theirs.send(b"before")
        await _quiet()
        assert peer.chunks == [(b"before", reader_task)]

        async with trio.open_nursery() as consumers:
            consumers.start_soon(peer.consume)
            await _quiet()
            assert not peer.reader.available  # lent: the reader task stands aside
            peer.theirs.send(b"others")  # not what the consumer waits for: read on
            await _quiet()
            peer.theirs.send(b"mine 1")
        consumer_chunks = peer.chunks[1:]
        assert [data for data, _ in consumer_chunks] == [b"others", b"mine 1"]
        assert all(task is not reader_task for _, task in consumer_chunks)
        assert peer.reader.available

        peer.theirs.send(b"after")  # given back: the reader task reads again
        await _quiet()
        assert peer.chunks[-1] == (b"after", reader_task)
        peer.theirs.shutdown(socket.SHUT_WR)
        await _quiet()
        assert peer.outcome == "ended"


@pytest.mark.trio
@pytest.mark.parametrize("ending", ["end of data", "violation"])
async def test_what_ends_the_connection_in_a_consumers_turn_is_left_to_the_reader_task(
    ending: str,
) -> None:
    async with _peer() as (peer, _reader_task, _nursery):
        async with trio.open_nursery() as consumers:
            consumers.start_soon(peer.consume)  # returns quietly
            await _quiet()
            if ending == "violation":
                peer.theirs.send(b"bad frame")
            else:
                peer.theirs.shutdown(socket.SHUT_WR)
        assert not peer.reader.available  # no consumer reads past it
        await _quiet()
        if ending == "violation":
            assert isinstance(peer.outcome, ProtocolError)
            assert peer.outcome.code == "malformed"
        else:
            assert peer.outcome == "ended"


@pytest.mark.trio
async def test_a_cancelled_consumer_gives_the_socket_back() -> None:
    async with _peer() as (peer, reader_task, _nursery):
        with trio.move_on_after(0.05) as scope:
            await peer.consume()
        assert scope.cancelled_caught
        assert peer.reader.available
        peer.theirs.send(b"mine, late")
        await _quiet()
        assert peer.chunks == [(b"mine, late", reader_task)]


@pytest.mark.trio
async def test_a_consumer_stops_once_the_connection_is_not_usable() -> None:
    async with _peer() as (peer, reader_task, _nursery):
        usable = True
        async with trio.open_nursery() as consumers:
            consumers.start_soon(peer.consume, lambda: usable)
            await _quiet()
            usable = False
            peer.theirs.send(b"others")  # read, acted on, then the consumer stops
        assert [data for data, _ in peer.chunks] == [b"others"]
        assert peer.reader.available
        peer.theirs.send(b"more")
        await _quiet()
        assert peer.chunks[-1] == (b"more", reader_task)


@pytest.mark.trio
async def test_a_consumer_whose_socket_is_closed_returns() -> None:
    peer = _Peer()
    try:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(peer.consume)
                await _quiet()
                trio.lowlevel.notify_closing(peer.ours)  # as closing the client's stream does
        assert peer.chunks == [] and peer.reader.available
    finally:
        peer.close()


@pytest.mark.trio
async def test_a_consumers_turn_is_a_schedule_point_even_with_data_waiting() -> None:
    peer = _Peer()
    try:
        peer.theirs.send(b"mine")
        with trio.testing.assert_checkpoints():
            await peer.consume()
        assert [data for data, _ in peer.chunks] == [b"mine"]
    finally:
        peer.close()


# --- any interleaving of data, consumers and their cancellation ---------------------

_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.binary(min_size=1, max_size=40)),
        st.tuples(st.just("send"), st.just(b"!")),  # what a waiting consumer waits for
        st.tuples(st.just("consume"), st.just(b"")),
        st.tuples(st.just("cancel"), st.integers(0, 5).map(lambda n: bytes([n]))),
    ),
    max_size=30,
)


@given(steps=_STEPS)
@settings(max_examples=60)
def test_every_byte_is_acted_on_once_in_order_whoever_reads(
    steps: list[tuple[str, bytes]],
) -> None:
    """Data sent in any pieces, consumers coming (each until a b"!" arrives) and being
    cancelled in any order: the bytes acted on are the bytes sent, in order, each once;
    no two tasks ever wait on the socket together; the reader task ends at the end."""

    async def main() -> None:
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        log: list[bytes] = []
        waiting: list[list[bytes]] = []  # each live consumer's "arrived"

        def received(data: bytes) -> None:
            log.append(data)
            if b"!" in data:
                for arrived in waiting:
                    arrived.append(data)

        reader = SocketReader(ours.fileno(), 16, received)
        ended = trio.Event()
        scopes: list[trio.CancelScope] = []

        async def run_reader() -> None:
            await reader.run()
            ended.set()

        async def consume(scope: trio.CancelScope) -> None:
            arrived: list[bytes] = []
            waiting.append(arrived)
            try:
                with scope:
                    if reader.available:
                        await reader.read_until(arrived, lambda: True)
            finally:
                waiting[:] = [other for other in waiting if other is not arrived]

        sent = []
        try:
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(run_reader)
                    await trio.testing.wait_all_tasks_blocked()
                    for action, arg in steps:
                        if action == "send":
                            theirs.send(arg)
                            sent.append(arg)
                        elif action == "consume":
                            scope = trio.CancelScope()
                            scopes.append(scope)
                            nursery.start_soon(consume, scope)
                        elif scopes:
                            scopes[arg[0] % len(scopes)].cancel()
                        await trio.testing.wait_all_tasks_blocked()
                    theirs.shutdown(socket.SHUT_WR)
                    await ended.wait()
                    for scope in scopes:
                        scope.cancel()
        finally:
            ours.close()
            theirs.close()
        assert b"".join(log) == b"".join(sent)

    trio.run(main)
