"""Reconnecting clients and broker links, with connections cut on purpose.

A TCP proxy in the test process stands between a client and its broker, and
between a child broker and its parent; `cut()` breaks every connection through it,
like a network failure, without restarting any process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

import client
from broker.local_network import Network, free_base_port
from broker.process import BrokerProcesses
from broker.protocol import PROTOCOL_VERSION, Connection, Hello, Welcome
from topologies.generators import chain, to_toml

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
FAST = client.Reconnect(initial_s=0.02, max_s=0.2, wait_s=10.0)


class Proxy:
    """Forwards TCP connections to `target_port`; `cut()` breaks all of them, and
    while `refusing` new connections are closed at once."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.refusing = False
        self.accepted = 0
        self._scopes: set[trio.CancelScope] = set()

    async def start(self, nursery: trio.Nursery) -> None:
        listeners = await nursery.start(partial(trio.serve_tcp, self._handle, 0, host=HOST))
        self.port = listeners[0].socket.getsockname()[1]

    def cut(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()

    async def _handle(self, downstream: trio.SocketStream) -> None:
        if self.refusing:
            return
        try:
            upstream = await trio.open_tcp_stream(HOST, self.target_port)
        except OSError:
            return
        self.accepted += 1
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            async with upstream, trio.open_nursery() as nursery:
                nursery.start_soon(_pump, downstream, upstream, scope)
                nursery.start_soon(_pump, upstream, downstream, scope)
        self._scopes.discard(scope)
        await trio.aclose_forcefully(downstream)


async def _pump(
    source: trio.SocketStream, sink: trio.SocketStream, scope: trio.CancelScope
) -> None:
    try:
        async for data in source:
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    scope.cancel()  # one side ended: end the other as well


@pytest.fixture
def chain2(tmp_path: Path) -> Iterator[tuple[Path, Path, int]]:
    """Topology files of broker 1 <- broker 2 on free ports; broker 2's file gives
    its parent's address as `proxy_port` (the test's proxy listens there)."""
    base = free_base_port(3)
    real = chain(2, name="chain2", base_port=base)
    proxy_port = base + 3
    spec = dataclasses.replace(real.brokers[1], port=proxy_port)
    via_proxy = dataclasses.replace(real, brokers={**real.brokers, 1: spec})
    files = tmp_path / "real.toml", tmp_path / "via-proxy.toml"
    files[0].write_text(to_toml(real))
    files[1].write_text(to_toml(via_proxy))
    yield files[0], files[1], proxy_port


@asynccontextmanager
async def running(file: Path, broker_id: int, log_dir: Path) -> AsyncIterator[BrokerProcesses]:
    from topologies import load_topology

    procs = BrokerProcesses(file, load_topology(file))
    procs.start([broker_id], log_dir)
    try:
        await trio.to_thread.run_sync(procs.wait_listening)
        yield procs
    finally:
        codes = await trio.to_thread.run_sync(procs.stop)
        assert codes == {broker_id: 0}, codes


async def until(condition, timeout: float = 15.0, what: str = "condition") -> None:
    with trio.move_on_after(timeout):
        while not await condition():
            await trio.sleep(0.02)
        return
    raise AssertionError(f"timed out waiting for {what}")


SUB_FILTERS = ["family = 1", "family = 1 and price < 50", "family = 2"]


def test_many_forced_reconnects_leave_no_duplicate_subscriptions(
    chain2: tuple[Path, Path, int], tmp_path: Path
) -> None:
    real_file, proxy_file, proxy_port = chain2
    base = proxy_port - 3
    rounds = 20

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            broker_proxy = Proxy(base + 1)  # broker 2 -> broker 1
            broker_proxy.port = proxy_port
            listeners = await nursery.start(
                partial(trio.serve_tcp, broker_proxy._handle, proxy_port, host=HOST)
            )
            assert listeners[0].socket.getsockname()[1] == proxy_port
            client_proxy = Proxy(base + 2)  # subscriber -> broker 2
            await client_proxy.start(nursery)
            async with (
                running(real_file, 1, tmp_path / "logs"),
                running(proxy_file, 2, tmp_path / "logs"),
                client.open_client(HOST, base + 1, name="watch1") as watch1,
                client.open_client(HOST, base + 2, name="watch2") as watch2,
                client.open_client(HOST, base + 1, name="pub") as pub,
                client.open_client(HOST, client_proxy.port, name="sub", reconnect=FAST) as sub,
            ):

                async def linked() -> bool:
                    return bool((await watch2.stats())["parent_connected"])

                await until(linked, what="broker 2 linked to broker 1")
                subs = [await sub.subscribe(f) for f in SUB_FILTERS]
                baseline = (await watch1.stats(), await watch2.stats())
                assert baseline[1]["subscriptions"] == len(SUB_FILTERS)
                received: dict[int, list[str]] = {s.id: [] for s in subs}
                expected: dict[int, list[str]] = {s.id: [] for s in subs}
                for i in range(rounds):
                    client_proxy.cut()
                    broker_proxy.cut()

                    async def settled(i: int = i) -> bool:
                        s1, s2 = await watch1.stats(), await watch2.stats()
                        return (
                            sub.connected
                            and sub.reconnects == i + 1
                            and s2["parent_connected"] == 1
                            and s1["subscriptions"] == baseline[0]["subscriptions"]
                            and s2["subscriptions"] == baseline[1]["subscriptions"]
                            and s2["forwarded"] == baseline[1]["forwarded"]
                        )

                    await until(settled, what=f"recovery from cut {i}")
                    event = {"family": 1 + i % 2, "price": 10.0 * i}
                    event_id = await pub.publish(event)
                    await pub.flush()
                    for s in subs:
                        if s.filter.matches(event):
                            expected[s.id].append(event_id)
                    for s in subs:
                        while len(received[s.id]) < len(expected[s.id]):
                            with trio.fail_after(10):
                                received[s.id].append((await s.next_delivery()).event_id)
                assert received == expected  # the same subscription objects, all along
                for s in subs:
                    assert s.active
                    with trio.move_on_after(0.3):  # room for stray duplicates to show up
                        extra = await s.next_delivery()
                        raise AssertionError(f"duplicate or stray delivery {extra}")
                s1, s2 = await watch1.stats(), await watch2.stats()
                # No subscription piled up on either side of either cut link.
                assert s1["subscriptions"] == baseline[0]["subscriptions"]
                assert s1["forwarded"] == baseline[0]["forwarded"]
                assert s2["subscriptions"] == baseline[1]["subscriptions"]
                assert s2["forwarded"] == baseline[1]["forwarded"]
                assert len([k for k in s2["links"] if k.startswith("client:sub#")]) == 1
                assert sub.reconnects == rounds
                # Every cut forced new connections. Not always exactly one: a child that
                # reconnects before its parent saw the old link die is refused ("already
                # connected") and tries again, and likewise a client's retry may be refused.
                assert broker_proxy.accepted >= rounds + 1
                assert client_proxy.accepted >= rounds + 1
            nursery.cancel_scope.cancel()

    trio.run(scenario)


@asynccontextmanager
async def proxied_broker(tmp_path: Path) -> AsyncIterator[tuple[int, Proxy]]:
    """One broker running, and a proxy in front of it: (the broker's port, the proxy)."""
    base = free_base_port(1)
    file = tmp_path / "one.toml"
    file.write_text(to_toml(chain(1, name="one", base_port=base)))
    async with trio.open_nursery() as nursery:
        proxy = Proxy(base + 1)
        await proxy.start(nursery)
        async with running(file, 1, tmp_path / "logs"):
            yield base + 1, proxy
        nursery.cancel_scope.cancel()


def test_a_handler_keeps_getting_deliveries_across_reconnects(tmp_path: Path) -> None:
    """A subscription with a handler is subscribed again on each new connection, and
    its handler (the same) gets what is published once it is back."""

    async def scenario() -> None:
        got: list[str] = []
        async with (
            proxied_broker(tmp_path) as (port, proxy),
            client.open_client(HOST, port, name="pub") as pub,
            client.open_client(HOST, proxy.port, name="sub", reconnect=FAST) as sub,
        ):
            await sub.subscribe("family = 1", handler=lambda d: got.append(d.event_id))
            for cut in range(3):
                event_id = await pub.publish({"family": 1, "cut": cut})

                async def arrived(event_id: str = event_id) -> bool:
                    return event_id in got

                await until(arrived, what=f"delivery {cut} to the handler")
                proxy.cut()

                async def back(cut: int = cut) -> bool:
                    return sub.connected and sub.reconnects == cut + 1

                await until(back, what=f"reconnection after cut {cut}")
            last = await pub.publish({"family": 1, "cut": 3})

            async def last_arrived() -> bool:
                return last in got

            await until(last_arrived, what="the last delivery")
            assert got == [f"pub:{n}" for n in range(1, 5)]

    trio.run(scenario)


def test_on_disconnect_and_on_reconnect_tell_of_each_cut(tmp_path: Path) -> None:
    """Each cut is told once to ``on_disconnect`` (with why), then ``on_reconnect``
    once the new connection is in use with the subscription renewed: an event
    published after it arrives. Closing the client is no loss to tell of."""
    heard: list[tuple[str, Any]] = []
    got: list[str] = []

    async def scenario() -> None:
        async with (
            proxied_broker(tmp_path) as (port, proxy),
            client.open_client(HOST, port, name="pub") as pub,
            client.open_client(
                HOST, proxy.port, name="sub", reconnect=FAST,
                on_disconnect=lambda error: heard.append(("lost", error)),
                on_reconnect=lambda: heard.append(("back", sub.connected)),
            ) as sub,
        ):  # fmt: skip
            await sub.subscribe("family = 1", handler=lambda d: got.append(d.event_id))
            for cut in range(3):
                proxy.cut()

                async def back(cut: int = cut) -> bool:
                    return len(heard) == 2 * (cut + 1)

                await until(back, what=f"on_reconnect after cut {cut}")
                event_id = await pub.publish({"family": 1, "cut": cut})

                async def arrived(event_id: str = event_id) -> bool:
                    return event_id in got

                await until(arrived, what=f"the delivery after cut {cut}")

    trio.run(scenario)
    assert [(what, type(x)) for what, x in heard] == [
        ("lost", client.ConnectionLost), ("back", bool)
    ] * 3  # fmt: skip
    assert [x for what, x in heard if what == "back"] == [True] * 3  # in use when told
    assert got == ["pub:1", "pub:2", "pub:3"]


def test_an_exception_in_on_reconnect_ends_the_client(tmp_path: Path) -> None:
    def fails() -> None:
        raise RuntimeError("on_reconnect failed")

    async def scenario() -> None:
        async with proxied_broker(tmp_path) as (_, proxy):
            with trio.fail_after(15), pytest.raises(RuntimeError, match="on_reconnect"):
                async with client.open_client(
                    HOST, proxy.port, name="sub", reconnect=FAST, on_reconnect=fails
                ) as sub:
                    proxy.cut()
                    await trio.sleep_forever()  # cancelled by the failing I/O task
            assert sub.reconnects == 1
            with pytest.raises(client.ConnectionLost, match="on_reconnect failed"):
                await sub.ping()

    trio.run(scenario)


def test_blocking_callbacks_run_in_the_io_thread_and_may_publish(tmp_path: Path) -> None:
    """A blocking client's ``on_disconnect`` and ``on_reconnect`` are called in its
    I/O thread; ``on_reconnect`` publishing there reaches a subscriber."""
    heard: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
    holder: list[client.Client] = []

    def on_disconnect(error: client.ConnectionLost) -> None:
        heard.put(("lost", threading.current_thread().name))

    def on_reconnect() -> None:
        heard.put(("back", threading.current_thread().name))
        holder[0].publish({"family": 1, "back": True})

    async def scenario() -> None:
        async with (
            proxied_broker(tmp_path) as (port, proxy),
            client.open_client(HOST, port, name="sub") as sub_client,
        ):
            sub = await sub_client.subscribe("family = 1")
            connect = partial(
                client.Client.connect, HOST, proxy.port, name="bpub", reconnect=FAST,
                on_disconnect=on_disconnect, on_reconnect=on_reconnect,
            )  # fmt: skip
            holder.append(await trio.to_thread.run_sync(connect))
            try:
                proxy.cut()
                with trio.fail_after(15):
                    assert await sub.next() == {"family": 1, "back": True}
            finally:
                await trio.to_thread.run_sync(holder[0].close)

    trio.run(scenario)
    told = [heard.get_nowait() for _ in range(heard.qsize())]
    assert told == [("lost", "hop-client-bpub"), ("back", "hop-client-bpub")]


def test_publish_waits_for_the_connection_and_flush_reports_the_loss(
    chain2: tuple[Path, Path, int], tmp_path: Path
) -> None:
    real_file, _, proxy_port = chain2
    policy = dataclasses.replace(FAST, wait_s=0.5)

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            proxy = Proxy(proxy_port - 2)  # to broker 1
            await proxy.start(nursery)
            async with (
                running(real_file, 1, tmp_path / "logs"),
                client.open_client(HOST, proxy.port, name="p", reconnect=policy) as pub,
                client.open_client(HOST, proxy_port - 2, name="s") as sub_client,
            ):
                sub = await sub_client.subscribe("n exists")
                await pub.publish({"n": 0})
                await pub.flush()
                proxy.cut()
                # With FAST the client may be back within one poll: count that too.
                await until(lambda: _lost_or_back(pub), what="the loss noticed")
                # Published while reconnecting: waits, then goes on the new connection.
                with trio.fail_after(5):
                    await pub.publish({"n": 1})
                assert pub.reconnects == 1
                with pytest.raises(client.ConnectionLost, match="since the previous flush"):
                    await pub.flush()  # a connection was lost since the last flush
                await pub.flush()  # reported once
                got = [(await sub.next())["n"] for _ in range(2)]
                assert got == [0, 1]
                # No broker to reconnect to: calls give up after wait_s.
                proxy.refusing = True
                proxy.cut()
                await until(lambda: _false(pub.connected), what="the loss noticed")
                with trio.fail_after(5), pytest.raises(client.ConnectionLost, match="in 0.5 s"):
                    await pub.publish({"n": 2})
                assert not pub.connected
                proxy.refusing = False
                with trio.fail_after(5):
                    await pub.publish({"n": 3})
                with pytest.raises(client.ConnectionLost):
                    await pub.flush()
                await pub.flush()
                assert (await sub.next())["n"] == 3
            nursery.cancel_scope.cancel()

    trio.run(scenario)


async def _false(value: bool) -> bool:
    return not value


class SilentBroker:
    """Answers Hello with Welcome, then never sends anything again."""

    def __init__(self) -> None:
        self.port = 0
        self.connections = 0

    async def start(self, nursery: trio.Nursery) -> None:
        listeners = await nursery.start(partial(trio.serve_tcp, self._handle, 0, host=HOST))
        self.port = listeners[0].socket.getsockname()[1]

    async def _handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        conn = Connection("acceptor")
        while True:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:  # the client gave up with a reset (CI, once)
                return
            if not data:
                return
            for message in conn.receive_data(data):
                if isinstance(message, Hello):
                    await stream.send_all(conn.send(Welcome(PROTOCOL_VERSION, "silent")))


def test_client_heartbeat_gives_up_a_silent_broker_and_reconnects() -> None:
    policy = client.Reconnect(initial_s=0.02, max_s=0.1, heartbeat_s=0.2, heartbeat_timeout_s=0.6)

    async def scenario() -> float:
        async with trio.open_nursery() as nursery:
            broker = SilentBroker()
            await broker.start(nursery)
            async with client.open_client(HOST, broker.port, name="c", reconnect=policy) as c:
                start = trio.current_time()
                with trio.fail_after(10):
                    while c.reconnects < 1:
                        await trio.sleep(0.01)
                elapsed = trio.current_time() - start
                # The client counts the connection once it is open; the broker's task
                # accepts it in its own time (on a loaded host, after the count).
                with trio.move_on_after(5):
                    while broker.connections < 2:
                        await trio.sleep(0.01)
                assert broker.connections >= 2
            nursery.cancel_scope.cancel()
        return elapsed

    elapsed = trio.run(scenario)
    assert 0.6 <= elapsed < 3.0  # cut after heartbeat_timeout_s of silence, not before


def test_client_heartbeat_does_not_blame_the_broker_for_the_clients_own_pause(
    tmp_path: Path,
) -> None:
    """The client's event loop held for longer than its heartbeat timeout (a long
    computation in a task, the process stopped): the broker's messages waited unread, so
    its silence is the client's own, and the connection is kept."""
    net = Network(chain(1, name="solo", base_port=free_base_port(1)), tmp_path)
    policy = client.Reconnect(initial_s=0.02, max_s=0.1, heartbeat_s=0.2, heartbeat_timeout_s=0.6)

    async def scenario() -> int:
        async with client.open_client(*net.address(1), name="c", reconnect=policy) as c:
            await c.ping()
            time.sleep(1.5)  # the whole loop held: nothing runs, nothing is read
            await trio.sleep(1.0)  # the heartbeat's turns after it
            await c.ping()
            return c.reconnects

    net.start()
    try:
        assert trio.run(scenario) == 0
    finally:
        net.stop()


def _wait_for_route(pub: client.Client, sub: client.Subscription, attempts: int = 100) -> None:
    """Publish probes (`probe` set, no `seq`) until one reaches `sub`: from then on the
    subscription is in force on the whole path from the publisher's broker."""
    for k in range(attempts):
        pub.publish({"n": 0, "probe": k})
        pub.flush()
        with contextlib.suppress(TimeoutError):
            sub.next(timeout=0.2)
            return
    raise AssertionError(f"no probe reached the subscriber in {attempts} attempts")


def _sequence_numbers(sub: client.Subscription, count: int, bound_s: float) -> list[int]:
    """The `seq` of every event `sub` receives until `count` of them have come, or no
    event has come for `bound_s` (late probes are skipped), and then for 0.3 s more so
    that duplicates show."""
    seqs: list[int] = []
    wait_s = bound_s
    while True:
        try:
            event = sub.next(timeout=wait_s)
        except TimeoutError:
            return seqs
        if "seq" in event:
            seqs.append(event["seq"])
            if len(seqs) >= count:
                wait_s = 0.3


@pytest.mark.integration
def test_blocking_client_keeps_its_subscription_across_a_broker_restart(tmp_path: Path) -> None:
    """After the subscriber's broker is killed and restarted, the reconnecting client
    subscribes again; once that subscription is in force along the chain (a probe got
    through), every event published is delivered exactly once. (Events published while
    it was not in force may be lost: delivery is at most once.)"""
    from broker.local_network import Network

    count = 300
    net = Network.from_file("chain5", tmp_path).start()
    try:
        net.wait_linked()
        policy = client.Reconnect(initial_s=0.05, max_s=0.2, wait_s=10)
        with client.Client.connect(*net.address(5), name="bsub", reconnect=policy) as sub_client:
            sub = sub_client.subscribe("n >= 0")
            net.kill(5)
            net.restart(5)
            net.wait_linked()
            with client.Client.connect(*net.address(1), name="bpub") as pub:
                _wait_for_route(pub, sub)
                for seq in range(count):
                    pub.publish({"n": seq, "seq": seq})
                pub.flush()
                seqs = _sequence_numbers(sub, count, bound_s=10.0)
        missing = sorted(set(range(count)) - set(seqs))
        duplicated = sorted(s for s in set(seqs) if seqs.count(s) > 1)
        assert not missing, f"lost {len(missing)} of {count}: {missing[:10]}"
        assert not duplicated, f"delivered more than once: {duplicated[:10]}"
        assert len(seqs) == count
    finally:
        net.stop()


async def _lost_or_back(c: client.AsyncClient) -> bool:
    return not c.connected or c.reconnects > 0
