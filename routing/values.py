"""Value kinds of the filter language and validation of events at the API boundary.

An event is a flat mapping of attribute name -> value. Values are `int`, `float`,
`str`, `bool` or `bytes` (opaque payloads, never matched by a constraint other than
`exists`). `int` and `float` form one kind, *number*; `bool` is a kind of its own.
Only these exact types are accepted (no subclasses such as numpy scalars): they are
what msgpack carries unchanged between brokers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import Enum
from typing import Any

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")

#: msgpack carries integers from -2**63 to 2**64 - 1.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1


class Kind(Enum):
    """The kind of a value, which decides which operators compare it."""

    NUMBER = "number"
    STRING = "string"
    BOOL = "bool"
    BYTES = "bytes"


_KIND_OF_TYPE: dict[type, Kind] = {
    int: Kind.NUMBER,
    float: Kind.NUMBER,
    str: Kind.STRING,
    bool: Kind.BOOL,
    bytes: Kind.BYTES,
}


def kind_of(value: Any) -> Kind:
    """The kind of an event or constraint value; TypeError for unsupported types."""
    try:
        return _KIND_OF_TYPE[type(value)]
    except KeyError:
        raise TypeError(
            f"unsupported value type {type(value).__name__} ({value!r}); "
            "use int, float, str, bool or bytes"
        ) from None


_CHECKED_NAMES: set[str] = set()
"""Attribute names that passed NAME_RE: events repeat their names, and a set lookup
costs a fraction of the regex. Bounded by _CHECKED_NAMES_MAX."""
_CHECKED_NAMES_MAX = 4096


def _check_name(name: str) -> bool:
    """Whether ``name`` is a valid attribute name (remembered when it is)."""
    if not NAME_RE.match(name):
        return False
    if len(_CHECKED_NAMES) < _CHECKED_NAMES_MAX:
        _CHECKED_NAMES.add(name)
    return True


def validate_event(event: Any) -> Mapping[str, Any]:
    """Check that `event` is a valid event and return it unchanged.

    Raises TypeError for a non-mapping, non-string names or unsupported value types,
    and ValueError for malformed attribute names or integers out of range.
    """
    if type(event) is not dict and not isinstance(event, Mapping):  # (an ABC check is slow)
        raise TypeError(f"an event must be a mapping of name -> value, got {type(event).__name__}")
    for name, value in event.items():
        if type(name) is not str:
            raise TypeError(f"event attribute names must be str, got {name!r}")
        if name not in _CHECKED_NAMES and not _check_name(name):
            raise ValueError(
                f"event attribute name {name!r} is not an identifier "
                "(letters, digits, '_' and '.', not starting with a digit)"
            )
        kind = _KIND_OF_TYPE.get(type(value))
        if kind is None:
            raise TypeError(
                f"event attribute {name!r} has unsupported type {type(value).__name__}; "
                "use int, float, str, bool or bytes"
            )
        if type(value) is int and not INT_MIN <= value <= INT_MAX:
            raise ValueError(f"event attribute {name!r}: integer {value} does not fit in 64 bits")
    return event
