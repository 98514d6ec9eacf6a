"""Tests of the sans-I/O wire protocol: framing, message validation, the state machine."""

import dataclasses
import struct
from collections.abc import Callable

import msgpack
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from broker.limits import Limits
from broker.messages import DELIVER_HEAD, PUBLISH_HEAD, publish_array, publish_of
from broker.protocol import (
    DEFAULT_MAX_FRAME,
    DELIVERIES_PAYLOAD,
    DIRECTION_TABLE,
    ERR_FRAMING,
    ERR_MALFORMED,
    ERR_UNEXPECTED,
    ERR_UNKNOWN_TYPE,
    ERR_VERSION,
    MESSAGE_TYPES,
    PROTOCOL_VERSION,
    Bye,
    Connection,
    Deliver,
    Deliveries,
    Error,
    Flush,
    FlushAck,
    Hello,
    Message,
    Ping,
    Pong,
    ProtocolError,
    Publish,
    State,
    Stats,
    StatsRequest,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Welcome,
    decode_message,
    encode_frame,
    encode_message,
    error_frame,
    frame_starts,
    join_frames,
)

V = PROTOCOL_VERSION
EVENT = {"type": "callForOffers", "family": 7, "price": 99.5, "urgent": False, "blob": b"\x00"}


def case(name: str, *values: object) -> object:
    return pytest.param(*values, id=name)


def raw_frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def framed(obj: object) -> bytes:
    """Frame any msgpack-able structure, valid as a message or not."""
    return raw_frame(msgpack.packb(obj, use_bin_type=True))


def open_pair(initiator_role: str = "client") -> tuple[Connection, Connection]:
    """(initiator, acceptor) after a completed handshake."""
    initiator, acceptor = Connection("initiator"), Connection("acceptor")
    acceptor.receive_data(initiator.send(Hello(V, initiator_role, "n1")))
    initiator.receive_data(acceptor.send(Welcome(V, "b1")))
    return initiator, acceptor


def link_for(kind: type[Message]) -> tuple[Connection, Connection]:
    """(sender, receiver), open, on a link where ``kind`` is allowed."""
    links = DIRECTION_TABLE[kind][1]
    if ("broker", "broker") in links:
        return open_pair("broker")
    initiator, acceptor = open_pair("client")
    return (initiator, acceptor) if ("client", "broker") in links else (acceptor, initiator)


def expect_error(conn: Connection, data: bytes, code: str, text: str) -> None:
    """Feeding ``data`` raises ProtocolError(code) whose message contains ``text``; the
    connection is then failed for good."""
    with pytest.raises(ProtocolError) as info:
        conn.receive_data(data)
    assert info.value.code == code
    assert text in info.value.message, info.value.message
    assert conn.state is State.ERROR
    with pytest.raises(ProtocolError, match="already failed") as again:
        conn.receive_data(b"")
    assert again.value.code == code


EXAMPLES: list[Message] = [
    Bye("shutting down"),
    Error("overload", "too many links"),
    Ping(1),
    Pong(2**64 - 1),
    Subscribe(3, [["family", "=", 7], ["price", "<", 120.5], ["discount", "exists"]]),
    Subscribe(4, [["flag", "=", True], ["region", "prefix", "EU"], ["x", "exists", None]]),
    Subscribe(5, []),
    SubAck(3),
    Unsubscribe(3),
    UnsubAck(-(2**63)),
    Publish("p1:1", "p1", EVENT, [], 1_763_000_000_000_000_000),
    Publish("p1:2", "p1", {}, ["b8", "b4"], 0),
    Deliver([3, 4], "p1:1", "p1", EVENT, ["b8", "b4", "b2"], 1_763_000_000_000_000_000),
    Flush(9),
    FlushAck(9),
    StatsRequest(),
    Stats({"events": {"in": 10, "out": 12}, "cpu_s": 0.5, "host": "h1", "empty": {}}),
]


# --- round trips ------------------------------------------------------------------------


def test_examples_cover_every_type_but_the_handshake() -> None:
    assert {type(m) for m in EXAMPLES} == set(MESSAGE_TYPES) - {Hello, Welcome}


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip_through_connections(message: Message) -> None:
    sender, receiver = link_for(type(message))
    data = sender.send(message)
    assert data == encode_frame(message)
    [received] = receiver.receive_data(data)
    assert received == message
    assert encode_frame(received) == data  # same kinds: bool stays bool, bytes stay bytes


def test_handshake_client() -> None:
    initiator, acceptor = Connection("initiator"), Connection("acceptor")
    assert (initiator.state, acceptor.state) == (State.SEND_HELLO, State.AWAIT_HELLO)
    assert (initiator.our_role, acceptor.our_role) == (None, "broker")
    hello = Hello(V, "client", "sub-1", secret="s3cret")
    assert acceptor.receive_data(initiator.send(hello)) == [hello]
    assert initiator.our_role == "client"
    assert (initiator.state, acceptor.state) == (State.AWAIT_WELCOME, State.SEND_WELCOME)
    assert (acceptor.peer_role, acceptor.peer_id) == ("client", "sub-1")
    assert initiator.receive_data(acceptor.send(Welcome(V, "b8"))) == [Welcome(V, "b8")]
    assert (initiator.state, acceptor.state) == (State.OPEN, State.OPEN)
    assert (initiator.peer_role, initiator.peer_id) == ("broker", "b8")


def test_hello_repr_hides_the_secret() -> None:
    assert "s3cret" not in repr(Hello(V, "client", "c", "s3cret"))


def test_broker_link_carries_subscriptions_and_events_both_ways() -> None:
    child, parent = open_pair("broker")
    assert parent.peer_role == "broker"
    for sender, receiver in ((child, parent), (parent, child)):
        for message in (
            Subscribe(1, [["a", "exists"]]),
            SubAck(1),
            Publish("e", "p", EVENT, [], 1),
        ):
            assert receiver.receive_data(sender.send(message)) == [message]


def test_handshake_split_at_every_byte_boundary() -> None:
    hello = Hello(V, "broker", "b2", secret="s")
    frame = encode_frame(hello)
    for cut in range(len(frame) + 1):
        acceptor = Connection("acceptor")
        assert acceptor.receive_data(frame[:cut]) + acceptor.receive_data(frame[cut:]) == [hello]


def test_stream_split_at_every_byte_boundary() -> None:
    sendable = [m for m in EXAMPLES if ("broker", "broker") in DIRECTION_TABLE[type(m)][1]]
    messages = [m for m in sendable if not isinstance(m, Bye | Error)] + [Bye("end")]
    stream = b"".join(encode_frame(m) for m in messages)
    for cut in range(len(stream) + 1):
        acceptor = open_pair("broker")[1]
        assert acceptor.receive_data(stream[:cut]) + acceptor.receive_data(stream[cut:]) == messages


def test_stream_fed_one_byte_at_a_time() -> None:
    initiator, acceptor = open_pair()
    messages = [Publish(f"e{i}", "p", EVENT, [], i) for i in range(20)]
    stream = b"".join(initiator.send(m) for m in messages)
    got = [m for i in range(len(stream)) for m in acceptor.receive_data(stream[i : i + 1])]
    assert got == messages


