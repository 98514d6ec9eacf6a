"""The filter language (docs/design.md): parsing, printing and matching semantics."""

from __future__ import annotations

import math
import pickle

import hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing import Constraint, Filter, FilterSyntaxError, Op, parse_filter, validate_event
from tests.strategies import events, filters, near_values, witnessed_filters


def m(text: str, event: dict) -> bool:
    return parse_filter(text).matches(event)


# -- parsing ----------------------------------------------------------------------


def test_values_keep_their_kind() -> None:
    f = parse_filter('a = 7 and b = 7.0 and c = "7" and d = true and e = false and g = -0.25')
    values = {c.name: c.value for c in f.constraints}
    assert values == {"a": 7, "b": 7.0, "c": "7", "d": True, "e": False, "g": -0.25}
    assert [type(values[k]) for k in "abcdeg"] == [int, float, str, bool, bool, float]


def test_example_from_design() -> None:
    f = parse_filter(
        'type = "callForOffers" and family = 7 and price < 120.5 '
        'and region prefix "EU" and discount exists'
    )
    event = {"type": "callForOffers", "family": 7, "price": 99.5, "region": "EU-1", "discount": 0}
    assert f.matches(event)
    assert not f.matches({**event, "price": 120.5})
    assert not f.matches({k: v for k, v in event.items() if k != "discount"})


def test_true_is_the_empty_filter_and_matches_everything() -> None:
    f = parse_filter("  true ")
    assert f == Filter() and len(f) == 0 and str(f) == "true"
    assert f.matches({}) and f.matches({"x": b"blob"})


def test_keywords_may_be_attribute_names() -> None:
    f = parse_filter("and = 1 and true = true and exists exists")
    assert {c.name for c in f.constraints} == {"and", "true", "exists"}
    assert parse_filter(str(f)) == f


def test_number_literals() -> None:
    values = [
        c.value for c in parse_filter("a = 0x1F and b = 1_000 and c = 1e3 and d = .5").constraints
    ]
    assert values == [31, 1000, 1000.0, 0.5]
    assert parse_filter("x > -5").constraints[0].value == -5


def test_string_escapes_round_trip() -> None:
    f = parse_filter(r'x = "a \"quoted\" \\ back"')
    assert f.constraints[0].value == 'a "quoted" \\ back'
    assert parse_filter(str(f)) == f


def test_equal_regardless_of_order_and_duplicates() -> None:
    a = parse_filter("x = 1 and y < 2")
    b = parse_filter("y < 2 and x = 1 and x = 1")
    assert a == b and hash(a) == hash(b) and str(a) == str(b)
    assert parse_filter("x = 7") != parse_filter("x = 7.0")
    assert parse_filter("x = 1") != parse_filter("x = true")


def test_filters_are_immutable_and_picklable() -> None:
    f = parse_filter("x = 1")
    with pytest.raises(AttributeError):
        f.constraints[0].value = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        f._constraints = ()  # type: ignore[misc]  # noqa: SLF001
    assert pickle.loads(pickle.dumps(f)) == f


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("", 1, "expected a constraint"),
        ("x", 2, "expected an operator"),
        ("x =", 4, "expected a value"),
        ("x = 5 and", 10, "expected an attribute name"),
        ("x = 5 y = 6", 7, "expected 'and'"),
        ("x == 5", 4, "expected a value"),
        ("x < true", 5, "bool value cannot be used with '<'"),
        ("x >= false", 6, "bool value"),
        ("x prefix 5", 10, "needs a string value"),
        ("x contains true", 12, "needs a string value"),
        ('x = "abc', 5, "unterminated string"),
        (r'x = "a\n"', 7, "unknown escape"),
        ("x = 07", 5, "malformed number"),
        ("x = 5abc", 5, "malformed number"),
        ("x = 1.2.3", 5, "malformed number"),
        ("x = 1e999", 5, "finite"),
        ("x = 2**70", 6, "unexpected character"),
        ("x = 99999999999999999999999", 5, "64 bits"),
        ("9x = 1", 1, "malformed number"),
        ("x exists 5", 10, "expected 'and'"),
        ("x = 'single'", 5, 'unexpected character "\'" (strings go in double quotes)'),
        ("x @ 1", 3, "unexpected character"),
        ("x = -", 5, "unexpected character"),
    ],
)
def test_syntax_errors_name_the_column(text: str, column: int, fragment: str) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        parse_filter(text)
    assert info.value.column == column, str(info.value)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_non_string_text_is_a_syntax_error() -> None:
    with pytest.raises(FilterSyntaxError):
        parse_filter(5)  # type: ignore[arg-type]


