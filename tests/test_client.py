"""Tests of the trio and blocking clients against the fake broker of
tests/fake_broker.py, on loopback: trio tests run it in the test's trio loop, blocking
tests in a thread."""

import errno
import queue
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from functools import partial
from typing import Any, TypeVar

import pytest
import trio

import client
from broker.netio import connect_error
from broker.protocol import (
    Bye,
    Deliver,
    Error,
    Flush,
    Hello,
    Ping,
    Pong,
    Publish,
    Subscribe,
    Unsubscribe,
    encode_frame,
)
from client.aio import OUTGOING_FRAMES
from client.shared_queue import SharedOutQueue
from routing import FilterSyntaxError, parse_filter
from tests.fake_broker import FakeBroker, fake_broker_thread

_T = TypeVar("_T")
HOST = "127.0.0.1"
EVENT = {"type": "callForOffers", "family": 7, "price": 99.0}


class _Name(str):
    """A str subclass: not an accepted attribute name type."""


class Event(Mapping[str, Any]):
    """An event that is a mapping but no dict."""

    def __init__(self, n: int) -> None:
        self._items = {"n": n}

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


async def _watchdog() -> None:
    await trio.sleep(10)
    raise AssertionError("the test took more than 10 s")


@pytest.fixture
async def broker(nursery: trio.Nursery) -> FakeBroker:
    fake = FakeBroker()
    await fake.start(nursery)
    nursery.start_soon(_watchdog)
    return fake


@pytest.fixture
def thread_broker() -> Iterator[FakeBroker]:
    """A fake broker running in a trio loop of its own thread."""
    with fake_broker_thread() as fake:
        yield fake


def connect(fake: FakeBroker, name: str = "c1", **kwargs: Any) -> Any:
    return client.open_client(HOST, fake.port, name=name, **kwargs)


# --- trio client --------------------------------------------------------------------


@pytest.mark.trio
async def test_subscribe_publish_next_round_trip(broker: FakeBroker) -> None:
    async with connect(broker, "sub-1") as c:
        sub = await c.subscribe("family = 7 and price < 120.5")
        assert (sub.id, sub.filter) == (1, parse_filter("family = 7 and price < 120.5"))
        assert await c.publish(EVENT) == "sub-1:1"
        assert await sub.next() == EVENT
        before = time.time_ns()
        assert await c.publish({"family": 7, "price": 1.5}, event_id="mine") == "mine"
        delivery = await sub.next_delivery()
        assert (delivery.event_id, delivery.publisher, delivery.attributes) == (
            "mine",
            "sub-1",
            {"family": 7, "price": 1.5},
        )
        assert (delivery.sub_ids, delivery.path) == ((1,), ())
        assert before <= delivery.t_publish_ns <= delivery.t_deliver_ns <= time.time_ns()
    assert [type(m) for m in broker.received] == [Hello, Subscribe, Publish, Publish, Bye]
    hello = broker.received[0]
    assert (hello.role, hello.node_id, hello.secret) == ("client", "sub-1", None)


@pytest.mark.trio
async def test_one_deliver_for_two_subscriptions_reaches_both(broker: FakeBroker) -> None:
    async with connect(broker) as c:
        family = await c.subscribe("family = 7")
        cheap = await c.subscribe(parse_filter("price < 100"))
        await c.publish(EVENT)
        await c.publish({"family": 7, "price": 500})
        await c.flush()
        assert [d.sub_ids for d in broker.delivered] == [[1, 2], [1]]
        first = await family.next_delivery()
        assert first is await cheap.next_delivery()
        assert first.sub_ids == (1, 2)
        assert (await family.next())["price"] == 500
        # A Deliver naming an unknown subscription id reaches only the known ones.
        await broker.link.send(Deliver([99, 2], "x:1", "x", {"price": 1}, [], 0))
        assert await cheap.next() == {"price": 1}


@pytest.mark.trio
async def test_unsubscribe_stops_delivery_and_ends_iteration(broker: FakeBroker) -> None:
    async with connect(broker) as c:
        gone = await c.subscribe("family = 7")
        kept = await c.subscribe("family = 7")
        await c.publish({"family": 7, "n": 1})
        await c.flush()
        await c.unsubscribe(gone)
        assert not gone.active and kept.active
        await c.publish({"family": 7, "n": 2})
        await c.flush()
        assert [event["n"] async for event in gone] == [1]  # drained, then ended
        with pytest.raises(client.SubscriptionClosed):
            await gone.next()
        assert [(await kept.next())["n"], (await kept.next())["n"]] == [1, 2]
        await c.unsubscribe(gone)  # twice: nothing happens
    assert broker.kinds().count(Unsubscribe) == 1
    assert [d.sub_ids for d in broker.delivered] == [[1, 2], [2]]


@pytest.mark.trio
async def test_closing_ends_iteration_after_what_was_queued(broker: FakeBroker) -> None:
    async with connect(broker) as c:
        sub = await c.subscribe("family = 7")
        await c.publish_many([{"family": 7, "n": 0}, {"family": 7, "n": 1}])
        await c.flush()
    assert [event["n"] async for event in sub] == [0, 1]
    with pytest.raises(client.ClientClosed):
        await sub.next()


@pytest.mark.trio
async def test_invalid_filters_and_events_raise_before_sending(broker: FakeBroker) -> None:
    async with connect(broker) as c:
        with pytest.raises(FilterSyntaxError):
            await c.subscribe("family = ")
        with pytest.raises(TypeError):
            await c.subscribe(7)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await c.publish({"family": [7]})
        with pytest.raises(ValueError):
            await c.publish({"7family": 7})
        with pytest.raises(TypeError):
            await c.publish([("family", 7)])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="event_id"):
            await c.publish({"family": 7}, event_id=7)  # type: ignore[arg-type]
        with pytest.raises(ValueError):  # a name seen valid before does not excuse others
            await c.publish({"family": 7, "family.x": 1, "family x": 2})
        await c.flush()
        assert broker.kinds() == [Hello, Flush]
        assert await c.publish({"family": 7}) == "c1:1"  # rejected events used no id


@pytest.mark.trio
async def test_flush_waits_for_flush_ack(broker: FakeBroker, nursery: trio.Nursery) -> None:
    broker.flush_gate = trio.Event()
    flushed = trio.Event()

    async def flush(c: client.AsyncClient) -> None:
        await c.flush()
        flushed.set()

    async with connect(broker) as c:
        await c.publish({"family": 7})
        nursery.start_soon(flush, c)
        await broker.flush_seen.wait()
        await trio.sleep(0.05)
        assert not flushed.is_set()
        broker.flush_gate.set()
        await flushed.wait()
        assert broker.kinds() == [Hello, Publish, Flush]