def test_many_frames_in_one_chunk_and_buffer_types() -> None:
    initiator, acceptor = open_pair()
    messages = [Publish(f"e{i}", "p", EVENT, ["b1"], i) for i in range(2000)]
    stream = b"".join(encode_frame(m) for m in messages)
    assert acceptor.receive_data(bytearray(stream[:-3])) == messages[:-1]
    assert acceptor.receive_data(memoryview(stream[-3:])) == messages[-1:]


BIG_BLOB = b"b" * 200_000  # a frame over the 64 KiB receive_data feeds msgpack at a time


def big_stream() -> tuple[list[Message], list[bytes]]:
    """Publish messages, three of them over 200 KB, and each one's frame."""
    messages: list[Message] = [
        Publish(f"e{i}", "p", {"blob": BIG_BLOB} if i % 40 == 7 else EVENT, [], i)
        for i in range(120)
    ]
    return messages, [encode_frame(m) for m in messages]


@pytest.mark.parametrize("chunk", [None, 1, 4093, 65536, 100_003], ids=lambda c: f"chunk={c}")
def test_reads_larger_and_smaller_than_the_feed_size(chunk: int | None) -> None:
    """One receive_data of the whole stream (over 800 KB) or reads of any size give the
    messages in order: the stream decoder is fed 64 KiB at a time."""
    messages, frames = big_stream()
    stream = b"".join(frames)
    acceptor = open_pair("broker")[1]
    step = chunk or len(stream)
    got = [
        m
        for at in range(0, len(stream), step)
        for m in acceptor.receive_data(stream[at : at + step])
    ]
    assert got == messages


@pytest.mark.parametrize("chunk", [None, 7, 65536, 70_001], ids=lambda c: f"chunk={c}")
def test_kept_frames_are_those_of_the_returned_messages(chunk: int | None) -> None:
    """With keep_frames, `received_frames` after each read holds exactly the frames of
    the messages that read returned, as received (a traced broker decodes them again)."""
    messages, frames = big_stream()
    stream = b"".join(frames)
    acceptor = Connection("acceptor", keep_frames=True)
    initiator = Connection("initiator")
    acceptor.receive_data(initiator.send(Hello(V, "broker", "n1")))
    acceptor.send(Welcome(V, "b1"))
    step = chunk or len(stream)
    returned = 0
    for at in range(0, len(stream), step):
        got = acceptor.receive_data(stream[at : at + step])
        assert got == messages[returned : returned + len(got)]
        assert bytes(acceptor.received_frames) == b"".join(frames[returned : returned + len(got)])
        returned += len(got)
    assert returned == len(messages)


@pytest.mark.parametrize("chunk", [None, 7, 65536, 70_001], ids=lambda c: f"chunk={c}")
def test_kept_payloads_are_those_of_the_returned_messages(chunk: int | None) -> None:
    """With keep_payloads, `received_payloads` after each read holds the payload of each
    message that read returned, in order (a broker splices forwarded events from them);
    without it, none are kept."""
    messages, frames = big_stream()
    stream = b"".join(frames)
    keeping, plain = Connection("acceptor", keep_payloads=True), Connection("acceptor")
    for acceptor in (keeping, plain):
        acceptor.receive_data(Connection("initiator").send(Hello(V, "broker", "n1")))
        acceptor.send(Welcome(V, "b1"))
    step = chunk or len(stream)
    returned = 0
    for at in range(0, len(stream), step):
        got = keeping.receive_data(stream[at : at + step])
        assert plain.receive_data(stream[at : at + step]) == got
        assert keeping.received_payloads == [f[4:] for f in frames[returned : returned + len(got)]]
        assert plain.received_payloads == []
        returned += len(got)
    assert returned == len(messages)


def test_publish_arrays_are_the_publishes_checked_and_the_rest_unchanged() -> None:
    """With publish_arrays, a Publish comes back as its PublishArray, also one whose
    sender chose wider msgpack encodings than msgpack's own (an array 16 for the
    message, a str 8 for its id), with the other messages as without it."""
    events = [Publish(f"e{i}", "p", EVENT, ["b1"] if i % 2 else [], i) for i in range(4)]
    wide = (
        b"\xdc\x00\x06"
        + msgpack.packb(Publish.TYPE)
        + b"\xd9\x01w"
        + msgpack.packb("p")
        + b"".join(msgpack.packb(v) for v in ({"n": 1}, [], 7))
    )
    data = (
        b"".join([encode_frame(events[0]), encode_frame(Ping(1)), *map(encode_frame, events[1:])])
        + struct.pack(">I", len(wide))
        + wide
    )
    arrays, plain = Connection("acceptor", publish_arrays=True), Connection("acceptor")
    for acceptor in (arrays, plain):
        acceptor.receive_data(Connection("initiator").send(Hello(V, "broker", "n1")))
        acceptor.send(Welcome(V, "b1"))
    got, expected = arrays.receive_data(data), plain.receive_data(data)
    assert expected[-1] == Publish("w", "p", {"n": 1}, [], 7)
    assert got == [publish_array(m) if isinstance(m, Publish) else m for m in expected]
    assert [type(m) for m in got] == [list, Ping, list, list, list, list]
    assert [publish_of(a) for a in got if type(a) is list] == [*events, expected[-1]]


def test_the_delivers_of_one_deliveries_frame_share_its_kept_payload() -> None:
    delivers = [Deliver([i], f"e{i}", "p", EVENT, ["b1"], i) for i in range(3)]
    messages = [*delivers[:2], SubAck(3), delivers[2]]
    data = join_frames([encode_frame(m) for m in messages])
    client = Connection("initiator", keep_payloads=True)
    client.send(Hello(V, "client", "c1"))
    client.receive_data(encode_frame(Welcome(V, "b1")))
    assert client.receive_data(data) == messages
    starts = [*frame_starts(data), len(data)]
    payloads = [data[a + 4 : b] for a, b in zip(starts, starts[1:], strict=False)]
    assert client.received_payloads == [payloads[0], payloads[0], payloads[1], payloads[2]]


def test_send_reuses_a_preencoded_frame() -> None:
    event = Publish("e1", "p1", EVENT, ["b1"], 5)
    frame = encode_frame(event)
    links = [open_pair("broker")[1] for _ in range(3)]
    assert all(link.send(event, frame) is frame for link in links)
    with pytest.raises(ProtocolError, match="cannot send Publish"):
        Connection("acceptor").send(event, frame)


def test_with_hop_and_to_deliver() -> None:
    event = Publish("e1", "p1", EVENT, ["b8"], 5)
    forwarded = event.with_hop("b4")
    assert forwarded == Publish("e1", "p1", EVENT, ["b8", "b4"], 5)
    assert event.path == ["b8"]
    assert event.to_deliver([1, 2]) == Deliver([1, 2], "e1", "p1", EVENT, ["b8"], 5)
    with pytest.raises(ProtocolError, match=r"with_hop\(broker_id\): expected str, got int"):
        event.with_hop(4)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match=r"to_deliver\(sub_ids\)\[0\]: expected int, got bool"):
        event.to_deliver([True])
    with pytest.raises(ProtocolError, match="does not fit in 64 bits"):
        event.to_deliver([2**64])


