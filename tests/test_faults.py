"""Faults: a broker killed and restarted, clean shutdown, slow and stuck
subscribers, silent peers. Real broker processes on 127.0.0.1, cleaned up by PID."""

from __future__ import annotations

import json
import math
import os
import random
import resource
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import trio

import client
from broker.local_network import REPO, Network, free_base_port
from broker.probe import fetch_stats
from broker.protocol import (
    PROTOCOL_VERSION,
    Bye,
    Connection,
    Deliver,
    Error,
    Hello,
    Ping,
    SubAck,
    Subscribe,
    Welcome,
)
from broker.server import BrokerConfig
from hop.cli import main as hop_main
from hop.command import HOP
from monitor.traces import read_table
from routing import parse_filter
from tests.processes import wait_for
from topologies import load_topology
from topologies.generators import chain, to_toml

pytestmark = pytest.mark.integration

FAST = client.Reconnect(initial_s=0.02, max_s=0.3, wait_s=15.0)
PAYLOAD = bytes(1000)  # events big enough to fill socket buffers quickly
BATCH_FRAMES = BrokerConfig().batch_frames  # frames a link's writer takes at once


@pytest.fixture
def stopped() -> Iterator[list[Network]]:
    """Networks appended here are stopped after the test; each broker must exit 0."""
    networks: list[Network] = []
    yield networks
    for net in networks:
        codes = net.stop()
        assert all(code == 0 for code in codes.values()), (codes, net.log_text()[-3000:])


def solo(tmp_path: Path, stopped: list[Network], *extra: str) -> Network:
    """One broker on a free port, started with the `hop broker` options `extra`."""
    net = Network(chain(1, name="solo", base_port=free_base_port(1)), tmp_path, extra)
    stopped.append(net)
    return net.start()


def tracing(run_dir: Path, run_id: str = "faults") -> list[str]:
    return ["--trace-dir", str(run_dir / "traces"), "--run-id", run_id]


async def expect(stream: trio.SocketStream, conn: Connection, kind: type) -> object:
    """Read until a message of type `kind` arrives (others are dropped)."""
    while True:
        data = await stream.receive_some(65536)
        assert data, f"connection closed while waiting for {kind.__name__}"
        for message in conn.receive_data(data):
            if isinstance(message, kind):
                return message


async def raw_client(
    host: str, port: int, name: str, filter_text: str | None = None
) -> tuple[trio.SocketStream, Connection]:
    """A hand-driven client: handshake, and a subscription if `filter_text`; then the
    test decides whether (and when) it reads."""
    stream = await trio.open_tcp_stream(host, port)
    conn = Connection("initiator")
    await stream.send_all(conn.send(Hello(PROTOCOL_VERSION, "client", name)))
    await expect(stream, conn, Welcome)
    if filter_text is not None:
        await stream.send_all(conn.send(Subscribe(1, parse_filter(filter_text).to_wire())))
        await expect(stream, conn, SubAck)
    return stream, conn


async def stats_of(c: client.AsyncClient, prefix: str) -> dict | None:
    """The stats of the one link whose id starts with `prefix` (None: no such link)."""
    links = [v for k, v in (await c.stats())["links"].items() if k.startswith(prefix)]
    assert len(links) <= 1
    return links[0] if links else None


async def poll(condition, timeout: float = 15.0, what: str = "condition") -> None:
    with trio.move_on_after(timeout):
        while not await condition():
            await trio.sleep(0.05)
        return
    raise AssertionError(f"timed out waiting for {what}")


# -- kill -9 of an inner broker ------------------------------------------------------

SUBSCRIBERS = [  # (name, broker, filters); broker 2 is killed, 4 and 5 are its children
    ("s-2", 2, ["family = 1", "price >= 150"]),
    ("s-4", 4, ["family = 2 and price < 100", "family = 3"]),
    ("s-5", 5, ["family = 1 and price < 50"]),
    ("s-6", 6, ['region prefix "EU"']),
    ("s-1", 1, ["family = 4"]),
]
PUBLISHERS = [("p-4", 4), ("p-2", 2), ("p-7", 7), ("p-1", 1)]


def random_event(rng: random.Random) -> dict:
    return {
        "type": "callForOffers",
        "family": rng.randint(1, 4),
        "price": round(rng.uniform(0, 200), 2),
        "region": rng.choice(["EU-west", "EU-east", "US"]),
    }


def routing_state(net: Network) -> dict[int, tuple]:
    """What must come back after a restart: per broker, its parent link, its
    subscription count and what it forwards to each neighbour."""
    out = {}
    for b in net.topology.brokers:
        s = net.stats(b)
        out[b] = (s["parent_connected"], s["subscriptions"], s["forwarded"])
    return out


