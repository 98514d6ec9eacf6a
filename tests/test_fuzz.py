"""Fuzzing of what a hostile peer controls: the wire decoder, the filter parser, and a
live broker fed random and mutated bytes over TCP.

The properties: every byte sequence gives messages or a ProtocolError (never another
exception), in every state of either side; every text gives a Filter or a
FilterSyntaxError; a broker answers garbage with Error and/or by closing that
connection, and keeps serving everyone else. tests/fuzz_atheris.py runs the first two
properties under atheris (coverage-guided) for longer runs.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgpack
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import client
from broker.local_network import Network, free_base_port
from broker.protocol import (
    PROTOCOL_VERSION,
    Bye,
    Connection,
    Deliver,
    Error,
    Flush,
    Hello,
    Limits,
    Message,
    Ping,
    ProtocolError,
    Publish,
    State,
    StatsRequest,
    SubAck,
    Subscribe,
    Welcome,
    decode_message,
    encode_frame,
)
from routing import Filter, FilterSyntaxError, parse_filter
from topologies.generators import chain

V = PROTOCOL_VERSION
FUZZ = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- connections in every state -------------------------------------------------------


def _acceptor(role: str, *, welcome: bool, limits: Limits | None = None) -> Connection:
    conn = Connection("acceptor", max_frame=4096, limits=limits)
    conn.receive_data(encode_frame(Hello(V, role, "peer")))  # type: ignore[arg-type]
    if welcome:
        conn.send(Welcome(V, "me"))
    return conn


def _initiator(role: str, *, welcome: bool) -> Connection:
    conn = Connection("initiator", max_frame=4096)
    conn.send(Hello(V, role, "me"))  # type: ignore[arg-type]
    if welcome:
        conn.receive_data(encode_frame(Welcome(V, "broker")))
    return conn


def _half_closed() -> Connection:
    conn = _acceptor("client", welcome=True)
    conn.send(Bye("done"))
    return conn


STATES: dict[str, Callable[[], Connection]] = {
    "acceptor-await-hello": lambda: Connection("acceptor", max_frame=4096),
    "acceptor-send-welcome": lambda: _acceptor("client", welcome=False),
    "acceptor-open-client": lambda: _acceptor("client", welcome=True),
    "acceptor-open-client-limited": lambda: _acceptor(
        "client", welcome=True, limits=Limits(max_attributes=2, max_subscriptions=2)
    ),
    "acceptor-open-broker": lambda: _acceptor("broker", welcome=True),
    "acceptor-sent-bye": _half_closed,
    "initiator-send-hello": lambda: Connection("initiator", max_frame=4096),
    "initiator-await-welcome": lambda: _initiator("client", welcome=False),
    "initiator-open-client": lambda: _initiator("client", welcome=True),
    "initiator-open-broker": lambda: _initiator("broker", welcome=True),
}

# --- byte strategies: raw bytes, random msgpack, near-valid messages --------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=8),
)
_msgpack_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.integers(-(2**63), 2**63)), inner, max_size=4
        ),
    ),
    max_leaves=12,
)
_VALID = [
    Hello(V, "client", "c1"),
    Hello(V, "broker", "2", "s3cret"),
    Welcome(V, "1"),
    Bye("bye"),
    Error("x", "y"),
    Ping(1),
    Subscribe(1, [["a", "=", 1], ["b", "exists"]]),
    SubAck(1),
    Publish("e", "p", {"a": 1, "b": "x", "c": b"\x00", "d": 1.5, "e": True}, ["1"], 5),
    Deliver([1], "e", "p", {"a": 1}, [], 5),
    Flush(3),
    StatsRequest(),
]


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


@st.composite
def _near_valid(draw: st.DrawFn) -> bytes:
    """A valid message's wire array with one field replaced, added or removed."""
    message = draw(st.sampled_from(_VALID))
    wire = list(message._WIRE(message))
    action = draw(st.sampled_from(["replace", "append", "drop", "keep", "code"]))
    if action == "replace":
        wire[draw(st.integers(0, len(wire) - 1))] = draw(_msgpack_values)
    elif action == "append":
        wire.append(draw(_msgpack_values))
    elif action == "drop" and len(wire) > 1:
        wire.pop()
    elif action == "code":
        wire[0] = draw(st.integers(-1, 40))
    return _frame(msgpack.packb(wire, use_bin_type=True))


