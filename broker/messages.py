"""Message types of the broker wire protocol and their msgpack payload codec.

A payload is a msgpack array ``[type_code, field1, field2, ...]`` holding every field
of the message in declaration order (optional fields are sent as nil, never omitted).
Type codes are part of the wire contract:

====  ============  ====  ============  ====  ============  ====  ============
code  message       code  message       code  message       code  message
====  ============  ====  ============  ====  ============  ====  ============
1     Hello         10    Subscribe     20    Publish       30    StatsRequest
2     Welcome       11    SubAck        21    Deliver       31    Stats
3     Bye           12    Unsubscribe   22    Flush
4     Error         13    UnsubAck      23    FlushAck
5     Ping                              24    (Deliveries)
6     Pong
====  ============  ====  ============  ====  ============  ====  ============

Code 24 is not a message of its own but a frame of several Delivers (`Deliveries`),
which a broker sends a client in place of consecutive Deliver frames.

Messages validate their fields when constructed, so one check serves both sides: a
message decoded from the wire is as trustworthy as one built locally, and an invalid
message cannot be sent. The check is strict: ``bool`` is not an ``int``, ``tuple`` is
not a ``list``, subclasses of the builtin types are refused, ints must fit msgpack's
int64/uint64 range. The field annotations are the schema (see ``_CHECKERS``).
"""

import reprlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, ClassVar, Literal, NoReturn, get_args

import msgpack

PROTOCOL_VERSION = 2
"""Major protocol version; a Hello or Welcome with any other version is refused.
2: brokers send clients `Deliveries` frames."""

# Codes of ProtocolError (and of the Error message sent to the peer before closing).
ERR_FRAMING = "framing"  # zero-length frame, or frame longer than the maximum
ERR_MALFORMED = "malformed"  # not msgpack, not an array, wrong field count or types
ERR_UNKNOWN_TYPE = "unknown-type"  # the type code names no message
ERR_VERSION = "version"  # the peer speaks another protocol version
ERR_UNEXPECTED = "unexpected"  # the message is not allowed in this state or direction

Role = Literal["client", "broker"]
Scalar = int | float | str | bool | bytes
Attributes = dict[str, Scalar]
WireFilter = list[list[str | Scalar | None]]
"""A filter's wire form: ``[[name, op, value], ...]``; ``[name, op]`` when there is no value."""
StatsTree = dict[str, "int | float | str | StatsTree"]

MAX_STATS_DEPTH = 16
"""Deepest nesting of dicts accepted in ``Stats.stats`` (bounds the recursive check)."""

_INT_MIN = -(2**63)
_UINT_MAX = 2**64 - 1
_SCALAR_TYPES = frozenset({int, float, str, bool, bytes})
_SCALARS_TEXT = "int, float, str, bool or bytes"

_Check = Callable[[Any, str], None]
"""A field check: takes the value and where it sits (``"Publish.path[2]"``), raises
ProtocolError if the value is not acceptable."""


