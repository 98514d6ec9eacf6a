"""Tests of the asyncio client (`client.asyncio_client`) against the fake broker of
tests/fake_broker.py, run in a trio loop of its own thread, on loopback; each test runs
its client in a fresh event loop, once on asyncio's own and once on uvloop. The TLS
network test is in tests/test_tls.py, the real broker's in
tests/test_bench_client_api.py."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import trio
import uvloop

import client
from broker.protocol import (
    Bye,
    Error,
    Flush,
    Hello,
    ProtocolError,
    Publish,
    Subscribe,
    Unsubscribe,
    encode_frame,
)
from routing import FilterSyntaxError
from tests.event_loops import LOOPS, run_on
from tests.fake_broker import FakeBroker, fake_broker_thread
from tests.test_client import BAD_CONNECT_ARGUMENTS

_T = TypeVar("_T")
HOST = "127.0.0.1"
FAST = client.Reconnect(initial_s=0.02, max_s=0.2, wait_s=5.0)


@pytest.fixture
def thread_broker() -> Iterator[FakeBroker]:
    with fake_broker_thread() as fake:
        yield fake


@pytest.fixture(autouse=True, params=sorted(LOOPS))
def loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs on each event loop of `LOOPS`."""
    monkeypatch.setattr(sys.modules[__name__], "LOOP", request.param)
    return str(request.param)


LOOP = "asyncio"
"""The event loop `run` uses: set by the `loop` fixture for each test."""


def run(scenario: Callable[[], Awaitable[_T]]) -> _T:
    """``scenario()`` in a fresh loop of the test's kind, failing after 10 s."""
    return run_on(LOOP, scenario, 10)


def connect(fake: FakeBroker, name: str = "a1", **kwargs: Any) -> Any:
    return client.open_asyncio_client(HOST, fake.port, name=name, **kwargs)


def in_broker(fake: FakeBroker, fn: Callable[[], object]) -> None:
    """Call ``fn`` in the fake broker's trio thread."""
    trio.from_thread.run_sync(fn, trio_token=fake.token)


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)


def test_subscribe_publish_next_round_trip(thread_broker: FakeBroker, loop: str) -> None:
    async def scenario() -> None:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop) == (loop == "uvloop")
        async with connect(thread_broker) as c:
            assert c.connected
            sub = await c.subscribe("family = 7 and price < 120.5")
            assert await c.publish({"family": 7, "price": 99.0}) == "a1:1"
            assert await c.publish({"family": 8, "price": 1.0}) == "a1:2"
            assert await c.publish({"family": 7, "price": 5.0}, event_id="mine") == "mine"
            first = await sub.next_delivery()
            assert (first.event_id, first.publisher, first.sub_ids) == ("a1:1", "a1", (sub.id,))
            assert first.attributes == {"family": 7, "price": 99.0}
            assert first.t_deliver_ns >= first.t_publish_ns > 0
            assert await sub.next() == {"family": 7, "price": 5.0}
        assert not c.connected

    run(scenario)
    assert thread_broker.kinds() == [Hello, Subscribe, Publish, Publish, Publish, Bye]


def test_one_deliver_for_two_subscriptions_reaches_both(thread_broker: FakeBroker) -> None:
    async def scenario() -> None:
        async with connect(thread_broker) as c:
            a = await c.subscribe("family = 7")
            b = await c.subscribe("price > 1")
            await c.publish({"family": 7, "price": 2})
            assert await a.next() == await b.next() == {"family": 7, "price": 2}

    run(scenario)
    assert len(thread_broker.delivered) == 1


def test_unsubscribe_stops_delivery_and_ends_iteration(thread_broker: FakeBroker) -> None:
    async def scenario() -> list[dict[str, Any]]:
        async with connect(thread_broker) as c:
            sub = await c.subscribe("family = 7")
            await c.publish({"family": 7, "n": 1})
            await c.flush()
            await c.unsubscribe(sub)
            await c.unsubscribe(sub)  # a second time does nothing
            await c.publish({"family": 7, "n": 2})
            await c.flush()
            assert not sub.active
            got = [event async for event in sub]  # what was queued, then the end
            with pytest.raises(client.SubscriptionClosed):
                await sub.next()
            return got

    assert run(scenario) == [{"family": 7, "n": 1}]
    assert thread_broker.kinds().count(Unsubscribe) == 1