@pytest.mark.trio
async def test_stats_ping_and_heartbeats(broker: FakeBroker) -> None:
    async with connect(broker) as c:
        await c.subscribe("true")
        assert await c.stats() == {"subscriptions": 1}
        assert 0 <= await c.ping() < 5
        await broker.link.send(Ping(42))  # the broker's heartbeat
        await c.flush()
        assert Pong(42) in broker.received


@pytest.mark.trio
async def test_broker_error_ends_the_client(broker: FakeBroker, nursery: trio.Nursery) -> None:
    broker.flush_gate = trio.Event()  # never set: the flush stays pending
    failed = trio.Event()

    async def pending_flush(c: client.AsyncClient) -> None:
        with pytest.raises(client.BrokerError) as info:
            await c.flush()
        assert (info.value.code, info.value.message) == ("overloaded", "too many clients")
        assert str(info.value) == "overloaded: too many clients"
        failed.set()

    async with connect(broker) as c:
        sub = await c.subscribe("family = 7")
        nursery.start_soon(pending_flush, c)
        await broker.flush_seen.wait()
        await broker.link.send(Error("overloaded", "too many clients"))
        with pytest.raises(client.BrokerError):  # a refusal is no end of the stream
            [event async for event in sub]
        await failed.wait()
        with pytest.raises(client.BrokerError):
            await sub.next()
        with pytest.raises(client.BrokerError):
            await c.publish({"family": 7})
        assert not sub.active


@pytest.mark.trio
async def test_connection_loss_raises_from_iteration_after_what_arrived(
    broker: FakeBroker,
) -> None:
    async with connect(broker) as c:
        sub = await c.subscribe("family = 7")
        await c.publish({"family": 7})
        await c.flush()
        await broker.link.stream.aclose()
        got = []
        with pytest.raises(client.ConnectionLost) as lost:
            async for event in sub:
                got.append(event)
        assert got == [{"family": 7}]  # drained first
        assert not isinstance(lost.value, client.ClientClosed)
        with pytest.raises(client.ConnectionLost) as info:
            await sub.next()
        assert not isinstance(info.value, client.BrokerError)
        for call in (c.flush(), c.publish({"family": 7}), c.subscribe("x = 1"), c.stats()):
            with pytest.raises(client.ConnectionLost):
                await call


@pytest.mark.trio
async def test_protocol_violation_is_reported_and_ends_the_client(broker: FakeBroker) -> None:
    async with connect(broker) as c:
        sub = await c.subscribe("family = 7")
        await broker.link.send_raw(encode_frame(Subscribe(1, [])))  # brokers never send it
        with pytest.raises(client.ConnectionLost, match="protocol violation"):
            await sub.next()
    assert isinstance(broker.received[-1], Error)
    assert broker.received[-1].code == "unexpected"


@pytest.mark.trio
async def test_a_waiting_consumer_reads_the_connection_for_the_others_too(
    broker: FakeBroker, nursery: trio.Nursery
) -> None:
    """A consumer that finds nothing queued reads the socket itself (no hand-off from
    the I/O task): what it reads for other subscriptions and calls reaches them."""
    async with connect(broker) as c:
        mine = await c.subscribe("family = 1")
        others = await c.subscribe("family = 2")
        got: list[list[int]] = []

        async def consume() -> None:
            got.append([d.attributes["n"] for d in await mine.next_batch()])

        nursery.start_soon(consume)
        await trio.testing.wait_all_tasks_blocked()
        assert c._reader is not None and not c._reader.available  # the consumer has it
        await c.publish({"family": 2, "n": 1})
        await c.flush()  # its FlushAck read by the consumer
        assert await others.next() == {"family": 2, "n": 1}
        assert (await c.stats())["subscriptions"] == 2
        assert got == []
        await c.publish({"family": 1, "n": 2})
        await c.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert got == [[2]]
        assert c._reader.available  # given back


@pytest.mark.trio
async def test_a_client_with_a_handler_reads_only_in_its_io_task(
    broker: FakeBroker, nursery: trio.Nursery
) -> None:
    async with connect(broker) as c:
        queued = await c.subscribe("family = 1")
        consumer: list[trio.lowlevel.Task] = []
        handled: list[trio.lowlevel.Task] = []
        await c.subscribe(
            "family = 2", handler=lambda d: handled.append(trio.lowlevel.current_task())
        )

        async def consume() -> None:
            consumer.append(trio.lowlevel.current_task())
            await queued.next_batch()

        nursery.start_soon(consume)
        await trio.testing.wait_all_tasks_blocked()
        assert c._reader is not None and c._reader.available  # the consumer parked
        await c.publish({"family": 2})
        await c.publish({"family": 1})
        await c.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert len(handled) == 1 and handled[0] is not consumer[0]


async def _violate(broker: FakeBroker) -> None:
    await broker.link.send_raw(encode_frame(Subscribe(1, [])))  # brokers never send it


async def _hang_up(broker: FakeBroker) -> None:
    await broker.link.stream.aclose()


@pytest.mark.trio
@pytest.mark.parametrize(
    ("end_it", "why"),
    [(_violate, "protocol violation"), (_hang_up, "the broker closed the connection")],
)
async def test_what_ends_the_connection_in_a_consumers_read_ends_the_client(
    broker: FakeBroker, end_it: Callable[[FakeBroker], Awaitable[None]], why: str
) -> None:
    """The consumer leaves it to the I/O task, which ends the client as if it had read
    it itself (a violation is reported to the broker first)."""
    async with connect(broker) as c:
        sub = await c.subscribe("family = 7")
        async with trio.open_nursery() as nursery:

            async def while_the_consumer_reads() -> None:
                await trio.testing.wait_all_tasks_blocked()
                assert c._reader is not None and not c._reader.available
                await end_it(broker)

            nursery.start_soon(while_the_consumer_reads)
            with pytest.raises(client.ConnectionLost, match=why):
                await sub.next_batch()
        assert not c.connected
    if end_it is _violate:
        assert isinstance(broker.received[-1], Error)
        assert broker.received[-1].code == "unexpected"


@pytest.mark.trio
async def test_close_sends_queued_events_then_bye(broker: FakeBroker) -> None:
    async with connect(broker) as c:
        for n in range(2000):  # more than the outgoing channel holds
            await c.publish({"n": n})
    assert broker.kinds() == [Hello] + [Publish] * 2000 + [Bye]
    with pytest.raises(client.ConnectionLost, match="closed"):
        await c.publish({"n": 0})


@pytest.mark.trio
async def test_a_publish_alone_in_time_is_written_at_once_a_burst_in_order(
    broker: FakeBroker,
) -> None:
    """A publish long enough after the one before goes out before publish returns (no
    pass of the writer task); the next ones, back to back, are queued for the writer;
    the broker gets them all in order."""
    async with connect(broker) as c:
        await trio.sleep(0.01)
        await trio.testing.wait_all_tasks_blocked()
        sent = c._outgoing.counters.messages_out  # Hello
        await c.publish({"n": 0})
        assert c._outgoing.counters.messages_out == sent + 1  # already written
        for n in range(1, 500):
            await c.publish({"n": n})
        assert c._outgoing.counters.messages_out < sent + 500  # the rest wait for the writer
        await trio.sleep(0.01)
        await c.publish({"n": 500})
        await c.flush()
    events = [m.attributes["n"] for m in broker.received if isinstance(m, Publish)]
    assert events == list(range(501))


