"""`MatchIndex`: which of many filters match an event, in close to O(matches).

Each filter is filed under exactly one *access constraint*, the one most likely to be
selective, in a structure that finds, for an event value, exactly (or nearly exactly)
the filters whose access constraint holds:

===============================  ==========================================  =========
access constraint                structure (per attribute)                   candidates
===============================  ==========================================  =========
``x = v`` (number, string)       dict value -> bucket                        exact
``x prefix p``                   dict length -> dict prefix -> bucket        exact
``lo <= x <= hi`` (numbers)      per width class 2**k: lows sorted, bisect   < 2x
``x < c``, ``x >= c``, ...       bounds sorted, bisect gives a slice         exact
``x suffix s``                   dict length -> dict suffix -> bucket        exact
``x = true``                     dict bool -> bucket                         exact
anything else (``!=``, ...)      one bucket of filters reading ``x``         superset
the empty filter                 a set, always matched                       exact
===============================  ==========================================  =========

Each candidate is then checked by a compiled predicate of its remaining constraints
(`routing.predicates`); filters with nothing left to check are kept in plain sets
and merged with one C-level set union. Adding and removing filters is incremental
(no rebuild): dict operations, or a `list.insert`/`del` in a sorted list.

Equality on the same number in int and float form (`x = 7`, `x = 7.0`) shares a
bucket, which is right because they match the same values; bools are kept apart
from numbers (in Python `True == 1`). NaN event values satisfy no ordering
constraint, and infinite values lie in no finite interval, so both skip the
sorted structures.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterator, Mapping
from fractions import Fraction
from typing import Any, Generic, TypeVar

from routing.filters import Constraint, Filter, Op
from routing.intervals import Interval
from routing.predicates import Predicate, compile_predicate
from routing.values import Kind, validate_event

# The operators matching compares against per event: an enum member's lookup on its
# class costs ~100 ns, a global's ~25.
_LT, _LE, _GT = Op.LT, Op.LE, Op.GT

K = TypeVar("K", bound=Hashable)


class _Bucket:
    """Filters whose access constraint holds together: some need a further check.

    Up to `SPLIT` filters needing a check are checked one by one; beyond that the
    bucket files their remaining constraints in a nested `MatchIndex`, so that a
    large bucket (many subscriptions on one family, each with its own price range)
    costs close to its matches rather than its size.
    """

    __slots__ = ("free", "checked", "residual", "nested", "nestable")
    SPLIT = 48

    def __init__(self, nestable: bool = True) -> None:
        # The `present` bucket keeps `!=`/`contains` access constraints in the residual,
        # so nesting it would not shrink the filters: it must not nest.
        self.nestable = nestable
        self.free: set[Any] = set()
        self.checked: dict[Any, Predicate] = {}
        self.residual: dict[Any, tuple[Constraint, ...]] = {}
        self.nested: MatchIndex[Any] | None = None

    def add(self, key: Any, rest: tuple[Constraint, ...]) -> None:
        if not rest:
            self.free.add(key)
        elif self.nested is not None:
            self.nested.add(key, Filter(rest))
        else:
            self.checked[key] = compile_predicate(rest)
            self.residual[key] = rest
            if self.nestable and len(self.checked) > self.SPLIT:
                self.nested = MatchIndex()
                for k, constraints in self.residual.items():
                    self.nested.add(k, Filter(constraints))
                self.checked.clear()
                self.residual.clear()

    def discard(self, key: Any) -> None:
        self.free.discard(key)
        if self.nested is not None and key in self.nested:
            self.nested.remove(key)
        elif self.checked.pop(key, None) is not None:
            del self.residual[key]

    def __bool__(self) -> bool:
        return bool(self.free or self.checked or self.nested)

    def size(self) -> int:
        return len(self.free) + len(self.checked) + (len(self.nested) if self.nested else 0)

    def collect(self, event: Mapping[str, Any], out: set[Any]) -> None:
        out |= self.free
        if self.nested is not None:
            out |= self.nested.match_valid(event)
            return
        for key, predicate in self.checked.items():
            if predicate(event):
                out.add(key)


class _Sorted:
    """Entries ordered by a bound; a bisect finds the slice whose bound an event meets.

    For intervals the bound is the low end and `max_width` the widest interval
    filed (it only grows while the list is in use).
    """

    __slots__ = ("bounds", "keys", "predicates", "max_width")

    def __init__(self) -> None:
        self.bounds: list[Any] = []
        self.keys: list[Any] = []
        self.predicates: list[Predicate | None] = []
        self.max_width: Any = 0

    def insert(self, bound: Any, key: Any, predicate: Predicate | None) -> None:
        i = bisect_right(self.bounds, bound)
        self.bounds.insert(i, bound)
        self.keys.insert(i, key)
        self.predicates.insert(i, predicate)

    def remove(self, bound: Any, key: Any) -> None:
        i = bisect_left(self.bounds, bound)
        while self.keys[i] != key:
            i += 1
        del self.bounds[i], self.keys[i], self.predicates[i]

    def __bool__(self) -> bool:
        return bool(self.bounds)

    def collect(self, start: int, stop: int, event: Mapping[str, Any], out: set[Any]) -> None:
        if start >= stop:  # nothing met: no slices, no zip (most events, most lists)
            return
        for key, predicate in zip(self.keys[start:stop], self.predicates[start:stop], strict=True):
            if predicate is None or predicate(event):
                out.add(key)

    def collect_op(self, op: Op, value: Any, event: Mapping[str, Any], out: set[Any]) -> None:
        """Collect the entries whose `value op bound` holds."""
        bounds = self.bounds
        if op is _LT:  # value < bound
            self.collect(bisect_right(bounds, value), len(bounds), event, out)
        elif op is _LE:
            self.collect(bisect_left(bounds, value), len(bounds), event, out)
        elif op is _GT:  # value > bound
            self.collect(0, bisect_left(bounds, value), event, out)
        else:  # Op.GE
            self.collect(0, bisect_right(bounds, value), event, out)


def _width_at_least(lo: Any, hi: Any, width: Any) -> Any:
    """A width no smaller than the exact ``hi - lo``, given ``width = hi - lo`` as Python
    computed it: with a float bound that difference is rounded, and may come out smaller
    (``9.223372036854776e18 - (2**63 - 2)`` is 0.0, not 2), which would make an
    interval's low end fall outside the candidates `_collect_intervals` looks at."""
    if type(width) is not float or not math.isfinite(width):
        return width  # exact (ints), or unbounded
    exact = Fraction(hi) - Fraction(lo)
    return width if width >= exact else math.ceil(exact)