class ProtocolError(ValueError):
    """A violation of the wire protocol; ``code`` is one of the ``ERR_*`` constants."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# --- field checks (see _Check) --------------------------------------------------------


def _describe(value: object) -> str:
    return "None" if value is None else type(value).__name__


def _fail(where: str, expected: str, value: object) -> NoReturn:
    raise ProtocolError(ERR_MALFORMED, f"{where}: expected {expected}, got {_describe(value)}")


def _check_int(value: object, where: str) -> None:
    if type(value) is not int:
        _fail(where, "int", value)
    if not _INT_MIN <= value <= _UINT_MAX:
        raise ProtocolError(ERR_MALFORMED, f"{where}: {value} does not fit in 64 bits")


def _check_str(value: object, where: str) -> None:
    if type(value) is not str:
        _fail(where, "str", value)


def _check_optional_str(value: object, where: str) -> None:
    if value is not None:
        _check_str(value, where)


def _check_role(value: object, where: str) -> None:
    if type(value) is not str or value not in ("client", "broker"):
        raise ProtocolError(
            ERR_MALFORMED, f"{where}: expected 'client' or 'broker', got {reprlib.repr(value)}"
        )


def _check_list(value: object, where: str, check_item: _Check, expected: str) -> None:
    if type(value) is not list:
        _fail(where, expected, value)
    for index, item in enumerate(value):
        check_item(item, f"{where}[{index}]")


def _check_int_list(value: object, where: str) -> None:
    _check_list(value, where, _check_int, "list of int")


def _check_str_list(value: object, where: str) -> None:
    _check_list(value, where, _check_str, "list of str")


def _check_scalar(value: object, where: str) -> None:
    if type(value) not in _SCALAR_TYPES:
        _fail(where, _SCALARS_TEXT, value)
    if type(value) is int:
        _check_int(value, where)


def _check_key(key: object, where: str) -> None:
    if type(key) is not str:
        raise ProtocolError(
            ERR_MALFORMED, f"{where}: keys must be str, got {_describe(key)} {reprlib.repr(key)}"
        )


def _check_attributes(value: object, where: str) -> None:
    if type(value) is not dict:
        _fail(where, "dict", value)
    for key, item in value.items():
        _check_key(key, where)
        _check_scalar(item, f"{where}[{reprlib.repr(key)}]")


def _check_constraint(value: object, where: str) -> None:
    if type(value) is not list or len(value) not in (2, 3):
        got = f"{len(value)} items" if type(value) is list else _describe(value)
        raise ProtocolError(
            ERR_MALFORMED, f"{where}: expected [name, op] or [name, op, value], got {got}"
        )
    _check_str(value[0], f"{where}[0] (name)")
    _check_str(value[1], f"{where}[1] (op)")
    if len(value) == 3 and value[2] is not None:
        _check_scalar(value[2], f"{where}[2] (value)")


def _check_filter(value: object, where: str) -> None:
    _check_list(value, where, _check_constraint, "list of constraints")


def _check_stats(value: object, where: str, depth: int = 1) -> None:
    if type(value) is not dict:
        _fail(where, "dict", value)
    if depth > MAX_STATS_DEPTH:
        raise ProtocolError(ERR_MALFORMED, f"{where}: nested deeper than {MAX_STATS_DEPTH}")
    for key, item in value.items():
        _check_key(key, where)
        here = f"{where}[{reprlib.repr(key)}]"
        if type(item) is dict:
            _check_stats(item, here, depth + 1)
        elif type(item) in (int, float, str):
            _check_scalar(item, here)
        else:
            _fail(here, "int, float, str or dict", item)


# Field annotation -> check. Every message field's annotation must be a key here.
_CHECKERS: dict[object, _Check] = {
    int: _check_int,
    str: _check_str,
    str | None: _check_optional_str,
    Role: _check_role,
    list[int]: _check_int_list,
    list[str]: _check_str_list,
    Attributes: _check_attributes,
    WireFilter: _check_filter,
    StatsTree: _check_stats,
}


# --- fast checks for Publish and Deliver, the hot path: they only answer yes or no (no
# field paths to build); on no, the generic checks above run to name the culprit.


def _fits_64(values: Iterable[Any]) -> bool:
    """Whether every int among ``values`` fits msgpack's int64/uint64 range."""
    return all(_INT_MIN <= value <= _UINT_MAX for value in values if type(value) is int)


def _ints_typed(values: Any) -> bool:
    """A list of ints (not bools). A loop: for the one or few sub ids of a Deliver it
    takes half the time of a set check over `map(type, values)` (~70 against ~140 ns)."""
    if type(values) is not list:
        return False
    for value in values:  # noqa: SIM110 (all() over a generator is slower still)
        if type(value) is not int:
            return False
    return True


def _event_typed(event_id: Any, publisher: Any, attributes: Any, path: Any, t_ns: Any) -> bool:
    """Type check of the event fields of Publish and Deliver (int ranges excepted)."""
    if (
        type(event_id) is not str
        or type(publisher) is not str
        or type(attributes) is not dict
        or type(path) is not list
        or type(t_ns) is not int
    ):
        return False
    for hop in path:
        if type(hop) is not str:
            return False
    for key, value in attributes.items():
        if type(key) is not str or type(value) not in _SCALAR_TYPES:
            return False
    return True


# --- message types --------------------------------------------------------------------


