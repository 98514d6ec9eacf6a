"""A parent whose Welcome arrives together with its next message in one read: the
child broker handles that message too, traced or not (the messages after a handshake
are handled apart from the reader's reads, with their frames for the trace)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from broker.local_network import free_base_port
from broker.protocol import PROTOCOL_VERSION, Connection, Ping, Pong, Welcome, encode_frame
from broker.server import Broker, BrokerConfig
from topologies.generators import chain


async def pong_from_child(traced: bool, trace_dir: Path) -> object:
    topology = chain(2, name="handshake", base_port=free_base_port(2))
    host, port = topology.address(1)
    config = BrokerConfig(trace_dir=trace_dir if traced else None, run_id="handshake")
    child = Broker(topology, 2, config)
    answer: list[object] = []

    async def fake_parent(stream: trio.SocketStream) -> None:
        conn = Connection("acceptor")
        while not conn.receive_data(await stream.receive_some(65536)):
            pass
        # Welcome and a Ping in one write, so that they come in one read
        await stream.send_all(conn.send(Welcome(PROTOCOL_VERSION, "1")) + encode_frame(Ping(7)))
        while not answer:
            data = await stream.receive_some(65536)
            if not data:
                return
            answer.extend(m for m in conn.receive_data(data) if isinstance(m, Pong))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(port, host=host)
            nursery.start_soon(trio.serve_listeners, fake_parent, listeners)
            await nursery.start(child.serve)
            while not answer:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    return answer[0]


@pytest.mark.parametrize("traced", [False, True])
def test_a_message_that_came_with_the_welcome_is_answered(traced: bool, tmp_path: Path) -> None:
    assert trio.run(pong_from_child, traced, tmp_path / "traces") == Pong(7)
