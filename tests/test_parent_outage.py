"""A child broker whose parent cannot be reached says so, after the start-up race's
grace, with the address and the reason, and says how long it lasted once connected
(broker.outage); its stats say why meanwhile, and so does a network that waits for
its links; the rules themselves are tested without sockets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import structlog
import trio

from broker.local_network import REPO, free_base_port, on_free_ports
from broker.outage import Outage
from broker.process import BrokerProcesses, StartupError
from broker.protocol import PROTOCOL_VERSION, Connection, Error, Welcome
from broker.server import Broker, BrokerConfig
from topologies import load_case_study
from topologies.generators import chain


def test_a_short_outage_is_not_warned_of() -> None:
    outage = Outage(warn_after_s=5.0, repeat_s=60.0)
    assert not any(outage.failed(t, "refused") for t in (0.0, 0.1, 0.3, 0.7, 1.5, 4.9))
    assert outage.attempts == 6 and outage.lasted(4.9) == 4.9
    assert outage.ended(5.2) is None  # connected: nothing to report
    assert outage.attempts == 0 and outage.lasted(6.0) == 0.0


def test_a_long_outage_is_warned_of_then_each_repeat_or_new_reason() -> None:
    outage = Outage(warn_after_s=5.0, repeat_s=60.0)
    times = [10.0 + 2 * i for i in range(40)]  # a failure every 2 s from t = 10 s
    warned = [t for t in times if outage.failed(t, "refused")]
    assert warned == [16.0, 76.0]  # 5 s after the first failure, then 60 s later
    assert outage.failed(90.0, "network is unreachable")  # a new reason: at once
    assert not outage.failed(92.0, "network is unreachable")
    assert outage.ended(93.0) == 83.0
    # A new outage starts afresh: its own grace.
    assert not outage.failed(200.0, "refused") and outage.failed(205.0, "refused")


def test_a_refused_handshake_is_warned_of_at_once_then_as_the_rest() -> None:
    outage = Outage(warn_after_s=5.0, repeat_s=60.0)
    assert outage.failed(0.0, "auth", at_once=True)
    assert not any(outage.failed(t, "auth", at_once=True) for t in (1.0, 3.0, 30.0))
    assert outage.failed(61.0, "auth", at_once=True)


async def _child_refused_by_its_parent(logs: list[dict[str, Any]]) -> int:
    topology = chain(2, name="refused", base_port=free_base_port(2))
    host, port = topology.address(1)
    child = Broker(topology, 2, BrokerConfig(reconnect_initial_s=0.01, reconnect_max_s=0.02))
    refusals = 0

    async def refusing_parent(stream: trio.SocketStream) -> None:
        nonlocal refusals
        conn = Connection("acceptor")
        while not conn.receive_data(await stream.receive_some(65536)):
            pass
        await stream.send_all(conn.send(Error("auth", "authentication failed")))
        refusals += 1

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(port, host=host)
            nursery.start_soon(trio.serve_listeners, refusing_parent, listeners)
            await nursery.start(child.serve)
            while refusals < 10:
                await trio.sleep(0.01)
            assert child.stats()["parent_problem"].startswith(
                f"the handshake with broker 1 at {host}:{port} failed: "
            )
            nursery.cancel_scope.cancel()
    return refusals


def test_a_parent_refusing_every_handshake_is_warned_of_once_not_at_each_attempt() -> None:
    with structlog.testing.capture_logs() as logs:
        refusals = trio.run(_child_refused_by_its_parent, logs)
    warnings = [entry for entry in logs if entry["event"] == "parent_handshake_failed"]
    assert refusals >= 10 and len(warnings) == 1, warnings
    refused = "failed: auth: the parent refused it: authentication failed"
    assert warnings[0]["error"].endswith(refused)
    assert warnings[0]["attempts"] == 1


async def _child_with_its_parent_down(logs: list[dict[str, Any]]) -> None:
    topology = chain(2, name="outage", base_port=free_base_port(2))
    host, port = topology.address(1)
    child = Broker(topology, 2, BrokerConfig(parent_warn_after_s=0.3, reconnect_max_s=0.1))

    def logged(event: str) -> list[dict[str, Any]]:
        return [entry for entry in logs if entry["event"] == event]

    async def parent(stream: trio.SocketStream) -> None:
        conn = Connection("acceptor")
        while not conn.receive_data(await stream.receive_some(65536)):
            pass
        await stream.send_all(conn.send(Welcome(PROTOCOL_VERSION, "1")))
        await trio.sleep_forever()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(child.serve)
            while not logged("parent_unreachable"):
                await trio.sleep(0.02)
            (warning,) = logged("parent_unreachable")
            assert warning["log_level"] == "warning" and warning["parent"] == 1
            assert warning["error"] == (
                f"cannot connect to broker 1 at {host}:{port}: connection refused "
                "(is a hop broker listening there?)"
            )
            assert warning["for_s"] >= 0.3 and warning["attempts"] >= 2
            stats = child.stats()  # what `hop stats` answers meanwhile
            assert stats["parent_connected"] == 0 and stats["parent_problem"] == warning["error"]
            assert stats["parent_unreachable_s"] >= warning["for_s"]
            listeners = await trio.open_tcp_listeners(port, host=host)
            nursery.start_soon(trio.serve_listeners, parent, listeners)
            while not logged("parent_connected"):
                await trio.sleep(0.02)
            assert logged("parent_connected")[0]["after_s"] >= warning["for_s"]
            stats = child.stats()
            assert (stats["parent_connected"], stats["parent_problem"]) == (1, "")
            assert stats["parent_unreachable_s"] == 0
            nursery.cancel_scope.cancel()


def test_a_child_names_its_unreachable_parent_and_the_reason() -> None:
    with structlog.testing.capture_logs() as logs:
        trio.run(_child_with_its_parent_down, logs)


@pytest.mark.integration
def test_waiting_for_the_links_names_why_a_parent_is_out_of_reach(tmp_path: Path) -> None:
    study = on_free_ports(REPO / "topologies" / "chain5.toml", tmp_path / "chain.toml")
    topology = load_case_study(study).topology
    brokers = BrokerProcesses(study, topology, [])
    try:
        brokers.start(log_dir=tmp_path / "logs")
        brokers.wait_listening()
        brokers.wait_linked()
        root = brokers.procs[1]
        root.kill()
        root.wait()
        host, port = topology.address(1)
        with pytest.raises(StartupError) as info:
            brokers.wait_linked(timeout=2.0, brokers=[2])
        assert str(info.value) == (
            "broker 2 did not link to its parent and children in 2.0 s (cannot connect to "
            f"broker 1 at {host}:{port}: connection refused (is a hop broker listening there?))"
        )
    finally:
        brokers.stop()