def test_killed_inner_broker_recovers_and_outage_losses_are_traced(
    tmp_path: Path, stopped: list[Network]
) -> None:
    run = tmp_path / "run"
    net = Network.from_file("tree7", tmp_path, extra_args=tracing(run))
    stopped.append(net)
    net.start()
    rng = random.Random(5)

    async def scenario() -> tuple[list[str], float, dict[str, set[str]], list]:
        async with trio.open_nursery() as nursery, AsyncExitStack() as stack:

            async def connect(name: str, broker: int) -> client.AsyncClient:
                cm = client.open_client(*net.address(broker), name=name, reconnect=FAST)
                return await stack.enter_async_context(cm)

            received: dict[str, list[tuple[int, str]]] = {n: [] for n, _, _ in SUBSCRIBERS}
            clients = {}
            for name, broker, filters in SUBSCRIBERS:
                clients[name] = c = await connect(name, broker)
                for f in filters:
                    nursery.start_soon(_record, await c.subscribe(f), received[name])
            pubs = {name: await connect(name, broker) for name, broker in PUBLISHERS}
            for name in pubs:
                clients[name] = pubs[name]
            baseline = await trio.to_thread.run_sync(routing_state, net)

            await trio.to_thread.run_sync(net.kill, 2)

            async def orphaned() -> bool:
                return not (await pubs["p-4"].stats())["parent_connected"]

            await poll(orphaned, what="broker 4 to notice its parent is gone")
            outage = [await pubs["p-4"].publish(random_event(rng)) for _ in range(30)]
            await pubs["p-4"].flush()

            start = trio.current_time()
            await trio.to_thread.run_sync(net.restart, 2)

            async def recovered() -> bool:
                if not all(c.connected for c in clients.values()):
                    return False
                return await trio.to_thread.run_sync(routing_state, net) == baseline

            await poll(recovered, timeout=30, what="the network to recover")
            recovery_s = trio.current_time() - start
            for name, p in pubs.items():  # only p-2 lost its connection: flush says so once
                try:
                    await p.flush()
                except client.ConnectionLost:
                    assert name == "p-2"
                else:
                    assert name != "p-2"

            published = []
            for i in range(200):
                name = PUBLISHERS[i % len(PUBLISHERS)][0]
                event = random_event(rng)
                published.append((await pubs[name].publish(event), event))
            for p in pubs.values():
                await p.flush()
            ids = {eid for eid, _ in published}
            expected = {n: _matching(published, fs) for n, _, fs in SUBSCRIBERS}

            async def delivered() -> bool:
                return all({e for _, e in received[n]} & ids >= expected[n] for n in expected)

            await poll(delivered, what="every matching event after recovery")
            await trio.sleep(0.3)  # room for duplicates or extra events to show up
            nursery.cancel_scope.cancel()
        after = {n: [(q, e) for q, e in got if e in ids] for n, got in received.items()}
        assert all(len(got) == len(set(got)) for got in after.values()), "duplicates"
        return outage, recovery_s, {n: {e for _, e in got} for n, got in after.items()}, expected

    outage, recovery_s, got, expected = trio.run(scenario)
    assert got == expected  # exactly the matching events after recovery, once each
    assert recovery_s < 10, recovery_s
    stats4 = net.stats(4)
    assert stats4["drops"]["link-down"] >= len(outage)
    net.stop()  # SIGTERM: the surviving brokers flush their traces
    hops = read_table(run, "hops").table.to_pylist()
    rows = {r["event_id"]: r for r in hops if r["broker"] == "4" and r["event_id"] in outage}
    assert set(rows) == set(outage)
    for row in rows.values():
        assert row["decision"] == "dropped"
        assert row["drop_reason"] == "link-down:broker:2"
        assert row["to_nodes"] == []


async def _record(sub: client.AsyncSubscription, out: list[tuple[int, str]]) -> None:
    while True:
        try:
            out.append((sub.id, (await sub.next_delivery()).event_id))
        except client.ClientError:
            return


def _matching(published: list[tuple[str, dict]], filters: list[str]) -> set[str]:
    fs = [parse_filter(f) for f in filters]
    return {eid for eid, e in published if any(f.matches(e) for f in fs)}


# -- clean shutdown ------------------------------------------------------------------


