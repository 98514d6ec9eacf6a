"""Candidate lookup for covering among many filters.

`covers` is exact but costs microseconds; comparing a new subscription with every
forwarded one makes installing n subscriptions O(n^2) (measured: 999 equality
subscriptions took 33 s to install below the root). A filter can only cover, or
be covered, where the equality constraints line up, so filters are indexed by
their equality constraints and the callers run `covers` on the candidates only.
"""

from __future__ import annotations

from collections.abc import Iterator

from routing.filters import Filter, Op

EqKey = tuple[str, object, object]  # (name, kind, value): bools apart from numbers


def _eq_keys(f: Filter) -> list[EqKey]:
    return [(c.name, c.kind, c.value) for c in f.constraints if c.op is Op.EQ]


class CoverIndex:
    """A set of filters that answers covering candidate queries."""

    def __init__(self) -> None:
        self._all: set[Filter] = set()
        self._by_eq: dict[EqKey, set[Filter]] = {}
        self._no_eq: set[Filter] = set()
        # Filters constraining a name without an equality on it (a range can pin a
        # value too, so they stay candidates for being covered).
        self._loose: dict[str, set[Filter]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, f: object) -> bool:
        return f in self._all

    def __iter__(self) -> Iterator[Filter]:
        return iter(self._all)

    def add(self, f: Filter) -> None:
        if f in self._all:
            return
        self._all.add(f)
        keys = _eq_keys(f)
        for key in keys:
            self._by_eq.setdefault(key, set()).add(f)
        if not keys:
            self._no_eq.add(f)
        eq_names = {key[0] for key in keys}
        for name in f.attributes() - eq_names:
            self._loose.setdefault(name, set()).add(f)

    def discard(self, f: Filter) -> None:
        if f not in self._all:
            return
        self._all.discard(f)
        keys = _eq_keys(f)
        for key in keys:
            _drop(self._by_eq, key, f)
        self._no_eq.discard(f)
        for name in f.attributes() - {key[0] for key in keys}:
            _drop(self._loose, name, f)

    def may_cover(self, f: Filter) -> set[Filter]:
        """Filters that might cover `f` (the ones that do, bar unsatisfiable `f`)."""
        out = set(self._no_eq)
        for key in _eq_keys(f):
            out |= self._by_eq.get(key, set())
        return out

    def may_be_covered_by(self, f: Filter) -> set[Filter]:
        """A superset of the satisfiable filters that `f` covers."""
        keys = _eq_keys(f)
        if not keys:
            return set(self._all)
        out: set[Filter] | None = None
        for name, kind, value in keys:
            same = self._by_eq.get((name, kind, value), set()) | self._loose.get(name, set())
            out = same if out is None else out & same
        return out or set()


def _drop(table: dict, key: object, f: Filter) -> None:
    members = table.get(key)
    if members is not None:
        members.discard(f)
        if not members:
            del table[key]