@given(st.text(max_size=40))
def test_arbitrary_text_parses_or_raises_syntax_error(text: str) -> None:
    try:
        f = parse_filter(text)
    except FilterSyntaxError:
        return
    assert parse_filter(str(f)) == f


TOKENS = [
    "x",
    "y.z",
    "and",
    "true",
    "false",
    "exists",
    "=",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "prefix",
    "suffix",
    "contains",
    '"s"',
    '"',
    "\\",
    "1",
    "-2",
    "0.5",
    "1e5",
    "0x1f",
    "-",
    ".",
    " ",
    "07",
    "__",
]


@given(st.lists(st.sampled_from(TOKENS), max_size=12))
def test_token_soup_parses_or_raises_syntax_error(tokens: list[str]) -> None:
    text = " ".join(tokens)
    try:
        f = parse_filter(text)
    except FilterSyntaxError as exc:
        assert 1 <= exc.column <= len(text) + 1
        return
    assert parse_filter(str(f)) == f


@given(filters)
def test_print_parse_round_trip(f: Filter) -> None:
    text = str(f)
    again = parse_filter(text)
    assert again == f
    assert str(again) == text
    assert [type(c.value) for c in again.constraints] == [type(c.value) for c in f.constraints]


@given(filters)
def test_wire_round_trip(f: Filter) -> None:
    assert Filter.from_wire(f.to_wire()) == f


@pytest.mark.parametrize(
    "data",
    [
        "x = 1",
        [["x"]],
        [["x", "~", 1]],
        [["x", "=", [1]]],
        [[1, "=", 1]],
        [["x", "<", True]],
        [["x", "exists", 1]],
        [["x", "prefix", 3]],
    ],
)
def test_bad_wire_filters_are_value_errors(data: object) -> None:
    with pytest.raises(ValueError):
        Filter.from_wire(data)


def test_constraint_rejects_bad_values() -> None:
    with pytest.raises(TypeError):
        Constraint("x", Op.EQ, [1])
    with pytest.raises(TypeError):
        Constraint("x", Op.EQ, b"bytes")
    with pytest.raises(ValueError):
        Constraint("x", Op.EQ, math.nan)
    with pytest.raises(ValueError):
        Constraint("1x", Op.EQ, 1)


# -- matching semantics: every operator and every cross-kind comparison ----------