def test_sigterm_drains_what_was_accepted_and_flushes_the_trace(
    tmp_path: Path, stopped: list[Network]
) -> None:
    run = tmp_path / "run"
    net = solo(tmp_path, stopped, *tracing(run))
    host, port = net.address(1)
    proc = net.procs.procs[1]
    count = 3000  # ~3 MB for a subscriber that is not reading: most stays queued

    async def scenario() -> tuple[list[str], list[str], bool]:
        stream, conn = await raw_client(host, port, "late-reader", "n exists")
        async with client.open_client(host, port, name="burst") as pub:
            ids = [await pub.publish({"n": i, "payload": PAYLOAD}) for i in range(count)]
            await pub.flush()  # the broker accepted all of them
            os.kill(proc.pid, signal.SIGTERM)
        got, bye = [], False
        with trio.fail_after(20):
            while data := await stream.receive_some(65536):
                for message in conn.receive_data(data):
                    if isinstance(message, Deliver):
                        got.append(message.event_id)
                    bye = bye or isinstance(message, Bye)
        await stream.aclose()
        return ids, got, bye

    ids, got, bye = trio.run(scenario)
    assert proc.wait(timeout=10) == 0
    assert got == ids  # every accepted event, in order, then the broker's Bye
    assert bye
    hops = read_table(run, "hops").table.to_pylist()
    assert [r["event_id"] for r in hops] == ids
    assert all(r["delivered_to"] == ["late-reader"] for r in hops)


# -- slow and stuck subscribers --------------------------------------------------------


def test_drop_policy_drops_for_the_slow_subscriber_only_and_cuts_it_when_stuck(
    tmp_path: Path, stopped: list[Network]
) -> None:
    run = tmp_path / "run"
    options = ["--queue-policy", "drop", "--queue-frames", "200", "--stuck-timeout", "2"]
    net = solo(tmp_path, stopped, *options, *tracing(run))
    host, port = net.address(1)
    count = 3000

    async def scenario() -> tuple[dict, dict, int, list[str]]:
        stream, _ = await raw_client(host, port, "slow", "n exists")  # never reads again
        async with (
            client.open_client(host, port, name="fast") as fast,
            client.open_client(host, port, name="pub") as pub,
        ):
            sub = await fast.subscribe("n exists")
            ids = []
            with trio.fail_after(20):  # the slow subscriber does not hold the publisher
                for i in range(count):
                    ids.append(await pub.publish({"n": i, "payload": PAYLOAD}))
                    if i % 50 == 49:
                        await pub.flush()  # a pace the other subscriber can follow
                await pub.flush()
            slow = await stats_of(pub, "client:slow#")
            broker = await pub.stats()
            with trio.fail_after(20):
                got = [(await sub.next_delivery()).event_id for _ in range(count)]
            assert got == ids

            async def cut() -> bool:
                return await stats_of(pub, "client:slow#") is None

            start = trio.current_time()
            await poll(cut, what="the stuck subscriber to be cut")
            waited = trio.current_time() - start
        await stream.aclose()
        assert slow is not None
        return slow, broker, waited, ids

    slow, broker, waited, ids = trio.run(scenario)
    assert slow["queue_depth"] <= 200 + BATCH_FRAMES  # bounded: the queue, and one batch
    assert slow["events_dropped"] > count // 2
    assert slow["events_out"] + slow["events_dropped"] == count
    assert broker["drops"]["queue-full"] == slow["events_dropped"]
    assert waited < 10
    net.stop()
    hops = read_table(run, "hops").table.to_pylist()
    dropped = [r for r in hops if r["decision"] == "dropped"]
    assert len(dropped) == slow["events_dropped"]
    for r in dropped:
        assert r["drop_reason"].startswith("queue-full:client:slow#")
        assert r["delivered_to"] == ["fast"]


def test_drop_policy_drops_for_a_sole_subscriber_and_traces_each_event(
    tmp_path: Path, stopped: list[Network]
) -> None:
    """An event for one client and no broker takes the broker's shortest way while the
    client's queue has room; once it is full, the events dropped are counted and
    traced as with several subscribers."""
    run = tmp_path / "run"
    options = ["--queue-policy", "drop", "--queue-frames", "200", "--stuck-timeout", "30"]
    net = solo(tmp_path, stopped, *options, *tracing(run))
    host, port = net.address(1)
    count = 2000

    async def scenario() -> tuple[dict, dict]:
        stream, _ = await raw_client(host, port, "slow", "n exists")  # never reads again
        async with client.open_client(host, port, name="pub") as pub:
            with trio.fail_after(20):
                for i in range(count):
                    await pub.publish({"n": i, "payload": PAYLOAD})
                    if i % 50 == 49:
                        await pub.flush()
                await pub.flush()
            slow = await stats_of(pub, "client:slow#")
            broker = await pub.stats()
        await stream.aclose()
        assert slow is not None
        return slow, broker

    slow, broker = trio.run(scenario)
    assert 0 < slow["events_out"] < count // 2 < slow["events_dropped"]
    assert slow["events_out"] + slow["events_dropped"] == count
    assert broker["drops"]["queue-full"] == slow["events_dropped"]
    net.stop()
    hops = read_table(run, "hops").table.to_pylist()
    assert len(hops) == count
    dropped = [r for r in hops if r["decision"] == "dropped"]
    assert len(dropped) == slow["events_dropped"]
    for r in dropped:
        assert r["drop_reason"].startswith("queue-full:client:slow#")
        assert r["delivered_to"] == []
    sent = [r for r in hops if r["decision"] != "dropped"]
    assert all(r["delivered_to"] == ["slow"] and r["bytes_out"] > 0 for r in sent)


