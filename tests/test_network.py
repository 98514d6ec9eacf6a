"""Integration tests: real broker processes on 127.0.0.1, real clients."""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import msgpack
import pytest
import structlog
import trio

import client
from broker.local_network import Network, free_base_port
from broker.logs import worth_logging
from broker.protocol import PROTOCOL_VERSION
from broker.server import Broker
from routing import parse_filter
from topologies.generators import chain

pytestmark = pytest.mark.integration

SUBSCRIBERS = [  # (name, broker, filters): overlapping on purpose
    ("s1", 4, ["family = 1", "family = 2 and price < 100"]),
    ("s2", 4, ["price >= 150"]),
    ("s3", 5, ["family = 1 and price < 50", "family = 1"]),
    ("s4", 6, ['region prefix "EU"']),
    ("s5", 7, ["family != 3 and price > 20 and price <= 180"]),
    ("s6", 1, ["family = 4"]),
    ("s7", 2, ["true"]),
]
PUBLISHERS = [("p1", 4), ("p2", 7), ("p3", 3), ("p4", 1)]
Received = dict[str, list[tuple[str, tuple[int, ...]]]]


def random_event(rng: random.Random) -> dict:
    return {
        "type": "callForOffers",
        "family": rng.randint(1, 6),
        "price": round(rng.uniform(0, 200), 2),
        "region": rng.choice(["EU-west", "EU-east", "US", "ASIA"]),
    }


@pytest.fixture
def tree7(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Network]:
    net = Network.from_file("tree7", tmp_path, routing=getattr(request, "param", None))
    try:
        yield net.start()
    finally:
        codes = net.stop()
        assert all(code == 0 for code in codes.values()), (codes, net.log_text()[-3000:])


async def record(
    sub: client.AsyncSubscription, out: list[tuple[int, str, tuple[int, ...]]]
) -> None:
    """Append (queue's sub id, event id, tagged sub ids) per delivery until the sub ends."""
    while True:
        try:
            d = await sub.next_delivery()
        except client.ClientError:
            return
        out.append((sub.id, d.event_id, tuple(d.sub_ids)))


def expected_ids(published: list[tuple[str, dict]], filters: list[str]) -> set[str]:
    fs = [parse_filter(f) for f in filters]
    return {eid for eid, e in published if any(f.matches(e) for f in fs)}


async def wait_for(condition, timeout: float = 15.0) -> None:
    with trio.move_on_after(timeout):
        while not condition():
            await trio.sleep(0.02)


@pytest.mark.parametrize("tree7", ["hierarchical", "acyclic", "flooding"], indirect=True)
def test_every_subscriber_gets_exactly_its_events_once(tree7: Network) -> None:
    rng = random.Random(11)
    events = [random_event(rng) for _ in range(300)]

    async def scenario() -> tuple[dict[str, list], list[tuple[str, dict]]]:
        received: dict[str, list] = {name: [] for name, _, _ in SUBSCRIBERS}
        async with trio.open_nursery() as nursery, AsyncExitStack() as stack:
            for name, broker, filters in SUBSCRIBERS:
                c = await stack.enter_async_context(
                    client.open_client(*tree7.address(broker), name=name)
                )
                for f in filters:
                    nursery.start_soon(record, await c.subscribe(f), received[name])
            publishers = [
                await stack.enter_async_context(client.open_client(*tree7.address(b), name=n))
                for n, b in PUBLISHERS
            ]
            published = []
            for i, event in enumerate(events):
                published.append((await publishers[i % 4].publish(event), event))
            for p in publishers:
                await p.flush()
            expected = {n: expected_ids(published, fs) for n, _, fs in SUBSCRIBERS}

            def complete() -> bool:
                return all({e for _, e, _ in received[n]} >= expected[n] for n, _, _ in SUBSCRIBERS)

            await wait_for(complete)
            await trio.sleep(0.3)  # time for stray duplicates or extra events to show
            for name, broker, _ in SUBSCRIBERS:
                stats = await trio.to_thread.run_sync(tree7.stats, broker)
                sent[name] = _events_out(stats, name)
        return received, published  # closing the clients ended the recording tasks

    sent: dict[str, int] = {}
    received, published = trio.run(scenario)
    by_id = dict(published)
    for name, _, filters in SUBSCRIBERS:
        fs = [parse_filter(f) for f in filters]
        assert expected_ids(published, filters), f"the workload gives {name} nothing"
        # One connection got each matching event once (the broker's count) ...
        assert sent[name] == len(expected_ids(published, filters)), name
        for sub_id, f in enumerate(fs, start=1):
            # ... and each subscription queue got exactly its events, once each,
            rows = [(eid, ids) for queue, eid, ids in received[name] if queue == sub_id]
            assert len(rows) == len({eid for eid, _ in rows}), f"{name}/{sub_id} duplicates"
            assert {eid for eid, _ in rows} == expected_ids(published, [str(f)]), name
            # ... tagged with the ids of every subscription of the client it matched.
            for eid, ids in rows:
                matching = tuple(i for i, g in enumerate(fs, start=1) if g.matches(by_id[eid]))
                assert ids == matching, (name, eid)