class _Message:
    """Base of all message types: validation on construction, type code, wire fields."""

    __slots__ = ()
    TYPE: ClassVar[int]
    _CHECKS: ClassVar[tuple[tuple[str, _Check], ...]]
    _WIRE: ClassVar[Any]  # message -> tuple (type code, *fields), ready for msgpack

    def __post_init__(self) -> None:
        self._validate()

    @classmethod
    def _from_wire(cls, wire: list[Any]) -> Any:
        """The message of a wire array ``[type, *fields]`` of the right length."""
        return cls(*wire[1:])

    def _validate(self) -> None:
        name = type(self).__name__
        for field_name, check in self._CHECKS:
            check(getattr(self, field_name), f"{name}.{field_name}")


@dataclass(frozen=True, slots=True)
class Hello(_Message):
    """First message of the connecting side: who it is, and the secret if one is set."""

    TYPE: ClassVar[int] = 1
    version: int
    role: Role
    node_id: str
    secret: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Welcome(_Message):
    """The accepting side's answer to a Hello it accepts; completes the handshake."""

    TYPE: ClassVar[int] = 2
    version: int
    node_id: str


@dataclass(frozen=True, slots=True)
class Bye(_Message):
    """The sender will send nothing more on this connection (a half-close)."""

    TYPE: ClassVar[int] = 3
    reason: str


@dataclass(frozen=True, slots=True)
class Error(_Message):
    """The sender detected a problem (``code``: an ``ERR_*`` value or an application code)
    and will send nothing more; like Bye, it closes the sender's direction."""

    TYPE: ClassVar[int] = 4
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Ping(_Message):
    """Liveness / round-trip probe; the peer answers Pong with the same nonce."""

    TYPE: ClassVar[int] = 5
    nonce: int


@dataclass(frozen=True, slots=True)
class Pong(_Message):
    """Answer to Ping."""

    TYPE: ClassVar[int] = 6
    nonce: int


@dataclass(frozen=True, slots=True)
class Subscribe(_Message):
    """Install subscription ``sub_id`` (chosen by the sender, unique per connection)."""

    TYPE: ClassVar[int] = 10
    sub_id: int
    filter: WireFilter


@dataclass(frozen=True, slots=True)
class SubAck(_Message):
    """Subscription ``sub_id`` is in force everywhere it had to be forwarded to."""

    TYPE: ClassVar[int] = 11
    sub_id: int


@dataclass(frozen=True, slots=True)
class Unsubscribe(_Message):
    """Remove subscription ``sub_id``."""

    TYPE: ClassVar[int] = 12
    sub_id: int


@dataclass(frozen=True, slots=True)
class UnsubAck(_Message):
    """Subscription ``sub_id`` is removed."""

    TYPE: ClassVar[int] = 13
    sub_id: int


@dataclass(frozen=True, slots=True)
class Publish(_Message):
    """An event, from a publishing client or forwarded between brokers (``path``: the
    ids of the brokers it has passed, in order)."""

    TYPE: ClassVar[int] = 20
    event_id: str
    publisher: str
    attributes: Attributes
    path: list[str]
    t_publish_ns: int

    def __post_init__(self) -> None:
        if not (
            _event_typed(
                self.event_id, self.publisher, self.attributes, self.path, self.t_publish_ns
            )
            and _fits_64((self.t_publish_ns, *self.attributes.values()))
        ):
            self._validate()

    @classmethod
    def _from_wire(cls, wire: list[Any]) -> "Publish":
        _, event_id, publisher, attributes, path, t_ns = wire
        if _event_typed(event_id, publisher, attributes, path, t_ns):  # msgpack ints fit 64 bits
            return _build_publish(event_id, publisher, attributes, path, t_ns)
        return cls(*wire[1:])  # raises ProtocolError naming the bad field

    def with_hop(self, broker_id: str) -> "Publish":
        """This event with ``broker_id`` appended to its path (for forwarding); only the
        new hop is checked. The attributes dict is shared, not copied."""
        _check_str(broker_id, "Publish.with_hop(broker_id)")
        path = [*self.path, broker_id]
        return _build_publish(
            self.event_id, self.publisher, self.attributes, path, self.t_publish_ns
        )

    def to_deliver(self, sub_ids: list[int]) -> "Deliver":
        """A Deliver of this event for ``sub_ids``; only ``sub_ids`` is checked. The
        attributes dict and path list are shared, not copied."""
        if not (_ints_typed(sub_ids) and _fits_64(sub_ids)):
            _check_int_list(sub_ids, "Publish.to_deliver(sub_ids)")
        return _build_deliver(
            sub_ids, self.event_id, self.publisher, self.attributes, self.path, self.t_publish_ns
        )


