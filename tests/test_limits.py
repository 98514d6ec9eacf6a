"""Limits on what clients send: in the protocol state machine, and on a live broker
started with the `hop broker` limit options."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import trio
from pyarrow import ipc

import client
from broker.cli import _limit_args, build_parser
from broker.local_network import Network, free_base_port
from broker.probe import fetch_stats
from broker.process import BrokerProcesses
from broker.protocol import (
    ERR_FRAMING,
    ERR_LIMIT,
    PROTOCOL_VERSION,
    Connection,
    Hello,
    Limits,
    ProtocolError,
    Publish,
    State,
    Subscribe,
    Unsubscribe,
    Welcome,
    encode_frame,
    new_event_frame,
)
from topologies.generators import chain

V = PROTOCOL_VERSION
SMALL = Limits(
    max_attributes=3, max_name_len=8, max_value_len=16, max_constraints=2, max_subscriptions=2
)


def open_acceptor(
    role: str = "client", limits: Limits = SMALL, publish_arrays: bool = False
) -> Connection:
    conn = Connection("acceptor", limits=limits, publish_arrays=publish_arrays)
    conn.receive_data(encode_frame(Hello(V, role, "peer")))  # type: ignore[arg-type]
    conn.send(Welcome(V, "1"))
    return conn


def publish(attributes: dict) -> bytes:
    return encode_frame(Publish("e1", "c", attributes, [], 0))


def expect_limit(conn: Connection, data: bytes, text: str) -> None:
    with pytest.raises(ProtocolError) as info:
        conn.receive_data(data)
    assert info.value.code == ERR_LIMIT
    assert info.value.message.startswith(text), info.value.message
    assert conn.state is State.ERROR


@pytest.mark.parametrize(
    ("attributes", "text"),
    [
        ({"a": 1, "b": 2, "c": 3, "d": 4}, "max_attributes: event has 4 attributes"),
        ({"abcdefghi": 1}, "max_name_len: event attribute name of 9 characters"),
        ({"a": "x" * 17}, "max_value_len: event attribute 'a' has a value of 17 characters"),
        ({"a": b"x" * 17}, "max_value_len: event attribute 'a' has a value of 17 bytes"),
    ],
)
@pytest.mark.parametrize("arrays", [False, True], ids=["publish", "publish-arrays"])
def test_event_limits(attributes: dict, text: str, arrays: bool) -> None:
    """Also on a broker's connections, which return events as their arrays."""
    expect_limit(open_acceptor(publish_arrays=arrays), publish(attributes), text)


@pytest.mark.parametrize("arrays", [False, True], ids=["publish", "publish-arrays"])
def test_events_at_the_limits_pass(arrays: bool) -> None:
    event = {"a": "x" * 16, "abcdefgh": b"y" * 16, "c": 10**18}
    assert len(open_acceptor(publish_arrays=arrays).receive_data(publish(event))) == 1


@pytest.mark.parametrize(
    ("wire_filter", "text"),
    [
        ([["a", "=", 1], ["b", "=", 2], ["c", "exists"]], "max_constraints: subscription 1 has 3"),
        ([["abcdefghi", "exists"]], "max_name_len: subscription 1: constraint on name of 9"),
        ([["a", "prefix", "x" * 17]], "max_value_len: subscription 1: constraint on 'a'"),
    ],
)
def test_filter_limits(wire_filter: list, text: str) -> None:
    expect_limit(open_acceptor(), encode_frame(Subscribe(1, wire_filter)), text)


def test_subscriptions_per_connection_count_unsubscribes_and_repeats() -> None:
    conn = open_acceptor()
    sub = [["a", "exists"]]
    frames = [Subscribe(1, sub), Subscribe(2, sub), Subscribe(2, sub), Unsubscribe(1)]
    frames += [Subscribe(3, sub)]
    assert len(conn.receive_data(b"".join(encode_frame(m) for m in frames))) == 5
    expect_limit(
        conn,
        encode_frame(Subscribe(4, sub)),
        "max_subscriptions: connection would hold 3 subscriptions, over the limit of 2",
    )


def test_limits_apply_to_clients_only() -> None:
    """Brokers forward aggregates: a parent holds its subtree's subscriptions."""
    conn = open_acceptor(role="broker")
    big = {f"attribute{i}": "x" * 100 for i in range(10)}
    frames = [publish(big)] + [encode_frame(Subscribe(i, [["a", "exists"]])) for i in range(5)]
    assert len(conn.receive_data(b"".join(frames))) == 6


def test_limits_need_positive_integers() -> None:
    with pytest.raises(ValueError, match="max_constraints must be a positive integer"):
        Limits(max_constraints=0)


def test_frame_limit_is_named() -> None:
    conn = Connection("acceptor", max_frame=64)
    with pytest.raises(ProtocolError, match=r"\(max_frame\)") as info:
        conn.receive_data(b"\x00\x00\x01\x00")
    assert info.value.code == ERR_FRAMING


def test_hop_net_passes_its_limits_to_each_broker() -> None:
    args = build_parser().parse_args(["net", "x.toml", "--max-subscriptions", "7"])
    passed = _limit_args(args)
    broker_args = build_parser().parse_args(["broker", "x.toml", "--id", "1", *passed])
    assert broker_args.max_subscriptions == 7
    assert broker_args.max_attributes == Limits().max_attributes
    assert broker_args.max_frame == args.max_frame


def test_limit_options_refuse_nonsense(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["broker", "x.toml", "--id", "1", "--max-attributes", "0"])
    assert info.value.code == 2
    assert "--max-attributes: must be at least 1" in capsys.readouterr().err


