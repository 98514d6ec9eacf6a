"""Event matching and routing: filters, covering, the matching index, routing tables.

Pure and synchronous: no I/O, no trio, nothing from `monitor`.
"""

from routing.covering import covers, is_satisfiable
from routing.filters import Constraint, Filter, Op
from routing.index import MatchIndex
from routing.parser import FilterSyntaxError, parse_filter
from routing.values import Kind, validate_event

__all__ = [
    "Constraint",
    "Filter",
    "FilterSyntaxError",
    "Kind",
    "MatchIndex",
    "Op",
    "covers",
    "is_satisfiable",
    "parse_filter",
    "validate_event",
]
