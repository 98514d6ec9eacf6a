"""Intervals over an ordered domain (numbers or strings), used by covering and the index."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from routing.filters import Op

_MAX_CHAR = chr(0x10FFFF)


@dataclass(frozen=True, slots=True)
class Interval:
    """`lo .. hi` with open or closed ends; None is an unbounded end."""

    lo: Any = None
    lo_open: bool = False
    hi: Any = None
    hi_open: bool = False

    @classmethod
    def from_op(cls, op: Op, value: Any) -> Interval:
        """The values `v` with `v op value`, for `=` and the ordering operators."""
        if op is Op.EQ:
            return cls(value, False, value, False)
        if op is Op.LT:
            return cls(hi=value, hi_open=True)
        if op is Op.LE:
            return cls(hi=value)
        if op is Op.GT:
            return cls(lo=value, lo_open=True)
        if op is Op.GE:
            return cls(lo=value)
        raise ValueError(f"no interval for {op}")

    @classmethod
    def prefix_range(cls, prefix: str) -> Interval:
        """The strings starting with `prefix`: [prefix, next string after all of them)."""
        stem = prefix.rstrip(_MAX_CHAR)
        if not stem:
            return cls(lo=prefix)
        upper = stem[:-1] + chr(ord(stem[-1]) + 1)
        return cls(lo=prefix, hi=upper, hi_open=True)

    def is_empty(self) -> bool:
        if self.lo is None or self.hi is None:
            return False
        if self.lo < self.hi:
            return False
        return not (self.lo == self.hi and not self.lo_open and not self.hi_open)

    def is_point(self) -> bool:
        return self.lo is not None and self.lo == self.hi and not (self.lo_open or self.hi_open)

    def contains(self, value: Any) -> bool:
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return False
        return not (
            self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi))
        )

    def intersect(self, other: Interval) -> Interval:
        lo, lo_open = self.lo, self.lo_open
        if other.lo is not None and (
            lo is None or other.lo > lo or (other.lo == lo and other.lo_open)
        ):
            lo, lo_open = other.lo, other.lo_open
        hi, hi_open = self.hi, self.hi_open
        if other.hi is not None and (
            hi is None or other.hi < hi or (other.hi == hi and other.hi_open)
        ):
            hi, hi_open = other.hi, other.hi_open
        return Interval(lo, lo_open, hi, hi_open)

    def within(self, other: Interval) -> bool:
        """True when every value of this (non-empty) interval lies in `other`."""
        if other.lo is not None:
            if self.lo is None or self.lo < other.lo:
                return False
            if self.lo == other.lo and other.lo_open and not self.lo_open:
                return False
        if other.hi is not None:
            if self.hi is None or self.hi > other.hi:
                return False
            if self.hi == other.hi and other.hi_open and not self.hi_open:
                return False
        return True

    def excluding(self, points: set[Any]) -> Interval:
        """Open the closed ends that are excluded points (`x != end`)."""
        lo_open = self.lo_open or (self.lo is not None and self.lo in points)
        hi_open = self.hi_open or (self.hi is not None and self.hi in points)
        return Interval(self.lo, lo_open, self.hi, hi_open)