# --- a live broker with small limits ---------------------------------------------------------

FLAGS = [
    "--max-frame", "4096",
    "--max-attributes", "3",
    "--max-name-len", "8",
    "--max-value-len", "16",
    "--max-constraints", "2",
    "--max-subscriptions", "2",
]  # fmt: skip


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Network]:
    net = Network(chain(1, name="limits", base_port=free_base_port(1)), tmp_path)
    net.procs = BrokerProcesses(net.file, net.topology, FLAGS, net.credentials)
    try:
        yield net.start()
    finally:
        codes = net.stop()
        assert all(code == 0 for code in codes.values()), (codes, net.log_text()[-3000:])


VIOLATIONS = [  # (what the client does, the start of the broker's Error message)
    ("publish", {"a": 1, "b": 2, "c": 3, "d": 4}, "max_attributes"),
    ("publish", {"abcdefghi": 1}, "max_name_len"),
    ("publish", {"a": "x" * 17}, "max_value_len"),
    ("publish", {"a": b"x" * 5000}, "max_frame"),
    ("subscribe", "a = 1 and b = 2 and c = 3", "max_constraints"),
    ("subscribe", 'a = "xxxxxxxxxxxxxxxxx"', "max_value_len"),
    ("subscribe", "n > 0", "max_subscriptions"),  # the third one (filters are checked first)
]


async def _violate(address: tuple[str, int], action: str, arg: object) -> client.BrokerError:
    async with client.open_client(*address, name="hostile") as c:
        await c.subscribe("n = 1")
        await c.subscribe("n = 2")
        with pytest.raises(client.BrokerError) as info:
            if action == "publish":
                await c.publish(arg)  # type: ignore[arg-type]
                await c.flush()
            else:
                await c.subscribe(arg)  # type: ignore[arg-type]
        return info.value


async def _still_serves(address: tuple[str, int]) -> None:
    async with client.open_client(*address, name="victim") as c:
        sub = await c.subscribe("n = 1")
        await c.publish({"n": 1, "text": "x" * 16})
        assert (await sub.next())["n"] == 1


@pytest.mark.integration
def test_broker_refuses_messages_over_its_limits(limited: Network) -> None:
    address = limited.address(1)

    async def scenario() -> list[tuple[str, str]]:
        errors = []
        with trio.fail_after(60):
            for action, arg, _ in VIOLATIONS:
                error = await _violate(address, action, arg)
                errors.append((error.code, error.message))
                await _still_serves(address)
        return errors

    errors = trio.run(scenario)
    for (_, _, limit), (code, message) in zip(VIOLATIONS, errors, strict=True):
        assert code == ("framing" if limit == "max_frame" else ERR_LIMIT), message
        assert limit in message, message
    assert limited.procs.failed() == {}


def _event_of_payload(size: int, name: str, n: int) -> dict[str, int | bytes]:
    """Event `n` of `name`, whose Publish payload (id `NAME:n`) is `size` bytes."""
    pad, event_id = 0, f"{name}:{n}"
    while True:
        event: dict[str, int | bytes] = {"n": n, "big": b"x" * pad}
        got = len(new_event_frame(event_id, name, event, time.time_ns(), max_frame=2**30)) - 4
        if got == size:
            return event
        pad += size - got


@pytest.mark.integration
@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
def test_an_event_with_no_room_left_for_its_path_is_dropped_and_the_brokers_serve_on(
    tmp_path: Path, traced: bool
) -> None:
    """A frame within max_frame grows at each broker (its id joins the path; a Deliver
    adds the subscription ids): an event that would outgrow the limit is dropped for
    the targets it cannot reach, as `too-large`, and logged; the brokers, the links and
    the publisher's connection go on."""
    max_frame = 4096
    traces = tmp_path / "traces"
    tracing = ["--trace-dir", str(traces), "--run-id", "room"] if traced else []
    net = Network(
        chain(3, name="room", base_port=free_base_port(3)),
        tmp_path,
        ["--max-frame", str(max_frame), *tracing],
    )
    events = [
        _event_of_payload(max_frame - 3, "pub", 1),  # grows past the limit at broker 2
        _event_of_payload(max_frame, "pub", 2),  # has no room at broker 1 already
        {"n": 3},
    ]

    async def scenario() -> list[int]:
        with trio.fail_after(60):
            async with (
                client.open_client(*net.address(3), name="sub") as s,
                client.open_client(*net.address(1), name="pub") as p,
            ):
                sub = await s.subscribe("n >= 0")
                for event in events:
                    await p.publish(event)
                await p.flush()
                return [(await sub.next())["n"]]

    net.start()
    try:
        assert trio.run(scenario) == [3]  # the small event, through the same links
        drops = {b: fetch_stats(*net.address(b))["drops"]["too-large"] for b in (1, 2, 3)}
        assert drops == {1: 1, 2: 1, 3: 0}
    finally:
        codes = net.stop()
    assert codes == {1: 0, 2: 0, 3: 0}, net.log_text()[-3000:]
    log = net.log_text()
    assert log.count('"event_too_large"') == 2 and '"pub:1"' in log and '"pub:2"' in log, log
    if traced:
        rows = pa.concat_tables(
            ipc.open_stream(path).read_all() for path in sorted(traces.glob("hops-*.arrow"))
        ).to_pylist()
        dropped = {(r["broker"], r["event_id"]): r["drop_reason"] for r in rows}
        assert dropped[("1", "pub:2")] == "too-large:broker:2"
        assert dropped[("2", "pub:1")] == "too-large:broker:3"
        assert ("3", "pub:1") not in dropped and dropped[("3", "pub:3")] == ""
