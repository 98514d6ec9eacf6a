"""Sans-I/O wire protocol of the broker network: framing plus the connection state machine.

Bytes in, messages out (``Connection.receive_data``); messages in, bytes out
(``Connection.send``). No sockets, no trio: the caller moves the bytes, so every rule
here can be tested without a network. The message types live in ``broker.messages``
and are re-exported here.

Framing: a 4-byte big-endian unsigned length, then that many bytes of msgpack payload.
A length of 0, or above the connection's ``max_frame``, is refused as soon as the four
length bytes are in, without waiting for (or buffering) the body. The payloads are
buffered by one msgpack stream decoder (``msgpack.Unpacker``) per connection, fed what
arrives; each payload is taken out of it as bytes and decoded by one ``unpackb`` call,
and must be exactly one object (`Connection._parse_frames`). A read that is exactly one
whole Publish or Deliver frame, with nothing buffered (every event a broker or a
subscriber gets at low rates), is decoded straight from the read instead
(`Connection._lone_event`): the same message and kept bytes, without the stream
decoder's machinery on the way of the event, which costs more than the decoding itself
when the CPU's caches went cold between events (docs/performance.md). With
``keep_payloads`` those bytes are kept beside the messages (``received_payloads``), so
that a broker can forward an event by splicing its own id into the bytes it received
instead of encoding the event again (`RoutedFrames.publish_received`). A broker sends
a client its Delivers joined into `Deliveries` frames (`join_frames`), which
``receive_data`` returns as the Delivers they carry.

Sides. The *initiator* opened the TCP connection: it sends Hello, then waits for Welcome.
The *acceptor* waits for Hello, then answers Welcome (or Error to refuse it). Only brokers
accept connections, so an acceptor's own role is "broker" and an initiator's peer is a
broker; the initiator's role ("client", or "broker" for a child linking to its parent) is
the one its Hello declares. Neither side may send anything but Bye or Error until the
handshake is complete (no pipelining behind Hello).

Closing. Bye and Error close the *sender's* direction only, like a TCP half-close: after
sending Bye a side may still receive what the peer had in flight; after receiving Bye it
may still send (a Bye of its own, say). ``state`` becomes CLOSED once both directions are.

Violations. ``receive_data`` raises ProtocolError for anything malformed or not allowed
by ``DIRECTION_TABLE``; the connection is then in state ERROR for good, and the caller
should write ``error_frame(exc.code, exc.message)`` and close. Messages decoded earlier
in the same ``receive_data`` call are dropped with the connection. ``send`` raises
ProtocolError for a message this side may not send now (ERR_UNEXPECTED) or that does not
fit in a frame (ERR_FRAMING); that is a bug in the caller, and leaves the state unchanged.

Limits. An acceptor given ``limits`` (``broker.limits.Limits``) checks the Publish,
Subscribe and Unsubscribe messages a *client* peer sends once the handshake is complete,
and counts its subscriptions; a message over a limit is a violation with code
``ERR_LIMIT`` (see ``broker.limits``).

Not the protocol's business, left to the caller: checking Hello's secret (answer Error
instead of Welcome), answering Ping with Pong and Flush with FlushAck, timeouts.
"""

import struct
from enum import Enum
from typing import Any, Literal

import msgpack
from msgpack import ExtraData

from broker.limits import ERR_LIMIT, Limits
from broker.messages import (
    DECODERS,
    DELIVER_HEAD,
    DELIVERIES_HEAD,
    ERR_FRAMING,
    ERR_MALFORMED,
    ERR_UNEXPECTED,
    ERR_UNKNOWN_TYPE,
    ERR_VERSION,
    MESSAGE_TYPES,
    PROTOCOL_VERSION,
    PUBLISH_HEAD,
    Attributes,
    Bye,
    Deliver,
    DeliverBuilder,
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
    PublishArray,
    Role,
    Stats,
    StatsRequest,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Welcome,
    _build_deliver,
    _check_str,
    _forwarded_payload,
    checked_publish_array,
    decode_message,
    decoders,
    deliver_head,
    deliveries_decoder,
    deliveries_head,
    encode_forwarded,
    encode_message,
    encode_new_event,
    message_of,
    not_msgpack,
    publish_array,
    publish_of,
)