def test_closing_ends_iteration_after_what_was_queued(thread_broker: FakeBroker) -> None:
    async def scenario() -> list[int]:
        async with connect(thread_broker) as c:
            sub = await c.subscribe("family = 7")
            await c.publish_many([{"family": 7, "n": 0}, {"family": 7, "n": 1}])
            await c.flush()
        got = [event["n"] async for event in sub]
        with pytest.raises(client.ClientClosed):
            await sub.next()
        return got

    assert run(scenario) == [0, 1]


def test_invalid_filters_and_events_raise_before_sending(thread_broker: FakeBroker) -> None:
    async def scenario() -> None:
        async with connect(thread_broker) as c:
            with pytest.raises(FilterSyntaxError):
                await c.subscribe("family = = 7")
            with pytest.raises(TypeError):
                await c.subscribe(7)  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                await c.publish({"family": None})
            with pytest.raises(ValueError):
                await c.publish({"big": 2**70})
            with pytest.raises(TypeError, match="event 1; nothing was sent"):
                await c.publish_many([{"family": 7}, {"family": [1]}])
            assert await c.publish_many([]) == []
            assert await c.publish({"family": 7}) == "a1:1"  # rejected ones used no id
            await c.flush()

    run(scenario)
    assert thread_broker.kinds() == [Hello, Publish, Flush, Bye]


def test_publish_many_in_order_with_publish_and_covered_by_flush(
    thread_broker: FakeBroker,
) -> None:
    async def scenario() -> list[str]:
        async with connect(thread_broker) as c:
            ids = [await c.publish({"n": 0})]
            ids += await c.publish_many({"n": n} for n in range(1, 3000))
            ids.append(await c.publish({"n": 3000}))
            await c.flush()
            return ids

    ids = run(scenario)
    assert ids == [f"a1:{n}" for n in range(1, 3002)]
    events = [m.attributes["n"] for m in thread_broker.received if isinstance(m, Publish)]
    assert events == list(range(3001))


def test_close_sends_what_was_published_then_bye(thread_broker: FakeBroker) -> None:
    async def scenario() -> None:
        async with connect(thread_broker) as c:
            for n in range(2000):  # more than a batch holds
                await c.publish({"n": n})
        with pytest.raises(client.ClientClosed, match="closed"):
            await c.publish({"n": 0})

    run(scenario)
    assert thread_broker.kinds() == [Hello] + [Publish] * 2000 + [Bye]


def test_flush_waits_for_the_brokers_answer(thread_broker: FakeBroker) -> None:
    gate = trio.Event()
    thread_broker.flush_gate = gate

    async def scenario() -> None:
        async with connect(thread_broker) as c:
            flush = asyncio.ensure_future(c.flush())
            await asyncio.sleep(0.2)
            assert not flush.done()
            in_broker(thread_broker, gate.set)
            await flush

    run(scenario)


def test_stats_and_ping(thread_broker: FakeBroker) -> None:
    async def scenario() -> tuple[dict[str, Any], float]:
        async with connect(thread_broker) as c:
            await c.subscribe("family = 7")
            return await c.stats(), await c.ping()

    stats, rtt = run(scenario)
    assert stats == {"subscriptions": 1}
    assert 0 < rtt < 5


def test_a_brokers_error_ends_the_client(thread_broker: FakeBroker) -> None:
    async def scenario() -> None:
        async with connect(thread_broker) as c:
            sub = await c.subscribe("family = 7")
            thread_broker.call(thread_broker.link.send, Error("overloaded", "too many clients"))
            with pytest.raises(client.BrokerError) as info:  # no end of the stream
                [event async for event in sub]
            assert (info.value.code, info.value.message) == ("overloaded", "too many clients")
            for call in (c.publish({"family": 7}), c.flush(), sub.next()):
                with pytest.raises(client.BrokerError):
                    await call
            assert not sub.active and not c.connected

    run(scenario)


def test_a_lost_connection_raises_from_iteration_after_what_arrived(
    thread_broker: FakeBroker,
) -> None:
    async def scenario() -> None:
        async with connect(thread_broker) as c:
            sub = await c.subscribe("family = 7")
            await c.publish({"family": 7})
            await c.flush()
            thread_broker.call(thread_broker.link.stream.aclose)
            got = []
            with pytest.raises(client.ConnectionLost) as lost:
                async for event in sub:
                    got.append(event)
            assert got == [{"family": 7}]
            assert not isinstance(lost.value, client.ClientClosed | client.BrokerError)
            for call in (c.flush(), c.publish({"family": 7}), c.subscribe("x = 1"), c.stats()):
                with pytest.raises(client.ConnectionLost):
                    await call

    run(scenario)