SEMANTICS = [
    # (filter, event value, expected); the event is {"x": value}
    ("x = 7", 7, True),
    ("x = 7", 7.0, True),
    ("x = 7.0", 7, True),
    ("x = 7", 8, False),
    ("x = 7", "7", False),
    ("x = 1", True, False),
    ("x = true", 1, False),
    ("x = true", True, True),
    ("x = true", False, False),
    ('x = "a"', "a", True),
    ('x = "a"', "A", False),
    ("x = 0", b"\x00", False),
    ("x != 7", 8, True),
    ("x != 7", 7.0, False),
    ("x != 7", "7", True),
    ("x != 7", True, True),
    ("x != true", False, True),
    ("x != true", True, False),
    ("x != true", 1, True),
    ('x != "a"', "b", True),
    ('x != "a"', "a", False),
    ('x != "a"', 5, True),
    ("x != 7", b"7", False),
    ("x < 5", 4, True),
    ("x < 5", 5, False),
    ("x < 5", 4.99, True),
    ("x < 5.5", 5, True),
    ("x <= 5", 5.0, True),
    ("x <= 5", 5.01, False),
    ("x > 5", 6, True),
    ("x > 5", 5, False),
    ("x >= 5", 5, True),
    ("x >= 5", 4, False),
    ('x < "b"', "a", True),
    ('x < "b"', "b", False),
    ('x >= "b"', "ba", True),
    ("x < 5", "4", False),
    ('x < "5"', 4, False),
    ("x < 5", True, False),
    ("x > 0", True, False),
    ("x < 5", b"", False),
    ('x prefix "ab"', "abc", True),
    ('x prefix "ab"', "ab", True),
    ('x prefix "ab"', "ba", False),
    ('x suffix "bc"', "abc", True),
    ('x suffix "bc"', "cb", False),
    ('x contains "b"', "abc", True),
    ('x contains "d"', "abc", False),
    ('x prefix ""', "", True),
    ('x prefix "1"', 1, False),
    ('x contains "a"', b"a", False),
    ("x exists", 0, True),
    ("x exists", b"", True),
    ("x exists", False, True),
    ("x < 5", math.nan, False),
    ("x != 5", math.nan, True),
    ("x = 5", math.nan, False),
    ("x > 5", math.inf, True),
    ("x < 5", -math.inf, True),
    ("x < 18446744073709551615", 2**64 - 2, True),
    ("x = 9007199254740993", 9007199254740992.0, False),
]


@pytest.mark.parametrize(("text", "value", "expected"), SEMANTICS)
def test_operator_semantics(text: str, value: object, expected: bool) -> None:
    assert m(text, {"x": value}) is expected


@pytest.mark.parametrize("op", ["= 1", "!= 1", "< 1", "exists", 'prefix "a"', '!= "a"'])
def test_missing_attribute_never_matches(op: str) -> None:
    assert not m(f"x {op}", {"y": 1})


@st.composite
def filters_and_close_events(draw: st.DrawFn) -> tuple[Filter, dict]:
    """A filter and an event matching it, or the event with one attribute dropped or
    set to a value near the filter's constants: so that a filter's constraints often
    all hold, or all but one (independent events rarely satisfy more than one)."""
    witness, f = draw(witnessed_filters())
    event = dict(witness)
    change = draw(st.sampled_from(["none", "drop", "move"]))
    name = draw(st.sampled_from(sorted(event)))
    if change == "drop":
        del event[name]
    elif change == "move":
        event[name] = draw(st.sampled_from(near_values([f])))
    return f, event


@settings(max_examples=300)
@given(st.one_of(st.tuples(filters, events), filters_and_close_events()))
def test_matches_is_a_conjunction(pair: tuple[Filter, dict]) -> None:
    """The compiled predicate of a whole filter agrees with its constraints one by one."""
    f, event = pair
    matched = f.matches(event)
    hypothesis.event(f"{'matched' if matched else 'not matched'}, {len(f)} constraints")
    assert matched == all(Filter([c]).matches(event) for c in f.constraints)


def test_unsupported_event_values_are_rejected() -> None:
    with pytest.raises(TypeError, match="'x' has unsupported type list"):
        m("x = 1", {"x": [1]})
    with pytest.raises(TypeError, match="unsupported type NoneType"):
        m("x != 1", {"x": None})
    with pytest.raises(TypeError):
        validate_event({"x": {"nested": 1}})
    with pytest.raises(TypeError):
        validate_event([("x", 1)])
    with pytest.raises(TypeError):
        validate_event({1: 1})
    with pytest.raises(ValueError, match="identifier"):
        validate_event({"bad name": 1})
    with pytest.raises(ValueError, match="64 bits"):
        validate_event({"x": 2**64})
    assert validate_event({"x": 1, "y": b"", "z": True, "w": "s", "v": 1.5}) is not None