__all__ = [
    "B2B",
    "B2C",
    "C2B",
    "DEFAULT_MAX_FRAME",
    "DELIVERIES_HEAD",
    "DIRECTION_TABLE",
    "ERR_FRAMING",
    "ERR_LIMIT",
    "ERR_MALFORMED",
    "ERR_UNEXPECTED",
    "ERR_UNKNOWN_TYPE",
    "ERR_VERSION",
    "MESSAGE_TYPES",
    "PROTOCOL_VERSION",
    "PublishArray",
    "RoutedFrames",
    "Bye",
    "Connection",
    "Deliver",
    "DeliverBuilder",
    "Deliveries",
    "Error",
    "Flush",
    "FlushAck",
    "Hello",
    "Limits",
    "Message",
    "Ping",
    "Pong",
    "ProtocolError",
    "Publish",
    "Role",
    "Side",
    "State",
    "Stats",
    "StatsRequest",
    "SubAck",
    "Subscribe",
    "UnsubAck",
    "Unsubscribe",
    "Welcome",
    "decode_message",
    "deliver_frame",
    "encode_frame",
    "encode_message",
    "error_frame",
    "forwarded_frame",
    "frame_starts",
    "join_frames",
    "new_event_frame",
]

DEFAULT_MAX_FRAME = 1_048_576
_LENGTH = struct.Struct(">I")
_EVENT_TAIL = struct.Struct(">BBQ")  # an empty path's fixarray, then a uint64's 0xcf and value
_MAX_LENGTH = 2**32 - 1
_FEED_SIZE = 65536  # receive_data hands msgpack's stream decoder at most this at a time
DELIVERIES_PAYLOAD = 8192
"""The largest payload of a `Deliveries` frame `join_frames` makes. 8 KiB (~55 Delivers
of 150 bytes) is large enough that a client pays one frame's checks for many
deliveries, and small enough that one frame does not decode into more objects at once
than the CPU caches hold, which made 64 KiB frames slower than none
(`python -m bench.fanout_cpu --subscribers 4` measures it, docs/performance.md)."""

Side = Literal["initiator", "acceptor"]


class State(Enum):
    """Where a connection stands. The four handshake states are named after what that
    side has to do next."""

    SEND_HELLO = "send-hello"  # initiator: must send Hello
    AWAIT_WELCOME = "await-welcome"  # initiator: Hello sent, waiting for Welcome
    AWAIT_HELLO = "await-hello"  # acceptor: waiting for Hello
    SEND_WELCOME = "send-welcome"  # acceptor: Hello received, must answer Welcome or Error
    OPEN = "open"  # handshake complete (one direction may be closed already)
    CLOSED = "closed"  # both directions closed by Bye or Error
    ERROR = "error"  # received data violated the protocol; nothing more is accepted


_HANDSHAKE = frozenset(
    {State.SEND_HELLO, State.AWAIT_WELCOME, State.AWAIT_HELLO, State.SEND_WELCOME}
)
# Links, as (sender role, receiver role). There is no client-to-client link.
C2B: tuple[Role, Role] = ("client", "broker")
B2C: tuple[Role, Role] = ("broker", "client")
B2B: tuple[Role, Role] = ("broker", "broker")
_ANY_LINK = (C2B, B2C, B2B)
_TO_BROKER = (C2B, B2B)
_FROM_BROKER = (B2C, B2B)

# Where each message type may be *received*: in which states of the receiver during the
# handshake, and once OPEN, on which links (sender role, receiver role). Anything else is
# ERR_UNEXPECTED. What a side may *send* is what its peer may receive: during the
# handshake, in the peer's counterpart state (_COUNTERPART); once OPEN, on the same link.
# fmt: off
DIRECTION_TABLE: dict[type[Message], tuple[frozenset[State], tuple[tuple[Role, Role], ...]]] = {
    #              handshake states of the receiver         links once OPEN
    Hello:        (frozenset({State.AWAIT_HELLO}),          ()),
    Welcome:      (frozenset({State.AWAIT_WELCOME}),        ()),
    Bye:          (_HANDSHAKE,                              _ANY_LINK),
    Error:        (_HANDSHAKE,                              _ANY_LINK),
    Ping:         (frozenset(),                             _ANY_LINK),
    Pong:         (frozenset(),                             _ANY_LINK),
    Subscribe:    (frozenset(),                             _TO_BROKER),
    SubAck:       (frozenset(),                             _FROM_BROKER),
    Unsubscribe:  (frozenset(),                             _TO_BROKER),
    UnsubAck:     (frozenset(),                             _FROM_BROKER),
    Publish:      (frozenset(),                             _TO_BROKER),
    Deliver:      (frozenset(),                             (B2C,)),
    Flush:        (frozenset(),                             _TO_BROKER),
    FlushAck:     (frozenset(),                             _FROM_BROKER),
    StatsRequest: (frozenset(),                             _TO_BROKER),
    Stats:        (frozenset(),                             _FROM_BROKER),
}
# fmt: on