@dataclass(frozen=True, slots=True)
class Deliver(_Message):
    """An event delivered by a broker to a client, for its subscriptions ``sub_ids``."""

    TYPE: ClassVar[int] = 21
    sub_ids: list[int]
    event_id: str
    publisher: str
    attributes: Attributes
    path: list[str]
    t_publish_ns: int

    def __post_init__(self) -> None:
        if not (
            _ints_typed(self.sub_ids)
            and _event_typed(
                self.event_id, self.publisher, self.attributes, self.path, self.t_publish_ns
            )
            and _fits_64((self.t_publish_ns, *self.sub_ids, *self.attributes.values()))
        ):
            self._validate()

    # Decoded by `_deliver_decoder` (see `decoders`), not by a `_from_wire`.


@dataclass(frozen=True, slots=True)
class Flush(_Message):
    """Asks the broker to answer FlushAck once everything sent before it is accepted."""

    TYPE: ClassVar[int] = 22
    token: int


@dataclass(frozen=True, slots=True)
class FlushAck(_Message):
    """Everything sent before the Flush with this token has been accepted."""

    TYPE: ClassVar[int] = 23
    token: int


@dataclass(frozen=True, slots=True)
class StatsRequest(_Message):
    """Asks the broker for a Stats snapshot."""

    TYPE: ClassVar[int] = 30


@dataclass(frozen=True, slots=True)
class Stats(_Message):
    """Counters and gauges of a broker: nested dicts of str -> int, float or str."""

    TYPE: ClassVar[int] = 31
    stats: StatsTree


# fmt: off
Message = (
    Hello | Welcome | Bye | Error | Ping | Pong | Subscribe | SubAck | Unsubscribe | UnsubAck
    | Publish | Deliver | Flush | FlushAck | StatsRequest | Stats
)
# fmt: on
MESSAGE_TYPES: tuple[type[Message], ...] = get_args(Message)


_Decoder = tuple[type, int, Callable[[list[Any]], Any]]
"""How `decode_message` reads a wire array of one type code: the type, the array's
length, and the function making the message of it: the type's `_from_wire`, bound once
here (binding it per message made an object per message for the garbage collector to
count), or for Deliver what `decoders` was given; for `Deliveries`, its elements."""
Decoders = dict[int, _Decoder]
"""A decoder per type code: `decoders()`."""


def _register(types: tuple[type[Message], ...]) -> Decoders:
    """Derive each type's checks and wire getter from its fields; map each type code
    to its `_Decoder` (Deliver's is replaced by `decoders`)."""
    by_code: Decoders = {}
    for cls in types:
        names = tuple(f.name for f in fields(cls))
        cls._CHECKS = tuple((f.name, _CHECKERS[f.type]) for f in fields(cls))
        # attrgetter with a single name returns a bare value, not a 1-tuple.
        getter = attrgetter("TYPE", *names) if names else lambda m: (m.TYPE,)
        cls._WIRE = staticmethod(getter)
        if cls.TYPE in by_code:
            raise RuntimeError(f"type code {cls.TYPE} used twice")
        by_code[cls.TYPE] = (cls, 1 + len(names), cls._from_wire)
    return by_code


_REGISTERED = _register(MESSAGE_TYPES)


# --- unchecked construction for the hot path. A frozen dataclass's __init__ assigns each
# field through object.__setattr__, which costs as much as all of Publish's checks; for
# values already checked, an instance is built without it (`unfrozen_twin`).


def unfrozen_twin(cls: type[Any]) -> type[Any]:
    """A class with the memory layout of the frozen slotted dataclass `cls` (same base,
    same slots) but plain attribute stores: build an instance of it, set its fields,
    then set its `__class__` to `cls`, which CPython allows between equal layouts.

    It halves what building a Deliver costs (~420 -> ~220 ns, against setting each slot
    through its descriptor's `__set__`): a Publish once per event in a broker, a
    `client.aio.Delivery` once per delivery in a client."""
    return type(f"_Unfrozen{cls.__name__}", cls.__bases__, {"__slots__": cls.__slots__})