# --- framing errors ---------------------------------------------------------------------


def test_oversized_length_fails_as_soon_as_the_prefix_is_in() -> None:
    conn = Connection("acceptor")
    assert conn.receive_data(struct.pack(">I", DEFAULT_MAX_FRAME)[:3]) == []
    expect_error(conn, b"\xff", ERR_FRAMING, "exceeds the maximum of 1048576")
    assert Connection("acceptor").receive_data(struct.pack(">I", DEFAULT_MAX_FRAME)) == []


def test_a_length_prefix_that_is_text_is_named() -> None:
    """The first bytes of another protocol's reply (an HTTP or SSH server's) read as a
    length prefix: the error shows them, so a wrong port is plain to see."""
    expect_error(Connection("initiator"), b"HTTP/1.0 400", ERR_FRAMING, "text 'HTTP'")
    with pytest.raises(ProtocolError) as info:  # (0x80 is no text)
        Connection("acceptor").receive_data(struct.pack(">I", 2**31))
    assert info.value.message.endswith("(max_frame)")


def test_max_frame_is_inclusive_on_both_sides() -> None:
    hello = Hello(V, "client", "c1")
    size = len(encode_message(hello))
    assert Connection("acceptor", max_frame=size).receive_data(encode_frame(hello)) == [hello]
    expect_error(
        Connection("acceptor", max_frame=size - 1), encode_frame(hello), ERR_FRAMING, "exceeds"
    )
    with pytest.raises(ProtocolError, match="over the maximum") as info:
        Connection("initiator", max_frame=size - 1).send(hello)
    assert info.value.code == ERR_FRAMING


def test_zero_length_frame() -> None:
    expect_error(Connection("acceptor"), b"\x00\x00\x00\x00", ERR_FRAMING, "zero-length")


def test_truncated_frame_waits_then_completes() -> None:
    initiator, acceptor = open_pair()
    data = initiator.send(Ping(1)) + initiator.send(Ping(2))
    assert acceptor.receive_data(data[:5]) == []
    assert acceptor.receive_data(data[5:9]) == [Ping(1)]  # and 2 bytes of the next frame
    assert acceptor.receive_data(data[9:]) == [Ping(2)]


def test_truncated_frame_then_garbage() -> None:
    initiator, acceptor = open_pair()
    data = initiator.send(Publish("e1", "p", EVENT, [], 1))
    assert acceptor.receive_data(data[:-1]) == []
    expect_error(acceptor, b"\xc1" + data, ERR_MALFORMED, "not valid msgpack")


def test_random_bytes() -> None:
    expect_error(Connection("acceptor"), b"GET / HTTP/1.1\r\n\r\n", ERR_FRAMING, "exceeds")


# --- malformed payloads -----------------------------------------------------------------

PUB = [Publish.TYPE, "e", "p", {}, [], 5]


def pub(index: int, value: object) -> list[object]:
    wire = list(PUB)
    wire[index] = value
    return wire


DEEP: dict[str, object] = {}
for _ in range(20):
    DEEP = {"x": DEEP}

MALFORMED = [
    case("not msgpack", raw_frame(b"\xc1"), ERR_MALFORMED, "not valid msgpack: FormatError"),
    case("incomplete", raw_frame(b"\x92\x05"), ERR_MALFORMED, "incomplete input"),
    case("extra data", raw_frame(b"\x92\x05\x01\x01"), ERR_MALFORMED, "extra data"),
    case("bad utf-8", raw_frame(b"\x92\x03\xa2\xff\xfe"), ERR_MALFORMED, "can't decode"),
    case("list map key", raw_frame(b"\x81\x91\x01\x02"), ERR_MALFORMED, "unhashable"),
    case("huge array", raw_frame(b"\xdd\xff\xff\xff\xff"), ERR_MALFORMED, "exceeds max_array_len"),
    case("huge map", raw_frame(b"\xdf\xff\xff\xff\xff"), ERR_MALFORMED, "exceeds max_map_len"),
    case("str past the frame", raw_frame(b"\x92\x05\xa5ab"), ERR_MALFORMED, "incomplete input"),
    case("map", framed({"type": 5}), ERR_MALFORMED, "non-empty array [type, fields...], got dict"),
    case("int", framed(5), ERR_MALFORMED, "got int"),
    case("empty array", framed([]), ERR_MALFORMED, "non-empty array"),
    case("unknown code", framed([99, 1]), ERR_UNKNOWN_TYPE, "unknown message type 99"),
    case("bool code", framed([True, 1]), ERR_UNKNOWN_TYPE, "unknown message type True"),
    case("str code", framed(["Ping", 1]), ERR_UNKNOWN_TYPE, "unknown message type 'Ping'"),
    case("too few", framed([Ping.TYPE]), ERR_MALFORMED, "Ping takes 1 field(s), got 0"),
    case("too many", framed([Ping.TYPE, 1, 2]), ERR_MALFORMED, "Ping takes 1 field(s), got 2"),
    case(
        "bool int", framed([Ping.TYPE, True]), ERR_MALFORMED, "Ping.nonce: expected int, got bool"
    ),
    case(
        "float int",
        framed([Flush.TYPE, 1.0]),
        ERR_MALFORMED,
        "Flush.token: expected int, got float",
    ),
    case(
        "nil int",
        framed([SubAck.TYPE, None]),
        ERR_MALFORMED,
        "SubAck.sub_id: expected int, got None",
    ),
    case(
        "err code", framed([Error.TYPE, 1, "x"]), ERR_MALFORMED, "Error.code: expected str, got int"
    ),
    case(
        "attribute list",
        framed(pub(3, {"price": [1]})),
        ERR_MALFORMED,
        "Publish.attributes['price']: expected int, float, str, bool or bytes, got list",
    ),
    case("attr key", framed(pub(3, {7: 1})), ERR_MALFORMED, "Publish.attributes: keys must be str"),
    case("attr nil", framed(pub(3, {"a": None})), ERR_MALFORMED, "attributes['a']: expected int,"),
    case(
        "attribute ext",
        framed(pub(3, {"a": msgpack.ExtType(5, b"x")})),
        ERR_MALFORMED,
        "got ExtType",
    ),
    case("attrs list", framed(pub(3, [])), ERR_MALFORMED, "Publish.attributes: expected dict"),
    case("path str", framed(pub(4, "b1")), ERR_MALFORMED, "Publish.path: expected list of str"),
    case("path item", framed(pub(4, ["b1", 2])), ERR_MALFORMED, "Publish.path[1]: expected str"),
    case(
        "t bool",
        framed(pub(5, True)),
        ERR_MALFORMED,
        "Publish.t_publish_ns: expected int, got bool",
    ),
    case(
        "id bytes", framed(pub(1, b"e")), ERR_MALFORMED, "Publish.event_id: expected str, got bytes"
    ),
    case(
        "sub_ids bool",
        framed([Deliver.TYPE, [1, False], "e", "p", {}, [], 5]),
        ERR_MALFORMED,
        "Deliver.sub_ids[1]: expected int, got bool",
    ),
    case(
        "deliver attrs",
        framed([Deliver.TYPE, [1], "e", "p", {"a": {}}, [], 5]),
        ERR_MALFORMED,
        "Deliver.attributes['a']: expected int, float, str, bool or bytes, got dict",
    ),
    case(
        "filter dict",
        framed([Subscribe.TYPE, 1, {"a": 1}]),
        ERR_MALFORMED,
        "Subscribe.filter: expected list of constraints, got dict",
    ),
    case(
        "constraint 4",
        framed([Subscribe.TYPE, 1, [["a", "=", 1, 2]]]),
        ERR_MALFORMED,
        "Subscribe.filter[0]: expected [name, op] or [name, op, value], got 4 items",
    ),
    case(
        "constraint name",
        framed([Subscribe.TYPE, 1, [["a", "exists"], [1, "=", 1]]]),
        ERR_MALFORMED,
        "Subscribe.filter[1][0] (name): expected str, got int",
    ),
    case(
        "constraint value",
        framed([Subscribe.TYPE, 1, [["a", "=", [1]]]]),
        ERR_MALFORMED,
        "Subscribe.filter[0][2] (value): expected int, float, str, bool or bytes, got list",
    ),
    case(
        "stats bool",
        framed([Stats.TYPE, {"links": {"up": True}}]),
        ERR_MALFORMED,
        "Stats.stats['links']['up']: expected int, float, str or dict, got bool",
    ),
    case("stats deep", framed([Stats.TYPE, DEEP]), ERR_MALFORMED, "nested deeper than 16"),
]