STRATEGIES = ["hierarchical", "acyclic", "flooding"]


@pytest.mark.parametrize("tree7", STRATEGIES, indirect=True)
def test_nothing_arrives_after_unsubscribe(tree7: Network) -> None:
    async def scenario() -> tuple[int, int, int]:
        async with (
            client.open_client(*tree7.address(6), name="quiet") as sub_client,
            client.open_client(*tree7.address(4), name="pub") as pub,
        ):
            sub = await sub_client.subscribe("family = 1")
            for _ in range(20):
                await pub.publish({"family": 1})
            await pub.flush()
            got = 0
            with trio.move_on_after(10):
                while got < 20:
                    await sub.next_delivery()
                    got += 1
            await sub_client.unsubscribe(sub)
            before = _events_out(tree7.stats(6), "quiet")
            for _ in range(50):
                await pub.publish({"family": 1})
            await pub.flush()
            await trio.sleep(0.5)
            return got, before, _events_out(tree7.stats(6), "quiet")

    got, before, after = trio.run(scenario)
    assert got == 20
    assert after == before == 20  # the broker sent nothing more to that client


def _events_out(stats: dict, client_name: str) -> int:
    links = [v for k, v in stats["links"].items() if k.startswith(f"client:{client_name}#")]
    assert len(links) == 1
    return links[0]["events_out"]


@pytest.mark.parametrize("tree7", STRATEGIES, indirect=True)
def test_subscribing_while_events_flow_loses_nothing_after_subscribe_returns(
    tree7: Network,
) -> None:
    async def scenario() -> tuple[list[tuple[int, str]], set[str], int]:
        published: list[tuple[int, str]] = []  # (time handed over, event id)
        received: set[str] = set()
        async with (
            client.open_client(*tree7.address(7), name="flow-pub") as pub,
            client.open_client(*tree7.address(4), name="late-sub") as sub_client,
            trio.open_nursery() as nursery,
        ):

            async def publish_steadily() -> None:
                for i in range(600):
                    eid = await pub.publish({"family": 2, "seq": i})
                    published.append((time.time_ns(), eid))
                    await trio.sleep(0.002)
                await pub.flush()

            nursery.start_soon(publish_steadily)
            await trio.sleep(0.3)
            sub = await sub_client.subscribe("family = 2")
            subscribed_ns = time.time_ns()

            async def drain() -> None:
                while True:
                    received.add((await sub.next_delivery()).event_id)

            nursery.start_soon(drain)
            while len(published) < 600:
                await trio.sleep(0.05)
            after = {eid for t, eid in published if t > subscribed_ns}
            await wait_for(lambda: after <= received, timeout=10)
            nursery.cancel_scope.cancel()
        return published, received, subscribed_ns

    published, received, subscribed_ns = trio.run(scenario)
    after = {eid for t, eid in published if t > subscribed_ns}
    assert len(after) > 100  # the subscription really happened mid-stream
    assert after <= received


def test_covered_subscriptions_travel_to_the_parent_once(tree7: Network) -> None:
    async def scenario() -> list[dict]:
        async with client.open_client(*tree7.address(4), name="coverer") as c:
            await c.subscribe("price < 1000")
            for i in range(25):
                await c.subscribe(f"price < {i} and family = {i % 3}")
            return [await trio.to_thread.run_sync(tree7.stats, b) for b in (4, 2, 1)]

    leaf, middle, root = trio.run(scenario)
    assert leaf["subscriptions"] == 26
    assert leaf["forwarded_total"] == {"broker:2": 1}  # one subscription went up
    assert middle["subscriptions"] == 1 and middle["forwarded_total"] == {"broker:1": 1}
    assert root["subscriptions"] == 1


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _hello(name: str) -> bytes:
    return _frame(msgpack.packb([1, PROTOCOL_VERSION, "client", name, None]))


HOSTILE = [  # (say Hello first?, bytes)
    (False, bytes(random.Random(3).getrandbits(8) for _ in range(4096))),  # random bytes
    (False, _frame(b"\x93\x01\x01")[:5]),  # a truncated frame, then the peer hangs up
    (False, struct.pack(">I", 2**31) + b"x" * 64),  # a huge length prefix
    (True, struct.pack(">I", 2**31) + b"x" * 64),  # the same after the handshake
    (False, _frame(b"")),  # an empty frame
    (True, _frame(msgpack.packb([21, [1], "e", "p", {}, [], 0]))),  # Deliver to a broker
    (True, _frame(msgpack.packb([2, 1, "me"]))),  # Welcome from a client
    (True, _frame(msgpack.packb([99, "?"]))),  # an unknown message type
    (True, _frame(msgpack.packb([10, 1, [["x", "~", 1]]]))),  # a bad filter
    (True, _frame(msgpack.packb([20, "e", "p", {"x": [1]}, [], 0]))),  # a bad value
    (True, _frame(b"\xc1")),  # not msgpack
    (True, _frame(msgpack.packb({"t": 20}))),  # not an array
    (False, _frame(msgpack.packb([20, "e", "p", {}, [], 0]))),  # publish before Hello
]


