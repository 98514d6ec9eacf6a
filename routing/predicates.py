"""Compiled match predicates for conjunctions of constraints.

A predicate is one generated Python function per filter. Generating the code costs
about as much as parsing, so it is done once per *shape* (the sequence of operator,
value kind and which attribute each constraint reads) and the shape's factory is
then called with the filter's names and values, which costs one closure creation.
A generated predicate runs several times faster than interpreting the constraints
one by one, which matters both for `Filter.matches` and for the index's candidate
verification.

Semantics (docs/design.md, "Filter language"): a constraint on a missing attribute is false; numbers
(int and float) compare with each other; ordering between different kinds is false;
`!=` across kinds is true; bytes values match nothing but `exists`; an attribute
value of an unsupported type raises TypeError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from routing.filters import Constraint, Op
from routing.values import Kind

Predicate = Callable[[Mapping[str, Any]], bool]


class _Missing:
    """Type of the sentinel that stands for an absent attribute."""

    __slots__ = ()


MISSING = _Missing()
_SUPPORTED = frozenset({int, float, str, bool, bytes, _Missing})


def _unsupported(name: str, value: Any) -> bool:
    raise TypeError(
        f"event attribute {name!r} has unsupported type {type(value).__name__}; "
        "use int, float, str, bool or bytes"
    )


_TYPE_TEST = {
    Kind.NUMBER: "(t is int or t is float)",
    Kind.STRING: "t is str",
    Kind.BOOL: "t is bool",
}
_COMPARE = {
    Op.EQ: "v == {c}",
    Op.LT: "v < {c}",
    Op.LE: "v <= {c}",
    Op.GT: "v > {c}",
    Op.GE: "v >= {c}",
    Op.PREFIX: "v.startswith({c})",
    Op.SUFFIX: "v.endswith({c})",
    Op.CONTAINS: "{c} in v",
}


def _constraint_lines(op: Op, kind: Kind | None, n: str, c: str) -> list[str]:
    """Statements that `return False` unless the constraint holds for `v` of type `t`."""
    if op is Op.EXISTS:
        return ["if t is _Missing: return False"]
    same_kind = _TYPE_TEST[kind]  # type: ignore[index]
    if op is Op.NE:
        return [
            f"if {same_kind}:",
            f"    if v == {c}: return False",
            "elif t is _Missing or t is bytes: return False",
            f"elif t not in _SUPPORTED: _unsupported({n}, v)",
        ]
    return [
        f"if {same_kind}:",
        f"    if not ({_COMPARE[op].format(c=c)}): return False",
        "elif t in _SUPPORTED: return False",
        f"else: _unsupported({n}, v)",
    ]


Shape = tuple[tuple[Op, Kind | None, int], ...]


@lru_cache(maxsize=4096)
def _factory(shape: Shape, n_names: int) -> Callable[..., Predicate]:
    """Build (once per shape) a factory taking names and values, returning a predicate."""
    names = [f"n{i}" for i in range(n_names)]
    values = [f"c{i}" for i in range(len(shape))]
    body = ["def predicate(e):"]
    current = None
    for i, (op, kind, slot) in enumerate(shape):
        if slot != current:
            body += [f"    v = e.get(n{slot}, _MISSING)", "    t = type(v)"]
            current = slot
        body += ["    " + line for line in _constraint_lines(op, kind, f"n{slot}", f"c{i}")]
    body.append("    return True")
    params = ", ".join(names + values)
    source = f"def factory({params}):\n" + "\n".join("    " + line for line in body)
    source += "\n    return predicate\n"
    namespace: dict[str, Any] = {
        "_MISSING": MISSING,
        "_Missing": _Missing,
        "_SUPPORTED": _SUPPORTED,
        "_unsupported": _unsupported,
    }
    exec(compile(source, f"<predicate {shape}>", "exec"), namespace)
    return namespace["factory"]


def _always(event: Mapping[str, Any]) -> bool:
    return True


def compile_predicate(constraints: Sequence[Constraint]) -> Predicate:
    """A function event -> bool that is true when every constraint holds."""
    if not constraints:
        return _always
    ordered = sorted(constraints, key=lambda c: c.name)
    slots: dict[str, int] = {}
    shape = []
    for c in ordered:
        slot = slots.setdefault(c.name, len(slots))
        shape.append((c.op, c.kind, slot))
    factory = _factory(tuple(shape), len(slots))
    return factory(*slots, *(c.value for c in ordered))