@pytest.mark.parametrize(("data", "code", "text"), MALFORMED)
def test_malformed_payload(data: bytes, code: str, text: str) -> None:
    expect_error(open_pair("broker")[1], data, code, text)


@pytest.mark.parametrize(("data", "code", "text"), MALFORMED)
def test_malformed_payload_among_other_frames(data: bytes, code: str, text: str) -> None:
    """A bad payload between good frames of the same read is refused with the same
    words, also when its msgpack runs on into the next frame's bytes."""
    before, after = framed([Ping.TYPE, 1]), framed([Ping.TYPE, 2])
    expect_error(open_pair("broker")[1], data + after, code, text)
    expect_error(open_pair("broker")[1], before + data + after, code, text)


@pytest.mark.parametrize(
    ("data", "code", "text"), [c for c in MALFORMED if c.values[0][4:6] == PUBLISH_HEAD]
)
def test_a_bad_publish_is_refused_in_the_same_words_as_an_array(
    data: bytes, code: str, text: str
) -> None:
    """The Publishes among the malformed payloads (those a broker decodes without
    `message_of`'s dispatch) are refused as they are without publish_arrays."""
    acceptor = Connection("acceptor", publish_arrays=True)
    acceptor.receive_data(Connection("initiator").send(Hello(V, "broker", "n1")))
    acceptor.send(Welcome(V, "b1"))
    expect_error(acceptor, data, code, text)


def test_one_read_of_several_kinds_and_a_cut_frame() -> None:
    """Messages of several kinds in one read, and a read that ends inside a frame."""
    initiator, acceptor = open_pair("broker")
    messages = [
        Publish("e1", "p", EVENT, ["1"], 7),
        Ping(3),
        Subscribe(4, [["family", "=", 7], ["name", "prefix", "ab"]]),
        Publish("e2", "p", {"blob": b"x" * 300}, [], 8),
        Flush(9),
    ]
    data = b"".join(initiator.send(m) for m in messages)
    assert acceptor.receive_data(data + data[:7]) == messages
    assert acceptor.receive_data(data[7:]) == messages


HELLO_ERRORS = [
    case(
        "role", [Hello.TYPE, V, "monitor", "x", None], "Hello.role: expected 'client' or 'broker'"
    ),
    case("secret", [Hello.TYPE, V, "client", "x", 5], "Hello.secret: expected str, got int"),
    case("no secret", [Hello.TYPE, V, "client", "x"], "Hello takes 4 field(s), got 3"),
    case("node id", [Hello.TYPE, V, "client", None, None], "Hello.node_id: expected str, got None"),
]


@pytest.mark.parametrize(("wire", "text"), HELLO_ERRORS)
def test_malformed_hello(wire: list[object], text: str) -> None:
    expect_error(Connection("acceptor"), framed(wire), ERR_MALFORMED, text)


# --- state machine violations -----------------------------------------------------------


def acceptor_after_hello() -> Connection:
    acceptor = Connection("acceptor")
    acceptor.receive_data(encode_frame(Hello(V, "client", "c1")))
    return acceptor


def initiator_after_hello() -> Connection:
    initiator = Connection("initiator")
    initiator.send(Hello(V, "client", "c1"))
    return initiator


VIOLATIONS = [
    case(
        "publish before handshake",
        lambda: Connection("acceptor"),
        Publish("e", "p", {}, [], 1),
        ERR_UNEXPECTED,
        "received Publish during the handshake (state AWAIT_HELLO)",
    ),
    case(
        "hello twice before welcome",
        acceptor_after_hello,
        Hello(V, "client", "c1"),
        ERR_UNEXPECTED,
        "received Hello during the handshake (state SEND_WELCOME)",
    ),
    case(
        "hello after handshake",
        lambda: open_pair()[1],
        Hello(V, "client", "c1"),
        ERR_UNEXPECTED,
        "received Hello after the handshake completed",
    ),
    case(
        "welcome to acceptor",
        lambda: Connection("acceptor"),
        Welcome(V, "b1"),
        ERR_UNEXPECTED,
        "received Welcome during the handshake (state AWAIT_HELLO)",
    ),
    case(
        "welcome before hello sent",
        lambda: Connection("initiator"),
        Welcome(V, "b1"),
        ERR_UNEXPECTED,
        "(state SEND_HELLO)",
    ),
    case(
        "ping before welcome",
        initiator_after_hello,
        Ping(1),
        ERR_UNEXPECTED,
        "received Ping during the handshake (state AWAIT_WELCOME)",
    ),
    case(
        "hello to initiator",
        initiator_after_hello,
        Hello(V, "broker", "b1"),
        ERR_UNEXPECTED,
        "received Hello",
    ),
    case(
        "hello version",
        lambda: Connection("acceptor"),
        Hello(V + 1, "client", "c1"),
        ERR_VERSION,
        f"peer speaks protocol version {V + 1}, this side speaks {V}",
    ),
    case(
        "welcome version",
        initiator_after_hello,
        Welcome(0, "b1"),
        ERR_VERSION,
        "peer speaks protocol version 0",
    ),
    case(
        "deliver from client",
        lambda: open_pair("client")[1],
        Deliver([1], "e", "p", {}, [], 1),
        ERR_UNEXPECTED,
        "received Deliver (a client may not send Deliver to a broker)",
    ),
    case(
        "deliver between brokers",
        lambda: open_pair("broker")[1],
        Deliver([1], "e", "p", {}, [], 1),
        ERR_UNEXPECTED,
        "(a broker may not send Deliver to a broker)",
    ),
    case(
        "subscribe to client",
        lambda: open_pair("client")[0],
        Subscribe(1, []),
        ERR_UNEXPECTED,
        "(a broker may not send Subscribe to a client)",
    ),
    case(
        "stats to broker",
        lambda: open_pair("client")[1],
        Stats({}),
        ERR_UNEXPECTED,
        "(a client may not send Stats to a broker)",
    ),
]


