"""Covering: sound always, and complete for the common same-attribute cases.

Soundness is checked on pairs where `covers` claims a cover: near misses (a cover
broken, or not, by one widened or moved constraint) and independent pairs. Completeness
is checked where the per-attribute value sets decide it: `b` built from `a` by
narrowing each constraint on its own attribute (see `tests.strategies`); `covers`
may still miss covers that need constraints combined in other ways, as its module says."""

from __future__ import annotations

import random

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from routing import Filter, Op, covers, is_satisfiable, parse_filter
from tests.strategies import (
    NAMES,
    constraints,
    covering_pairs,
    filters,
    narrowed_pairs,
    near_miss_pairs,
    near_values,
)


def cov(a: str, b: str) -> bool:
    return covers(parse_filter(a), parse_filter(b))


COVERED = [
    ("true", "x = 1"),
    ("x > 3", "x > 5 and x < 10"),  # SIENA's pairwise rule misses this one
    ("x > 3", "x > 3"),
    ("x >= 3", "x > 3"),
    ("x > 3", "x >= 4"),
    ("x > 3", "x = 4"),
    ("x > 3", "x >= 3 and x != 3"),
    ("x < 10 and x > 0", "x > 2 and x < 5"),
    ("x != 5", "x > 5"),
    ("x != 5", "x = 4"),
    ("x != 5", 'x = "a"'),
    ("x != 5", "x != 5 and y = 1"),
    ("x != 5", "x = true"),
    ("x exists", "x = 1"),
    ("x exists", "x exists and y exists"),
    ("x = 7", "x = 7.0"),
    ("x = 7.0", "x >= 7 and x <= 7"),
    ('x prefix "a"', 'x prefix "ab"'),
    ('x prefix "a"', 'x = "abc"'),
    ('x prefix "ab"', 'x >= "ab" and x < "ac"'),
    ('x < "b"', 'x prefix "ab"'),
    ('x >= "ab"', 'x prefix "ab"'),
    ('x suffix "c"', 'x suffix "bc"'),
    ('x contains "b"', 'x prefix "ab"'),
    ('x contains "b"', 'x suffix "bc"'),
    ('x contains "bc"', 'x contains "abcd"'),
    ('x contains "b"', 'x = "abc"'),
    ('x prefix ""', 'x = "z"'),
    ('x != "a"', 'x prefix "b"'),
    ('x != "a"', "x = 1"),
    ("x = true", "x = true and y = 2"),
    ("x != false", "x = true"),
    ("x = 1 and y > 2", "y > 3 and x = 1 and z = 0"),
    ("x = 1", "x > 5 and x < 3"),  # b matches nothing
    ("x = 1", 'x = 1 and x = "a"'),  # b matches nothing
    ("y = 1", 'x prefix "a" and x prefix "b"'),  # b matches nothing
]

NOT_COVERED = [
    ("x = 1", "true"),
    ("x > 3", "x > 2"),
    ("x > 3", "x >= 3"),
    ("x > 3", "x != 3"),
    ("x != 5", "x > 4"),
    ("x != 5", "x exists"),
    ("x = 1", "y = 1"),
    ("x exists", "y = 1"),
    ('x prefix "ab"', 'x prefix "a"'),
    ('x < "b"', 'x prefix "b"'),
    ('x suffix "bc"', 'x suffix "c"'),
    ('x contains "d"', 'x prefix "abc"'),
    ("x = true", "x != false"),  # x could be a number
    ("x > 0", "x != 0"),
    ("x < 5", 'x != "a"'),
    ("x = 1 and y = 2", "x = 1"),
    ("x != 1", "x exists"),
]


@pytest.mark.parametrize(("a", "b"), COVERED)
def test_covers(a: str, b: str) -> None:
    assert cov(a, b)


@pytest.mark.parametrize(("a", "b"), NOT_COVERED)
def test_does_not_cover(a: str, b: str) -> None:
    assert not cov(a, b)