_UnfrozenPublish: Any = unfrozen_twin(Publish)
_UnfrozenDeliver: Any = unfrozen_twin(Deliver)


def _build_publish(
    event_id: str, publisher: str, attributes: Attributes, path: list[str], t_ns: int
) -> Publish:
    message: Any = _UnfrozenPublish.__new__(_UnfrozenPublish)
    message.event_id = event_id
    message.publisher = publisher
    message.attributes = attributes
    message.path = path
    message.t_publish_ns = t_ns
    message.__class__ = Publish
    return message


PublishArray = list[Any]
"""An event as a broker routes it: the array a Publish payload decodes to,
``[Publish.TYPE, event_id, publisher, attributes, path, t_publish_ns]``, its fields
checked as a Publish's (`Connection(publish_arrays=True)`). Building a Publish of it
costs about 0.2 us, a twenty-fifth of what a broker spends per routed event."""


def checked_publish_array(wire: list[Any]) -> PublishArray:
    """``wire``, the decoded array of a Publish payload (six elements, the type code
    first), as a `PublishArray`: checked as `Publish._from_wire` checks it, raising the
    ProtocolError that names a bad field."""
    if _event_typed(wire[1], wire[2], wire[3], wire[4], wire[5]):
        return wire
    return publish_array(Publish._from_wire(wire))


def publish_array(event: Publish) -> PublishArray:
    """The `PublishArray` of ``event``."""
    return [
        Publish.TYPE, event.event_id, event.publisher, event.attributes, event.path,
        event.t_publish_ns,
    ]  # fmt: skip


def publish_of(array: PublishArray) -> Publish:
    """The Publish of a `PublishArray`."""
    return _build_publish(array[1], array[2], array[3], array[4], array[5])


def _build_deliver(
    sub_ids: list[int],
    event_id: str,
    publisher: str,
    attributes: Attributes,
    path: list[str],
    t_ns: int,
) -> Deliver:
    message: Any = _UnfrozenDeliver.__new__(_UnfrozenDeliver)
    message.sub_ids = sub_ids
    message.event_id = event_id
    message.publisher = publisher
    message.attributes = attributes
    message.path = path
    message.t_publish_ns = t_ns
    message.__class__ = Deliver
    return message


DeliverBuilder = Callable[[list[int], str, str, Attributes, list[str], int], Any]
"""Makes an object of a Deliver's fields (sub_ids, event_id, publisher, attributes,
path, t_publish_ns), all already checked: `_build_deliver` makes the Deliver."""


def _deliver_decoder(build: DeliverBuilder) -> Callable[[list[Any]], Any]:
    """Deliver's `_Decoder` function: check the fields of a wire array of the right
    length, then ``build`` of them."""

    def from_wire(wire: list[Any]) -> Any:
        _, sub_ids, event_id, publisher, attributes, path, t_ns = wire
        if _ints_typed(sub_ids) and _event_typed(event_id, publisher, attributes, path, t_ns):
            return build(sub_ids, event_id, publisher, attributes, path, t_ns)
        return Deliver(*wire[1:])  # raises ProtocolError naming the bad field

    return from_wire


DeliveriesDecoder = Callable[[list[Any], list[Any]], bool]


def deliveries_decoder(build: DeliverBuilder = _build_deliver) -> DeliveriesDecoder:
    """What decodes the elements of a `Deliveries` frame at once: ``decode(elements,
    out)`` appends ``build`` of each element's fields to ``out`` and returns True if
    every element is a well-typed Deliver wire array; else it returns False at the
    first that is not (the caller then names the culprit as a frame of its own would).

    The checks of `_deliver_decoder`'s ``from_wire``, `_ints_typed` and `_event_typed`,
    in one loop over the frame (three calls less per delivery: a subscriber takes
    tens of thousands a second)."""
    code_of_deliver = Deliver.TYPE
    scalars = _SCALAR_TYPES

    def decode(elements: list[Any], out: list[Any]) -> bool:
        append = out.append
        for wire in elements:
            if type(wire) is not list or len(wire) != 7:
                return False
            code, sub_ids, event_id, publisher, attributes, path, t_ns = wire
            if (
                code != code_of_deliver
                or type(code) is not int
                or type(sub_ids) is not list
                or type(event_id) is not str
                or type(publisher) is not str
                or type(attributes) is not dict
                or type(path) is not list
                or type(t_ns) is not int
            ):
                return False
            for sub_id in sub_ids:
                if type(sub_id) is not int:
                    return False
            for hop in path:
                if type(hop) is not str:
                    return False
            for key, value in attributes.items():
                if type(key) is not str or type(value) not in scalars:
                    return False
            append(build(sub_ids, event_id, publisher, attributes, path, t_ns))
        return True

    return decode