@pytest.mark.parametrize(("make", "message", "code", "text"), VIOLATIONS)
def test_violation(make: Callable[[], Connection], message: Message, code: str, text: str) -> None:
    expect_error(make(), encode_frame(message), code, text)


def test_state_changes_apply_to_later_frames_of_the_same_chunk() -> None:
    hello, ping, bye = (encode_frame(m) for m in (Hello(V, "client", "c"), Ping(1), Bye("x")))
    assert Connection("acceptor").receive_data(hello + bye) == [Hello(V, "client", "c"), Bye("x")]
    text = "received Ping during the handshake (state SEND_WELCOME)"  # no pipelining
    expect_error(Connection("acceptor"), hello + ping, ERR_UNEXPECTED, text)
    expect_error(open_pair()[1], bye + ping, ERR_UNEXPECTED, "received Ping after Bye")


def test_violation_after_valid_frames_in_the_same_chunk() -> None:
    initiator, acceptor = open_pair()
    data = initiator.send(Ping(1)) + encode_frame(Hello(V, "client", "c1"))
    expect_error(acceptor, data, ERR_UNEXPECTED, "received Hello")


def test_failed_connection_refuses_to_send_and_error_frame_answers() -> None:
    initiator, acceptor = open_pair()
    with pytest.raises(ProtocolError) as info:
        acceptor.receive_data(framed([Ping.TYPE, "x"]))
    with pytest.raises(ProtocolError, match="answer with error_frame"):
        acceptor.send(Pong(1))
    [error] = initiator.receive_data(error_frame(info.value.code, info.value.message))
    assert error == Error(ERR_MALFORMED, "Ping.nonce: expected int, got str")
    assert initiator.peer_closed


# --- sending rules and closing ----------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message", "text"),
    [
        (lambda: Connection("initiator"), Publish("e", "p", {}, [], 1), "during the handshake"),
        (initiator_after_hello, Ping(1), "(state AWAIT_WELCOME)"),
        (lambda: Connection("initiator"), Welcome(V, "b1"), "(state SEND_HELLO)"),
        (lambda: Connection("acceptor"), Hello(V, "broker", "b1"), "(state AWAIT_HELLO)"),
        (acceptor_after_hello, Ping(1), "(state SEND_WELCOME)"),
        (lambda: open_pair()[0], Hello(V, "client", "c1"), "after the handshake completed"),
        (lambda: open_pair()[0], Deliver([1], "e", "p", {}, [], 1), "a client may not send"),
        (lambda: open_pair()[1], StatsRequest(), "a broker may not send StatsRequest to a client"),
    ],
)
def test_send_refuses_what_the_peer_may_not_receive(
    make: Callable[[], Connection], message: Message, text: str
) -> None:
    conn = make()
    state = conn.state
    with pytest.raises(ProtocolError, match="cannot send") as info:
        conn.send(message)
    assert info.value.code == ERR_UNEXPECTED
    assert text in info.value.message
    assert conn.state is state


def test_bye_half_closes_each_direction() -> None:
    initiator, acceptor = open_pair()
    bye = initiator.send(Bye("done"))
    assert initiator.our_closed and initiator.state is State.OPEN
    with pytest.raises(ProtocolError, match="cannot send Ping after Bye or Error from this side"):
        initiator.send(Ping(1))
    in_flight = Deliver([1], "e", "p", EVENT, [], 1)
    assert initiator.receive_data(acceptor.send(in_flight)) == [in_flight]
    assert acceptor.receive_data(bye) == [Bye("done")]
    assert acceptor.peer_closed
    acceptor.send(FlushAck(1))  # the acceptor's direction is still open
    assert initiator.receive_data(acceptor.send(Bye("bye too"))) == [Bye("bye too")]
    assert initiator.state is acceptor.state is State.CLOSED
    expect_error(
        acceptor, encode_frame(Ping(1)), ERR_UNEXPECTED, "after Bye or Error from the peer"
    )


def test_refused_handshake() -> None:
    initiator, acceptor = Connection("initiator"), Connection("acceptor")
    hello = Hello(V, "client", "c1", secret="wrong")
    assert acceptor.receive_data(initiator.send(hello)) == [hello]
    refusal = acceptor.send(Error("auth", "bad secret"))
    assert initiator.receive_data(refusal) == [Error("auth", "bad secret")]
    assert initiator.peer_closed and initiator.state is State.AWAIT_WELCOME
    initiator.send(Bye("ok"))
    assert initiator.state is State.CLOSED
    expect_error(initiator, encode_frame(Welcome(V, "b1")), ERR_UNEXPECTED, "received Welcome")


def test_refusal_before_hello() -> None:
    initiator = Connection("initiator")
    assert initiator.receive_data(Connection("acceptor").send(Bye("full"))) == [Bye("full")]
    assert initiator.peer_closed


def test_connection_arguments() -> None:
    with pytest.raises(ValueError, match="side"):
        Connection("client")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_frame"):
        Connection("acceptor", max_frame=2**32)
    assert Connection("acceptor", max_frame=10).max_frame == 10


# --- local construction -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "text"),
    [
        (lambda: Publish("e", "p", {"a": (1,)}, [], 1), "Publish.attributes['a']: expected int,"),
        (
            lambda: Publish("e", "p", {}, ("b1",), 1),
            "Publish.path: expected list of str, got tuple",
        ),
        (lambda: Publish("e", "p", {"a": 2**64}, [], 1), "Publish.attributes['a']: 1844"),
        (lambda: Publish("e", "p", {}, [], -(2**63) - 1), "does not fit in 64 bits"),
        (lambda: Deliver([-(2**63) - 1], "e", "p", {}, [], 1), "Deliver.sub_ids[0]: -9223"),
        (lambda: Subscribe(1, [("a", "exists")]), "Subscribe.filter[0]: expected [name, op]"),
        (lambda: Hello(V, "Client", "c"), "Hello.role: expected 'client' or 'broker'"),
        (lambda: Stats({"a": [1]}), "Stats.stats['a']: expected int, float, str or dict"),
        (lambda: Ping(True), "Ping.nonce: expected int, got bool"),
    ],
)
def test_invalid_messages_cannot_be_built(build: Callable[[], object], text: str) -> None:
    with pytest.raises(ProtocolError) as info:
        build()
    assert isinstance(info.value, ValueError)
    assert info.value.code == ERR_MALFORMED
    assert text in info.value.message, info.value.message


