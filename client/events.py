"""An event's forms in the client: checked and encoded as a Publish frame when it is
published, built as a `Delivery` when it is received (for every client)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.messages import unfrozen_twin
from broker.protocol import new_event_frame
from routing import validate_event


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event delivered to a subscription. ``t_deliver_ns`` is ``time.time_ns()`` when
    the frame was decoded. One Deliver for several subscriptions of a connection gives
    one Delivery, shared by them: do not mutate ``attributes``."""

    event_id: str
    publisher: str
    attributes: dict[str, Any]
    sub_ids: tuple[int, ...]
    path: tuple[str, ...]
    t_publish_ns: int
    t_deliver_ns: int


_UnfrozenDelivery: Any = unfrozen_twin(Delivery)


def delivery_of(
    sub_ids: list[int],
    event_id: str,
    publisher: str,
    attributes: dict[str, Any],
    path: list[str],
    t_publish_ns: int,
) -> Delivery:
    """The client connection's ``build_deliver``: the `Delivery` of a Deliver's checked
    fields, made without a Deliver in between, and built as
    `broker.messages.unfrozen_twin` says (a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``, which took ~0.9 us)."""
    delivery: Any = _UnfrozenDelivery.__new__(_UnfrozenDelivery)
    delivery.event_id = event_id
    delivery.publisher = publisher
    delivery.attributes = attributes
    delivery.sub_ids = tuple(sub_ids)
    delivery.path = tuple(path)
    delivery.t_publish_ns = t_publish_ns
    delivery.t_deliver_ns = time.time_ns()
    delivery.__class__ = Delivery
    return delivery


_VALUE_TYPES = frozenset({int, float, str, bool, bytes})
_VALID_NAMES: set[str] = set()
"""Attribute names of events this process published: `checked_event` skips the name
checks for them. Bounded by _VALID_NAMES_MAX."""
_VALID_NAMES_MAX = 4096


def checked_event(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """``attributes`` as the dict to encode, after ``routing.validate_event`` accepted
    it, with its errors (TypeError, ValueError) for an invalid event.

    An event that is a dict of names published before and values of the accepted
    types is not checked further here: of what `validate_event` checks, only the range
    of its integers is left, and msgpack refuses exactly those out of range when the
    event is encoded (`publish_frame` then lets `validate_event` raise its error). The
    types are checked in one loop over the items, the cheaper way on the publisher's
    per-event path (bench/HISTORY.md has the timings)."""
    if type(attributes) is dict and attributes.keys() <= _VALID_NAMES:
        for name, value in attributes.items():
            if type(name) is not str or type(value) not in _VALUE_TYPES:
                break
        else:
            return attributes
    validate_event(attributes)
    if len(_VALID_NAMES) < _VALID_NAMES_MAX:
        _VALID_NAMES.update(attributes)
    return attributes if type(attributes) is dict else dict(attributes)


def publish_frame(event_id: str, publisher: str, event: dict[str, Any], t_ns: int) -> bytes:
    """The Publish frame of an event `checked_event` returned (`new_event_frame`)."""
    try:
        return new_event_frame(event_id, publisher, event, t_ns)
    except OverflowError:  # an integer out of msgpack's range
        validate_event(event)  # raises ValueError naming the attribute
        raise


def checked_events(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`checked_event` of each event; an error notes the index of the event it is about."""
    accepted = []
    for index, attributes in enumerate(events):
        try:
            accepted.append(checked_event(attributes))
        except (TypeError, ValueError) as exc:
            exc.add_note(f"publish_many: event {index}; nothing was sent")
            raise
    return accepted


def publish_frames(
    name: str, last_seq: int, events: list[dict[str, Any]], t_ns: int
) -> tuple[list[str], list[bytes]]:
    """The default ids (after ``last_seq``) and the frames of ``events`` (`publish_frame`)."""
    ids = [f"{name}:{seq}" for seq in range(last_seq + 1, last_seq + 1 + len(events))]
    frames = []
    for index, (event_id, event) in enumerate(zip(ids, events, strict=True)):
        try:
            frames.append(publish_frame(event_id, name, event, t_ns))
        except (TypeError, ValueError) as exc:
            exc.add_note(f"publish_many: event {index}; nothing was sent")
            raise
    return ids, frames