def test_block_policy_holds_publishers_until_the_stuck_subscriber_is_cut(
    tmp_path: Path, stopped: list[Network]
) -> None:
    net = solo(tmp_path, stopped, "--queue-frames", "50", "--stuck-timeout", "1.5")
    host, port = net.address(1)
    count = 3000

    async def scenario() -> tuple[int, float, list[str], list[str]]:
        stream, _ = await raw_client(host, port, "stuck", "n exists")  # never reads again
        async with (
            client.open_client(host, port, name="fast") as fast,
            client.open_client(host, port, name="pub") as pub,
            client.open_client(host, port, name="watch") as watch,
        ):
            sub = await fast.subscribe("n exists")
            depth = 0

            async def full() -> bool:
                nonlocal depth
                link = await stats_of(watch, "client:stuck#")
                depth = max(depth, link["queue_depth"]) if link else depth
                return depth >= 50

            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(poll, full, 20, "the stuck queue to fill")
                with trio.fail_after(30):
                    ids = [await pub.publish({"n": i, "payload": PAYLOAD}) for i in range(count)]
                    await pub.flush()
            held = trio.current_time() - start
            with trio.fail_after(20):
                got = [(await sub.next_delivery()).event_id for _ in range(count)]
            assert await stats_of(watch, "client:stuck#") is None
        await stream.aclose()
        return depth, held, ids, got

    depth, held, ids, got = trio.run(scenario)
    assert 50 <= depth <= 50 + BATCH_FRAMES  # the queue filled up, plus the batch in writing
    assert held >= 1.5  # backpressure held the publisher until the cut
    assert got == ids  # the other subscriber lost nothing


# -- heartbeats ------------------------------------------------------------------------


def test_heartbeat_cuts_a_silent_peer_but_not_a_quiet_one(
    tmp_path: Path, stopped: list[Network]
) -> None:
    net = solo(tmp_path, stopped, "--heartbeat", "0.3", "--heartbeat-timeout", "1")
    host, port = net.address(1)

    async def scenario() -> tuple[float, list[type], str]:
        async with client.open_client(host, port, name="quiet") as quiet:
            stream, conn = await raw_client(host, port, "silent")
            start = trio.current_time()
            seen: list = []
            with trio.fail_after(10):
                while data := await stream.receive_some(65536):
                    seen += conn.receive_data(data)
            cut_after = trio.current_time() - start
            await stream.aclose()
            await trio.sleep(1.5)  # idle, but it answers the broker's pings
            assert quiet.connected
            assert await stats_of(quiet, "client:quiet#") is not None
        errors = [m.code for m in seen if isinstance(m, Error)]
        return cut_after, [type(m) for m in seen], errors[0] if errors else ""

    cut_after, kinds, code = trio.run(scenario)
    assert 1.0 <= cut_after < 4.0
    assert Ping in kinds
    assert code == "timeout"


def test_brokers_stopped_longer_than_the_heartbeat_timeout_keep_their_links_once_resumed(
    tmp_path: Path, stopped: list[Network]
) -> None:
    """As after Ctrl-Z and fg on `hop net`, or a paused VM: the brokers did not run for
    longer than their heartbeat timeout, but their peers (the other broker, two clients
    that were never stopped) were alive all along. Resumed, they cut no link."""
    base = free_base_port(2)
    net = Network(chain(2, name="paused", base_port=base), tmp_path, HEARTBEATS)
    stopped.append(net.start())
    with (
        client.Client.connect(*net.address(1), name="sub") as sub_client,
        client.Client.connect(*net.address(2), name="pub") as pub,
    ):
        sub = sub_client.subscribe("n exists")
        pub.publish({"n": 1})
        assert sub.next(timeout=10) == {"n": 1}
        pids = [proc.pid for proc in net.procs.procs.values()]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(2.5)  # the heartbeat timeout is 1 s
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        time.sleep(1.5)  # a watch's turn or more after the resumption
        assert sub_client.connected and pub.connected
        pub.publish({"n": 2})
        assert sub.next(timeout=10) == {"n": 2}
    assert "closing_link" not in net.log_text()