UNBOUNDED = 16 * OUTGOING_FRAMES
"""More 10 kB events than a stalled connection takes in: the kernel's buffers on
loopback (growing to tens of MB), the trio client's queue and the blocking client's
hand-off."""


@pytest.mark.trio
async def test_a_publish_waiting_for_room_fails_when_the_connection_is_lost(
    broker: FakeBroker, nursery: trio.Nursery
) -> None:
    """A broker that reads nothing fills the socket, then the outgoing queue: publish
    waits (backpressure) and raises ConnectionLost once the connection is lost."""
    broker.stall = True
    published = 0
    outcome: list[BaseException] = []

    async def publish_until_it_fails(c: client.AsyncClient) -> None:
        nonlocal published
        try:
            while published < UNBOUNDED:
                await c.publish({"blob": b"x" * 10_000})
                published += 1
        except client.ConnectionLost as exc:
            outcome.append(exc)

    async with connect(broker) as c:
        nursery.start_soon(publish_until_it_fails, c)
        before, still = -1, 0
        while still < 5:  # until publishing stops (the queue is full): no progress for 1 s
            await trio.sleep(0.2)
            before, still = published, (still + 1 if published == before else 0)
        assert OUTGOING_FRAMES <= published < UNBOUNDED and not outcome
        await broker.link.stream.aclose()
        with trio.fail_after(5):
            while not outcome:
                await trio.sleep(0.01)
    assert published == before  # nothing was taken after the queue filled


@pytest.mark.trio
async def test_publish_many_checks_every_event_before_sending_any(broker: FakeBroker) -> None:
    async with connect(broker) as c:
        await c.publish({"family": 7})  # its names are known: the quick check applies
        bad: list[Any] = [
            [{"family": 7}, {"family": None}],  # a value of no accepted type
            [{"family": 7}, {"7family": 7}],  # a bad name
            [{"family": 7}, {"family": 2**64}],  # known name, integer out of range
            [{"family": 7}, {_Name("family"): 7}],  # a name that is no plain str
            [{"family": 7}, [("family", 7)]],  # not a mapping
        ]
        for events in bad:
            with pytest.raises((TypeError, ValueError)) as info:
                await c.publish_many(events)
            assert "publish_many: event 1; nothing was sent" in info.value.__notes__
        with pytest.raises(ValueError, match="64 bits"):  # as validate_event says it
            await c.publish({"family": -(2**63) - 1})
        await c.flush()
        assert broker.kinds() == [Hello, Publish, Flush]
        assert await c.publish_many([{"family": 7}, {"n": 1}]) == ["c1:2", "c1:3"]
        assert await c.publish_many([]) == []


@pytest.mark.trio
async def test_publish_many_keeps_order_with_publish_and_flush_covers_it(
    broker: FakeBroker,
) -> None:
    count = 3 * OUTGOING_FRAMES  # more than the queue holds: it waits for room
    async with connect(broker) as c:
        sub = await c.subscribe("n >= 0")
        assert await c.publish({"n": 0}) == "c1:1"
        ids = await c.publish_many(Event(n) for n in range(1, count + 1))  # any mappings
        assert ids == [f"c1:{n}" for n in range(2, count + 2)]
        await c.publish({"n": count + 1})
        await c.flush()
        published = [m for m in broker.received if isinstance(m, Publish)]
        assert [m.attributes["n"] for m in published] == list(range(count + 2))
        assert len({m.t_publish_ns for m in published[1:-1]}) == 1  # one call, one time
        assert broker.kinds()[-1] is Flush  # every event before the Flush
        got = [d.attributes["n"] for d in await sub.next_batch()]
        while len(got) < count + 2:
            got += [d.attributes["n"] for d in await sub.next_batch()]
        assert got == list(range(count + 2))


@pytest.mark.trio
async def test_publish_many_waiting_for_room_fails_when_the_connection_is_lost(
    broker: FakeBroker, nursery: trio.Nursery
) -> None:
    broker.stall = True
    outcome: list[BaseException] = []
    returned = trio.Event()

    async def publish_many(c: client.AsyncClient) -> None:
        try:
            await c.publish_many([{"blob": b"x" * 10_000}] * (4 * OUTGOING_FRAMES))
            returned.set()
        except client.ConnectionLost as exc:
            outcome.append(exc)

    async with connect(broker) as c:
        nursery.start_soon(publish_many, c)
        await trio.sleep(0.3)
        assert not returned.is_set() and not outcome  # waiting for room
        await broker.link.stream.aclose()
        with trio.fail_after(5):
            while not outcome:
                await trio.sleep(0.01)
    assert not returned.is_set()


@pytest.mark.trio
async def test_refused_hello_raises_broker_error(broker: FakeBroker) -> None:
    broker.refuse = Error("auth", "bad secret")
    with pytest.raises(client.BrokerError) as info:
        async with connect(broker, secret="guess"):
            pytest.fail("connected")
    assert info.value.code == "auth"
    assert broker.received[0].secret == "guess"


@pytest.mark.trio
async def test_connect_timeout(broker: FakeBroker) -> None:
    broker.answer_hello = False
    start = trio.current_time()
    with pytest.raises(TimeoutError, match="connected to .*, but no hop broker answered"):
        async with connect(broker, timeout=0.2):
            pytest.fail("connected")
    assert trio.current_time() - start >= 0.2


@pytest.mark.trio
async def test_a_port_nobody_listens_on_is_named_with_the_reason() -> None:
    """trio's own message is "all attempts to connect ... failed"; the client's says
    which broker and why, and keeps the error's class for callers that catch it."""
    with socket.socket() as bound:  # bound, not listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        with pytest.raises(ConnectionRefusedError) as info:
            async with client.open_client("127.0.0.1", port, name="t"):
                pytest.fail("connected")
    assert str(info.value) == (
        f"cannot connect to the broker at 127.0.0.1:{port}: connection refused "
        "(is a hop broker listening there?)"
    )
    assert info.value.errno == errno.ECONNREFUSED


