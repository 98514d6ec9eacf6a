"""Limits on what a client may send to a broker: events, filters, subscriptions.

A hostile or buggy client must not make a broker hold unbounded state or do unbounded
work per message. The frame size bounds every message (``max_frame``, checked by the
framing); the limits here bound what fits in a frame. They apply to messages received
from *clients* only: brokers forward aggregates (a parent holds the subscriptions of its
whole subtree), and a broker link is trusted once its Hello is accepted (see the network
secret in ``broker.security``).

A message over a limit is a protocol violation with code ``ERR_LIMIT``: the broker
answers Error, whose message starts with the limit's name (``max_attributes: ...``), and
closes the connection. The protocol has no negative acknowledgement, so an excess
subscription cannot be refused alone.

String values and attribute names are measured in characters, bytes values in bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, NoReturn

from broker.messages import ProtocolError, WireFilter

ERR_LIMIT = "limit"


@dataclass(frozen=True)
class Limits:
    """Per-client limits of a broker (defaults leave room for the workloads we run:
    SPECjms2007 payloads of 37 KB, thousands of subscriptions per connection)."""

    max_attributes: int = 256
    """Attributes per event."""
    max_name_len: int = 256
    """Characters per attribute name, in events and filters."""
    max_value_len: int = 262_144
    """Characters per string value, bytes per bytes value, in events and filters."""
    max_constraints: int = 64
    """Constraints per filter."""
    max_subscriptions: int = 10_000
    """Subscriptions in force per connection."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{f.name} must be a positive integer, got {value!r}")

    def check_event(self, attributes: Mapping[str, Any], frame_size: float = math.inf) -> None:
        """ProtocolError(ERR_LIMIT) if the event's attributes exceed a limit.

        On the hot path. No string or bytes in a frame is longer than the frame, so
        given the ``frame_size`` the length checks run only when they could fail; and
        only a failure looks at each attribute in turn, to name it.
        """
        if len(attributes) > self.max_attributes:
            _exceeded("max_attributes", f"event has {len(attributes)} attributes", self)
        max_name_len, max_value_len = self.max_name_len, self.max_value_len
        if frame_size > max_name_len and attributes and max(map(len, attributes)) > max_name_len:
            for name in attributes:
                self._check_name(name, "event attribute")
        if frame_size > max_value_len:
            for value in attributes.values():
                if (type(value) is str or type(value) is bytes) and len(value) > max_value_len:
                    for name, item in attributes.items():
                        self._check_value(name, item, "event attribute")

    def check_filter(self, wire_filter: WireFilter, sub_id: int) -> None:
        """ProtocolError(ERR_LIMIT) if a filter (wire form, already type-checked) exceeds
        a limit."""
        if len(wire_filter) > self.max_constraints:
            _exceeded(
                "max_constraints",
                f"subscription {sub_id} has {len(wire_filter)} constraints",
                self,
            )
        for constraint in wire_filter:
            name = constraint[0]
            assert isinstance(name, str)  # checked by the message's validation
            where = f"subscription {sub_id}: constraint on"
            self._check_name(name, where)
            if len(constraint) == 3:
                self._check_value(name, constraint[2], where)

    def check_subscription_count(self, count: int) -> None:
        """ProtocolError(ERR_LIMIT) if a connection may not hold ``count`` subscriptions."""
        if count > self.max_subscriptions:
            _exceeded("max_subscriptions", f"connection would hold {count} subscriptions", self)

    def _check_name(self, name: str, what: str) -> None:
        if len(name) > self.max_name_len:
            _exceeded("max_name_len", f"{what} name of {len(name)} characters", self)

    def _check_value(self, name: str, value: object, what: str) -> None:
        if type(value) in (str, bytes) and len(value) > self.max_value_len:  # type: ignore[arg-type]
            unit = "characters" if type(value) is str else "bytes"
            shown = name if len(name) <= 40 else name[:40] + "..."
            _exceeded(
                "max_value_len",
                f"{what} {shown!r} has a value of {len(value)} {unit}",  # type: ignore[arg-type]
                self,
            )


def _exceeded(limit: str, what: str, limits: Limits) -> NoReturn:
    raise ProtocolError(ERR_LIMIT, f"{limit}: {what}, over the limit of {getattr(limits, limit)}")
