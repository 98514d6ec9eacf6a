"""Constraints and filters: the subscription language (docs/design.md, "Filter language").

A `Filter` is an immutable conjunction of `Constraint`s. Two filters are equal when
they hold the same constraints, in any order; a constraint's value keeps its kind,
so `x = 7` and `x = 7.0` are different constraints (they print differently) even
though they match the same events.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from routing.values import INT_MAX, INT_MIN, NAME_RE, Kind, kind_of


class Op(Enum):
    """A constraint operator; the value is its text form."""

    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    PREFIX = "prefix"
    SUFFIX = "suffix"
    CONTAINS = "contains"
    EXISTS = "exists"


ORDERING_OPS = frozenset({Op.LT, Op.LE, Op.GT, Op.GE})
STRING_OPS = frozenset({Op.PREFIX, Op.SUFFIX, Op.CONTAINS})
_OP_RANK = {op: rank for rank, op in enumerate(Op)}


def _check_value(op: Op, value: Any) -> Kind | None:
    """Return the kind of a constraint's value, or raise ValueError/TypeError."""
    if op is Op.EXISTS:
        if value is not None:
            raise ValueError("'exists' takes no value")
        return None
    kind = kind_of(value)
    if kind is Kind.BYTES:
        raise TypeError("bytes values are opaque and cannot be used in a constraint")
    if kind is Kind.BOOL and op in ORDERING_OPS:
        raise ValueError(f"a bool value cannot be used with {op.value!r}")
    if op in STRING_OPS and kind is not Kind.STRING:
        raise ValueError(f"{op.value!r} needs a string value, got {value!r}")
    if type(value) is float and not math.isfinite(value):
        raise ValueError(f"constraint values must be finite numbers, got {value!r}")
    if type(value) is int and not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"integer {value} does not fit in 64 bits")
    return kind


@dataclass(frozen=True, slots=True, eq=False)
class Constraint:
    """`name op value`; value is None for `exists`."""

    name: str
    op: Op
    value: Any = None

    def __post_init__(self) -> None:
        if type(self.name) is not str or not NAME_RE.match(self.name):
            raise ValueError(f"attribute name {self.name!r} is not an identifier")
        if not isinstance(self.op, Op):
            raise TypeError(f"op must be an Op, got {self.op!r}")
        _check_value(self.op, self.value)

    @property
    def kind(self) -> Kind | None:
        """The kind of the value (None for `exists`)."""
        return None if self.op is Op.EXISTS else kind_of(self.value)

    def identity(self) -> tuple[str, Op, str, Any]:
        """What makes two constraints the same: the value's exact type is part of it."""
        return (self.name, self.op, type(self.value).__name__, self.value)

    def sort_key(self) -> tuple[str, int, str, Any]:
        value = 0 if self.value is None else self.value
        return (self.name, _OP_RANK[self.op], type(self.value).__name__, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Constraint):
            return NotImplemented
        return self.identity() == other.identity()

    def __hash__(self) -> int:
        return hash(self.identity())

    def __str__(self) -> str:
        if self.op is Op.EXISTS:
            return f"{self.name} exists"
        return f"{self.name} {self.op.value} {format_value(self.value)}"

    def to_wire(self) -> list[Any]:
        """The msgpack-friendly form: [name, op, value] (no value for `exists`)."""
        if self.op is Op.EXISTS:
            return [self.name, self.op.value]
        return [self.name, self.op.value, self.value]


def format_value(value: Any) -> str:
    """The text form of a constraint value, parsed back by `parse_filter`."""
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


class Filter:
    """An immutable conjunction of constraints; the empty filter matches everything."""

    __slots__ = ("_constraints", "_set", "_hash", "_predicate", "__weakref__")
    _constraints: tuple[Constraint, ...]
    _set: frozenset[Constraint]
    _hash: int
    _predicate: Callable[[Mapping[str, Any]], bool] | None  # compiled on first use

    def __init__(self, constraints: Iterable[Constraint] = ()) -> None:
        unique = frozenset(constraints)
        for c in unique:
            if not isinstance(c, Constraint):
                raise TypeError(f"a Filter holds Constraints, got {c!r}")
        init = object.__setattr__
        init(self, "_set", unique)
        init(self, "_constraints", tuple(sorted(unique, key=Constraint.sort_key)))
        init(self, "_hash", hash(unique))
        init(self, "_predicate", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Filter is immutable (cannot set {name!r})")

    @property
    def constraints(self) -> tuple[Constraint, ...]:
        """The constraints in canonical order (by name, operator, value)."""
        return self._constraints

    def attributes(self) -> frozenset[str]:
        return frozenset(c.name for c in self._constraints)

    def matches(self, event: Mapping[str, Any]) -> bool:
        """True when every constraint holds for `event`.

        Raises TypeError when an attribute this filter reads has an unsupported type.
        """
        predicate = self._predicate
        if predicate is None:
            from routing.predicates import compile_predicate

            predicate = compile_predicate(self._constraints)
            object.__setattr__(self, "_predicate", predicate)
        return predicate(event)

    def to_wire(self) -> list[list[Any]]:
        return [c.to_wire() for c in self._constraints]

    @classmethod
    def from_wire(cls, data: Any) -> Filter:
        """Rebuild a filter from `to_wire` output; ValueError on malformed data."""
        if not isinstance(data, list):
            raise ValueError(f"a wire filter is a list of constraints, got {type(data).__name__}")
        constraints = []
        for i, item in enumerate(data):
            if not isinstance(item, list | tuple) or len(item) not in (2, 3):
                raise ValueError(f"constraint {i}: expected [name, op] or [name, op, value]")
            name, op_text, *rest = item
            try:
                op = Op(op_text)
            except ValueError:
                raise ValueError(f"constraint {i}: unknown operator {op_text!r}") from None
            try:
                constraints.append(Constraint(name, op, rest[0] if rest else None))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"constraint {i}: {exc}") from None
        return cls(constraints)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Filter):
            return NotImplemented
        return self._set == other._set

    def __hash__(self) -> int:
        return self._hash

    def __len__(self) -> int:
        return len(self._constraints)

    def __str__(self) -> str:
        if not self._constraints:
            return "true"
        return " and ".join(str(c) for c in self._constraints)

    def __repr__(self) -> str:
        return f"Filter({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Filter, (self._constraints,))
