"""The JSON and Parquet files of a run folder (its manifest, the analysis's summaries
and tables), read so that what is wrong with them is named: the file, and the field or
column.

A run folder is the user's input: a file cut short, edited by hand or written by
another program is theirs to correct (`hop` exits 2 naming it), never a traceback.
A JSON file is checked field by field, for the fields the command reading it uses
(`Field`, `problem`): a command asks only for what it needs, so a run folder holding
less (a test's, an older run's) still serves the commands that need less of it.
Each caller raises its own `InputError` subclass, which the command line maps to
exit 2.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from monitor.errors import InputError

if TYPE_CHECKING:  # pandas is loaded by the one reader that returns a frame
    import pandas as pd

Check = Callable[[str, Any], str | None]
"""What is wrong with the value of a field (given the field's name, to say which), or
None when nothing is."""


@dataclass(frozen=True)
class Field:
    """How one field of a JSON file is checked. An `optional` field may be absent (and
    so may the tables holding it, or they may be null): its reader has a default."""

    check: Check
    optional: bool = False


def shown(value: Any) -> str:
    """`value` as JSON, cut to a length a one-line message can hold."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def kind(what: str, valid: Callable[[Any], bool]) -> Check:
    """A check of one value: `valid`, else '<field> must be <what>, got <value>'."""

    def check(name: str, value: Any) -> str | None:
        return None if valid(value) else f"{name} must be {what}, got {shown(value)}"

    return check


def _number(value: Any) -> bool:
    # JSON's true and false are ints to Python, and its NaN and Infinity are floats
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


NUMBER = kind("a finite number", _number)
AMOUNT = kind("a finite number at least 0", lambda v: _number(v) and v >= 0)
COUNT = kind("a whole number at least 0", lambda v: _whole(v, 0))
NS = kind("a whole number of nanoseconds", lambda v: _whole(v, 0))
CORES = kind("a whole number at least 1", lambda v: _whole(v, 1))
TEXT = kind("text", lambda v: isinstance(v, str))
FLAG = kind("true or false", lambda v: isinstance(v, bool))
TABLE = kind("a table (a JSON object)", lambda v: isinstance(v, dict))


def or_null(check: Check) -> Check:
    """`check`, or null."""
    return lambda name, value: None if value is None else check(name, value)


def _not_a_table(name: str, value: Any) -> str:
    return f"{name} must be a table (a JSON object), got {shown(value)}"


def table_of(each: Check, keys: tuple[str, Callable[[str], bool]] | None = None) -> Check:
    """A JSON object whose every value passes `each` (named '<field>.<key>'), and with
    `keys` (what they must be, and a test) every key passes its test."""

    def check(name: str, value: Any) -> str | None:
        if not isinstance(value, dict):
            return _not_a_table(name, value)
        for key, item in value.items():
            if keys is not None and not keys[1](key):
                return f"{name} has the key {shown(key)}, not {keys[0]}"
            wrong = each(f"{name}.{key}", item)
            if wrong is not None:
                return wrong
        return None

    return check


def record(fields: Mapping[str, Check]) -> Check:
    """A JSON object holding each of `fields`, each passing its check (named
    '<field>.<key>')."""

    def check(name: str, value: Any) -> str | None:
        if not isinstance(value, dict):
            return _not_a_table(name, value)
        for key, each in fields.items():
            wrong = (
                f"{name}.{key} is missing"
                if key not in value
                else each(f"{name}.{key}", value[key])
            )
            if wrong is not None:
                return wrong
        return None

    return check


def list_of(each: Check, least: int = 0) -> Check:
    """A JSON array of at least `least` items, each passing `each` (named
    '<field>[i]')."""

    def check(name: str, value: Any) -> str | None:
        if not isinstance(value, list) or len(value) < least:
            at_least = f" of at least {least} items" if least else ""
            return f"{name} must be a list{at_least}, got {shown(value)}"
        for i, item in enumerate(value):
            wrong = each(f"{name}[{i}]", item)
            if wrong is not None:
                return wrong
        return None

    return check


def problem(doc: Any, fields: Mapping[str, Field], names: Iterable[str]) -> str | None:
    """What is wrong with `doc` (a JSON file's content) for a reader of the fields
    `names` (dotted paths, each described in `fields`), or None: the first field
    missing or not as its `Field` says, named by its dotted path."""
    if not isinstance(doc, dict):
        return f"not a JSON object (got {shown(doc)})"
    for name in names:
        field = fields[name]
        value, wrong = _lookup(doc, name, field.optional)
        if wrong is None and value is _ABSENT:
            wrong = None if field.optional else f"{name} is missing"
        elif wrong is None:
            wrong = field.check(name, value)
        if wrong is not None:
            return wrong
    return None


_ABSENT = object()


def _lookup(doc: dict[str, Any], name: str, optional: bool) -> tuple[Any, str | None]:
    """The value of the dotted field `name` (`_ABSENT` when it is not there), or what
    is wrong with a table on its way: something other than a table (null is taken as
    absent on the way to an optional field)."""
    value: Any = doc
    parts = name.split(".")
    for depth, part in enumerate(parts):
        if depth and not isinstance(value, dict):
            if value is None and optional:
                return _ABSENT, None
            return _ABSENT, _not_a_table(".".join(parts[:depth]), value)
        if part not in value:
            return _ABSENT, None
        value = value[part]
    return value, None


def read_json(path: Path, error: type[InputError], missing: str) -> Any:
    """The content of the JSON file `path`; `error` naming it when it is missing (with
    `missing`, what writes it) or unreadable (not UTF-8 text, not JSON)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise error(f"{path}: missing ({missing})") from None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise error(f"{path}: unreadable ({exc})") from None


def read_checked_json(
    path: Path,
    error: type[InputError],
    missing: str,
    fields: Mapping[str, Field],
    names: Iterable[str],
) -> dict[str, Any]:
    """`read_json`, its content checked for the fields `names` (`problem`)."""
    doc = read_json(path, error, missing)
    wrong = problem(doc, fields, names)
    if wrong is not None:
        raise error(f"{path}: {wrong}")
    return doc


def local_path(path: Path) -> str:
    """`path` as pyarrow and Spark are to take it: absolute. Either reads a relative
    path whose first part holds a colon (a folder named ``run:1``) as a URI of the
    scheme ``run:``, and Spark's executors resolve a relative path against their own
    working folder."""
    return str(Path(path).absolute())


def read_parquet(
    path: Path, columns: Iterable[str], error: type[InputError], remedy: str
) -> pd.DataFrame:
    """The Parquet file or folder of parts at `path`, as a frame; `error` naming it when
    a part cannot be read (cut short, not Parquet) or a column the reader uses is not
    there (an emptied folder has none), with `remedy`, what writes it again."""
    try:
        table = pq.read_table(local_path(path))
    except (pa.ArrowException, OSError) as exc:
        reason = " ".join(str(exc).split())  # Arrow's messages may span lines
        raise error(f"{path}: unreadable ({reason}); {remedy}") from None
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise error(f"{path}: no column {', '.join(missing)} in it; {remedy}")
    return table.to_pandas()