def test_messages_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Ping(1).nonce = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    "message",
    [
        Publish("e1", "pub", {"n": 1, "s": "x"}, ["1", "2"], 7),
        Deliver([3, 4], "e1", "pub", {"n": 1}, ["1"], 7),
    ],
)
def test_decoded_events_are_whole_frozen_messages(message: Publish | Deliver) -> None:
    """Publish and Deliver are decoded without their __init__ (messages.unfrozen_twin):
    what comes out is an instance of the class itself, equal to it, with its fields,
    and frozen."""
    decoded = decode_message(encode_message(message))
    assert type(decoded) is type(message)
    assert decoded == message and repr(decoded) == repr(message)
    assert dataclasses.fields(decoded) == dataclasses.fields(message)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decoded.event_id = "other"  # type: ignore[misc]


# --- properties -------------------------------------------------------------------------

ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
texts = st.text(max_size=10)
floats = st.floats(allow_nan=False)
scalars = st.one_of(ints, floats, texts, st.booleans(), st.binary(max_size=10))
attributes = st.dictionaries(texts, scalars, max_size=6)
paths = st.lists(texts, max_size=4)
constraints = st.one_of(st.tuples(texts, texts), st.tuples(texts, texts, st.none() | scalars))


def stats_trees(depth: int = 3) -> st.SearchStrategy[dict]:
    tree = st.dictionaries(texts, ints | floats | texts, max_size=3)
    for _ in range(depth):
        tree = st.dictionaries(texts, ints | floats | texts | tree, max_size=3)
    return tree


STRATEGIES: dict[type, st.SearchStrategy[Message]] = {
    Hello: st.builds(Hello, ints, st.sampled_from(["client", "broker"]), texts, st.none() | texts),
    Welcome: st.builds(Welcome, ints, texts),
    Bye: st.builds(Bye, texts),
    Error: st.builds(Error, texts, texts),
    Ping: st.builds(Ping, ints),
    Pong: st.builds(Pong, ints),
    Subscribe: st.builds(Subscribe, ints, st.lists(constraints.map(list), max_size=4)),
    SubAck: st.builds(SubAck, ints),
    Unsubscribe: st.builds(Unsubscribe, ints),
    UnsubAck: st.builds(UnsubAck, ints),
    Publish: st.builds(Publish, texts, texts, attributes, paths, ints),
    Deliver: st.builds(Deliver, st.lists(ints, max_size=3), texts, texts, attributes, paths, ints),
    Flush: st.builds(Flush, ints),
    FlushAck: st.builds(FlushAck, ints),
    StatsRequest: st.just(StatsRequest()),
    Stats: st.builds(Stats, stats_trees()),
}
messages = st.one_of(*STRATEGIES.values())


def test_strategies_cover_every_type() -> None:
    assert set(STRATEGIES) == set(MESSAGE_TYPES)


@given(messages)
def test_valid_messages_round_trip(message: Message) -> None:
    frame = encode_frame(message)
    decoded = decode_message(frame[4:])
    assert decoded == message
    assert encode_frame(decoded) == frame
    if DIRECTION_TABLE[type(message)][1]:
        sender, receiver = link_for(type(message))
        assert receiver.receive_data(sender.send(message)) == [message]


def feed(conn: Connection, data: bytes, cuts: list[int]) -> None:
    """Feed ``data`` in chunks; every call returns messages or raises ProtocolError, after
    which every call raises ProtocolError again."""
    failed = False
    for start, stop in zip([0, *cuts], [*cuts, len(data)], strict=True):
        try:
            got = conn.receive_data(data[start:stop])
        except ProtocolError:
            assert conn.state is State.ERROR
            failed = True
        else:
            assert not failed
            assert all(isinstance(m, MESSAGE_TYPES) for m in got)


hello_frame = encode_frame(Hello(V, "broker", "b2"))
random_frames = st.lists(st.binary(min_size=0, max_size=40).map(raw_frame), max_size=4)


@settings(max_examples=300)
@given(
    prefix=st.sampled_from([b"", hello_frame]),
    frames=random_frames,
    tail=st.binary(max_size=60),
    data=st.data(),
)
def test_arbitrary_bytes_give_messages_or_protocol_error(
    prefix: bytes, frames: list[bytes], tail: bytes, data: st.DataObject
) -> None:
    stream = prefix + b"".join(frames) + tail
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    feed(Connection("acceptor"), stream, cuts)