def _width_class(width: Any) -> int | None:
    """The k with 2**(k-1) < width <= 2**k; None for a zero width."""
    if width <= 0:
        return None
    mantissa, exponent = math.frexp(width)
    return exponent - 1 if mantissa == 0.5 else exponent


class _Spans:
    """The smallest and largest number bound seen per attribute, to guess selectivity.

    Filter constants are the only knowledge of an attribute's values the index has
    when filing a filter; the share of [min, max] a range covers is the guess.
    """

    __slots__ = ("low", "high")

    def __init__(self) -> None:
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}

    def widen(self, name: str, value: Any) -> None:
        if name not in self.low or value < self.low[name]:
            self.low[name] = value
        if name not in self.high or value > self.high[name]:
            self.high[name] = value

    def share(self, name: str, lo: Any, hi: Any) -> float:
        """Estimated share of values in [lo, hi] (None = unbounded) for `name`."""
        low, high = self.low[name], self.high[name]
        span = high - low
        if span <= 0:
            return 0.5
        lo = low if lo is None else max(lo, low)
        hi = high if hi is None else min(hi, high)
        return max(0.0, float(hi - lo) / float(span))


class _Attribute:
    """Every structure that files filters under a constraint on one attribute."""

    __slots__ = (
        "eq_numbers",
        "eq_strings",
        "eq_bools",
        "prefixes",
        "suffixes",
        "number_ranges",
        "string_ranges",
        "intervals",
        "present",
    )

    def __init__(self) -> None:
        self.eq_numbers: dict[Any, _Bucket] = {}
        self.eq_strings: dict[str, _Bucket] = {}
        self.eq_bools: dict[bool, _Bucket] = {}
        self.prefixes: dict[int, dict[str, _Bucket]] = {}
        self.suffixes: dict[int, dict[str, _Bucket]] = {}
        self.number_ranges: dict[Op, _Sorted] = {}
        self.string_ranges: dict[Op, _Sorted] = {}
        self.intervals: dict[int | None, _Sorted] = {}
        self.present = _Bucket(nestable=False)

    def is_empty(self) -> bool:
        return not (
            self.eq_numbers
            or self.eq_strings
            or self.eq_bools
            or self.prefixes
            or self.suffixes
            or self.number_ranges
            or self.string_ranges
            or self.intervals
            or self.present
        )

    def collect(self, value: Any, event: Mapping[str, Any], out: set[Any]) -> None:
        t = type(value)
        if t is int or t is float:
            if self.eq_numbers:
                bucket = self.eq_numbers.get(value)
                if bucket is not None:
                    bucket.collect(event, out)
            if value == value:  # NaN meets no ordering constraint
                for op, entries in self.number_ranges.items():
                    # `_Sorted.collect_op`, inline: most events meet no bound of most
                    # lists, and this skips two calls for each.
                    bounds = entries.bounds
                    if op is _GT:  # value > bound
                        stop = bisect_left(bounds, value)
                        if stop:
                            entries.collect(0, stop, event, out)
                    elif op is _LT:  # value < bound
                        start = bisect_right(bounds, value)
                        if start < len(bounds):
                            entries.collect(start, len(bounds), event, out)
                    else:
                        entries.collect_op(op, value, event, out)
                if self.intervals and (t is int or math.isfinite(value)):
                    self._collect_intervals(value, event, out)
        elif t is str:
            if self.eq_strings:
                bucket = self.eq_strings.get(value)
                if bucket is not None:
                    bucket.collect(event, out)
            for length, by_prefix in self.prefixes.items():
                bucket = by_prefix.get(value[:length])
                if bucket is not None:
                    bucket.collect(event, out)
            for length, by_suffix in self.suffixes.items():
                if len(value) >= length:
                    bucket = by_suffix.get(value[len(value) - length :])
                    if bucket is not None:
                        bucket.collect(event, out)
            for op, entries in self.string_ranges.items():
                entries.collect_op(op, value, event, out)
        elif t is bool and self.eq_bools:
            bucket = self.eq_bools.get(value)
            if bucket is not None:
                bucket.collect(event, out)
        present = self.present  # (its emptiness tested inline: a call less per attribute)
        if present.free or present.checked:  # (never nested: nestable=False)
            present.collect(event, out)

    def _collect_intervals(self, value: Any, event: Mapping[str, Any], out: set[Any]) -> None:
        for entries in self.intervals.values():
            # Candidates have lo <= value and lo >= value - max_width, since
            # hi - lo <= max_width. Float rounding may only move the start left.
            width = entries.max_width
            lowest = value - width
            if type(lowest) is float:
                lowest -= (abs(value) + width) * 1e-15
            entries.collect(
                bisect_left(entries.bounds, lowest),
                bisect_right(entries.bounds, value),
                event,
                out,
            )