def test_a_connect_error_says_every_distinct_reason_once() -> None:
    """The causes trio groups (one per address of the name) become one message; an
    unknown host name says so (built here: a test resolves no name)."""
    refused = [ConnectionRefusedError(errno.ECONNREFUSED, "x") for _ in range(2)]
    mixed = [ConnectionRefusedError(errno.ECONNREFUSED, "x"), OSError(errno.ENETUNREACH, "y")]
    for causes, kind, why in [
        (refused, ConnectionRefusedError, "connection refused (is a hop broker listening"),
        (mixed, OSError, "connection refused (is a hop broker listening there?), network"),
    ]:
        trio_error = OSError("all attempts to connect to h:1 failed")
        trio_error.__cause__ = ExceptionGroup("all attempts", causes)
        error = connect_error("the broker at h:1", trio_error)
        assert type(error) is kind and error.errno == errno.ECONNREFUSED
        assert str(error).startswith(f"cannot connect to the broker at h:1: {why}")
    unknown = connect_error(
        "the broker at nowhere:1", socket.gaierror(socket.EAI_NONAME, "Name unknown")
    )
    assert isinstance(unknown, socket.gaierror)
    assert str(unknown) == (
        "cannot connect to the broker at nowhere:1: its host name cannot be resolved (Name unknown)"
    )