def test_a_protocol_violation_is_reported_and_ends_the_client(thread_broker: FakeBroker) -> None:
    async def scenario() -> None:
        async with connect(thread_broker) as c:
            sub = await c.subscribe("family = 7")
            frame = encode_frame(Subscribe(1, []))  # brokers never send it
            thread_broker.call(thread_broker.link.send_raw, frame)
            with pytest.raises(client.ConnectionLost, match="protocol violation by the broker"):
                await sub.next()

    run(scenario)
    deadline = time.monotonic() + 5  # (the broker's thread takes it in its own time)
    while not isinstance(thread_broker.received[-1], Error) and time.monotonic() < deadline:
        time.sleep(0.01)
    error = thread_broker.received[-1]
    assert isinstance(error, Error) and error.code == "unexpected"


@pytest.mark.parametrize(("port", "options", "error", "message"), BAD_CONNECT_ARGUMENTS)
def test_bad_connect_arguments_are_named_before_connecting(
    port: Any, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    async def scenario() -> None:
        with pytest.raises(error, match=message):
            await client.AsyncioClient.connect(HOST, port, name="a", **options)

    run(scenario)


def test_a_peer_that_is_no_hop_broker_is_named_with_what_broke() -> None:
    """As the trio client says it: the handshake's answer that never came is a
    ConnectionLost caused by the ProtocolError the peer's bytes made."""
    with socket.create_server((HOST, 0)) as server:
        port = server.getsockname()[1]

        def answer_as_http() -> None:
            peer, _ = server.accept()
            with peer:
                peer.recv(1000)
                peer.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                time.sleep(1)

        thread = threading.Thread(target=answer_as_http)
        thread.start()

        async def scenario() -> None:
            speak = "does not speak hop's protocol"
            with pytest.raises(client.ConnectionLost, match=speak) as info:
                await client.AsyncioClient.connect(HOST, port, name="lost", timeout=5)
            assert isinstance(info.value.__cause__, ProtocolError), info.value.__cause__

        try:
            run(scenario)
        finally:
            thread.join()


def test_a_full_connection_makes_publish_wait_until_the_broker_reads(
    thread_broker: FakeBroker,
) -> None:
    """A broker that stops reading fills the socket and the transport's buffer: publish
    waits (backpressure) instead of buffering without end, and goes on once it reads."""
    gate = trio.Event()
    thread_broker.read_gate = gate
    blob = b"x" * 10_000

    async def scenario() -> int:
        async with connect(thread_broker) as c:
            published = 0

            async def publish_all() -> None:
                nonlocal published
                for _ in range(2000):
                    await c.publish({"blob": blob})
                    published += 1

            task = asyncio.ensure_future(publish_all())
            while True:  # until publishing stops: the connection is full
                before = published
                await asyncio.sleep(0.2)
                if published == before:
                    break
            assert not task.done() and published < 2000
            in_broker(thread_broker, gate.set)
            await task
            await c.flush()
            return published

    assert run(scenario) == 2000
    assert thread_broker.kinds().count(Publish) == 2000


def test_a_refused_hello_raises_broker_error(thread_broker: FakeBroker) -> None:
    thread_broker.refuse = Error("auth", "authentication failed")

    async def scenario() -> None:
        with pytest.raises(client.BrokerError, match="auth: authentication failed"):
            async with connect(thread_broker, secret="wrong"):
                pass

    run(scenario)
    assert isinstance(thread_broker.received[0], Hello)
    assert thread_broker.received[0].secret == "wrong"


def test_a_silent_peer_times_out_naming_the_handshake(thread_broker: FakeBroker) -> None:
    thread_broker.answer_hello = False

    async def scenario() -> None:
        with pytest.raises(TimeoutError, match="no hop broker answered the handshake"):
            async with connect(thread_broker, timeout=0.3):
                pass

    run(scenario)


def test_a_port_nobody_listens_on_is_named_with_the_reason() -> None:
    with socket.socket() as bound:  # bound, not listening: connections are refused
        bound.bind((HOST, 0))
        port = bound.getsockname()[1]

        async def scenario() -> None:
            async with client.open_asyncio_client(HOST, port, name="a1"):
                pass

        with pytest.raises(ConnectionRefusedError) as info:
            run(scenario)
    assert str(info.value) == (
        f"cannot connect to the broker at {HOST}:{port}: connection refused "
        "(is a hop broker listening there?)"
    )


def test_a_handler_gets_every_delivery_in_order(thread_broker: FakeBroker) -> None:
    thread_broker.early = {"family": 7, "early": True}  # delivered before the SubAck

    async def scenario() -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        async with connect(thread_broker) as c:
            sub = await c.subscribe("family = 7", handler=lambda d: got.append(d.attributes))
            assert got == [{"family": 7, "early": True}]
            await c.publish_many({"family": 7, "n": n} for n in range(100))
            await c.flush()
            with pytest.raises(client.ClientError, match="hands its deliveries"):
                await sub.next()
        return got

    got = run(scenario)
    assert got[1:] == [{"family": 7, "n": n} for n in range(100)]


def test_callbacks_must_be_plain_callables(thread_broker: FakeBroker) -> None:
    async def handler(delivery: client.Delivery) -> None:
        pass

    async def scenario() -> None:
        with pytest.raises(TypeError, match="on_disconnect must be callable"):
            await client.AsyncioClient.connect(HOST, thread_broker.port, name="a", on_disconnect=1)
        async with connect(thread_broker) as c:
            with pytest.raises(TypeError, match="not an async one"):
                await c.subscribe("family = 7", handler=handler)

    run(scenario)
    assert thread_broker.kinds() == [Hello, Bye]  # nothing sent for either


def test_a_handlers_exception_ends_the_client_and_is_raised_once(
    thread_broker: FakeBroker,
) -> None:
    def handler(delivery: client.Delivery) -> None:
        raise LookupError(f"cannot handle {delivery.event_id}")

    async def scenario() -> None:
        with pytest.raises(LookupError, match="cannot handle a1:1"):
            async with connect(thread_broker) as c:
                other = await c.subscribe("family = 7")
                await c.subscribe("family = 7", handler=handler)
                await c.publish({"family": 7})
                await until(lambda: not c.connected)
                with pytest.raises(client.ConnectionLost, match="callback failed: LookupError"):
                    await c.publish({"family": 7})
        assert await other.next() == {"family": 7}  # queued before the handler raised
        with pytest.raises(client.ConnectionLost):
            await other.next()
        # wait_closed raises it instead, and then the block does not again
        async with connect(thread_broker, "a2") as c:
            await c.subscribe("family = 7", handler=handler)
            await c.publish({"family": 7})
            with pytest.raises(LookupError, match="cannot handle a2:1"):
                await c.wait_closed()

    run(scenario)


def test_a_handlers_exception_is_raised_once_by_aclose_or_wait_closed(
    thread_broker: FakeBroker,
) -> None:
    """A long-lived client closed with `aclose` raises it there; after `wait_closed`
    raised it, later waits raise the ConnectionLost it caused, as later calls do."""

    def handler(delivery: client.Delivery) -> None:
        raise LookupError(f"cannot handle {delivery.event_id}")

    async def ended_by_handler(name: str) -> client.AsyncioClient:
        c = await client.AsyncioClient.connect(HOST, thread_broker.port, name=name)
        await c.subscribe("family = 7", handler=handler)
        await c.publish({"family": 7})
        await until(lambda: not c.connected)
        return c

    async def scenario() -> None:
        c = await ended_by_handler("a4")
        with pytest.raises(LookupError, match="cannot handle a4:1"):
            await c.aclose()
        await c.aclose()  # not twice
        c = await ended_by_handler("a5")
        with pytest.raises(LookupError, match="cannot handle a5:1"):
            await c.wait_closed()
        with pytest.raises(client.ConnectionLost, match="callback failed") as info:
            await c.wait_closed()
        assert isinstance(info.value.__cause__, LookupError)
        await c.aclose()

    run(scenario)


def test_wait_closed_returns_once_another_task_closes_the_client(
    thread_broker: FakeBroker,
) -> None:
    async def scenario() -> None:
        async with connect(thread_broker) as c:
            waiting = asyncio.ensure_future(c.wait_closed())
            await asyncio.sleep(0.05)
            assert not waiting.done()
            await c.aclose()
            await waiting
            await c.aclose()  # idempotent

    run(scenario)


def test_wait_closed_raises_the_loss_and_on_disconnect_hears_of_it_once(
    thread_broker: FakeBroker,
) -> None:
    heard: list[client.ConnectionLost] = []

    async def scenario() -> None:
        async with connect(thread_broker, on_disconnect=heard.append) as c:
            await c.flush()
            thread_broker.call(thread_broker.link.stream.aclose)
            with pytest.raises(client.ConnectionLost, match="closed the connection"):
                await c.wait_closed()
        assert [type(e) for e in heard] == [client.ConnectionLost]
        async with connect(thread_broker, "a2", on_disconnect=heard.append) as c:
            await c.flush()

    run(scenario)
    assert len(heard) == 1  # closed by its user: no loss to tell of


def test_reconnecting_renews_subscriptions_and_flush_reports_the_loss(
    thread_broker: FakeBroker,
) -> None:
    """The broker hangs up: the client tells of it, opens a new connection, subscribes
    again with the same ids; the same subscription goes on receiving, a publish made
    meanwhile waits for the connection, and the next flush reports the loss."""
    events: list[str] = []

    async def scenario() -> None:
        async with connect(
            thread_broker, reconnect=FAST,
            on_disconnect=lambda e: events.append("lost"),
            on_reconnect=lambda: events.append("back"),
        ) as c:  # fmt: skip
            sub = await c.subscribe("family = 7")
            await c.flush()
            thread_broker.call(thread_broker.link.stream.aclose)
            await until(lambda: not c.connected)
            await c.publish({"family": 7, "n": 1})  # waits for the next connection
            assert c.connected and c.reconnects == 1
            assert await sub.next() == {"family": 7, "n": 1}
            with pytest.raises(client.ConnectionLost, match="lost since the previous flush"):
                await c.flush()
            await c.flush()  # reported once

    run(scenario)
    assert events == ["lost", "back"]
    assert len(thread_broker.links) == 2
    subscribes = [m for m in thread_broker.received if isinstance(m, Subscribe)]
    assert [m.sub_id for m in subscribes] == [1, 1]


def test_reconnecting_gives_up_calls_after_wait_s(thread_broker: FakeBroker) -> None:
    policy = client.Reconnect(initial_s=0.02, max_s=0.05, wait_s=0.3)

    async def scenario() -> None:
        async with connect(thread_broker, reconnect=policy) as c:
            await c.flush()
            thread_broker.refuse = Error("auth", "no more")  # the next Hello is refused
            thread_broker.call(thread_broker.link.stream.aclose)
            with pytest.raises(client.BrokerError, match="no more"):
                await c.wait_closed()  # a refused Hello ends the client for good
            with pytest.raises(client.BrokerError):
                await c.publish({"n": 1})

    run(scenario)


def test_the_heartbeat_does_not_blame_the_broker_for_the_clients_own_pause(
    thread_broker: FakeBroker,
) -> None:
    """The loop held for longer than the heartbeat timeout: the broker's answers waited
    unread, so the silence is the client's own, and the connection is kept."""
    policy = client.Reconnect(initial_s=0.02, max_s=0.1, heartbeat_s=0.2, heartbeat_timeout_s=0.6)

    async def scenario() -> int:
        async with connect(thread_broker, reconnect=policy) as c:
            await c.ping()
            time.sleep(1.5)  # the whole loop held: nothing runs, nothing is read
            await asyncio.sleep(1.0)  # the heartbeat's turns after it
            await c.ping()
            return c.reconnects

    assert run(scenario) == 0


def test_the_heartbeat_gives_up_a_silent_broker_and_reconnects(
    thread_broker: FakeBroker,
) -> None:
    """The fake broker answers Hello, then reads and says nothing more: after
    ``heartbeat_timeout_s`` of silence (pings unanswered) the client gives the
    connection up and opens another."""
    gate = trio.Event()  # set at the end: the broker reads the last connection's Bye
    thread_broker.read_gate = gate
    policy = client.Reconnect(initial_s=0.02, max_s=0.1, heartbeat_s=0.2, heartbeat_timeout_s=0.6)

    async def scenario() -> float:
        async with connect(thread_broker, reconnect=policy) as c:
            start = time.monotonic()
            await until(lambda: c.reconnects >= 1)
            elapsed = time.monotonic() - start
            # The client counts the connection once it is open; the broker's thread
            # accepts it in its own time (on a loaded host, after the count).
            accepted_by = time.monotonic() + 5.0
            while len(thread_broker.links) < 2 and time.monotonic() < accepted_by:
                await asyncio.sleep(0.005)
            in_broker(thread_broker, gate.set)
            return elapsed

    elapsed = run(scenario)
    assert 0.6 <= elapsed < 3.0  # cut after heartbeat_timeout_s of silence, not before
    assert len(thread_broker.links) >= 2
