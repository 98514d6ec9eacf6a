"""Covering between filters: `covers(a, b)` is true only if every event matching `b`
matches `a`.

SIENA's rule checks each constraint of `a` against one constraint of `b` at a time,
so it misses e.g. `x > 3` covering `x > 5 and x < 10` only in the sense that it
cannot combine constraints; it also cannot see that `x prefix "ab"` implies
`x < "b"`. Here all constraints of `b` on one attribute are first summarised as the
set of values they allow, per kind of value (numbers as an interval minus points,
strings as an interval minus points plus suffix/substring requirements, bools as a
set, bytes allowed only under `exists`), and each constraint of `a` is then checked
against that whole set. A `b` that no event can match is covered by everything.

The answer is sound; it can still say False where covering holds (for instance
string sets made empty by a combination of suffix and substring constraints).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from routing.filters import Constraint, Filter, Op
from routing.intervals import Interval
from routing.values import Kind

_FULL = Interval()


class AttributeSet:
    """The values that a conjunction of constraints on one attribute allows."""

    __slots__ = (
        "numbers",
        "number_holes",
        "strings",
        "string_holes",
        "prefixes",
        "suffixes",
        "substrings",
        "bools",
        "bytes_ok",
    )

    def __init__(self, constraints: Iterable[Constraint]) -> None:
        numbers: Interval | None = _FULL
        strings: Interval | None = _FULL
        self.number_holes: set[Any] = set()
        self.string_holes: set[str] = set()
        self.prefixes: list[str] = []
        self.suffixes: list[str] = []
        self.substrings: list[str] = []
        bools = {True, False}
        self.bytes_ok = True
        for c in constraints:
            if c.op is Op.EXISTS:
                continue
            self.bytes_ok = False
            kind = c.kind
            if c.op is Op.NE:
                if kind is Kind.NUMBER:
                    self.number_holes.add(c.value)
                elif kind is Kind.STRING:
                    self.string_holes.add(c.value)
                else:
                    bools.discard(c.value)
                continue
            # Every other operator admits only values of its own kind.
            if kind is not Kind.NUMBER:
                numbers = None
            if kind is not Kind.STRING:
                strings = None
            if kind is not Kind.BOOL:
                bools = set()
            if kind is Kind.BOOL:
                bools &= {c.value}
            elif kind is Kind.NUMBER and numbers is not None:
                numbers = numbers.intersect(Interval.from_op(c.op, c.value))
            elif kind is Kind.STRING and strings is not None:
                if c.op is Op.PREFIX:
                    self.prefixes.append(c.value)
                    strings = strings.intersect(Interval.prefix_range(c.value))
                elif c.op is Op.SUFFIX:
                    self.suffixes.append(c.value)
                elif c.op is Op.CONTAINS:
                    self.substrings.append(c.value)
                else:
                    strings = strings.intersect(Interval.from_op(c.op, c.value))
        self.numbers = _normalise(numbers, self.number_holes)
        self.strings = _normalise(strings, self.string_holes)
        if self.strings is not None and not self._strings_consistent():
            self.strings = None
        self.bools = frozenset(bools)

    def _strings_consistent(self) -> bool:
        """False when the string requirements obviously contradict each other."""
        assert self.strings is not None
        for a in self.suffixes:
            for b in self.suffixes:
                if not (a.endswith(b) or b.endswith(a)):
                    return False
        if self.strings.is_point():
            return self._string_allowed(self.strings.lo)
        return True

    def _string_allowed(self, s: str) -> bool:
        """Whether the string `s` satisfies every string requirement."""
        return (
            self.strings is not None
            and self.strings.contains(s)
            and s not in self.string_holes
            and all(s.startswith(p) for p in self.prefixes)
            and all(s.endswith(x) for x in self.suffixes)
            and all(x in s for x in self.substrings)
        )

    def is_empty(self) -> bool:
        return (
            self.numbers is None and self.strings is None and not self.bools and not (self.bytes_ok)
        )

    def implies(self, c: Constraint) -> bool:
        """True when every value in this set satisfies `c`."""
        if c.op is Op.EXISTS:
            return True
        if self.bytes_ok:
            return False
        kind = c.kind
        if c.op is Op.NE:
            if kind is Kind.NUMBER:
                return (
                    self.numbers is None
                    or c.value in self.number_holes
                    or not self.numbers.contains(c.value)
                )
            if kind is Kind.STRING:
                return not self._string_allowed(c.value)
            return c.value not in self.bools
        # Other operators admit only their own kind.
        if kind is Kind.BOOL:
            return self.numbers is None and self.strings is None and self.bools <= {c.value}
        if self.bools:
            return False
        if kind is Kind.NUMBER:
            return self.strings is None and (
                self.numbers is None or self.numbers.within(Interval.from_op(c.op, c.value))
            )
        if self.numbers is not None:
            return False
        return self.strings is None or self._strings_imply(c)

    def _strings_imply(self, c: Constraint) -> bool:
        strings = self.strings
        assert strings is not None
        if c.op in (Op.PREFIX, Op.SUFFIX, Op.CONTAINS) and c.value == "":
            return True
        if c.op is Op.PREFIX:
            return strings.within(Interval.prefix_range(c.value))
        if c.op is Op.SUFFIX:
            return any(s.endswith(c.value) for s in self.suffixes) or (
                strings.is_point() and strings.lo.endswith(c.value)
            )
        if c.op is Op.CONTAINS:
            known = [*self.prefixes, *self.suffixes, *self.substrings]
            if strings.is_point():
                known.append(strings.lo)
            return any(c.value in s for s in known)
        return strings.within(Interval.from_op(c.op, c.value))


def _normalise(interval: Interval | None, holes: set[Any]) -> Interval | None:
    if interval is None:
        return None
    interval = interval.excluding(holes)
    return None if interval.is_empty() else interval


def attribute_sets(f: Filter) -> dict[str, AttributeSet]:
    by_name: dict[str, list[Constraint]] = {}
    for c in f.constraints:
        by_name.setdefault(c.name, []).append(c)
    return {name: AttributeSet(cs) for name, cs in by_name.items()}


def is_satisfiable(f: Filter) -> bool:
    """False when no event can match `f` (as far as this analysis can tell)."""
    return not any(s.is_empty() for s in attribute_sets(f).values())


def covers(a: Filter, b: Filter) -> bool:
    """True only if every event that matches `b` also matches `a`."""
    if not a.constraints:
        return True
    sets = attribute_sets(b)
    if any(s.is_empty() for s in sets.values()):
        return True
    for c in a.constraints:
        allowed = sets.get(c.name)
        if allowed is None or not allowed.implies(c):
            return False
    return True