keys = st.none() | st.booleans() | ints | floats | texts | st.binary(max_size=8)
structures = st.recursive(
    keys | st.floats(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)
codes = st.sampled_from([cls.TYPE for cls in MESSAGE_TYPES]) | st.integers(-3, 40)
arrays = st.builds(lambda code, rest: [code, *rest], codes, st.lists(structures, max_size=7))


@st.composite
def mutated_messages(draw: st.DrawFn) -> list[object]:
    """The wire array of a valid message with one field replaced by anything."""
    message = draw(messages)
    wire = msgpack.unpackb(encode_message(message))
    if len(wire) > 1:
        wire[draw(st.integers(1, len(wire) - 1))] = draw(structures)
    return wire


def _same_type(value: object) -> st.SearchStrategy[object]:
    """Values of the Python type of `value` (anything for containers)."""
    by_type: dict[type, st.SearchStrategy[object]] = {
        bool: st.booleans(),
        int: ints,
        float: floats,
        str: texts,
        bytes: st.binary(max_size=8),
        type(None): st.none(),
    }
    return by_type.get(type(value), structures)


@st.composite
def retyped_messages(draw: st.DrawFn) -> list[object]:
    """The wire array of a valid message with one field replaced by another value of the
    same type: often still valid, which is where a field could be coerced or let through
    unchecked (an arbitrary replacement is refused nearly always)."""
    wire = msgpack.unpackb(encode_message(draw(messages)))
    if len(wire) > 1:
        i = draw(st.integers(1, len(wire) - 1))
        wire[i] = draw(_same_type(wire[i]))
    return wire


@settings(max_examples=400)
@given(st.one_of(structures, arrays, mutated_messages(), retyped_messages()))
def test_arbitrary_msgpack_gives_valid_message_or_protocol_error(obj: object) -> None:
    payload = msgpack.packb(obj, use_bin_type=True)
    conn = open_pair("broker")[1]
    try:
        got = conn.receive_data(raw_frame(payload))
    except ProtocolError:
        assert conn.state is State.ERROR
        event("refused")
        return
    event("accepted")
    [message] = got
    assert encode_message(message) == payload  # nothing was coerced on the way in
    assert encode_message(dataclasses.replace(message)) == payload  # full validation agrees


# --- a read that is one whole Publish or Deliver frame ----------------------------------


HEADS = {Publish: PUBLISH_HEAD, Deliver: DELIVER_HEAD}


@st.composite
def event_payloads(draw: st.DrawFn, kind: type[Message]) -> bytes:
    """A payload that begins as a ``kind``'s (Publish or Deliver) does: a valid one, one
    with a field replaced (by anything, or by a value of the same type), or one with
    bytes after the array."""
    wire = msgpack.unpackb(encode_message(draw(STRATEGIES[kind])))
    how = draw(st.sampled_from(["valid", "mutated", "retyped", "trailing"]))
    if how in ("mutated", "retyped"):
        i = draw(st.integers(1, len(wire) - 1))
        wire[i] = draw(structures if how == "mutated" else _same_type(wire[i]))
    payload = msgpack.packb(wire, use_bin_type=True)
    if how == "trailing":
        payload += draw(st.binary(min_size=1, max_size=12))
    assert payload[:2] == HEADS[kind]
    return payload


def lone_receiver(
    kind: type[Message], options: dict[str, bool], handshake: str | None, built: list[object]
) -> Connection:
    """The side that receives ``kind`` (a broker for Publish, a client building its
    Delivers into ``built`` for Deliver), with ``options``, after a handshake with a
    ``handshake`` peer or as itself (None: before any); a broker holds limits small
    enough for generated events to break."""
    if kind is Publish:
        conn = Connection("acceptor", limits=Limits(max_attributes=3, max_value_len=6), **options)
        if handshake is not None:
            conn.receive_data(Connection("initiator").send(Hello(V, handshake, "n1")))
            conn.send(Welcome(V, "b1"))
        return conn

    def build(*fields: object) -> tuple[object, ...]:
        built.append(("built", *fields))
        return built[-1]

    conn = Connection("initiator", build_deliver=build, **options)
    if handshake is not None:
        broker = Connection("acceptor")
        broker.receive_data(conn.send(Hello(V, handshake, "n1")))
        conn.receive_data(broker.send(Welcome(V, "b1")))
    return conn


def outcome(conn: Connection, reads: list[bytes]) -> tuple[object, ...]:
    """What ``conn`` makes of ``reads``, one after the other: the messages, the payloads
    and frames kept for them, or the ProtocolError that ended it."""
    got: list[object] = []
    try:
        for data in reads:
            got += conn.receive_data(data)
    except ProtocolError as exc:
        return ("refused", exc.code, exc.message, conn.state)
    return (got, conn.received_payloads, bytes(conn.received_frames), conn.state)


@settings(max_examples=300)
@given(
    data=st.data(),
    kind=st.sampled_from([Publish, Deliver]),
    prefix_error=st.sampled_from([0, 0, 0, -1, 1]),
    options=st.fixed_dictionaries(
        {
            "publish_arrays": st.booleans(),
            "keep_payloads": st.booleans(),
            "keep_frames": st.booleans(),
        }
    ),
    handshake=st.sampled_from(["client", "broker", None]),
    leftover=st.sampled_from([b"", b"", b"\x00", b"\x00\x00\x00"]),
)
def test_a_lone_event_frame_gives_what_the_same_bytes_in_two_reads_give(
    data: st.DataObject,
    kind: type[Message],
    prefix_error: int,
    options: dict[str, bool],
    handshake: str | None,
    leftover: bytes,
) -> None:
    """A read that is one whole Publish or Deliver frame with nothing buffered is decoded
    straight from the read (`Connection._lone_event`); cut in two, the same bytes take
    the stream decoder's way. Both give the same message (a client's Delivers built the
    same, as often), kept payload and frame, or the same violation, and the connection
    goes on the same: the next frame too. After a ``leftover`` (the start of a frame,
    buffered) such a read is no lone frame: it goes on that frame."""
    payload = data.draw(event_payloads(kind))
    frame = struct.pack(">I", len(payload) + prefix_error) + payload
    built_whole: list[object] = []
    built_cut: list[object] = []
    whole = lone_receiver(kind, options, handshake, built_whole)
    cut = lone_receiver(kind, options, handshake, built_cut)
    first = outcome(whole, [leftover, frame])
    event(f"{kind.__name__} {first[0] if first[0] == 'refused' else 'accepted'}")
    assert first == outcome(cut, [leftover, frame[:1], frame[1:]])
    after = encode_frame(
        Publish("next", "p", {"n": 1}, [], 2)
        if kind is Publish
        else Deliver([1], "next", "p", {"n": 1}, [], 2)
    )
    assert outcome(whole, [after]) == outcome(cut, [after])
    assert built_whole == built_cut


# --- a client's own deliveries (build_deliver) ------------------------------------------


def building_pair(built: list[tuple[object, ...]]) -> tuple[Connection, Connection]:
    """(initiator, acceptor) after the handshake; the initiator makes each Deliver into a
    tuple ("built", *its fields), also appended to ``built``."""

    def build(*fields: object) -> tuple[object, ...]:
        built.append(("built", *fields))
        return built[-1]

    initiator = Connection("initiator", build_deliver=build)
    acceptor = Connection("acceptor")
    acceptor.receive_data(initiator.send(Hello(V, "client", "n1")))
    initiator.receive_data(acceptor.send(Welcome(V, "b1")))
    return initiator, acceptor


def deliver_fields(message: Deliver) -> tuple[object, ...]:
    return tuple(getattr(message, f.name) for f in dataclasses.fields(message))


def test_build_deliver_makes_what_receive_data_returns_for_a_deliver() -> None:
    built: list[tuple[object, ...]] = []
    client, broker = building_pair(built)
    first = next(m for m in EXAMPLES if type(m) is Deliver)
    second = Deliver([1], "e2", "p", {}, [], 5)
    stream = b"".join(broker.send(m) for m in (Ping(1), first, Stats({"n": 1}), second, SubAck(3)))
    got = client.receive_data(stream)
    assert got == [Ping(1), built[0], Stats({"n": 1}), built[1], SubAck(3)]
    assert built == [("built", *deliver_fields(first)), ("built", *deliver_fields(second))]


@given(STRATEGIES[Deliver])
def test_build_deliver_gets_the_fields_a_deliver_decodes_to(message: Deliver) -> None:
    built: list[tuple[object, ...]] = []
    client, broker = building_pair(built)
    assert client.receive_data(broker.send(message)) == [("built", *deliver_fields(message))]


BAD_DELIVERS = [
    case("sub id", [Deliver.TYPE, [1, "2"], "e", "p", {}, [], 5], "Deliver.sub_ids[1]"),
    case("value", [Deliver.TYPE, [1], "e", "p", {"a": [1]}, [], 5], "Deliver.attributes['a']"),
    case("path", [Deliver.TYPE, [1], "e", "p", {}, [7], 5], "Deliver.path[0]"),
    case("length", [Deliver.TYPE, [1], "e", "p", {}, []], "Deliver takes 6 field(s), got 5"),
]


@pytest.mark.parametrize(("wire", "text"), BAD_DELIVERS)
def test_build_deliver_is_not_given_a_malformed_deliver(wire: list[object], text: str) -> None:
    """The same error as without a builder, and nothing built."""
    built: list[tuple[object, ...]] = []
    expect_error(building_pair(built)[0], framed(wire), ERR_MALFORMED, text)
    expect_error(open_pair()[0], framed(wire), ERR_MALFORMED, text)
    assert built == []


def test_build_deliver_does_not_make_a_deliver_receivable() -> None:
    """An acceptor given a builder still refuses a Deliver from its client."""
    acceptor = Connection("acceptor", build_deliver=lambda *fields: fields)
    sender = Connection("initiator")
    acceptor.receive_data(sender.send(Hello(V, "client", "n1")))
    sender.receive_data(acceptor.send(Welcome(V, "b1")))
    deliver = next(m for m in EXAMPLES if type(m) is Deliver)
    expect_error(acceptor, encode_frame(deliver), ERR_UNEXPECTED, "received Deliver")


# --- Deliveries: a broker's frame of several Delivers to a client -------------------------

TO_CLIENT = [m for m in EXAMPLES if ("broker", "client") in DIRECTION_TABLE[type(m)][1]]
CONTROL_TO_CLIENT = [m for m in TO_CLIENT if type(m) is not Deliver and type(m) not in (Bye, Error)]


@st.composite
def to_client_streams(draw: st.DrawFn) -> list[Message]:
    """What a broker queues for a client: Delivers, a few of them large, among control
    messages."""
    delivers = st.builds(
        Deliver,
        st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=3),
        st.text(max_size=6),
        st.just("p"),
        st.one_of(
            st.just(EVENT),
            st.binary(min_size=1, max_size=40_000).map(lambda blob: {"blob": blob}),
        ),
        st.lists(st.text(max_size=3), max_size=3),
        st.integers(0, 2**63 - 1),
    )
    return draw(
        st.lists(st.one_of(delivers, delivers, st.sampled_from(CONTROL_TO_CLIENT)), max_size=60)
    )