HEARTBEATS = ("--heartbeat", "0.3", "--heartbeat-timeout", "1")


def test_a_broker_out_of_file_descriptors_says_so_in_a_few_warnings_and_serves_on(
    tmp_path: Path,
) -> None:
    """More connections than the broker may hold files: trio's accept loop retries ten
    times a second, logging each failure with its traceback; the broker's log has a few
    `accept_failed` warnings instead (1st, 2nd, 4th... with their count), JSON lines
    like the rest, and the broker serves on once the connections go."""
    study = tmp_path / "solo.toml"
    study.write_text(to_toml(chain(1, name="solo", base_port=free_base_port(1))))
    address = ("127.0.0.1", load_topology(study).address(1)[1])

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            [*HOP, "broker", str(study), "--id", "1"],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=log, text=True, preexec_fn=few_files,
        )  # fmt: skip
        flood: list[socket.socket] = []
        try:
            wait_for(lambda: bool(fetch_stats(*address, timeout=2)), "the broker answering")
            for _ in range(100):
                flood.append(socket.create_connection(address, timeout=5))
            time.sleep(1.0)  # its accept loop tries, fails, retries
            for sock in flood:
                sock.close()
            wait_for(lambda: bool(fetch_stats(*address, timeout=2)), "the broker serving again")
        finally:
            for sock in flood:
                sock.close()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        log.seek(0)
        records = [json.loads(line) for line in log.read().splitlines()]  # JSON lines all
    failed = [r for r in records if r["event"] == "accept_failed"]
    assert failed and "EMFILE" in failed[0]["reason"], records
    assert [r["times"] for r in failed] == [2**k for k in range(len(failed))]


# -- command line ----------------------------------------------------------------------


def test_fault_options_are_checked_and_passed_on_by_hop_net(capsys) -> None:
    from broker.cli import _fault_args, build_parser

    args = build_parser().parse_args(
        ["net", "x.toml", "--queue-policy", "drop", "--heartbeat", "2", "--stuck-timeout", "9"]
    )
    assert _fault_args(args) == [
        "--queue-policy", "drop", "--stuck-timeout", "9.0", "--heartbeat", "2.0"
    ]  # fmt: skip
    tree7 = str(REPO / "topologies" / "tree7.toml")
    bad = ["broker", tree7, "--id", "1", "--heartbeat", "5", "--heartbeat-timeout", "2"]
    assert hop_main(bad) == 2
    said = "hop broker: --heartbeat-timeout (2) must be longer than --heartbeat (5)\n"
    assert capsys.readouterr().err.endswith(said)


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--queue-frames", "0", "must be at least 1, got 0"),
        ("--queue-frames", "-1", "must be at least 1, got -1"),
        ("--stuck-timeout", "-1", "must be a finite number of 0 or more, got -1"),
        ("--heartbeat", "nan", "must be a finite number of 0 or more, got nan"),
        ("--heartbeat-timeout", "0", "must be a finite number more than 0, got 0"),
        ("--drain-timeout", "inf", "must be a finite number of 0 or more, got inf"),
        ("--max-frame", "3", "must be 4096 to 4294967295 bytes, got 3"),
    ],
)
@pytest.mark.parametrize("command", ["broker", "net"])
def test_options_a_broker_cannot_work_with_are_refused(
    capsys: pytest.CaptureFixture[str], command: str, option: str, value: str, said: str
) -> None:
    """A queue of no frames stalled every link; a NaN or negative time never or at once
    expired, or failed at SIGTERM; a frame limit under a broker's own replies refused
    every client: each is refused before anything starts, naming the option."""
    ident = ["--id", "1"] if command == "broker" else []
    with pytest.raises(SystemExit) as info:
        hop_main([command, "tree7", *ident, option, value])
    assert info.value.code == 2
    assert f"argument {option}: {said}" in capsys.readouterr().err


def test_broker_config_refuses_what_a_broker_cannot_work_with() -> None:
    for bad, said in [
        ({"queue_frames": 0}, "queue_frames must be at least 1"),
        ({"drain_timeout_s": -1.0}, "drain_timeout_s must be a finite number of seconds"),
        ({"heartbeat_timeout_s": math.nan}, "heartbeat_timeout_s must be a finite number"),
        ({"max_frame": 100}, "max_frame must be 4096 to"),
    ]:
        with pytest.raises(ValueError, match=said):
            BrokerConfig(**bad)