class _Filed:
    """Where a filter is filed: its holder (None: matches always), the dict holding
    that holder under `parent_key`, the attribute's name, and the bound it is sorted by
    (a `_Sorted` holder) or its access constraint (a `_Bucket`). An object, not a
    closure, because a broker keeps one per subscription (a closure cost ~4x more)."""

    __slots__ = ("holder", "parent", "parent_key", "name", "bound")

    def __init__(
        self,
        holder: _Bucket | _Sorted | None,
        parent: dict[Any, Any] | None,
        parent_key: Any,
        name: str,
        bound: Any,
    ) -> None:
        self.holder, self.parent, self.parent_key = holder, parent, parent_key
        self.name, self.bound = name, bound


_ALWAYS = _Filed(None, None, None, "", None)


class MatchIndex(Generic[K]):
    """Exact content-based matching over a changing set of keyed filters.

    `match(event)` returns the same set as `{k for k, f in filters if f.matches(event)}`.
    Adding a filter under a key that is already present replaces the old filter.
    """

    def __init__(self) -> None:
        self._filters: dict[K, Filter] = {}
        self._slots: dict[K, _Filed] = {}
        self._always: set[K] = set()
        self._attributes: dict[str, _Attribute] = {}
        self._spans = _Spans()

    def __len__(self) -> int:
        return len(self._filters)

    def __bool__(self) -> bool:
        return bool(self._filters)

    def __contains__(self, key: object) -> bool:
        return key in self._filters

    def __iter__(self) -> Iterator[K]:
        return iter(self._filters)

    def get(self, key: K) -> Filter | None:
        return self._filters.get(key)

    def items(self) -> Iterator[tuple[K, Filter]]:
        return iter(self._filters.items())

    def add(self, key: K, f: Filter) -> None:
        if not isinstance(f, Filter):
            raise TypeError(f"MatchIndex.add needs a Filter, got {type(f).__name__}")
        if key in self._filters:
            self.remove(key)
        self._filters[key] = f
        self._slots[key] = self._file(key, f)

    def remove(self, key: K) -> Filter:
        """Remove and return the filter under `key`; KeyError if there is none."""
        f = self._filters.pop(key)
        self._unfile(key, self._slots.pop(key))
        return f

    def match(self, event: Mapping[str, Any]) -> set[K]:
        """The keys of every filter that `event` matches (validates the event first)."""
        validate_event(event)
        return self.match_valid(event)

    def match_valid(self, event: Mapping[str, Any]) -> set[K]:
        """`match` for an event already checked by `validate_event`."""
        out = set(self._always)
        attributes = self._attributes
        if len(attributes) < len(event):  # look up the fewer names in the other's dict
            for name, attribute in attributes.items():
                value = event.get(name)
                if value is not None:  # (an event's values are never None)
                    attribute.collect(value, event, out)
        else:
            for name, value in event.items():
                filed = attributes.get(name)
                if filed is not None:
                    filed.collect(value, event, out)
        return out

    # -- filing -------------------------------------------------------------------

    def _attribute(self, name: str) -> _Attribute:
        attribute = self._attributes.get(name)
        if attribute is None:
            attribute = self._attributes[name] = _Attribute()
        return attribute

    def _cleanup(self, name: str) -> None:
        attribute = self._attributes.get(name)
        if attribute is not None and attribute.is_empty():
            del self._attributes[name]

    def _file(self, key: K, f: Filter) -> _Filed:
        """File `f` under its access constraint; return where, for `_unfile`."""
        if not f.constraints:
            self._always.add(key)
            return _ALWAYS
        access = self._choose_access(f)
        name = access.name if isinstance(access, Constraint) else access[0]
        attribute = self._attribute(name)
        if isinstance(access, tuple):
            return self._file_interval(key, f, attribute, *access)
        rest = tuple(c for c in f.constraints if c is not access)
        if access.op is Op.NE or access.op is Op.CONTAINS:
            rest += (access,)  # `present` only says the attribute is there
        holder, parent, parent_key = self._holder(attribute, access)
        if isinstance(holder, _Sorted):
            holder.insert(access.value, key, compile_predicate(rest) if rest else None)
            return _Filed(holder, parent, parent_key, name, access.value)
        holder.add(key, rest)
        return _Filed(holder, parent, parent_key, name, access)

    def _unfile(self, key: K, filed: _Filed) -> None:
        """Undo `_file`: take `key` out of its holder, and drop holders left empty."""
        holder, parent = filed.holder, filed.parent
        if holder is None:
            self._always.discard(key)
            return
        if isinstance(holder, _Sorted):
            holder.remove(filed.bound, key)
            if not holder and parent is not None:  # (a sorted list always has one)
                del parent[filed.parent_key]
        else:
            holder.discard(key)
            if not holder and parent is not None:
                del parent[filed.parent_key]
                access = filed.bound
                if access.op in (Op.PREFIX, Op.SUFFIX) and not parent:
                    attribute = self._attributes[filed.name]
                    outer = attribute.prefixes if access.op is Op.PREFIX else attribute.suffixes
                    del outer[len(access.value)]
        self._cleanup(filed.name)

    def _holder(
        self, attribute: _Attribute, c: Constraint
    ) -> tuple[_Bucket | _Sorted, dict[Any, Any] | None, Any]:
        """The bucket or sorted list for access constraint `c`, with its parent dict."""
        op, kind, value = c.op, c.kind, c.value
        parent: dict[Any, Any]
        if op is Op.EQ:
            parent = {
                Kind.NUMBER: attribute.eq_numbers,
                Kind.STRING: attribute.eq_strings,
                Kind.BOOL: attribute.eq_bools,
            }[kind]  # type: ignore[index]
        elif op in (Op.PREFIX, Op.SUFFIX):
            outer = attribute.prefixes if op is Op.PREFIX else attribute.suffixes
            parent = outer.setdefault(len(value), {})
        elif op in (Op.LT, Op.LE, Op.GT, Op.GE):
            ranges = attribute.number_ranges if kind is Kind.NUMBER else attribute.string_ranges
            entries = ranges.get(op)
            if entries is None:
                entries = ranges[op] = _Sorted()
            return entries, ranges, op
        else:
            return attribute.present, None, None
        bucket = parent.get(value)
        if bucket is None:
            bucket = parent[value] = _Bucket()
        return bucket, parent, value

    def _file_interval(
        self, key: K, f: Filter, attribute: _Attribute, name: str, lo: Any, hi: Any
    ) -> _Filed:
        width = hi - lo
        width_class = _width_class(width)
        entries = attribute.intervals.get(width_class)
        if entries is None:
            entries = attribute.intervals[width_class] = _Sorted()
        entries.max_width = max(entries.max_width, _width_at_least(lo, hi, width))
        entries.insert(lo, key, compile_predicate(f.constraints))
        return _Filed(entries, attribute.intervals, width_class, name, lo)

    def _choose_access(self, f: Filter) -> Constraint | tuple[str, Any, Any]:
        """The constraint to file `f` under, or (name, lo, hi) for a number interval.

        Equality comes first (the bucket with fewest filters), then the longest prefix,
        then the number range that admits the smallest share of the values seen in
        filters on that attribute so far, then the rest.
        """
        best_eq: Constraint | None = None
        best_size = -1
        prefix = suffix = string_range = bool_eq = None
        bounds: dict[str, Interval] = {}
        for c in f.constraints:
            kind = c.kind
            if c.op is Op.EQ and kind is not Kind.BOOL:
                size = self._bucket_size(c)
                if best_eq is None or size < best_size:
                    best_eq, best_size = c, size
            elif c.op is Op.EQ:
                bool_eq = c
            elif c.op is Op.PREFIX:
                if c.value and (prefix is None or len(c.value) > len(prefix.value)):
                    prefix = c
            elif c.op is Op.SUFFIX:
                if c.value and (suffix is None or len(c.value) > len(suffix.value)):
                    suffix = c
            elif c.op in (Op.LT, Op.LE, Op.GT, Op.GE):
                if kind is Kind.NUMBER:
                    self._spans.widen(c.name, c.value)
                    previous = bounds.get(c.name, Interval())
                    bounds[c.name] = previous.intersect(Interval.from_op(c.op, c.value))
                else:
                    string_range = string_range or c
        if best_eq is not None:
            return best_eq
        if prefix is not None:
            return prefix
        number_range = self._narrowest(f, bounds)
        for candidate in (number_range, string_range, suffix, bool_eq):
            if candidate is not None:
                return candidate
        exists = [c for c in f.constraints if c.op is Op.EXISTS]
        return exists[0] if exists else f.constraints[0]

    def _narrowest(
        self, f: Filter, bounds: dict[str, Interval]
    ) -> Constraint | tuple[str, Any, Any] | None:
        """The number interval or one-sided range admitting the smallest share."""
        best: Constraint | tuple[str, Any, Any] | None = None
        best_share = math.inf
        for name, interval in bounds.items():
            if interval.lo is not None and interval.hi is not None and interval.lo <= interval.hi:
                share = self._spans.share(name, interval.lo, interval.hi)
                if share < best_share:
                    best, best_share = (name, interval.lo, interval.hi), share
        for c in f.constraints:
            if c.op in (Op.LT, Op.LE, Op.GT, Op.GE) and c.kind is Kind.NUMBER:
                below = c.op in (Op.LT, Op.LE)
                share = self._spans.share(
                    c.name, None if below else c.value, c.value if below else None
                )
                if share < best_share:
                    best, best_share = c, share
        return best

    def _bucket_size(self, c: Constraint) -> int:
        attribute = self._attributes.get(c.name)
        if attribute is None:
            return 0
        table = attribute.eq_strings if c.kind is Kind.STRING else attribute.eq_numbers
        bucket = table.get(c.value)
        return 0 if bucket is None else bucket.size()