@settings(max_examples=60, deadline=None)
@given(to_client_streams())
def test_joined_frames_give_the_same_messages(messages: list[Message]) -> None:
    """join_frames's bytes give the client the messages of the frames, in order; runs
    of Delivers become Deliveries frames of at most DELIVERIES_PAYLOAD bytes (a larger
    Deliver alone stays a frame of its own)."""
    frames = [encode_frame(m) for m in messages]
    data = join_frames(frames)
    client, _ = open_pair()
    assert client.receive_data(data) == messages
    starts = [*frame_starts(data), len(data)]
    for start, stop in zip(starts, starts[1:], strict=False):
        payload = data[start + 4 : stop]
        if payload[:2] == bytes((0x92, Deliveries.TYPE)):
            assert len(payload) <= DELIVERIES_PAYLOAD
        else:
            assert data[start:stop] in frames
    delivers = sum(type(m) is Deliver for m in messages)
    assert len(starts) - 1 <= len(messages) - delivers + max(delivers, 1)


def test_a_run_of_delivers_is_one_frame_and_others_keep_their_place() -> None:
    delivers = [Deliver([i], f"e{i}", "p", EVENT, ["b1"], i) for i in range(3)]
    messages = [*delivers[:2], SubAck(3), delivers[2], Pong(4)]
    data = join_frames([encode_frame(m) for m in messages])
    assert len(frame_starts(data)) == 4  # Deliveries of two, SubAck, Deliver, Pong
    client, _ = open_pair()
    assert client.receive_data(data) == messages
    lone = encode_frame(delivers[0])
    assert join_frames([lone]) is lone


def test_deliveries_go_to_the_client_builder() -> None:
    built: list[tuple[object, ...]] = []
    client, _ = building_pair(built)
    delivers = [Deliver([i], f"e{i}", "p", EVENT, [], i) for i in range(5)]
    got = client.receive_data(join_frames([encode_frame(m) for m in delivers]))
    assert got == built
    assert built == [("built", *deliver_fields(m)) for m in delivers]


DELIVER_WIRE = [Deliver.TYPE, [1], "e", "p", {}, [], 5]

BAD_DELIVERIES = [
    case("empty", [Deliveries.TYPE, []], "Deliveries carries an array of Delivers, got list"),
    case("not an array", [Deliveries.TYPE, 5], "Deliveries carries an array of Delivers, got int"),
    case("no elements", [Deliveries.TYPE], "Deliveries takes 1 field(s), got 0"),
    case("a Ping", [Deliveries.TYPE, [DELIVER_WIRE, [Ping.TYPE, 1]]], "only Delivers, got a Ping"),
    case(
        "nested",
        [Deliveries.TYPE, [[Deliveries.TYPE, [DELIVER_WIRE]]]],
        "only Delivers, got a Deliveries",
    ),
    case("bad Deliver", [Deliveries.TYPE, [DELIVER_WIRE, pub(0, 21)]], "Deliver takes 6 field(s)"),
    case(
        "bad sub id",
        [Deliveries.TYPE, [DELIVER_WIRE, [Deliver.TYPE, [1, "2"], "e", "p", {}, [], 5]]],
        "Deliver.sub_ids[1]",
    ),
    case("not a list", [Deliveries.TYPE, [DELIVER_WIRE, "x"]], "got str"),
    case(
        "bad value",
        [Deliveries.TYPE, [DELIVER_WIRE, [Deliver.TYPE, [1], "e", "p", {"a": None}, [], 5]]],
        "Deliver.attributes['a']",
    ),
    case(
        "bad name",
        [Deliveries.TYPE, [DELIVER_WIRE, [Deliver.TYPE, [1], "e", "p", {1: 2}, [], 5]]],
        "Deliver.attributes: keys must be str",
    ),
    case(
        "bad hop",
        [Deliveries.TYPE, [DELIVER_WIRE, [Deliver.TYPE, [1], "e", "p", {}, [7], 5]]],
        "Deliver.path[0]",
    ),
    case(
        "bad publisher",
        [Deliveries.TYPE, [DELIVER_WIRE, [Deliver.TYPE, [1], "e", 3, {}, [], 5]]],
        "Deliver.publisher",
    ),
]


@pytest.mark.parametrize(("wire", "text"), BAD_DELIVERIES)
def test_malformed_deliveries(wire: list[object], text: str) -> None:
    client, _ = open_pair()
    expect_error(client, framed(wire), ERR_MALFORMED, text)


def test_a_deliveries_element_has_an_int_code() -> None:
    """As in a frame of its own, 21.0 is not Deliver's type code."""
    wire = [Deliveries.TYPE, [DELIVER_WIRE, [21.0, *DELIVER_WIRE[1:]]]]
    expect_error(open_pair()[0], framed(wire), ERR_UNKNOWN_TYPE, "unknown message type 21.0")


def test_deliveries_only_where_a_deliver_may_go() -> None:
    frame = join_frames([encode_frame(Deliver([1], f"e{i}", "p", {}, [], i)) for i in range(2)])
    expect_error(open_pair()[1], frame, ERR_UNEXPECTED, "received Deliver")  # to a broker
    expect_error(
        Connection("initiator"), frame, ERR_UNEXPECTED, "received Deliver"
    )  # no Welcome yet