_COUNTERPART = {
    State.SEND_HELLO: State.AWAIT_HELLO,
    State.AWAIT_HELLO: State.SEND_HELLO,
    State.AWAIT_WELCOME: State.SEND_WELCOME,
    State.SEND_WELCOME: State.AWAIT_WELCOME,
}
_NOTHING: frozenset[type[Message]] = frozenset()
_IN_STATE = {
    state: frozenset(kind for kind, (states, _) in DIRECTION_TABLE.items() if state in states)
    for state in _HANDSHAKE
}
_ON_LINK = {
    link: frozenset(kind for kind, (_, links) in DIRECTION_TABLE.items() if link in links)
    for link in _ANY_LINK
}
_TRANSITIONS = frozenset({Hello, Welcome, Bye, Error})
_LIMITED = frozenset({Publish, Subscribe, Unsubscribe})


def encode_frame(message: Message, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """One complete frame for ``message``, e.g. to encode an event once and write the
    same bytes to many links (see ``Connection.send``'s ``frame`` argument)."""
    return _framed(type(message).__name__, encode_message(message), max_frame)


def new_event_frame(
    event_id: str,
    publisher: str,
    attributes: Attributes,
    t_publish_ns: int,
    max_frame: int = DEFAULT_MAX_FRAME,
) -> bytes:
    """``encode_frame(Publish(event_id, publisher, attributes, [], t_publish_ns))``, the
    same bytes, without building the message, for ``attributes`` that passed
    ``routing.validate_event`` (`messages.encode_new_event`): a client's publish. Send
    it with ``Connection.send_encoded(Publish, frame)``."""
    payload = encode_new_event(event_id, publisher, attributes, t_publish_ns)
    if len(payload) > max_frame:  # (`_framed`, inline: once per event a client publishes)
        return _framed("Publish", payload, max_frame)
    return _LENGTH.pack(len(payload)) + payload


def forwarded_frame(event: Publish, broker_id: str, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """``encode_frame(event.with_hop(broker_id), max_frame)``, the same bytes, without
    building the forwarded message (`messages.encode_forwarded`). Send it with
    ``Connection.send_encoded(Publish, frame)``; `deliver_frame` makes Delivers of it."""
    return _framed("Publish", encode_forwarded(event, broker_id), max_frame)


def _framed(kind: str, payload: bytes, max_frame: int) -> bytes:
    if len(payload) > max_frame:
        raise ProtocolError(
            ERR_FRAMING, f"{kind} needs {len(payload)} bytes, over the maximum of {max_frame}"
        )
    return _LENGTH.pack(len(payload)) + payload


def deliver_frame(
    publish_frame: bytes, sub_ids: list[int], max_frame: int = DEFAULT_MAX_FRAME
) -> bytes:
    """``encode_frame(event.to_deliver(sub_ids), max_frame)``, the same bytes, from
    ``publish_frame = encode_frame(event)`` without encoding the event again: a broker
    delivering one event to several clients encodes it once (`messages.deliver_head`).
    Send it with ``Connection.send_encoded(Deliver, frame)``."""
    if publish_frame[4:6] != PUBLISH_HEAD:
        raise ValueError("deliver_frame: publish_frame is not the frame of a Publish")
    return _spliced_deliver(publish_frame, deliver_head(sub_ids), max_frame)


def _spliced_deliver(publish_frame: bytes, head: bytes, max_frame: int) -> bytes:
    """The Deliver frame of a Publish frame with ``head`` (`deliver_head`) in place of
    the Publish payload's first two bytes."""
    length = len(publish_frame) - 6 + len(head)
    if length > max_frame:
        raise ProtocolError(
            ERR_FRAMING, f"Deliver needs {length} bytes, over the maximum of {max_frame}"
        )
    return _LENGTH.pack(length) + head + publish_frame[6:]


class RoutedFrames:
    """`forwarded_frame` and `deliver_frame` for one broker, the same bytes for less
    per routed event: its id is checked once, not per event, and the Deliver heads of
    the single sub ids it delivered to before are kept (each client numbers its
    subscriptions from 1, so the same few ids recur across clients and events; at most
    HEADS_KEPT of them)."""

    HEADS_KEPT = 4096

    def __init__(self, broker_id: str, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        _check_str(broker_id, "RoutedFrames(broker_id)")
        self.broker_id = broker_id
        self.max_frame = max_frame
        self._heads: dict[int, bytes] = {}
        self._first_hop = msgpack.packb([broker_id])  # the path of a forwarded event
        self._first_hop_extra = len(self._first_hop) - 1  # its growth over the empty path

    def publish(self, event: Publish) -> bytes:
        """``forwarded_frame(event, broker_id, max_frame)``."""
        payload = _forwarded_payload(event, self.broker_id)
        if len(payload) > self.max_frame:
            return _framed("Publish", payload, self.max_frame)  # raises
        return _LENGTH.pack(len(payload)) + payload

    def publish_received(self, event: PublishArray, payload: bytes) -> bytes:
        """`publish` of ``event``, which was decoded from ``payload``: the forwarded frame
        spliced from those bytes (this broker's id put into the empty path) when the event
        came from its publisher in the encoding msgpack gives it, else encoded again.

        The frame decodes to the same message as ``publish(event)``; its bytes are those
        of ``payload`` but for the path (a publisher's own encoding of a field, say a
        float32, is kept). The splice is only taken when the payload's last ten bytes can
        be nothing but the empty path (0x90) and the time as a uint64 (0xcf and its 8
        bytes): a shorter encoding of the time that ended the payload would have its own
        first byte where the time's big-endian bytes are zero, and the other encodings
        of an empty array end in 0x00."""
        if _spliceable(event, payload):
            length = len(payload) + self._first_hop_extra
            if length <= self.max_frame:
                return b"".join(
                    (_LENGTH.pack(length), payload[:-10], self._first_hop, payload[-9:])
                )
        return self.publish(publish_of(event))

    def deliver(self, publish_frame: bytes, sub_ids: list[int]) -> bytes:
        """``deliver_frame(publish_frame, sorted(sub_ids), max_frame)`` of a frame made
        by `publish` or `publish_received`."""
        return _spliced_deliver(publish_frame, self._head(sub_ids), self.max_frame)

    def deliver_received(self, event: PublishArray, payload: bytes, sub_ids: list[int]) -> bytes:
        """``deliver(publish_received(event, payload), sub_ids)``, the same bytes, spliced
        straight from ``payload`` when `publish_received` would splice: for an event
        delivered and not forwarded, one copy of it made instead of two."""
        head = self._head(sub_ids)
        if _spliceable(event, payload):
            length = len(payload) + self._first_hop_extra - 2 + len(head)
            if length <= self.max_frame:
                return b"".join(
                    (_LENGTH.pack(length), head, payload[2:-10], self._first_hop, payload[-9:])
                )
        return _spliced_deliver(self.publish(publish_of(event)), head, self.max_frame)

    def _head(self, sub_ids: list[int]) -> bytes:
        """`deliver_head` of ``sorted(sub_ids)``, kept for single ids."""
        if len(sub_ids) == 1 and type(sub_ids[0]) is int:  # nearly always
            sub_id = sub_ids[0]
            head = self._heads.get(sub_id)
            if head is None:
                head = deliver_head(sub_ids)  # (checks the id's range)
                if len(self._heads) < self.HEADS_KEPT:
                    self._heads[sub_id] = head
            return head
        return deliver_head(sorted(sub_ids))


def _spliceable(event: PublishArray, payload: bytes) -> bool:
    """Whether ``payload``, which ``event`` was decoded from, ends in the empty path and
    the time as a uint64 and begins with a Publish's head (`RoutedFrames.publish_received`
    says why that is enough)."""
    return (
        not event[4]  # the path
        and len(payload) > 10
        and _EVENT_TAIL.unpack_from(payload, len(payload) - 10) == (0x90, 0xCF, event[5])
        and payload[:2] == PUBLISH_HEAD
    )


def join_frames(frames: list[bytes]) -> bytes:
    """The bytes that send ``frames`` in order, but each run of consecutive Deliver
    frames (`deliver_frame`) as `Deliveries` frames of at most DELIVERIES_PAYLOAD
    bytes: what a broker writes to a client. A client decodes a frame of many Delivers
    with one msgpack call and one frame's checks instead of one each, for less per
    Deliver than the broker pays to join them (both measured by
    `python -m bench.fanout_cpu`, docs/performance.md)."""
    if len(frames) == 1:  # nothing to join: a write at low load
        return frames[0]
    out: list[bytes] = []
    run: list[bytes] = []  # Deliver payloads
    size = 0  # of the run's payloads
    for frame in frames:
        if frame[4:6] == DELIVER_HEAD:
            size += len(frame) - 4
            if size > _RUN_PAYLOAD:
                if run:
                    _add_run(run, out)
                run, size = [], len(frame) - 4
            run.append(frame[4:])
        else:
            if run:
                _add_run(run, out)
                run, size = [], 0
            out.append(frame)
    if run:
        _add_run(run, out)
    return b"".join(out)


_RUN_PAYLOAD = DELIVERIES_PAYLOAD - 7  # 7: the longest head, an array 32's


def _add_run(run: list[bytes], out: list[bytes]) -> None:
    """Append the frame of the Deliver payloads ``run`` to ``out``: a `Deliveries`
    frame, or the Deliver frame of one alone (which may be over DELIVERIES_PAYLOAD)."""
    if len(run) == 1:
        out.append(_LENGTH.pack(len(run[0])))
        out.append(run[0])
        return
    head = deliveries_head(len(run))
    body = b"".join(run)
    out.append(_LENGTH.pack(len(head) + len(body)))
    out.append(head)
    out.append(body)


def frame_starts(data: bytes | bytearray) -> list[int]:
    """Where each of the whole frames (length prefix included) that `data` holds one
    after the other starts, as in `Connection.received_frames`; a truncated last frame
    is an error. (A trace writer calls this for every frame a broker received: the loop
    is kept lean.)"""
    starts: list[int] = []
    append, unpack = starts.append, _LENGTH.unpack_from
    start, end = 0, len(data)
    while start + 4 <= end:
        append(start)
        start += 4 + unpack(data, start)[0]
    if start < end:
        raise ProtocolError(ERR_FRAMING, f"{end - start} bytes left over after the frames")
    if start > end:
        last = starts[-1]
        raise ProtocolError(
            ERR_FRAMING, f"last frame truncated ({end - last} of {start - last} bytes)"
        )
    return starts


def error_frame(code: str, message: str) -> bytes:
    """The frame of an Error message: the answer to a violation, written before closing."""
    return encode_frame(Error(code, message))


def _not_one_object(exc: Exception) -> ProtocolError:
    """A payload ``unpackb`` could not decode to exactly one object (``exc``, its error)."""
    if isinstance(exc, ExtraData):
        return not_msgpack(ValueError(f"extra data ({len(exc.extra)} bytes after the object)"))
    return not_msgpack(exc)


def _bad_length(length: int, max_frame: int) -> ProtocolError:
    if length == 0:
        return ProtocolError(ERR_FRAMING, "zero-length frame")
    message = f"frame of {length} bytes exceeds the maximum of {max_frame} (max_frame)"
    prefix = length.to_bytes(4, "big")
    if all(32 <= byte < 127 for byte in prefix):  # e.g. b"HTTP", b"SSH-": a text protocol
        message += f"; its length prefix is the text {prefix.decode()!r}: another protocol?"
    return ProtocolError(ERR_FRAMING, message)


class Connection:
    """The protocol state of one connection, seen from one side (see the module doc).

    ``build_deliver``, if given, makes what `receive_data` returns for a Deliver, from
    its checked fields (`broker.messages.DeliverBuilder`), in place of the Deliver: a
    client builds the deliveries it hands to its application so, without a Deliver in
    between (`client.aio`). With ``publish_arrays``, it returns each Publish as its
    `PublishArray` (a list), checked as the Publish would be, and a broker routes the
    event without building a message object of it.
    """

    def __init__(
        self,
        side: Side,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        limits: Limits | None = None,
        keep_frames: bool = False,
        keep_payloads: bool = False,
        publish_arrays: bool = False,
        build_deliver: DeliverBuilder | None = None,
    ) -> None:
        if side not in ("initiator", "acceptor"):
            raise ValueError(f"side must be 'initiator' or 'acceptor', not {side!r}")
        if not 0 < max_frame <= _MAX_LENGTH:
            raise ValueError(f"max_frame must be in 1..{_MAX_LENGTH}, not {max_frame}")
        self._side: Side = side
        self._max_frame = max_frame
        initiator = side == "initiator"
        self._state = State.SEND_HELLO if initiator else State.AWAIT_HELLO
        self._our_role: Role | None = None if initiator else "broker"
        self._peer_role: Role | None = None
        self._peer_id: str | None = None
        self._our_closed = False
        self._peer_closed = False
        self._error: ProtocolError | None = None
        # The bytes received and not yet returned as messages are in the stream decoder's
        # buffer (only its `read_bytes` is used): the frame at stream offset `_frame_start`
        # (its length, once its prefix is read, in `_length`) and whatever follows it, up
        # to offset `_fed`.
        self._payloads = msgpack.Unpacker(
            read_size=_FEED_SIZE, max_buffer_size=max_frame + 4 + _FEED_SIZE
        )
        self._fed = 0
        self._frame_start = 0
        self._length = 0
        self._buffer = bytearray()  # with `keep_frames`: those bytes again
        self._limits = limits
        self._limited: Limits | None = None  # the limits in force: a client peer, OPEN
        self._subscriptions: set[int] = set()  # a limited peer's subscriptions in force
        self._keep_frames = keep_frames
        self._keep_payloads = keep_payloads
        self._publish_arrays = publish_arrays
        self._decoders = DECODERS if build_deliver is None else decoders(build_deliver)
        self._decode_deliveries = deliveries_decoder(build_deliver or _build_deliver)
        self.received_frames: bytes | bytearray = b""
        """With `keep_frames`: the frames (length prefixes included) of the messages the
        last receive_data returned, as received (a broker's trace decodes them again)."""
        self.received_payloads: list[bytes] = []
        """With `keep_payloads`: the payload each message the last receive_data returned
        came in, one per message, in their order (the Delivers of one `Deliveries` frame
        share its payload)."""
        self._receivable = self._sendable = _NOTHING
        self._update_allowed()

    @property
    def side(self) -> Side:
        return self._side

    @property
    def max_frame(self) -> int:
        return self._max_frame

    @property
    def state(self) -> State:
        return self._state

    @property
    def our_role(self) -> Role | None:
        """Our role: "broker" for an acceptor; an initiator's is known once Hello is sent."""
        return self._our_role

    @property
    def peer_role(self) -> Role | None:
        """The peer's role, known once the peer's Hello or Welcome has arrived."""
        return self._peer_role

    @property
    def peer_id(self) -> str | None:
        """The peer's node id, from its Hello or Welcome."""
        return self._peer_id

    @property
    def our_closed(self) -> bool:
        """This side has sent Bye or Error."""
        return self._our_closed

    @property
    def peer_closed(self) -> bool:
        """The peer has sent Bye or Error."""
        return self._peer_closed

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Any]:
        """Buffer ``data`` and return the messages of every frame it completes (a
        Deliver as ``build_deliver`` made it, if the connection was given one).

        Raises ProtocolError on any violation; the connection is then in state ERROR and
        every later call raises again.
        """
        if self._error is not None:
            error = self._error
            raise ProtocolError(error.code, f"connection already failed: {error.message}")
        if self._fed == self._frame_start:  # nothing buffered
            head = data[4:6]
            if head in (PUBLISH_HEAD, DELIVER_HEAD):
                lone = self._lone_event(data, Publish if head == PUBLISH_HEAD else Deliver)
                if lone is not None:
                    return lone
        messages: list[Any] = []
        payloads: list[bytes] | None = [] if self._keep_payloads else None
        begin = self._frame_start
        try:
            if len(data) <= _FEED_SIZE:  # nearly always: one read of a socket
                self._feed(data)
                self._parse_frames(messages, payloads)
            else:
                for at in range(0, len(data), _FEED_SIZE):
                    self._feed(data[at : at + _FEED_SIZE])
                    self._parse_frames(messages, payloads)
        except ProtocolError as exc:
            self._fail(exc)
            raise
        if payloads is not None:
            self.received_payloads = payloads
        if self._keep_frames:  # hand the buffer over rather than copy the frames out
            buffer = self._buffer
            buffer += data
            consumed = self._frame_start - begin
            self._buffer = buffer[consumed:]  # at most part of one frame
            del buffer[consumed:]
            self.received_frames = buffer
        return messages

    def _lone_event(self, data: bytes | bytearray | memoryview, kind: type) -> list[Any] | None:
        """`receive_data` of ``data`` that begins with the head of a ``kind`` frame (Publish
        or Deliver), while nothing is buffered: if ``data`` is exactly that one whole frame
        and a valid message this side may receive now, the message in a list, with
        ``received_payloads`` and ``received_frames`` set as `receive_data` sets them;
        else None, having changed nothing, for `receive_data`'s general way to decode it
        again and name what is wrong (the stream decoder is not fed: the frame is all
        that arrived). A Deliver is built (``build_deliver``) only once valid, as there."""
        length = len(data) - 4
        if (
            int.from_bytes(data[:4], "big") != length
            or length > self._max_frame
            or kind not in self._receivable
        ):
            return None
        payload = bytes(data[4:])
        try:  # (the head says how many elements, the code first: see `_parse_frames`)
            wire = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            if kind is Deliver:
                message: Any = self._decoders[Deliver.TYPE][2](wire)
            elif self._publish_arrays:
                message = checked_publish_array(wire)
            else:
                message = Publish._from_wire(wire)
            limited = self._limited  # (limits are on a client's messages to a broker)
            if limited is not None and kind is Publish:
                attributes = message[3] if self._publish_arrays else message.attributes
                limited.check_event(attributes, length)
        except Exception:  # msgpack's errors, ProtocolError: reported the general way
            return None
        if self._keep_payloads:
            self.received_payloads = [payload]
        if self._keep_frames:
            self.received_frames = bytes(data)
        return [message]

    def send(self, message: Message, frame: bytes | None = None) -> bytes:
        """The bytes to write for ``message``, after checking this side may send it now.

        ``frame``, if given, must be ``encode_frame(message)``: it is returned as is, so a
        message sent on many links is encoded once.
        """
        kind = type(message)
        if kind not in self._sendable:
            raise self._unexpected(kind, receiving=False)
        if frame is None:
            frame = encode_frame(message, self._max_frame)
        if kind in _TRANSITIONS:
            self._on_sent(message)
        return frame

    def may_send(self, kind: type[Message]) -> bool:
        """Whether this side may send a message of type ``kind`` now (what `send` and
        `send_encoded` check)."""
        return kind in self._sendable

    def send_encoded(self, kind: type[Message], frame: bytes) -> bytes:
        """``send`` of a message of type ``kind`` that is already encoded into ``frame``
        (e.g. by `deliver_frame`): the check that this side may send it now. Only for
        kinds that do not change the connection's state."""
        if kind not in self._sendable:
            raise self._unexpected(kind, receiving=False)
        if kind in _TRANSITIONS:
            raise ValueError(f"send_encoded: {kind.__name__} changes the state; use send")
        return frame

    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        self._payloads.feed(data)
        self._fed += len(data)

    def _parse_frames(self, messages: list[Any], payloads: list[bytes] | None) -> None:
        """Append the messages of all complete frames fed so far, and their payloads to
        ``payloads`` unless it is None."""
        max_frame = self._max_frame
        by_code = self._decoders
        receivable = self._receivable
        limited = self._limited
        read_bytes, unpackb = self._payloads.read_bytes, msgpack.unpackb
        publish_from = checked_publish_array if self._publish_arrays else Publish._from_wire
        arrays = self._publish_arrays
        fed = self._fed
        start, length = self._frame_start, self._length
        try:
            while True:
                if not length:
                    if fed - start < 4:
                        break
                    length = int.from_bytes(read_bytes(4), "big")
                    if not 0 < length <= max_frame:
                        raise _bad_length(length, max_frame)
                stop = start + 4 + length
                if stop > fed:
                    break
                payload = read_bytes(length)
                try:  # (its size limits default to the payload's length)
                    obj = unpackb(payload, raw=False, strict_map_key=False)
                except Exception as exc:  # msgpack's errors: ValueError subclasses, ...
                    raise _not_one_object(exc) from None
                kind: type
                message: Any
                if payload[:2] == PUBLISH_HEAD:  # six elements, Publish's code first: what
                    kind, message = Publish, publish_from(obj)  # message_of finds, for less
                else:
                    kind, message = message_of(obj, by_code)
                    if arrays and kind is Publish:
                        message = publish_array(message)
                if kind not in receivable:  # never a Deliveries: no test on the hot path
                    if kind is not Deliveries:
                        raise self._unexpected(kind, receiving=True)
                    self._receive_deliveries(message, messages)
                    if payloads is not None:
                        payloads += [payload] * (len(messages) - len(payloads))
                    start, length = stop, 0
                    continue
                if limited is not None:
                    if kind is Publish:  # (`_check_limits`, inline: once per event)
                        limited.check_event(message[3] if arrays else message.attributes, length)
                    elif kind in _LIMITED:
                        self._check_limits(limited, message, length)
                if kind in _TRANSITIONS:
                    self._on_received(message)
                    receivable, limited = self._receivable, self._limited
                messages.append(message)
                if payloads is not None:
                    payloads.append(payload)
                start, length = stop, 0
        finally:
            self._frame_start, self._length = start, length

    def _receive_deliveries(self, elements: list[Any], messages: list[Any]) -> None:
        """Append the Delivers of a `Deliveries` frame (its elements): each is checked
        as a Deliver frame would be."""
        if Deliver not in self._receivable:
            raise self._unexpected(Deliver, receiving=True)
        count = len(messages)
        if self._decode_deliveries(elements, messages):
            return
        del messages[count:]  # a bad element: find it, and say what is wrong with it
        by_code = self._decoders
        from_wire = by_code[Deliver.TYPE][2]
        for wire in elements:
            if (
                type(wire) is list
                and len(wire) == 7
                and wire[0] == Deliver.TYPE
                and type(wire[0]) is int  # not 21.0, as `message_of` has it
            ):
                messages.append(from_wire(wire))
            else:  # the words of a frame of its own, or those below
                kind, _ = message_of(wire, by_code)
                raise ProtocolError(
                    ERR_MALFORMED, f"Deliveries carries only Delivers, got a {kind.__name__}"
                )

    def _on_received(self, message: Message) -> None:
        if isinstance(message, Hello | Welcome):
            if message.version != PROTOCOL_VERSION:
                raise ProtocolError(
                    ERR_VERSION,
                    f"peer speaks protocol version {message.version}, "
                    f"this side speaks {PROTOCOL_VERSION}",
                )
            self._peer_id = message.node_id
            if isinstance(message, Hello):
                self._peer_role = message.role
                self._state = State.SEND_WELCOME
            else:
                self._peer_role = "broker"
                self._state = State.OPEN
        else:  # Bye or Error
            self._peer_closed = True
            if self._our_closed:
                self._state = State.CLOSED
        self._update_allowed()

    def _on_sent(self, message: Message) -> None:
        if isinstance(message, Hello):
            self._our_role = message.role
            self._state = State.AWAIT_WELCOME
        elif isinstance(message, Welcome):
            self._state = State.OPEN
            if self._peer_role == "client":
                self._limited = self._limits
        else:  # Bye or Error
            self._our_closed = True
            if self._peer_closed:
                self._state = State.CLOSED
        self._update_allowed()

    def _check_limits(self, limits: Limits, message: Message, size: int) -> None:
        """Raise ProtocolError(ERR_LIMIT) if a client's message (of ``size`` bytes)
        exceeds ``limits``."""
        if type(message) is Publish:
            limits.check_event(message.attributes, size)
        elif isinstance(message, Subscribe):
            limits.check_filter(message.filter, message.sub_id)
            if message.sub_id not in self._subscriptions:
                limits.check_subscription_count(len(self._subscriptions) + 1)
                self._subscriptions.add(message.sub_id)
        elif isinstance(message, Unsubscribe):
            self._subscriptions.discard(message.sub_id)

    def _fail(self, error: ProtocolError) -> None:
        self._error = error
        self._state = State.ERROR
        self._payloads = msgpack.Unpacker()  # nothing more is read: let the bytes go
        self._buffer = bytearray()
        self._update_allowed()

    def _update_allowed(self) -> None:
        """Recompute the sets of message types we may receive and send now."""
        self._receivable = self._allowed(receiving=True)
        self._sendable = self._allowed(receiving=False)

    def _allowed(self, *, receiving: bool) -> frozenset[type[Message]]:
        state = self._state
        if state is State.ERROR or (self._peer_closed if receiving else self._our_closed):
            return _NOTHING
        if state is State.OPEN:
            ours, peers = self._our_role, self._peer_role
            assert ours is not None and peers is not None  # known once OPEN
            return _ON_LINK.get((peers, ours) if receiving else (ours, peers), _NOTHING)
        # During the handshake a side may send what its peer may receive in its state.
        return _IN_STATE[state if receiving else _COUNTERPART[state]]

    def _unexpected(self, kind: type[Message], *, receiving: bool) -> ProtocolError:
        name = kind.__name__
        verb = f"received {name}" if receiving else f"cannot send {name}"
        if self._state is State.ERROR:
            detail = "after the connection failed; answer with error_frame()"
        elif self._peer_closed if receiving else self._our_closed:
            detail = "after Bye or Error from " + ("the peer" if receiving else "this side")
        elif self._state is not State.OPEN:
            detail = f"during the handshake (state {self._state.name})"
        elif kind is Hello or kind is Welcome:
            detail = "after the handshake completed"
        else:
            ours, peers = self._our_role, self._peer_role
            sender, receiver = (peers, ours) if receiving else (ours, peers)
            detail = f"(a {sender} may not send {name} to a {receiver})"
        return ProtocolError(ERR_UNEXPECTED, f"{verb} {detail}")
