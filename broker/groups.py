"""The exception inside trio's exception groups.

A trio nursery raises what one of its tasks raised wrapped in an exception group (with
strict groups, trio's default), nested once per nursery it passed. Code that reports
the exception or raises it on to its caller wants the exception itself when there is
one; with several, the group is the answer.
"""

from __future__ import annotations


def sole_exception(error: BaseException) -> BaseException:
    """The one exception inside ``error``'s nested single-exception groups, else
    ``error`` itself (not a group, or a group of several)."""
    inner = error
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return error if isinstance(inner, BaseExceptionGroup) else inner


def holds(error: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``error`` is a ``kind``, or a group with one inside, at any depth: how
    a KeyboardInterrupt comes out of a trio nursery, beside its siblings' Cancelled."""
    if isinstance(error, BaseExceptionGroup):
        return error.subgroup(kind) is not None
    return isinstance(error, kind)
