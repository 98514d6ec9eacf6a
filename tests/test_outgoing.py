"""The broker's outgoing queue (`broker.outgoing`) and socket reads (`broker.netio`),
on socket pairs: write-through at a read's end and of a lone frame, the CPU yielded after
a short read (also by a broker serving our clients), order under partial writes,
backpressure, the writer's end, and reads that wait or not."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import trio
import trio.testing

import client
from broker.local_network import free_base_port
from broker.netio import receive_some, socket_fd
from broker.outgoing import YIELD_READS_UP_TO, Outgoing, OutQueue
from broker.protocol import PROTOCOL_VERSION as V
from broker.protocol import Connection, Deliver, Hello, Pong, Welcome, encode_frame, join_frames
from broker.server import Broker, BrokerConfig
from topologies.generators import chain


@dataclass
class Counts:
    messages_out: int = 0
    bytes_out: int = 0


async def _pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


async def _read_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = bytearray()
    with trio.fail_after(10):
        while len(data) < size:
            chunk = await stream.receive_some(1 << 20)
            assert chunk, "the peer closed early"
            data += chunk
    return bytes(data)


class Writer:
    """An OutQueue on one end of a socket pair (written through unless ``plain``: as
    for TLS or in-memory streams), and its writer task; ``outgoing`` to share one
    `Outgoing` among several."""

    def __init__(
        self,
        nursery: trio.Nursery,
        local: trio.SocketStream,
        limit: int = 1000,
        plain: bool = False,
        join: Callable[[list[bytes]], bytes] = b"".join,
        outgoing: Outgoing | None = None,
    ):
        self.outgoing = Outgoing() if outgoing is None else outgoing
        self.counts = Counts()
        fd = None if plain else socket_fd(local)
        self.queue = OutQueue(limit, 64, self.outgoing, self.counts, fd, join)
        self.done = trio.Event()
        nursery.start_soon(self._run, local)

    async def _run(self, local: trio.SocketStream) -> None:
        await self.queue.writer(local)
        self.done.set()


def test_frames_of_a_read_are_written_through_without_waking_the_writer() -> None:
    async def main() -> None:
        local, peer = await _pair()
        async with trio.open_nursery() as nursery:
            w = Writer(nursery, local)
            await trio.testing.wait_all_tasks_blocked()
            assert w.queue.writer_idle
            with w.outgoing.handling_read(10):
                for i in range(10):
                    assert w.queue.put_nowait(b"frame%d;" % i)
                assert w.outgoing.frames == 10 and w.counts.messages_out == 0  # not yet
            assert w.counts.messages_out == 10 and w.queue.queued == w.outgoing.frames == 0
            assert w.queue.writer_idle  # nobody woke it
            assert await _read_exactly(peer, 70) == b"".join(b"frame%d;" % i for i in range(10))
            nursery.cancel_scope.cancel()

    trio.run(main)


@pytest.mark.parametrize("plain", [False, True], ids=["written through", "by the writer"])
def test_a_short_read_that_wrote_through_yields_the_cpu_once(
    plain: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short read's end that wrote to peers yields the CPU once, however many it
    wrote to, so that a peer woken on this CPU runs first. A read that wrote nothing
    (the frames left to the writer task) or a long one (a broker under load) does not
    yield."""
    yields: list[None] = []
    monkeypatch.setattr("broker.outgoing.os.sched_yield", lambda: yields.append(None))

    async def main() -> None:
        (local1, peer1), (local2, peer2) = await _pair(), await _pair()
        async with trio.open_nursery() as nursery:
            outgoing = Outgoing()  # the broker's one, shared by its queues
            writers = [
                Writer(nursery, local, plain=plain, outgoing=outgoing) for local in (local1, local2)
            ]

            async def read(messages: int) -> None:
                await trio.testing.wait_all_tasks_blocked()  # the writers parked
                with outgoing.handling_read(messages):
                    for w in writers:
                        assert w.queue.put_nowait(b"frame;")
                    assert not yields  # (not before the read's end)
                for peer in (peer1, peer2):
                    assert await _read_exactly(peer, 6) == b"frame;"

            await read(YIELD_READS_UP_TO + 1)
            assert not yields
            await read(YIELD_READS_UP_TO)
            assert len(yields) == (0 if plain else 1)
            with outgoing.handling_read(1):  # a read with nothing to write
                pass
            assert len(yields) == (0 if plain else 1)
            nursery.cancel_scope.cancel()

    trio.run(main)


