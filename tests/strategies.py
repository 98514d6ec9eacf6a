"""Hypothesis strategies for filters and events over a small universe, so that random
filters and events often touch the same attributes and boundary values; and, since
independent filters rarely cover each other and independent events rarely match a
filter's bounds, strategies that build such cases on purpose: narrowed pairs (b implies
a by construction), near misses (one constraint of a narrowed b widened or moved), and
filters with an event that matches them."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from routing import Constraint, Filter, Op
from routing.filters import ORDERING_OPS, STRING_OPS
from routing.values import kind_of

NAMES = ["a", "b", "c.d"]
NUMBERS: list[Any] = [-2, -1, 0, 1, 2, 3, -1.5, 0.0, 0.5, 1.0, 2.5, 2**63 - 1]
STRINGS = ["", "a", "b", "ab", "ba", "abc", 'b"a', "\\", "é"]
BOOLS = [True, False]

number_values = st.sampled_from(NUMBERS)
string_values = st.sampled_from(STRINGS)
bool_values = st.sampled_from(BOOLS)


@st.composite
def constraints(draw: st.DrawFn, names: list[str] = NAMES) -> Constraint:
    name = draw(st.sampled_from(names))
    op = draw(st.sampled_from(list(Op)))
    if op is Op.EXISTS:
        return Constraint(name, op)
    if op in (Op.PREFIX, Op.SUFFIX, Op.CONTAINS):
        return Constraint(name, op, draw(string_values))
    if op in (Op.EQ, Op.NE):
        return Constraint(name, op, draw(st.one_of(number_values, string_values, bool_values)))
    return Constraint(name, op, draw(st.one_of(number_values, string_values)))


filters = st.lists(constraints(), min_size=0, max_size=4).map(Filter)

event_values = st.one_of(
    number_values,
    string_values,
    bool_values,
    st.sampled_from([b"", b"ab", math.nan, math.inf, -math.inf, 0.75, -3, 1.5, "abd", "c"]),
)
events = st.dictionaries(st.sampled_from(NAMES), event_values, max_size=len(NAMES))


def near_values(fs: list[Filter]) -> list[Any]:
    """Values at and around every constant of the filters (where covering could fail)."""
    out: list[Any] = [True, False, b"x", math.nan, math.inf, "", "zzz", 0, -1000, 1000]
    for f in fs:
        for c in f.constraints:
            v = c.value
            if type(v) in (int, float):
                out += [v, v - 1, v + 1, v - 0.25, v + 0.25, float(v)]
            elif type(v) is str:
                out += [v, v + "a", "a" + v, v + "\U0010ffff", v[:-1], v[1:], "x" + v + "x"]
    return out


# ---- pairs (a, b) where a often covers b


def _valid(name: str, op: Op, value: Any) -> Constraint | None:
    """The constraint `name op value`, or None where the language refuses it."""
    try:
        return Constraint(name, op, value)
    except (ValueError, TypeError):
        return None


def _same_kind(c: Constraint, values: list[Any]) -> list[Any]:
    return [v for v in values if type(v) is not bool and kind_of(v) is c.kind]


@functools.lru_cache(maxsize=4096)
def _narrower_candidates(c: Constraint) -> list[Constraint]:
    """Constraints on `c`'s attribute that imply `c` (every event matching one matches
    `c`): `c` itself, equality with a value `c` accepts, and per operator a tighter
    bound, a longer prefix or suffix, or a longer substring (or a prefix/suffix holding
    it); for `exists`, any constraint on the attribute."""
    pool = near_values([Filter([c])]) + NUMBERS + STRINGS + BOOLS
    alone = Filter([c])
    out: list[Constraint | None] = [c]
    out += [_valid(c.name, Op.EQ, v) for v in pool if alone.matches({c.name: v})]
    if c.op is Op.EXISTS:
        out += [_valid(c.name, op, v) for op in Op for v in pool]
    elif c.op in (Op.GT, Op.GE, Op.LT, Op.LE):
        up = c.op in (Op.GT, Op.GE)
        for w in _same_kind(c, pool):
            inside = w > c.value if up else w < c.value
            if inside or w == c.value:
                out.append(_valid(c.name, Op.GT if up else Op.LT, w))
            if inside or (w == c.value and c.op in (Op.GE, Op.LE)):
                out.append(_valid(c.name, Op.GE if up else Op.LE, w))
    elif c.op is Op.PREFIX:
        out += [_valid(c.name, Op.PREFIX, c.value + t) for t in STRINGS]
    elif c.op is Op.SUFFIX:
        out += [_valid(c.name, Op.SUFFIX, t + c.value) for t in STRINGS]
    elif c.op is Op.CONTAINS:
        for op in STRING_OPS:
            out += [_valid(c.name, op, t + c.value + u) for t in STRINGS[:4] for u in STRINGS[:4]]
    return [n for n in out if n is not None]


@functools.lru_cache(maxsize=4096, typed=True)
def _satisfied_by(name: str, value: Any) -> list[Constraint]:
    """Every constraint on `name` over the values near `value` that `value` satisfies."""
    pool = [*near_values([Filter([_valid(name, Op.EQ, value) or Constraint(name, Op.EXISTS)])])]
    pool += NUMBERS + STRINGS + BOOLS + [value]
    candidates = [_valid(name, op, v) for op in Op for v in [None, *pool]]
    return [c for c in candidates if c is not None and Filter([c]).matches({name: value})]


def _one_by_op(draw: st.DrawFn, choices: list[Constraint]) -> Constraint:
    """One of `choices`, the operator drawn first so that no operator crowds out the
    rest (a number satisfies `!=` for nearly every value, a string `contains` only few)."""
    ops = sorted({c.op for c in choices}, key=list(Op).index)
    op = draw(st.sampled_from(ops))
    return draw(st.sampled_from([c for c in choices if c.op is op]))


def _witness_value(name: str, op: Op | None) -> st.SearchStrategy[Any]:
    """Values of `name` that some constraint with operator `op` accepts (any value for
    None)."""
    if op is None:
        return event_values
    kinds = string_values if op in STRING_OPS else st.one_of(number_values, string_values)
    values = kinds if op in STRING_OPS or op in ORDERING_OPS else event_values
    return values.filter(lambda v: any(c.op is op for c in _satisfied_by(name, v)))


@dataclass(frozen=True)
class Narrowing:
    """`a`, and for `b`: `kept`, constraints implying each of `a`'s in turn (one or two
    each), and `extra` ones; the `witness` event matches all of them."""

    witness: dict[str, Any]
    a: Filter
    kept: list[list[Constraint]]
    extra: list[Constraint]


_CLOSED = {Op.LT: Op.LE, Op.GT: Op.GE}


def _narrowed(draw: st.DrawFn, c: Constraint, witness: dict[str, Any]) -> list[Constraint]:
    """What implies `c` in `b`: `c` itself half the time (bounds equal to `a`'s are where
    a cover is decided by one point), else a narrower constraint the witness matches, or
    for a strict bound the closed bound minus the point (`x <= 3 and x != 3`)."""
    if c.op in _CLOSED and draw(st.integers(0, 3)) == 0:
        return [Constraint(c.name, _CLOSED[c.op], c.value), Constraint(c.name, Op.NE, c.value)]
    if draw(st.booleans()):
        return [c]
    return [_one_by_op(draw, [n for n in _narrower_candidates(c) if Filter([n]).matches(witness)])]


@st.composite
def narrowings(draw: st.DrawFn, names: list[str], first_op: Op | None = None) -> Narrowing:
    """A `Narrowing` over `names` whose `a` has one to four constraints, the first with
    operator `first_op` on `names[0]` where one is given."""
    witness = {n: draw(_witness_value(n, first_op if n == names[0] else None)) for n in names}
    choices = [c for name, value in witness.items() for c in _satisfied_by(name, value)]
    first = [c for c in choices if c.name == names[0] and c.op is first_op]
    a = [draw(st.sampled_from(first))] if first_op is not None else []
    a += [_one_by_op(draw, choices) for _ in range(draw(st.integers(1 - len(a), 4 - len(a))))]
    kept = [_narrowed(draw, c, witness) for c in a]
    extra = [_one_by_op(draw, choices) for _ in range(draw(st.integers(0, 2)))]
    return Narrowing(witness, Filter(a), kept, extra)


@st.composite
def narrowed_pairs(
    draw: st.DrawFn, names: list[str] = NAMES, first_op: Op | None = None
) -> tuple[Filter, Filter]:
    """(a, b) from a `Narrowing`, b's constraints in any order. Every event matching `b`
    matches `a` by construction, and the witness matches `b`: a real cover, neither a
    trivially true `a` nor an unsatisfiable `b`."""
    n = draw(narrowings(names, first_op))
    return n.a, Filter(draw(st.permutations([*itertools.chain(*n.kept), *n.extra])))


@functools.lru_cache(maxsize=4096)
def _wider_candidates(c: Constraint) -> list[Constraint]:
    """Constraints on `c`'s attribute that `c` implies, or nearly: `exists`, `!=` a
    value `c` refuses, a looser bound, a shorter prefix, suffix or substring of a string
    value. Put in place of a narrowed constraint they mostly break a cover, by a little."""
    pool = near_values([Filter([c])]) + NUMBERS + STRINGS + BOOLS
    alone = Filter([c])
    out: list[Constraint | None] = [Constraint(c.name, Op.EXISTS)]
    if c.op is not Op.EXISTS:
        out += [_valid(c.name, Op.NE, w) for w in pool if not alone.matches({c.name: w})]
    if c.op in (Op.EQ, Op.GT, Op.GE, Op.LT, Op.LE):
        for w in _same_kind(c, pool):
            for op in (Op.GT, Op.GE, Op.LT, Op.LE):
                if op is not c.op and (n := _valid(c.name, op, w)) is not None:
                    out.append(n)
    if type(c.value) is str:
        v = c.value
        for k in range(len(v) + 1):
            out += [_valid(c.name, Op.PREFIX, v[:k]), _valid(c.name, Op.SUFFIX, v[k:])]
            out += [_valid(c.name, Op.CONTAINS, v[k:j]) for j in range(k, len(v) + 1)]
    return [n for n in out if n is not None and n != c]


@st.composite
def near_miss_pairs(
    draw: st.DrawFn, names: list[str] = NAMES, first_op: Op | None = None
) -> tuple[Filter, Filter]:
    """A narrowed pair whose constraint narrowed from one of `a`'s (the first, with
    `first_op`, where one is given) is replaced by a wider one or a nearby one on the
    same attribute (another operator, a neighbouring value): covering may or may not
    hold, which is where a covering test claiming too much is caught."""
    n = draw(narrowings(names, first_op))
    kept = [list(k) for k in n.kept]
    i = 0 if first_op is not None else draw(st.integers(0, len(kept) - 1))
    old = kept[i][0]
    nearby = [
        c
        for op in Op
        for v in [None, *near_values([Filter([old])])]
        if (c := _valid(old.name, op, v)) is not None
    ]
    same_value = [c for op in Op if op is not old.op and (c := _valid(old.name, op, old.value))]
    wider = _wider_candidates(old) or nearby
    kept[i][0] = _one_by_op(draw, draw(st.sampled_from([wider, nearby, same_value or nearby])))
    return n.a, Filter(draw(st.permutations([*itertools.chain(*kept), *n.extra])))


def covering_pairs(names: list[str] = NAMES) -> st.SearchStrategy[tuple[Filter, Filter]]:
    """Pairs to check covering's soundness on: three in four near misses, one in four
    independent filters. (Narrowed pairs are covers by construction, so `covers` can
    only be right on them: they are for completeness.)"""
    independent = st.lists(constraints(names), max_size=4).map(Filter)
    near = near_miss_pairs(names)
    return st.one_of(near, near, near, st.tuples(independent, independent))


def witnessed_filters(names: list[str] = NAMES) -> st.SearchStrategy[tuple[dict[str, Any], Filter]]:
    """(event, filter) with the event matching the filter, whose constraints are often
    bounds equal to the event's values (`a <= 1` for `a = 1`): the cases an index
    that files filters by bound must get right, rare among independent filters and
    events."""
    return narrowings(names).map(lambda n: (n.witness, n.a))