def test_unsatisfiable_filters_are_detected() -> None:
    assert not is_satisfiable(parse_filter("x > 5 and x < 3"))
    assert not is_satisfiable(parse_filter('x = 1 and x = "1"'))
    assert is_satisfiable(parse_filter("x > 5 and x < 6"))
    assert is_satisfiable(parse_filter("x != 1 and x != 2"))


def _random_events(fs: list[Filter], rng: random.Random, count: int) -> list[dict]:
    pool = near_values(fs)
    names = sorted({c.name for f in fs for c in f.constraints} | set(NAMES))
    out = []
    for _ in range(count):
        event = {}
        for name in names:
            if rng.random() < 0.85:
                event[name] = rng.choice(pool)
        out.append(event)
    return out


def _check_sound(a: Filter, b: Filter) -> None:
    """Where `covers(a, b)` claims a cover (a constraining something), no sampled event
    near the filters' constants matches `b` without matching `a`. Hypothesis discards
    the other pairs (too many would fail its filter health check, so the strategy must
    keep producing covers), and counts the kinds of cover it checked."""
    assume(a.constraints and covers(a, b))
    event("b unsatisfiable" if not is_satisfiable(b) else "b satisfiable")
    for sample in _random_events([a, b], random.Random(f"{a}|{b}"), 300):
        if b.matches(sample):
            assert a.matches(sample), f"{a} claims to cover {b} but {sample} matches only b"


@settings(max_examples=400)
@given(covering_pairs())
def test_covering_is_sound(pair: tuple[Filter, Filter]) -> None:
    _check_sound(*pair)


@settings(max_examples=200)
@given(narrowed_pairs())
def test_covering_is_complete_for_narrowed_constraints(pair: tuple[Filter, Filter]) -> None:
    """Where `b` is `a` with each constraint replaced by one implying it on the same
    attribute (a tighter bound, a longer prefix, suffix or substring, equality with an
    accepted value), plus more constraints, the per-attribute value sets decide the cover:
    `covers` must see it. The pairs have a witness event matching both, so no pair is
    covered merely because `b` is unsatisfiable."""
    a, b = pair
    assert is_satisfiable(b), f"{b} has a witness event but is called unsatisfiable"
    assert covers(a, b), f"{a} covers {b} by construction"


@given(filters)
def test_every_filter_covers_itself_and_true_covers_all(f: Filter) -> None:
    assert covers(f, f)
    assert covers(Filter(), f)


# Two to four constraints on one attribute: about half of them contradict each other.
crowded_filters = st.lists(constraints(names=["a"]), min_size=2, max_size=4).map(Filter)


@settings(max_examples=200)
@given(st.one_of(filters, crowded_filters, crowded_filters))
def test_unsatisfiable_means_no_event_matches(f: Filter) -> None:
    assume(not is_satisfiable(f))
    assert not any(f.matches(e) for e in _random_events([f], random.Random(str(f)), 300))


@pytest.mark.parametrize("op", list(Op), ids=lambda op: op.name)
@settings(max_examples=60)
@given(data=st.data())
def test_covering_is_sound_on_one_attribute(op: Op, data: st.DataObject) -> None:
    """Same-attribute pairs are where covering is decided by value sets, not names; each
    operator gets its own run, `a`'s first constraint having it, so that the rarer
    string operators are checked as often as the others."""
    _check_sound(*data.draw(near_miss_pairs(names=["a"], first_op=op)))


@pytest.mark.parametrize("op", list(Op), ids=lambda op: op.name)
@settings(max_examples=20)
@given(data=st.data())
def test_covering_is_complete_on_one_attribute(op: Op, data: st.DataObject) -> None:
    pair = data.draw(narrowed_pairs(names=["a"], first_op=op))
    test_covering_is_complete_for_narrowed_constraints.hypothesis.inner_test(pair)
