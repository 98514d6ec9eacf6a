"""MatchIndex gives exactly the brute-force answer, through any adds and removes."""

from __future__ import annotations

import math

import hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing import Filter, MatchIndex, parse_filter
from routing.index import _Bucket
from tests.strategies import events, filters, witnessed_filters


def brute_force(table: dict[int, Filter], event: dict) -> set[int]:
    return {k for k, f in table.items() if f.matches(event)}


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 15), filters),
        st.tuples(st.just("add"), st.integers(0, 15), witnessed_filters()),
        st.tuples(st.just("remove"), st.integers(0, 15)),
        st.tuples(st.just("match"), events),
        st.tuples(st.just("match witness"), st.integers(0, 15)),
    ),
    max_size=60,
)
"""Adds of random filters, or of filters with an event that matches them; matches of
random events, or of the event of an earlier add (so that matches often find
filters, also at their bounds)."""


@settings(max_examples=300)
@given(operations)
def test_index_equals_brute_force_through_adds_and_removes(ops: list[tuple]) -> None:
    _check_operations(ops)


@settings(max_examples=200)
@given(operations)
def test_nested_buckets_equal_brute_force(ops: list[tuple]) -> None:
    """Large buckets become nested indexes; force that with a tiny split size."""
    original = _Bucket.SPLIT
    _Bucket.SPLIT = 1
    try:
        _check_operations(ops)
    finally:
        _Bucket.SPLIT = original


def _check_operations(ops: list[tuple]) -> None:
    index: MatchIndex[int] = MatchIndex()
    table: dict[int, Filter] = {}
    witnesses: list[dict] = []
    found = 0
    for op in ops:
        if op[0] == "add":
            f = op[2]
            if isinstance(f, tuple):
                witnesses.append(f[0])
                f = f[1]
            index.add(op[1], f)
            table[op[1]] = f
        elif op[0] == "remove":
            if op[1] in table:
                assert index.remove(op[1]) == table.pop(op[1])
            else:
                with pytest.raises(KeyError):
                    index.remove(op[1])
        else:
            pool = witnesses or [{}]
            event = op[1] if op[0] == "match" else pool[op[1] % len(pool)]
            matched = index.match(event)
            assert matched == brute_force(table, event)
            found += bool(matched)
        assert len(index) == len(table)
    hypothesis.event("some match found a filter" if found else "no match found a filter")
    for key in list(table):
        index.remove(key)
    assert len(index) == 0
    assert not index._attributes and not index._always  # noqa: SLF001 (nothing leaks)


@settings(max_examples=200)
@given(
    st.lists(filters, max_size=30),
    st.lists(witnessed_filters(), min_size=1, max_size=10),
    st.lists(events, max_size=10),
)
def test_index_on_larger_tables(
    fs: list[Filter], witnessed: list[tuple[dict, Filter]], evs: list[dict]
) -> None:
    """Random filters and filters with an event matching them (and random events): each
    witness event finds at least its own filter."""
    index: MatchIndex[int] = MatchIndex()
    table = dict(enumerate(fs + [f for _, f in witnessed]))
    for i, f in table.items():
        index.add(i, f)
    for e in [w for w, _ in witnessed] + evs:
        assert index.match(e) == brute_force(table, e)


INTERVALS = [
    "x >= 0 and x <= 0",
    "x > 0 and x < 1e-9",
    "x >= -0.5 and x < 0.25",
    "x > 1 and x <= 1000000",
    "x >= 100000000000000000 and x <= 100000000000000002",
    "x >= 1e17 and x <= 1.0000000000000002e17",
    "x > 3 and x < 2",
    "x >= 5 and x <= 5 and x != 5",
    "x >= 18446744073709551000 and x <= 18446744073709551615",
    # an int and a float bound whose difference rounds to 0.0 in float arithmetic
    "x > 9223372036854775806 and x < 9.223372036854776e+18",
]
PROBES = [
    0,
    -0.0,
    1e-10,
    0.25,
    -0.5,
    1,
    2,
    999999.5,
    1000000,
    10**17,
    10**17 + 1,
    1e17,
    1e17 + 16,
    5,
    18446744073709551615,
    9223372036854775807,
    math.nan,
    math.inf,
    -math.inf,
    3,
    2.5,
]


def test_number_intervals_at_their_edges() -> None:
    index: MatchIndex[str] = MatchIndex()
    table = {text: parse_filter(text) for text in INTERVALS}
    for text, f in table.items():
        index.add(text, f)
    for value in PROBES:
        assert index.match({"x": value}) == brute_force(table, {"x": value}), value


def test_replacing_a_key_replaces_the_filter() -> None:
    index: MatchIndex[str] = MatchIndex()
    index.add("s", parse_filter("x = 1"))
    index.add("s", parse_filter("x = 2"))
    assert len(index) == 1
    assert index.match({"x": 1}) == set()
    assert index.match({"x": 2}) == {"s"}


def test_bools_are_not_numbers_in_the_index() -> None:
    index: MatchIndex[str] = MatchIndex()
    index.add("one", parse_filter("x = 1"))
    index.add("true", parse_filter("x = true"))
    assert index.match({"x": True}) == {"true"}
    assert index.match({"x": 1.0}) == {"one"}


def test_match_rejects_bad_events() -> None:
    index: MatchIndex[str] = MatchIndex()
    index.add("a", parse_filter("x = 1"))
    with pytest.raises(TypeError):
        index.match({"x": [1]})
    with pytest.raises(TypeError):
        index.match(["x"])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        index.add("b", "x = 1")  # type: ignore[arg-type]


def test_a_large_bucket_splits_and_stays_exact() -> None:
    index: MatchIndex[int] = MatchIndex()
    table = {}
    for i in range(300):
        f = parse_filter(f"family = 1 and price < {i % 37} and quantity >= {i % 11}")
        index.add(i, f)
        table[i] = f
    for i in range(0, 300, 3):
        index.remove(i)
        del table[i]
    for price in range(-1, 40, 3):
        for quantity in range(0, 12, 2):
            event = {"family": 1, "price": price + 0.5, "quantity": quantity}
            assert index.match(event) == brute_force(table, event)