_chunks = st.one_of(
    st.binary(max_size=64),
    _msgpack_values.map(lambda v: _frame(msgpack.packb(v, use_bin_type=True))),
    _near_valid(),
    st.sampled_from(_VALID).map(encode_frame),
    st.integers(0, 2**32 - 1).map(lambda n: struct.pack(">I", n)),
)
byte_streams = st.lists(_chunks, max_size=6).map(b"".join)


def _feed(conn: Connection, data: bytes, cuts: list[int]) -> None:
    """Feed ``data`` in pieces cut at ``cuts``; only messages or ProtocolError may come
    out, and after a ProtocolError every later call raises one too."""
    failed = False
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    for start, stop in zip(bounds, bounds[1:], strict=False):
        try:
            messages = conn.receive_data(data[start:stop])
        except ProtocolError as exc:
            assert exc.code and isinstance(exc.message, str)
            assert conn.state is State.ERROR
            failed = True
            continue
        assert not failed, "a failed connection accepted data"
        assert all(isinstance(m, Message) for m in messages)


@FUZZ
@given(
    state=st.sampled_from(sorted(STATES)),
    data=byte_streams,
    cuts=st.lists(st.integers(min_value=0), max_size=4),
)
def test_any_bytes_give_messages_or_protocol_error(
    state: str, data: bytes, cuts: list[int]
) -> None:
    _feed(STATES[state](), data, cuts)


@FUZZ
@given(state=st.sampled_from(sorted(STATES)), data=st.binary(max_size=512))
def test_random_bytes_give_messages_or_protocol_error(state: str, data: bytes) -> None:
    _feed(STATES[state](), data, [])


@FUZZ
@given(payload=st.binary(max_size=256))
def test_decode_message_raises_only_protocol_error(payload: bytes) -> None:
    try:
        message = decode_message(payload)
    except ProtocolError:
        return
    assert isinstance(message, Message)


# --- the filter parser --------------------------------------------------------------------

_filter_words = st.sampled_from(
    [
        "a",
        "b.c",
        "_x",
        "and",
        "true",
        "false",
        "exists",
        "prefix",
        "suffix",
        "contains",
        "=",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        '"s"',
        '"a\\"b"',
        '"\\\\"',
        '"',
        "\\",
        "-5",
        "-0.25",
        "1e3",
        "0x1F",
        "1_000",
        ".5",
        "nan",
        "inf",
        "9" * 30,
        "(",
        ")",
        "or",
        "not",
        "é",
    ]
)
filter_texts = st.one_of(
    st.text(max_size=80),
    st.lists(_filter_words, max_size=12).map(" ".join),
    st.lists(st.one_of(_filter_words, st.text(max_size=3)), max_size=10).map("".join),
)


@settings(max_examples=1000, deadline=None)
@given(text=filter_texts)
def test_any_text_gives_a_filter_or_syntax_error(text: str) -> None:
    try:
        parsed = parse_filter(text)
    except FilterSyntaxError as exc:
        assert 1 <= exc.column <= len(text) + 1
        return
    assert isinstance(parsed, Filter)
    assert parse_filter(str(parsed)) == parsed  # the contract: str() parses back


# --- a live broker ----------------------------------------------------------------------------

ATTACKS = 300
ATTACK_TIMEOUT_S = 5.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Network]:
    net = Network(chain(1, name="fuzz", base_port=free_base_port(1)), tmp_path)
    try:
        yield net.start()
    finally:
        codes = net.stop()
        assert all(code == 0 for code in codes.values()), (codes, net.log_text()[-3000:])


