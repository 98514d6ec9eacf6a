"""Hypothesis strategies for filters and events over a small universe, so that random
filters and events often touch the same attributes and boundary values."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from routing import Constraint, Filter, Op

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