@pytest.mark.parametrize("plain", [False, True], ids=["written through", "by the writer"])
def test_a_queue_to_a_client_joins_delivers(plain: bool) -> None:
    """With ``join=join_frames`` (a broker's link to a client) a batch goes out as
    join_frames makes it, Delivers joined, and is counted frame by frame."""
    messages = [Deliver([1], f"e{i}", "p", {"n": i}, [], i) for i in range(100)]
    messages.insert(50, Pong(7))
    frames = [encode_frame(m) for m in messages]
    expected = join_frames(frames[:64]) + join_frames(frames[64:])  # batches of 64

    async def main() -> None:
        local, peer = await _pair()
        async with trio.open_nursery() as nursery:
            w = Writer(nursery, local, plain=plain, join=join_frames)
            await trio.testing.wait_all_tasks_blocked()
            with w.outgoing.handling_read(len(frames)):
                for frame in frames:
                    assert w.queue.put_nowait(frame)
            data = await _read_exactly(peer, len(expected))
            assert data == expected and len(data) < len(b"".join(frames))
            client, broker = Connection("initiator"), Connection("acceptor")
            broker.receive_data(client.send(Hello(V, "client", "c")))
            client.receive_data(broker.send(Welcome(V, "b")))
            assert client.receive_data(data) == messages
            await trio.testing.wait_all_tasks_blocked()
            assert w.counts.messages_out == len(frames) and w.queue.queued == 0
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_outside_a_read_putting_wakes_the_writer() -> None:
    async def main() -> None:
        local, peer = await _pair()
        async with trio.open_nursery() as nursery:
            w = Writer(nursery, local)
            await trio.testing.wait_all_tasks_blocked()
            assert w.queue.put_nowait(b"ping")
            assert not w.queue.writer_idle  # woken
            assert await _read_exactly(peer, 4) == b"ping"
            await trio.testing.wait_all_tasks_blocked()
            assert w.counts.messages_out == 1
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_partial_write_through_keeps_the_order() -> None:
    """More than the socket buffers take: the writer sends the rest, in order."""
    frames = [bytes([i % 251]) * 20_000 for i in range(200)]  # 4 MB

    async def main() -> None:
        local, peer = await _pair()
        async with trio.open_nursery() as nursery:
            w = Writer(nursery, local)
            await trio.testing.wait_all_tasks_blocked()
            with w.outgoing.handling_read(100):
                for frame in frames[:100]:
                    assert w.queue.put_nowait(frame)
            assert w.queue.tail  # the socket took part of the first batch
            for frame in frames[100:]:  # behind the tail, while the writer sends
                assert w.queue.put_nowait(frame)
            received = await _read_exactly(peer, sum(map(len, frames)))
            assert received == b"".join(frames)
            await trio.testing.wait_all_tasks_blocked()
            assert w.counts.messages_out == 200 and w.queue.queued == 0
            assert w.counts.bytes_out == len(received)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_reader_at_a_full_queue_writes_through_and_goes_on() -> None:
    """A full queue that a write-through empties must not leave the reader waiting for
    room nobody will announce."""

    async def main() -> None:
        local, peer = await _pair()
        async with trio.open_nursery() as nursery:
            w = Writer(nursery, local, limit=5)
            await trio.testing.wait_all_tasks_blocked()
            with trio.fail_after(5), w.outgoing.handling_read(12):
                for i in range(12):
                    assert await w.queue.put(b"%02d" % i)
                assert w.outgoing.deferring  # still handling the read
            assert await _read_exactly(peer, 24) == b"".join(b"%02d" % i for i in range(12))
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_put_through_writes_a_lone_frame_at_once_and_queues_behind_others() -> None:
    """A frame that finds the writer parked with nothing queued is written by the put
    itself; one that finds frames waiting or in flight queues behind them, in order."""
    big = [bytes([i]) * 100_000 for i in range(1, 41)]  # 4 MB: more than the socket takes

    async def main() -> None:
        local, peer = await _pair()
        async with trio.open_nursery() as nursery:
            w = Writer(nursery, local)
            await trio.testing.wait_all_tasks_blocked()
            assert w.queue.put_through(b"lone;")
            assert w.counts.messages_out == 1 and w.queue.queued == w.outgoing.frames == 0
            assert w.queue.writer_idle  # nobody woke it
            assert await _read_exactly(peer, 5) == b"lone;"
            await trio.testing.wait_all_tasks_blocked()
            for frame in big[:20]:
                assert w.queue.put_nowait(frame)  # wakes the writer, which has not run yet
            assert w.queue.put_through(b"after;")  # queued behind them, not written ahead
            assert w.counts.messages_out == 1
            for frame in big[20:]:
                assert w.queue.put_nowait(frame)
            expected = b"".join(big[:20]) + b"after;" + b"".join(big[20:])
            assert await _read_exactly(peer, len(expected)) == expected
            await trio.testing.wait_all_tasks_blocked()
            assert w.counts.messages_out == 42 and w.queue.queued == 0
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_put_through_leaves_the_rest_of_a_partial_write_to_the_writer_first() -> None:
    """A lone frame larger than the socket takes: the put writes what it can, the rest
    is in flight (counted in `queued`) until the writer has sent it, before anything
    queued after it; nothing else is written through meanwhile."""
    lone = bytes(range(256)) * 16_384  # 4 MiB: more than the socket pair holds

    async def main() -> None:
        local, peer = await _pair()
        async with trio.open_nursery() as nursery:
            w = Writer(nursery, local)
            await trio.testing.wait_all_tasks_blocked()
            assert w.queue.put_through(lone)
            assert w.queue.tail and lone.endswith(w.queue.tail)
            assert 0 < w.counts.bytes_out < len(lone) and w.counts.messages_out == 0
            assert w.queue.queued == w.outgoing.frames == 1 and not w.queue.writer_idle
            assert w.queue.put_through(b"after;")  # queued behind the rest
            assert w.queue.queued == 2
            expected = lone + b"after;"
            assert await _read_exactly(peer, len(expected)) == expected
            await trio.testing.wait_all_tasks_blocked()
            assert w.counts.messages_out == 2 and w.counts.bytes_out == len(expected)
            assert w.queue.queued == w.outgoing.frames == 0 and w.queue.writer_idle
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_put_through_without_a_socket_wakes_the_writer() -> None:
    """No file descriptor (TLS, in-memory streams): the writer sends, as with put_nowait."""

    async def main() -> None:
        local, peer = await _pair()
        async with trio.open_nursery() as nursery:
            w = Writer(nursery, local, plain=True)
            await trio.testing.wait_all_tasks_blocked()
            assert w.queue.put_through(b"frame")
            assert w.counts.messages_out == 0 and not w.queue.writer_idle  # woken
            assert await _read_exactly(peer, 5) == b"frame"
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_backpressure_waits_for_the_peer_and_the_bound_holds() -> None:
    async def main() -> None:
        local, peer = await _pair()
        frame = b"x" * 50_000
        async with trio.open_nursery() as nursery:
            w = Writer(nursery, local, limit=4)
            await trio.testing.wait_all_tasks_blocked()
            put = 0

            async def producer() -> None:
                nonlocal put
                for _ in range(100):
                    with w.outgoing.handling_read(1):
                        assert await w.queue.put(frame)
                    put += 1

            nursery.start_soon(producer)
            await trio.testing.wait_all_tasks_blocked()
            assert put < 100  # the peer reads nothing: the producer waits
            assert len(w.queue.frames) <= 4 and w.queue.queued <= 4 + 64
            await _read_exactly(peer, 100 * len(frame))
            await trio.testing.wait_all_tasks_blocked()
            assert put == 100
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_end_sends_everything_then_stops_the_writer_and_takes_nothing_more() -> None:
    async def main() -> None:
        local, peer = await _pair()
        async with trio.open_nursery() as nursery:
            w = Writer(nursery, local)
            await trio.testing.wait_all_tasks_blocked()
            w.queue.put_nowait(b"event;")
            await w.queue.end(b"bye")
            with trio.fail_after(5):
                await w.done.wait()
            assert w.queue.put_nowait(b"late")  # swallowed: the link says Bye
            assert not await w.queue.put(b"late")
            assert await _read_exactly(peer, 9) == b"event;bye"

    trio.run(main)


