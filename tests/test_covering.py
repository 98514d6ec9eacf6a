"""Covering: sound always, and complete for the common same-attribute cases."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing import Filter, covers, is_satisfiable, parse_filter
from tests.strategies import NAMES, constraints, filters, near_values


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


@settings(max_examples=400)
@given(filters, filters)
def test_covering_is_sound(a: Filter, b: Filter) -> None:
    if not covers(a, b):
        return
    for event in _random_events([a, b], random.Random(f"{a}|{b}"), 300):
        if b.matches(event):
            assert a.matches(event), f"{a} claims to cover {b} but {event} matches only b"


@given(filters)
def test_every_filter_covers_itself_and_true_covers_all(f: Filter) -> None:
    assert covers(f, f)
    assert covers(Filter(), f)


@given(filters)
def test_unsatisfiable_means_no_event_matches(f: Filter) -> None:
    if is_satisfiable(f):
        return
    assert not any(f.matches(e) for e in _random_events([f], random.Random(str(f)), 300))


one_attribute_filters = st.lists(constraints(names=["a"]), min_size=1, max_size=3).map(Filter)


@settings(max_examples=600)
@given(one_attribute_filters, one_attribute_filters)
def test_covering_is_sound_on_one_attribute(a: Filter, b: Filter) -> None:
    """Same-attribute pairs are where covering is decided by value sets, not names."""
    test_covering_is_sound.hypothesis.inner_test(a, b)