class Deliveries:
    """Not a message type but the type of a frame that carries several Delivers to a
    client: ``[24, [deliver, ...]]``, each element the whole wire array of a Deliver,
    ``[21, sub_ids, ...]``. A broker joins consecutive Deliver frames for a client into
    one (`broker.protocol.join_frames`): a client decodes one frame of many Delivers
    at a lower cost per Deliver than as many frames. `decode` gives its elements,
    unchecked, and `broker.protocol.Connection.receive_data` the Delivers they are."""

    TYPE: ClassVar[int] = 24


def _deliveries_elements(wire: list[Any]) -> list[Any]:
    elements = wire[1]
    if type(elements) is not list or not elements:
        got = _describe(elements)
        raise ProtocolError(ERR_MALFORMED, f"Deliveries carries an array of Delivers, got {got}")
    return elements


def decoders(build_deliver: DeliverBuilder = _build_deliver) -> Decoders:
    """The decoder table of `decode`: every message type decoded to its message, but a
    Deliver to ``build_deliver`` of its checked fields. A client builds the objects it
    hands to its application that way, without a Deliver in between (~0.25 us less per
    delivery: the Deliver's construction and its freeing)."""
    _, length, _ = _REGISTERED[Deliver.TYPE]
    return {
        **_REGISTERED,
        Deliver.TYPE: (Deliver, length, _deliver_decoder(build_deliver)),
        Deliveries.TYPE: (Deliveries, 2, _deliveries_elements),
    }


DECODERS = decoders()
"""Every message type decoded to its message, and a `Deliveries` frame to its list of
Deliver wire arrays."""


# --- codec ----------------------------------------------------------------------------


class _Packer(threading.local):
    """One msgpack Packer per thread: reusing it is much faster than ``packb`` (which
    builds a new Packer per call), and a Packer must not be shared between threads."""

    def __init__(self) -> None:
        packer = msgpack.Packer(use_bin_type=True)
        self.pack = packer.pack
        self.pack_array_header = packer.pack_array_header


_packer = _Packer()


def encode_message(message: Message) -> bytes:
    """The msgpack payload of ``message`` (no length prefix)."""
    return _packer.pack(message._WIRE(message))


def encode_new_event(
    event_id: str, publisher: str, attributes: Attributes, t_publish_ns: int
) -> bytes:
    """``encode_message(Publish(event_id, publisher, attributes, [], t_publish_ns))``,
    the same bytes, without building the message, for ``attributes`` that passed
    ``routing.validate_event``, which checks all that Publish checks of them: only the
    other fields are checked here. A client's publish: building the Publish and then
    encoding it took about twice as long (~1.3 against ~0.65 us, timeit)."""
    if not (
        type(event_id) is str
        and type(publisher) is str
        and type(t_publish_ns) is int
        and _INT_MIN <= t_publish_ns <= _UINT_MAX
    ):
        Publish(event_id, publisher, attributes, [], t_publish_ns)  # raises, naming it
    return _packer.pack((Publish.TYPE, event_id, publisher, attributes, [], t_publish_ns))


def encode_forwarded(event: Publish, broker_id: str) -> bytes:
    """``encode_message(event.with_hop(broker_id))``, the same bytes, without building
    the forwarded message (once per routed event: it halves the cost of encoding)."""
    _check_str(broker_id, "encode_forwarded(broker_id)")
    return _forwarded_payload(event, broker_id)


def _forwarded_payload(event: Publish, broker_id: str) -> bytes:
    """`encode_forwarded` of a ``broker_id`` the caller has checked."""
    return _packer.pack(
        (
            Publish.TYPE,
            event.event_id,
            event.publisher,
            event.attributes,
            [*event.path, broker_id],
            event.t_publish_ns,
        )
    )