def test_close_releases_a_producer_waiting_for_room() -> None:
    async def main() -> None:
        local, _peer = await _pair()
        async with trio.open_nursery() as nursery:
            w = Writer(nursery, local, limit=1)
            w.queue.fd = None  # no write-through: the writer alone sends
            results: list[bool] = []

            async def producer() -> None:
                for _ in range(1000):
                    ok = await w.queue.put(b"y" * 100_000)
                    results.append(ok)
                    if not ok:
                        return

            nursery.start_soon(producer)
            await trio.testing.wait_all_tasks_blocked()
            w.queue.close()
            await trio.testing.wait_all_tasks_blocked()
            assert results[-1] is False and len(results) < 1000
            nursery.cancel_scope.cancel()

    trio.run(main)


@pytest.mark.parametrize("plain", [True, False])
def test_receive_some_reads_waits_and_sees_the_end(plain: bool) -> None:
    async def main() -> None:
        local, peer = await _pair()
        fd = socket_fd(local) if plain else None
        await peer.send_all(b"ready")
        assert await receive_some(local, fd, 100) == b"ready"  # there already

        async def later() -> None:
            await trio.sleep(0.05)
            await peer.send_all(b"late")
            await peer.send_eof()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(later)
            with trio.fail_after(5):
                assert await receive_some(local, fd, 100) == b"late"  # waited for
                assert await receive_some(local, fd, 100) == b""

    trio.run(main)