def test_hostile_input_does_not_stop_the_broker(tree7: Network) -> None:
    host, port = tree7.address(4)

    async def scenario() -> tuple[int, list[bytes]]:
        answers: list[bytes] = []
        async with (
            client.open_client(host, port, name="victim-sub") as sub_client,
            client.open_client(host, port, name="victim-pub") as pub,
        ):
            sub = await sub_client.subscribe("family = 9")
            got = 0
            for i, (hello, attack) in enumerate(HOSTILE):
                answer = await trio.to_thread.run_sync(_attack, host, port, hello, attack, i)
                answers.append(answer)
                await pub.publish({"family": 9})
                await pub.flush()
                with trio.fail_after(5):
                    await sub.next_delivery()
                got += 1
            return got, answers

    got, answers = trio.run(scenario)
    assert got == len(HOSTILE)  # the other clients kept working after every attack
    for i, answer in enumerate(answers):
        if i != 1:  # the truncated frame's sender hung up before any answer
            assert answer[4:5] == b"\x93" and answer[5:6] == b"\x04", (i, answer[:60])
    assert tree7.procs.failed() == {}


def _attack(host: str, port: int, hello: bool, data: bytes, i: int) -> bytes:
    """Send `data` (after a handshake if `hello`), then read until the broker closes the
    connection (end of stream or reset); return what the broker answered after the
    handshake. A broker that keeps the connection open `CLOSE_BOUND_S` fails the test."""
    with socket.create_connection((host, port), timeout=CLOSE_BOUND_S) as s:
        if hello:
            s.sendall(_hello(f"hostile-{i}"))
            welcome = s.recv(65536)
            assert welcome[4:6] == b"\x93\x02", welcome  # [2, version, node id]
        s.sendall(data)
        if i == 1:
            return b""  # hang up mid-frame
        return _read_until_closed(s, i)


CLOSE_BOUND_S = 5.0


def _read_until_closed(s: socket.socket, i: int) -> bytes:
    """Everything received until end of stream or a reset, within `CLOSE_BOUND_S`."""
    deadline = time.monotonic() + CLOSE_BOUND_S
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"attack {i}: the broker still keeps the connection open")
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        except TimeoutError:
            raise AssertionError(
                f"attack {i}: the broker did not close within {CLOSE_BOUND_S} s"
            ) from None
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_an_event_that_already_passed_a_broker_is_dropped(tree7: Network) -> None:
    """A path naming this broker means a routing cycle: drop it and count it."""
    host, port = tree7.address(4)

    async def scenario() -> int:
        async with client.open_client(host, port, name="cycle-sub") as c:
            sub = await c.subscribe("family = 5")
            stream = await trio.open_tcp_stream(host, port)
            await stream.send_all(_hello("cycler"))
            await stream.receive_some(65536)  # Welcome
            looped = msgpack.packb([20, "loop:1", "cycler", {"family": 5}, ["2", "4"], 1])
            fresh = msgpack.packb([20, "loop:2", "cycler", {"family": 5}, [], 1])
            await stream.send_all(_frame(looped) + _frame(fresh))
            with trio.fail_after(5):
                delivery = await sub.next_delivery()
            await stream.aclose()
            assert delivery.event_id == "loop:2"  # the looped one never arrived
            return (await c.stats())["events_dropped"]

    assert trio.run(scenario) == 1


def test_a_problem_a_client_can_repeat_is_logged_at_powers_of_two() -> None:
    assert [n for n in range(1, 70) if worth_logging(n)] == [1, 2, 4, 8, 16, 32, 64]


def test_events_dropped_as_cycles_are_logged_less_and_less_often() -> None:
    """A client may send any path, as often as it likes: every drop is counted, but
    only the 1st, 2nd, 4th, 8th... is logged, and the broker goes on serving."""
    topology = chain(1, name="cycles", base_port=free_base_port(1))
    host, port = topology.address(1)
    broker = Broker(topology, 1)

    async def scenario() -> dict[str, Any]:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await nursery.start(broker.serve)
                async with client.open_client(host, port, name="sub") as c:
                    sub = await c.subscribe("family = 5")
                    stream = await trio.open_tcp_stream(host, port)
                    await stream.send_all(_hello("cycler"))
                    await stream.receive_some(65536)  # Welcome
                    looped = [
                        [20, f"loop:{n}", "cycler", {"family": 5}, ["1"], 1] for n in range(20)
                    ]
                    fresh = [20, "fresh", "cycler", {"family": 5}, [], 1]
                    frames = [_frame(msgpack.packb(m)) for m in [*looped, fresh]]
                    await stream.send_all(b"".join(frames))
                    delivery = await sub.next_delivery()
                    await stream.aclose()
                    stats = await c.stats()
                nursery.cancel_scope.cancel()
        assert delivery.event_id == "fresh"
        return stats

    with structlog.testing.capture_logs() as logs:
        stats = trio.run(scenario)
    assert stats["drops"]["cycle"] == 20
    logged = [e["cycles_dropped"] for e in logs if e["event"] == "cycle_dropped"]
    assert logged == [1, 2, 4, 8, 16]