# A Publish payload is [20, *fields] and a Deliver payload [21, sub_ids, *the same
# fields]; a msgpack array is its header followed by its elements, so a Deliver can be
# spliced from a Publish's encoding without encoding the event again. Both headers are
# one byte (fixarray) and both type codes one byte (positive fixint).
PUBLISH_HEAD = bytes((0x90 | 6, Publish.TYPE))
DELIVER_HEAD = bytes((0x90 | 7, Deliver.TYPE))


def deliver_head(sub_ids: list[int]) -> bytes:
    """What a Deliver payload for ``sub_ids`` has in place of a Publish payload's first
    two bytes (`PUBLISH_HEAD`); ``sub_ids`` checked as ``Publish.to_deliver`` does."""
    if not _ints_typed(sub_ids):
        _check_int_list(sub_ids, "deliver_head(sub_ids)")
    try:
        packed = _packer.pack(sub_ids)
    except OverflowError:  # msgpack checks the range (per delivery: no check in Python)
        _check_int_list(sub_ids, "deliver_head(sub_ids)")
        raise
    return DELIVER_HEAD + packed


DELIVERIES_HEAD = bytes((0x92, Deliveries.TYPE))
"""The first two bytes of a `Deliveries` payload; its array header follows."""


def deliveries_head(count: int) -> bytes:
    """What a `Deliveries` payload of ``count`` Delivers has before their payloads."""
    return DELIVERIES_HEAD + _packer.pack_array_header(count)


def publish_summary(payload: bytes | bytearray | memoryview) -> tuple[str, str, Any, int]:
    """The event id, publisher, `type` attribute ("" if none) and path length of a
    Publish payload, without checking or building the message: for the traces of frames
    a broker has already accepted. ProtocolError if it is not a Publish."""
    try:
        wire = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:  # as in decode_message
        raise not_msgpack(exc) from None
    if type(wire) is not list or len(wire) != 6 or wire[0] != Publish.TYPE:
        raise ProtocolError(ERR_MALFORMED, f"not a Publish: {reprlib.repr(wire)}")
    _, event_id, publisher, attributes, path, _ = wire
    return event_id, publisher, attributes.get("type", ""), len(path)


def decode_message(payload: bytes | bytearray | memoryview) -> Message:
    """Decode and validate one payload; raises ProtocolError, and only ProtocolError."""
    return decode(payload, _REGISTERED)[1]


def decode(payload: bytes | bytearray | memoryview, by_code: Decoders) -> tuple[type[Message], Any]:
    """The message type of one payload and what ``by_code`` (`decoders()`) makes of it,
    validated; raises ProtocolError, and only ProtocolError.

    unpackb's size limits (``max_str_len`` etc.) default to the payload's length, which
    is what we want: nothing can claim more items than the frame has bytes.
    """
    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises ValueError subclasses, TypeError, ...
        raise not_msgpack(exc) from None
    return message_of(obj, by_code)


def not_msgpack(exc: Exception) -> ProtocolError:
    """The violation of a payload msgpack could not decode (``exc``, msgpack's error)."""
    detail = str(exc) or type(exc).__name__
    return ProtocolError(ERR_MALFORMED, f"payload is not valid msgpack: {detail}")


def message_of(obj: Any, by_code: Decoders) -> tuple[type, Any]:
    """The message type of a decoded payload ``obj`` and what ``by_code`` makes of it,
    validated (`decode` after msgpack); raises ProtocolError, and only ProtocolError."""
    if type(obj) is not list or not obj:
        expected = "a non-empty array [type, fields...]"
        raise ProtocolError(ERR_MALFORMED, f"payload must be {expected}, got {_describe(obj)}")
    code = obj[0]
    decoder = by_code.get(code) if type(code) is int else None
    if decoder is None:
        raise ProtocolError(ERR_UNKNOWN_TYPE, f"unknown message type {reprlib.repr(code)}")
    cls, length, from_wire = decoder
    if len(obj) != length:
        raise ProtocolError(
            ERR_MALFORMED, f"{cls.__name__} takes {length - 1} field(s), got {len(obj) - 1}"
        )
    return cls, from_wire(obj)