@pytest.mark.trio
@pytest.mark.parametrize("reconnect", [False, True])
async def test_a_peer_that_is_no_hop_broker_is_named_so(
    nursery: trio.Nursery, reconnect: bool
) -> None:
    """Pointed at another service's port (here one answering as an HTTP server does),
    the client says the peer does not speak the protocol, not just what broke; a
    reconnecting client too, whose first connection fails as any client's does."""

    async def http_server(stream: trio.SocketStream) -> None:
        await stream.receive_some(1000)
        await stream.send_all(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await trio.sleep(1)

    listeners = await nursery.start(partial(trio.serve_tcp, http_server, 0, host=HOST))
    port = listeners[0].socket.getsockname()[1]
    with pytest.raises(client.ConnectionLost, match="does not speak hop's protocol.*text 'HTTP'"):
        async with client.open_client(HOST, port, name="lost", timeout=5, reconnect=reconnect):
            pytest.fail("connected")


BAD_CONNECT_ARGUMENTS = [  # (port, keyword arguments, the error and its message)
    (70000, {}, ValueError, "port must be 1 to 65535, got 70000"),
    ("7300", {}, TypeError, "port must be an int, got str"),
    (7300, {"reconnect": 5}, TypeError, "reconnect must be True, False or a client.Reconnect"),
]


@pytest.mark.trio
@pytest.mark.parametrize(("port", "options", "error", "message"), BAD_CONNECT_ARGUMENTS)
async def test_bad_connect_arguments_are_named_before_connecting(
    port: Any, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        async with client.open_client(HOST, port, name="c", **options):
            pytest.fail("connected")
    with pytest.raises(error, match=message):
        client.Client.connect(HOST, port, name="c", **options)


@pytest.mark.trio
async def test_exceptions_leave_the_block_unwrapped(broker: FakeBroker) -> None:
    with pytest.raises(KeyError):
        async with connect(broker):
            raise KeyError("mine")
    assert broker.kinds() == [Hello, Bye]


@pytest.mark.trio
async def test_an_exception_leaving_the_block_is_kept_when_closing_wakes_a_sibling(
    broker: FakeBroker,
) -> None:
    """Closing the client on the way out ends a sibling task waiting in ``sub.next()``
    with ClientClosed; the nursery then cancels the block's task while it closes. The
    block's own exception must still come out, beside the sibling's."""
    with pytest.raises(BaseExceptionGroup) as info:
        async with trio.open_nursery() as nursery, connect(broker) as c:
            sub = await c.subscribe("family = 7")
            nursery.start_soon(sub.next)
            await trio.testing.wait_all_tasks_blocked()
            raise KeyError("mine")
    mine, rest = info.value.split(KeyError)
    assert mine is not None and str(mine.exceptions[0]) == "'mine'"
    assert rest is not None and [type(e) for e in rest.exceptions] == [client.ClientClosed]
    assert broker.kinds()[-1] is Bye


@pytest.mark.trio
async def test_a_cancelled_block_is_left_as_cancelled(broker: FakeBroker) -> None:
    with trio.move_on_after(0.5) as scope:
        async with connect(broker) as c:
            await c.subscribe("family = 7")
            await trio.sleep_forever()
    assert scope.cancelled_caught


@pytest.mark.trio
async def test_closing_the_client_ends_iteration_quietly(broker: FakeBroker) -> None:
    got: list[dict[str, Any]] = []
    async with connect(broker) as c:
        sub = await c.subscribe("family = 7")
        await c.publish({"family": 7})
        await c.flush()

        async def consume() -> None:
            async for event in sub:  # no exception: the program asked for the end
                got.append(event)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await trio.testing.wait_all_tasks_blocked()
            assert got == [{"family": 7}]
            await c.aclose()
    assert got == [{"family": 7}]


@pytest.mark.trio
async def test_a_handler_gets_every_delivery_in_order_in_the_io_task(broker: FakeBroker) -> None:
    """What came before the SubAck from within subscribe, the rest from the I/O task as
    it is decoded; none queued, and nothing once unsubscribed."""
    broker.early = {"family": 7, "n": 0}
    got: list[tuple[int, bool]] = []
    me = trio.lowlevel.current_task()

    def handler(delivery: client.Delivery) -> None:
        got.append((delivery.attributes["n"], trio.lowlevel.current_task() is me))

    async with connect(broker) as c:
        sub = await c.subscribe("family = 7", handler=handler)
        assert got == [(0, True)]  # handed over by subscribe itself
        for n in range(1, 6):
            await c.publish({"family": 7, "n": n})
        await c.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert got == [(0, True)] + [(n, False) for n in range(1, 6)]
        assert not sub._queue
        await c.unsubscribe(sub)
        assert not sub.active
        await c.publish({"family": 7, "n": 6})
        await c.flush()
        await trio.testing.wait_all_tasks_blocked()
    assert [n for n, _ in got] == [0, 1, 2, 3, 4, 5]


@pytest.mark.trio
async def test_a_handler_must_be_a_plain_callable(broker: FakeBroker) -> None:
    async def waits(delivery: client.Delivery) -> None:
        pass

    class Waits:
        async def __call__(self, delivery: client.Delivery) -> None:
            pass

    async with connect(broker) as c:
        for bad, why in ((waits, "not an async one"), (Waits(), "not an async one"),
                         ("print", "must be callable")):  # fmt: skip
            with pytest.raises(TypeError, match=why):
                await c.subscribe("family = 7", handler=bad)  # type: ignore[arg-type]
        assert c._subscriptions == {}  # refused before anything was sent
    assert broker.kinds() == [Hello, Bye]


def test_blocking_handler_must_be_a_plain_callable(thread_broker: FakeBroker) -> None:
    async def waits(delivery: client.Delivery) -> None:
        pass

    with blocking(thread_broker) as c, pytest.raises(TypeError, match="not an async one"):
        c.subscribe("family = 7", handler=waits)
    assert thread_broker.kinds() == [Hello, Bye]


def _free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@pytest.mark.trio
async def test_connection_callbacks_must_be_plain_callables_checked_before_connecting() -> None:
    async def waits(error: client.ConnectionLost) -> None:
        pass

    port = _free_port()  # connecting would raise OSError: the check comes first
    for option in ("on_disconnect", "on_reconnect"):
        for bad, why in ((waits, "not an async one"), ("print", "must be callable")):
            with pytest.raises(TypeError) as info:
                async with client.open_client(HOST, port, name="c", **{option: bad}):
                    pass
            assert str(info.value).startswith(option) and why in str(info.value)
            with pytest.raises(TypeError) as info:
                client.Client.connect(HOST, port, name="c", **{option: bad})
            assert str(info.value).startswith(option) and why in str(info.value)


@pytest.mark.trio
async def test_on_disconnect_hears_of_a_lost_connection_once_and_not_of_closing(
    broker: FakeBroker,
) -> None:
    heard: list[client.ConnectionLost] = []
    async with connect(broker, on_disconnect=heard.append) as c:
        await c.flush()
        assert heard == []
        await broker.link.stream.aclose()
        with pytest.raises(client.ConnectionLost):
            await c.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert [type(e) for e in heard] == [client.ConnectionLost]
        assert "closed the connection" in str(heard[0])
    assert len(heard) == 1
    async with connect(broker, "c2", on_disconnect=heard.append) as c:
        await c.flush()
    assert len(heard) == 1  # closed by its user: no loss to tell of


@pytest.mark.trio
async def test_on_disconnect_is_not_told_of_a_connection_open_client_refused(
    broker: FakeBroker,
) -> None:
    heard: list[client.ConnectionLost] = []
    broker.refuse = Error("auth", "no such secret")
    with pytest.raises(client.BrokerError, match="no such secret"):
        async with connect(broker, on_disconnect=heard.append):
            pass
    broker.refuse, broker.answer_hello = None, False
    with pytest.raises(TimeoutError):
        async with connect(broker, "c2", timeout=0.2, on_disconnect=heard.append):
            pass
    await trio.testing.wait_all_tasks_blocked()
    assert heard == []  # open_client's exception says it


@pytest.mark.trio
async def test_on_disconnect_gets_the_brokers_error(broker: FakeBroker) -> None:
    heard: list[client.ConnectionLost] = []
    async with connect(broker, on_disconnect=heard.append) as c:
        await c.flush()
        await broker.link.send(Error("overloaded", "too many clients"))
        with pytest.raises(client.BrokerError):
            await c.ping()
        await trio.testing.wait_all_tasks_blocked()
    assert [(type(e), str(e)) for e in heard] == [
        (client.BrokerError, "overloaded: too many clients")
    ]


@pytest.mark.trio
async def test_an_exception_in_on_disconnect_leaves_the_block(broker: FakeBroker) -> None:
    def fails(error: client.ConnectionLost) -> None:
        raise RuntimeError("on_disconnect failed")

    with trio.fail_after(10), pytest.raises(RuntimeError, match="on_disconnect failed"):
        async with connect(broker, on_disconnect=fails) as c:
            await c.flush()
            await broker.link.stream.aclose()
            await trio.sleep_forever()  # cancelled by the failing I/O task


def test_blocking_on_disconnect_runs_in_the_io_thread(thread_broker: FakeBroker) -> None:
    heard: queue.SimpleQueue[tuple[str, type]] = queue.SimpleQueue()

    def on_disconnect(error: client.ConnectionLost) -> None:
        heard.put((threading.current_thread().name, type(error)))

    with client.Client.connect(
        HOST, thread_broker.port, name="b1", on_disconnect=on_disconnect
    ) as c:
        c.flush()
        thread_broker.call(thread_broker.link.stream.aclose)
        assert heard.get(timeout=10) == ("hop-client-b1", client.ConnectionLost)
    assert heard.empty()


@pytest.mark.trio
async def test_wait_closed_returns_once_another_task_closes_the_client(
    broker: FakeBroker, nursery: trio.Nursery
) -> None:
    async with connect(broker) as c:

        async def close_soon() -> None:
            await trio.sleep(0.05)
            await c.aclose()

        nursery.start_soon(close_soon)
        with trio.fail_after(10):
            await c.wait_closed()
        assert broker.kinds() == [Hello, Bye]


@pytest.mark.trio
async def test_wait_closed_raises_the_loss_that_ended_the_client(broker: FakeBroker) -> None:
    async with connect(broker) as c:
        await c.flush()
        await broker.link.stream.aclose()
        with trio.fail_after(10), pytest.raises(client.ConnectionLost) as lost:
            await c.wait_closed()
        assert not isinstance(lost.value, client.ClientClosed)


@pytest.mark.trio
async def test_a_handlers_exception_leaves_the_block_alone_from_wait_closed(
    broker: FakeBroker, nursery: trio.Nursery
) -> None:
    def fails(delivery: client.Delivery) -> None:
        raise RuntimeError("handler failed")

    with trio.fail_after(10), pytest.raises(RuntimeError, match="handler failed"):
        async with connect(broker) as c:
            await c.subscribe("family = 7", handler=fails)

            async def publish_soon() -> None:
                await trio.sleep(0.05)  # once the block waits in wait_closed
                await c.publish(EVENT)

            nursery.start_soon(publish_soon)
            await c.wait_closed()  # cancelled: not a ConnectionLost beside it


def test_blocking_wait_closed_until_closed_elsewhere_or_timeout(thread_broker: FakeBroker) -> None:
    with blocking(thread_broker) as c:
        with pytest.raises(TimeoutError, match="still open"):
            c.wait_closed(timeout=0.05)
        closer = threading.Timer(0.05, c.close)
        closer.start()
        c.wait_closed(timeout=10)
        closer.join()
    assert thread_broker.kinds() == [Hello, Bye]


def test_blocking_wait_closed_raises_a_handlers_exception_once(thread_broker: FakeBroker) -> None:
    def fails(delivery: client.Delivery) -> None:
        raise RuntimeError("handler failed")

    with blocking(thread_broker) as c:
        c.subscribe("family = 7", handler=fails)
        c.publish(EVENT)
        with pytest.raises(RuntimeError, match="handler failed"):
            c.wait_closed(timeout=10)
    # (close, leaving the block, raised nothing more)


def test_blocking_wait_closed_raises_the_loss_that_ended_the_client(
    thread_broker: FakeBroker,
) -> None:
    with blocking(thread_broker) as c:
        c.flush()
        thread_broker.call(thread_broker.link.stream.aclose)
        with pytest.raises(client.ConnectionLost) as lost:
            c.wait_closed(timeout=10)
        assert not isinstance(lost.value, client.ClientClosed)
        with pytest.raises(client.ConnectionLost):
            c.publish(EVENT)


@pytest.mark.trio
async def test_a_handler_failing_within_subscribe_leaves_no_subscription(
    broker: FakeBroker,
) -> None:
    broker.early = {"family": 7, "n": 0}  # delivered before the SubAck

    def handler(delivery: client.Delivery) -> None:
        raise LookupError(delivery.event_id)

    async with connect(broker) as c:
        with pytest.raises(LookupError, match="early:1"):
            await c.subscribe("family = 7", handler=handler)
        assert c._subscriptions == {}
        broker.early = None
        kept = await c.subscribe("family = 8")
        await c.publish({"family": 7})
        await c.publish({"family": 8})
        assert await kept.next() == {"family": 8}  # the client carries on
    assert Unsubscribe in broker.kinds()
    assert [d.sub_ids for d in broker.delivered] == [[2]]  # nothing more for the first


@pytest.mark.trio
async def test_a_handlers_subscription_refuses_to_be_taken_from(broker: FakeBroker) -> None:
    async with connect(broker) as c:
        sub = await c.subscribe("family = 7", handler=lambda delivery: None)
        for take in (sub.next, sub.next_delivery, sub.next_batch, sub.__anext__):
            with pytest.raises(client.ClientError, match="hands its deliveries to its handler"):
                await take()


@pytest.mark.trio
async def test_a_handlers_exception_ends_the_client_and_leaves_the_block(
    broker: FakeBroker,
) -> None:
    def handler(delivery: client.Delivery) -> None:
        raise LookupError(f"cannot handle {delivery.event_id}")

    other: client.AsyncSubscription | None = None
    heard: list[client.ConnectionLost] = []
    with pytest.raises(LookupError, match="cannot handle c1:1"):
        async with connect(broker, on_disconnect=heard.append) as c:
            other = await c.subscribe("family = 7")
            await c.subscribe("family = 7", handler=handler)
            await c.publish({"family": 7})
            await trio.sleep_forever()  # cancelled by the I/O task's failure
    assert other is not None and not other.active
    assert await other.next() == {"family": 7}  # queued before the handler raised
    with pytest.raises(client.ConnectionLost, match="I/O task failed: LookupError"):
        await other.next()
    assert heard == []  # the client's own doing, raised instead


@pytest.mark.trio
@pytest.mark.parametrize("reconnect", [False, True])
async def test_a_handlers_oserror_is_its_own_not_a_lost_connection(
    broker: FakeBroker, reconnect: bool
) -> None:
    """A handler writing to a closed pipe raises BrokenPipeError, an OSError as a failed
    read of the socket is: it leaves the block as raised all the same, and a
    reconnecting client does not take it for a lost connection."""

    def handler(delivery: client.Delivery) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    with trio.fail_after(10), pytest.raises(BrokenPipeError):
        async with connect(broker, reconnect=reconnect) as c:
            await c.subscribe("family = 7", handler=handler)
            await c.publish({"family": 7})
            await trio.sleep_forever()  # cancelled by the I/O task's failure
    assert broker.kinds().count(Hello) == 1  # no second connection


# --- blocking client ------------------------------------------------------------------


def blocking(fake: FakeBroker, name: str = "b1") -> client.Client:
    return client.Client.connect(HOST, fake.port, name=name)


def test_blocking_round_trip(thread_broker: FakeBroker) -> None:
    with blocking(thread_broker, "sub-1") as c:
        sub = c.subscribe("family = 7 and price < 120.5")
        assert c.publish(EVENT) == "sub-1:1"
        assert sub.next(timeout=5) == EVENT
        c.publish({"family": 7, "price": 1.5}, event_id="e2")
        delivery = sub.next_delivery(timeout=5)
        assert (delivery.event_id, delivery.sub_ids) == ("e2", (1,))
        assert delivery.t_publish_ns <= delivery.t_deliver_ns
        c.flush()
        assert c.stats() == {"subscriptions": 1}
        assert c.ping() >= 0
    assert thread_broker.kinds()[-1] is Bye


def test_blocking_handler_runs_in_the_io_thread_in_order_and_may_publish(
    thread_broker: FakeBroker,
) -> None:
    got: list[tuple[int, str]] = []
    done = threading.Event()
    with blocking(thread_broker) as c:

        def handler(delivery: client.Delivery) -> None:
            n = delivery.attributes["n"]
            got.append((n, threading.current_thread().name))
            if n < 3:  # answered from the I/O thread: comes back to this handler
                c.publish({"family": 7, "n": n + 1})
                return
            try:
                c.flush()  # would wait for the thread it runs in
            except RuntimeError:
                done.set()

        sub = c.subscribe("family = 7", handler=handler)
        c.publish({"family": 7, "n": 0})
        assert done.wait(5)
        assert got == [(n, "hop-client-b1") for n in range(4)]
        with pytest.raises(client.ClientError, match="hands its deliveries to its handler"):
            sub.next(timeout=0.1)
        with pytest.raises(client.ClientError, match="hands its deliveries to its handler"):
            next(iter(sub))
        c.unsubscribe(sub)
        c.publish({"family": 7, "n": 10})
        c.flush()
    assert [n for n, _ in got] == [0, 1, 2, 3]


def test_blocking_calls_after_its_thread_ended_raise_the_loss_caused_by_the_handler(
    thread_broker: FakeBroker,
) -> None:
    def handler(delivery: client.Delivery) -> None:
        raise LookupError("cannot handle it")

    c = blocking(thread_broker)
    c.subscribe("family = 7", handler=handler)
    c.publish({"family": 7})
    with pytest.raises(LookupError):
        c.wait_closed(timeout=5)
    for call in (c.ping, c.flush, c.stats, lambda: c.subscribe("family = 8")):
        with pytest.raises(client.ConnectionLost, match="I/O task failed") as info:
            call()
        assert isinstance(info.value.__cause__, LookupError), call
    c.close()


def test_blocking_handler_exception_ends_the_client_and_close_raises_it(
    thread_broker: FakeBroker,
) -> None:
    def handler(delivery: client.Delivery) -> None:
        raise LookupError(f"cannot handle {delivery.event_id}")

    with pytest.raises(LookupError, match="cannot handle b1:1"), blocking(thread_broker) as c:
        other = c.subscribe("family = 7")
        c.subscribe("family = 7", handler=handler)
        c.publish({"family": 7})
        assert other.next(timeout=5) == {"family": 7}  # queued before the handler ran
        with pytest.raises(client.ConnectionLost, match="I/O task failed: LookupError"):
            other.next(timeout=5)
        with pytest.raises(client.ConnectionLost, match="I/O task failed: LookupError"):
            c.flush()
        with pytest.raises(client.ConnectionLost, match="I/O task failed: LookupError"):
            c.publish({"family": 7})
    assert not c._thread.is_alive()


def test_blocking_next_timeout(thread_broker: FakeBroker) -> None:
    with blocking(thread_broker) as c:
        sub = c.subscribe("family = 7")
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            sub.next(timeout=0.2)
        assert time.monotonic() - start >= 0.2
        c.publish({"family": 7})
        assert sub.next(timeout=5) == {"family": 7}  # the subscription still works


def test_blocking_unsubscribe_ends_iteration(thread_broker: FakeBroker) -> None:
    with blocking(thread_broker) as c:
        sub = c.subscribe("family = 7")
        for n in range(3):
            c.publish({"family": 7, "n": n})
        c.flush()
        c.unsubscribe(sub)
        c.publish({"family": 7, "n": 3})
        c.flush()
        assert [event["n"] for event in sub] == [0, 1, 2]
        with pytest.raises(client.SubscriptionClosed):
            sub.next(timeout=1)


def test_blocking_connection_loss_raises_from_iteration(thread_broker: FakeBroker) -> None:
    with blocking(thread_broker) as c:
        sub = c.subscribe("family = 7")
        c.publish({"family": 7, "n": 0})
        c.flush()
        assert sub.next(timeout=5)["n"] == 0
        trio.from_thread.run(thread_broker.link.stream.aclose, trio_token=thread_broker.token)
        with pytest.raises(client.ConnectionLost) as lost:
            for _ in sub:
                pass
        assert not isinstance(lost.value, client.ClientClosed)


def test_blocking_close_ends_iteration_after_what_was_queued(thread_broker: FakeBroker) -> None:
    c = blocking(thread_broker)
    sub = c.subscribe("family = 7")
    assert c.connected and sub.active
    c.publish_many([{"family": 7, "n": 0}, {"family": 7, "n": 1}, {"family": 7, "n": 2}])
    c.flush()
    assert sub.next(timeout=5)["n"] == 0
    c.close()
    assert not c.connected and not sub.active
    assert [event["n"] for event in sub] == [1, 2]
    with pytest.raises(client.ClientClosed):
        sub.next(timeout=1)


def test_blocking_invalid_input_raises_before_sending(thread_broker: FakeBroker) -> None:
    with blocking(thread_broker) as c:
        with pytest.raises(FilterSyntaxError):
            c.subscribe("family >")
        with pytest.raises(TypeError):
            c.publish({"family": None})
        c.flush()
        assert thread_broker.kinds() == [Hello, Flush]


def test_blocking_broker_error_keeps_its_type(thread_broker: FakeBroker) -> None:
    with blocking(thread_broker) as c:
        sub = c.subscribe("family = 7")
        thread_broker.call(thread_broker.link.send, Error("shutdown", "going away"))
        with pytest.raises(client.BrokerError):  # from the loop, not an empty stream
            list(sub)
        with pytest.raises(client.BrokerError) as info:
            c.flush()
        assert info.value.code == "shutdown"


def test_blocking_connection_loss(thread_broker: FakeBroker) -> None:
    with blocking(thread_broker) as c:
        sub = c.subscribe("family = 7")
        thread_broker.call(thread_broker.link.stream.aclose)
        with pytest.raises(client.ConnectionLost):
            sub.next(timeout=5)
        with pytest.raises(client.ConnectionLost):
            c.publish({"family": 7})


def test_blocking_close_leaves_no_threads(thread_broker: FakeBroker) -> None:
    before = threading.active_count()
    c = blocking(thread_broker)
    sub = c.subscribe("family = 7")
    c.publish({"family": 7})
    assert threading.active_count() == before + 1
    c.close()
    assert threading.active_count() == before
    c.close()  # idempotent
    with pytest.raises(client.ConnectionLost):
        c.publish({"family": 7})
    assert list(sub) == [{"family": 7}]  # what was received, then the end


def test_blocking_connect_errors(thread_broker: FakeBroker) -> None:
    before = threading.active_count()
    thread_broker.refuse = Error("auth", "bad secret")
    with pytest.raises(client.BrokerError, match="auth: bad secret"):
        blocking(thread_broker)
    thread_broker.refuse = None
    thread_broker.answer_hello = False
    with pytest.raises(TimeoutError):
        client.Client.connect(HOST, thread_broker.port, name="b1", timeout=0.2)
    assert threading.active_count() == before


def test_blocking_publish_keeps_order_across_calls_and_flush_covers_it(
    thread_broker: FakeBroker,
) -> None:
    count = 3 * OUTGOING_FRAMES
    with blocking(thread_broker) as c:
        sub = c.subscribe("n >= 0")
        ids = [c.publish({"n": n}) for n in range(count)]
        ids += c.publish_many({"n": n} for n in range(count, 2 * count))
        assert ids == [f"b1:{n}" for n in range(1, 2 * count + 1)]
        c.flush()
        kinds = thread_broker.kinds()
        assert kinds[-1] is Flush and kinds.count(Publish) == 2 * count
        published = [m.attributes["n"] for m in thread_broker.received if isinstance(m, Publish)]
        assert published == list(range(2 * count))
        assert [sub.next(timeout=5)["n"] for _ in range(2 * count)] == published


def test_blocking_publish_many_checks_every_event_before_sending_any(
    thread_broker: FakeBroker,
) -> None:
    with blocking(thread_broker) as c:
        with pytest.raises(TypeError) as info:
            c.publish_many([{"family": 7}, {"family": None}])
        assert "publish_many: event 1; nothing was sent" in info.value.__notes__
        c.flush()
        assert thread_broker.kinds() == [Hello, Flush]
        assert c.publish_many([{"family": 7}]) == ["b1:1"]  # rejected events used no id


def test_blocking_publish_waits_for_room_and_fails_when_the_connection_is_lost(
    thread_broker: FakeBroker,
) -> None:
    """A broker that reads nothing: publish stops returning once the connection, the
    trio client's queue and the hand-off hold all they may (backpressure), and raises
    ConnectionLost once the connection is lost."""
    thread_broker.stall = True
    published = 0
    outcome: list[BaseException] = []

    def publish_until_it_fails(c: client.Client) -> None:
        nonlocal published
        try:
            while published < UNBOUNDED:
                c.publish({"blob": b"x" * 10_000})
                published += 1
        except client.ConnectionLost as exc:
            outcome.append(exc)

    with blocking(thread_broker) as c:
        thread = threading.Thread(target=publish_until_it_fails, args=(c,), daemon=True)
        thread.start()
        # Until publishing stops: no progress for 1 s (a busy host may hold the
        # publishing thread back for a moment).
        before, still = -1, 0
        while still < 5:
            time.sleep(0.2)
            before, still = published, (still + 1 if published == before else 0)
        assert OUTGOING_FRAMES <= published < UNBOUNDED and not outcome
        thread_broker.call(thread_broker.link.stream.aclose)
        thread.join(timeout=5)
        assert outcome and published == before


def test_blocking_close_sends_what_was_published_then_bye(thread_broker: FakeBroker) -> None:
    with blocking(thread_broker) as c:
        for n in range(3 * OUTGOING_FRAMES):
            c.publish({"n": n})
    kinds = thread_broker.kinds()
    assert kinds == [Hello] + [Publish] * (3 * OUTGOING_FRAMES) + [Bye]


def _gated_publisher(fake: FakeBroker, then: Callable[[client.Client], None]) -> list[type]:
    """Publish more big events than the connection and the queues hold while the broker
    reads nothing, call ``then`` (flush, close) while the last ones are still on
    their way, then let the broker read; what the broker received, in order."""
    fake.read_gate = trio.Event()
    c = blocking(fake)

    def publish_then() -> None:
        for n in range(3 * OUTGOING_FRAMES):
            c.publish({"n": n, "blob": b"x" * 2000})
        then(c)

    thread = threading.Thread(target=publish_then, daemon=True)
    thread.start()
    time.sleep(0.5)  # the publisher is held by backpressure
    assert thread.is_alive()
    trio.from_thread.run_sync(fake.read_gate.set, trio_token=fake.token)
    thread.join(timeout=5)
    assert not thread.is_alive()
    c.close()
    return fake.kinds()


def test_blocking_flush_comes_after_every_publish_on_its_way(thread_broker: FakeBroker) -> None:
    kinds = _gated_publisher(thread_broker, client.Client.flush)
    assert kinds[: 3 * OUTGOING_FRAMES + 2] == [Hello] + [Publish] * (3 * OUTGOING_FRAMES) + [Flush]


def test_blocking_close_says_bye_after_every_publish_on_its_way(thread_broker: FakeBroker) -> None:
    kinds = _gated_publisher(thread_broker, client.Client.close)
    assert kinds == [Hello] + [Publish] * (3 * OUTGOING_FRAMES) + [Bye]


def test_blocking_publish_reports_events_lost_while_reconnecting(thread_broker: FakeBroker) -> None:
    """Reconnecting, a publish returns before its event is handed over; if the connection
    does not come back in time, the event is lost and the next call says so."""
    policy = client.Reconnect(initial_s=0.01, max_s=0.02, wait_s=0.2)
    with client.Client.connect(HOST, thread_broker.port, name="b1", reconnect=policy) as c:
        c.publish({"n": 0})
        c.flush()
        thread_broker.answer_hello = False  # the next connection never becomes ready
        thread_broker.call(thread_broker.link.stream.aclose)
        time.sleep(0.1)
        c.publish({"n": 1})  # waits in the feeder, then is dropped
        time.sleep(0.5)
        with pytest.raises(client.ConnectionLost):
            c.publish({"n": 2})
        thread_broker.answer_hello = True


def test_the_feeder_hands_over_at_once_only_what_the_connection_has_room_for() -> None:
    """A lone frame that the connection has room for is handed over by the wake-up
    itself; frames beyond the room go to the feeder task, which waits for room."""
    from client.blocking import _Feeder

    class Connection:
        _failure = None

        def __init__(self) -> None:
            self.at_once: list[list[bytes]] = []
            self.by_task: list[list[bytes]] = []

        def _room_now(self) -> int:
            return 3

        def _send_frames_nowait(self, frames: list[bytes], through: bool = False) -> None:
            self.at_once.append(frames)

        async def _send_frames(self, frames: list[bytes], through: bool = False) -> None:
            self.by_task.append(frames)

    async def main() -> None:
        conn = Connection()
        feeder = _Feeder(conn, trio.lowlevel.current_trio_token())  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(feeder.run)
            await trio.testing.wait_all_tasks_blocked()
            feeder.put([b"a"])
            await feeder.drained()
            assert (conn.at_once, conn.by_task) == ([[b"a"]], [])
            feeder.put([b"b", b"c", b"d", b"e"])  # more than the room
            await feeder.drained()
            assert (conn.at_once, conn.by_task) == ([[b"a"]], [[b"b", b"c", b"d", b"e"]])
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_blocking_next_batch_takes_what_was_received_then_the_end(
    thread_broker: FakeBroker,
) -> None:
    with blocking(thread_broker) as c:
        sub = c.subscribe("n >= 0")
        c.publish_many({"n": n} for n in range(5))
        c.flush()
        c.ping()  # the Delivers came before the Pong
        assert [d.attributes["n"] for d in sub.next_batch(timeout=5)] == [0, 1, 2, 3, 4]
        with pytest.raises(TimeoutError):
            sub.next_batch(timeout=0.05)
        c.publish({"n": 5})
        c.flush()
        c.unsubscribe(sub)
        assert [d.attributes["n"] for d in sub.next_batch(timeout=5)] == [5]
        with pytest.raises(client.SubscriptionClosed):
            sub.next_batch(timeout=5)


def test_blocking_publish_alone_in_time_goes_out_while_the_io_thread_is_busy(
    thread_broker: FakeBroker,
) -> None:
    """A lone publish is written from the caller's thread: it reaches the broker while
    the client's I/O thread is held (here in a handler), with no hand-off to it."""
    held, release = threading.Event(), threading.Event()

    def handler(delivery: client.Delivery) -> None:
        held.set()
        release.wait(10)

    with blocking(thread_broker) as c:
        c.subscribe("family = 7", handler=handler)
        c.publish({"family": 7, "n": 0})
        assert held.wait(5)
        c.publish({"family": 8, "n": 1})
        deadline = time.monotonic() + 2  # (the handler holds the I/O thread for 10 s)
        while Publish not in thread_broker.kinds()[3:] and time.monotonic() < deadline:
            time.sleep(0.01)
        got = [m.attributes["n"] for m in thread_broker.received if isinstance(m, Publish)]
        release.set()
        assert got == [0, 1]


def test_blocking_publishes_the_socket_takes_in_part_arrive_whole_and_in_order(
    thread_broker: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the broker reads nothing, lone publishes written from the caller's thread
    fill the socket: the one it takes in part is finished by the I/O thread's writer
    before anything after it, and every event arrives whole, in order."""
    written: list[bytes | None] = []
    write_from_thread = SharedOutQueue.write_from_thread

    def spy(queue: SharedOutQueue, frame: bytes, ready: Callable[[], bool]) -> bytes | None:
        rest = write_from_thread(queue, frame, ready)
        written.append(rest)
        return rest

    monkeypatch.setattr(SharedOutQueue, "write_from_thread", spy)
    thread_broker.read_gate = trio.Event()
    count, blob = 300, bytes(range(256)) * 200  # 51 KB each: 15 MB, ~3x what the buffers hold
    with blocking(thread_broker) as c:
        for n in range(count):
            time.sleep(0.0002)  # alone in time (`WRITE_THROUGH_GAP_NS`)
            c.publish({"n": n, "blob": blob})
        trio.from_thread.run_sync(thread_broker.read_gate.set, trio_token=thread_broker.token)
        deadline = time.monotonic() + 10
        while thread_broker.kinds().count(Publish) < count and time.monotonic() < deadline:
            time.sleep(0.01)
    assert b"" in written and any(written), "no whole and no partial write from the thread"
    published = [m.attributes for m in thread_broker.received if isinstance(m, Publish)]
    assert [a["n"] for a in published] == list(range(count))
    assert all(a["blob"] == blob for a in published)