def _mutate(rng: random.Random, data: bytes) -> bytes:
    """One to four random edits: flip, insert, delete, truncate, duplicate, new length."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        edit = rng.randrange(6)
        at = rng.randrange(len(out) + 1)
        if edit == 0 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif edit == 1:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        elif edit == 2:
            del out[at : at + rng.randint(1, 8)]
        elif edit == 3:
            del out[at:]
        elif edit == 4:
            out += bytes(out)
        elif len(out) >= 4:
            out[0:4] = struct.pack(">I", rng.choice([0, 1, len(out), 2**20 + 1, 2**32 - 1]))
    return bytes(out)


def _attacks(seed: int) -> list[tuple[bool, bytes]]:
    """(say a valid Hello first?, bytes): mutated valid frames and plain random bytes."""
    rng = random.Random(seed)
    corpus = [encode_frame(m) for m in _VALID]
    attacks = []
    for i in range(ATTACKS):
        if i % 4 == 0:
            data = rng.randbytes(rng.randint(1, 300))
        else:
            frames = b"".join(rng.choices(corpus, k=rng.randint(1, 3)))
            data = _mutate(rng, frames)
        attacks.append((i % 2 == 0, data))
    return attacks


def _read_frames(data: bytes) -> list[Message]:
    """The broker's answer, decoded (it must be well-formed frames)."""
    messages = []
    while len(data) >= 4:
        (length,) = struct.unpack(">I", data[:4])
        assert len(data) >= 4 + length, f"truncated answer {data[:40]!r}"
        messages.append(decode_message(data[4 : 4 + length]))
        data = data[4 + length :]
    assert not data, f"trailing bytes {data!r}"
    return messages


def _attack(address: tuple[str, int], hello: bool, data: bytes, i: int) -> list[Message]:
    """Send ``data`` (after a handshake if ``hello``), half-close, and read until the
    broker closes; return what it answered after the handshake."""
    with socket.create_connection(address, timeout=ATTACK_TIMEOUT_S) as s:
        answer = b""
        if hello:
            s.sendall(encode_frame(Hello(V, "client", f"fuzz-{i}")))
            while len(answer) < 4 or len(answer) < 4 + struct.unpack(">I", answer[:4])[0]:
                chunk = s.recv(65536)
                assert chunk, "closed during the handshake"
                answer += chunk
            (length,) = struct.unpack(">I", answer[:4])
            assert isinstance(decode_message(answer[4 : 4 + length]), Welcome)
            answer = answer[4 + length :]
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)  # an incomplete frame must not keep it waiting
        except (BrokenPipeError, ConnectionResetError):
            pass  # the broker refused and closed before we were done
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
    return _read_frames(answer)


def test_broker_survives_random_and_mutated_bytes(broker: Network) -> None:
    address = broker.address(1)
    started = time.monotonic()
    errors = 0
    for i, (hello, data) in enumerate(_attacks(seed=9)):
        answer = _attack(address, hello, data, i)
        if answer and isinstance(answer[-1], Error):
            errors += 1
        if i % 50 == 0:
            assert broker.stats(1)["broker"] == "1"  # still serving
    assert errors > ATTACKS // 2  # most garbage is answered with Error, not just dropped
    assert time.monotonic() - started < 60
    assert broker.procs.failed() == {}
    trio.run(_normal_client_works, address)


def test_another_protocol_is_refused_with_its_words_and_logged(broker: Network) -> None:
    """An HTTP client on a broker's port gets an Error that shows what it sent, and the
    broker's log names the refusal; a bare connect and close (a port probe) does not."""
    with socket.create_connection(broker.address(1), timeout=ATTACK_TIMEOUT_S):
        pass
    answer = _attack(broker.address(1), False, b"GET / HTTP/1.0\r\n\r\n", 0)
    assert len(answer) == 1 and isinstance(answer[0], Error)
    assert answer[0].code == "framing" and "the text 'GET '" in answer[0].message
    deadline = time.monotonic() + 5
    while '"handshake_refused"' not in broker.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    refusals = [line for line in broker.log_text().splitlines() if "handshake_refused" in line]
    assert len(refusals) == 1 and "the text 'GET '" in refusals[0]


async def _normal_client_works(address: tuple[str, int]) -> None:
    with trio.fail_after(10):
        async with client.open_client(*address, name="after-fuzz") as c:
            sub = await c.subscribe("n = 1")
            await c.publish({"n": 1})
            assert await sub.next() == {"n": 1}