def test_receive_some_after_a_short_read_waits_before_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``drained`` (the previous read did not fill its buffer): no read that finds
    nothing before the data comes; a cancelled wait loses nothing; without it the first
    read is tried at once."""
    reads: list[int] = []
    real_read = os.read

    def counted_read(fd: int, size: int) -> bytes:
        reads.append(fd)
        return real_read(fd, size)

    monkeypatch.setattr("broker.netio.os.read", counted_read)

    async def main() -> None:
        local, peer = await _pair()
        fd = socket_fd(local)

        async def later(data: bytes) -> None:
            await trio.sleep(0.05)
            await peer.send_all(data)

        with trio.move_on_after(0.05):
            await receive_some(local, fd, 100, drained=True)
        assert reads == []  # cancelled while waiting, before any read
        async with trio.open_nursery() as nursery:
            nursery.start_soon(later, b"late")
            with trio.fail_after(5):
                assert await receive_some(local, fd, 100, drained=True) == b"late"
        assert len(reads) == 1
        async with trio.open_nursery() as nursery:
            nursery.start_soon(later, b"later")
            with trio.fail_after(5):
                assert await receive_some(local, fd, 100) == b"later"
        assert len(reads) == 3  # one found nothing, then the one after the wait

    trio.run(main)


def test_receive_some_ends_when_the_stream_is_closed_meanwhile() -> None:
    async def main() -> None:
        local, _peer = await _pair()
        fd = socket_fd(local)
        assert fd is not None
        async with trio.open_nursery() as nursery:

            async def close_soon() -> None:
                await trio.sleep(0.05)
                await local.aclose()

            nursery.start_soon(close_soon)
            with pytest.raises(trio.ClosedResourceError), trio.fail_after(5):
                await receive_some(local, fd, 100)

    trio.run(main)


def test_a_broker_yields_after_a_lone_event_and_not_after_a_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker hands `Outgoing` each read's message count: a read of one event that it
    delivered yields the CPU once; a read of ten events, written at once by
    ``publish_many``, does not."""
    yields: list[None] = []
    monkeypatch.setattr("broker.outgoing.os.sched_yield", lambda: yields.append(None))
    topology = chain(1, name="yield", base_port=free_base_port(1))
    broker = Broker(topology, 1, BrokerConfig())
    host, port = topology.address(1)

    async def main() -> None:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await nursery.start(broker.serve)
                async with (
                    client.open_client(host, port, name="sub") as sub_client,
                    client.open_client(host, port, name="pub") as pub_client,
                ):
                    sub = await sub_client.subscribe("n >= 0")
                    await trio.sleep(0.05)  # the handshakes' and SubAck's reads done
                    before = len(yields)
                    await pub_client.publish({"n": 0})
                    assert len(await sub.next_batch()) == 1
                    assert len(yields) == before + 1
                    await pub_client.publish_many([{"n": n} for n in range(1, 11)])
                    got = 0
                    while got < 10:
                        got += len(await sub.next_batch())
                    assert len(yields) == before + 1
                nursery.cancel_scope.cancel()

    trio.run(main)
