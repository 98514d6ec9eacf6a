"""`client.events.checked_event`: its shortcut for names published before refuses
what `routing.validate_event` refuses."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from client.events import checked_event
from routing import validate_event
from routing.values import INT_MAX, INT_MIN


class _Name(str):
    """A str subclass: equal to a valid name, but not a str."""


_KNOWN = ["family", "price", "sym", "ok", "blob"]
_NAMES = (
    st.sampled_from(_KNOWN)
    | st.sampled_from(["7x", "a b", ""])
    | st.builds(_Name, st.sampled_from(_KNOWN))
)
_VALUES = st.one_of(
    st.integers(INT_MIN, INT_MAX),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.booleans(),
    st.binary(max_size=5),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.builds(_Name, st.text(max_size=3)),
    st.tuples(st.integers()),
)


def _outcome(check: Any, event: Any) -> type[BaseException] | None:
    try:
        check(event)
    except (TypeError, ValueError) as exc:
        return type(exc)
    return None


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=6))
def test_checked_event_refuses_what_validate_event_refuses(items: list[tuple[Any, Any]]) -> None:
    checked_event(dict.fromkeys(_KNOWN, 1))  # every known name seen valid: the shortcut
    event = dict(items)
    assert _outcome(checked_event, event) is _outcome(validate_event, event)
    if _outcome(validate_event, event) is None:
        assert checked_event(event) is event  # a dict is not copied
