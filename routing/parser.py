"""Parser for the text form of filters (docs/design.md, "Filter language").

    filter     := "true" | constraint ("and" constraint)*
    constraint := NAME "exists" | NAME op value
    op         := "=" | "!=" | "<" | "<=" | ">" | ">=" | "prefix" | "suffix" | "contains"
    value      := STRING | NUMBER | "true" | "false"

Words are recognised by position, so an attribute may be called `and` or `true`;
the text `true` on its own is the empty filter. Errors carry a 1-based column.
"""

from __future__ import annotations

import re
from typing import Any

from routing.filters import Constraint, Filter, Op

__all__ = ["FilterSyntaxError", "parse_filter"]


class FilterSyntaxError(ValueError):
    """Malformed filter text; `column` is 1-based."""

    def __init__(self, text: str, column: int, message: str) -> None:
        self.text = text
        self.column = column
        self.message = message
        super().__init__(f"column {column}: {message} (in filter {text!r})")


_TOKEN_RE = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>")
  | (?P<number>-?(?:0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+
        |(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?))
  | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<symbol>!=|<=|>=|=|<|>)
    """,
    re.VERBOSE,
)

_SYMBOL_OPS = {"=": Op.EQ, "!=": Op.NE, "<": Op.LT, "<=": Op.LE, ">": Op.GT, ">=": Op.GE}
_WORD_OPS = {"prefix": Op.PREFIX, "suffix": Op.SUFFIX, "contains": Op.CONTAINS}
_EXPECTED_OP = "an operator (=, !=, <, <=, >, >=, prefix, suffix, contains, exists)"


class _Token:
    __slots__ = ("kind", "text", "value", "column")

    def __init__(self, kind: str, text: str, value: Any, column: int) -> None:
        self.kind = kind
        self.text = text
        self.value = value
        self.column = column

    def describe(self) -> str:
        return "the end of the filter" if self.kind == "end" else repr(self.text)


def _read_string(text: str, start: int) -> tuple[str, int]:
    """Read a quoted string whose opening quote is at `start`; return (value, end)."""
    out: list[str] = []
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == '"':
            return "".join(out), i + 1
        if ch == "\\":
            nxt = text[i + 1] if i + 1 < len(text) else ""
            if nxt not in ('"', "\\"):
                shown = repr(nxt) if nxt else "the end of the filter"
                raise FilterSyntaxError(
                    text, i + 1, f'unknown escape \\ before {shown} (only \\" and \\\\)'
                )
            out.append(nxt)
            i += 2
            continue
        out.append(ch)
        i += 1
    raise FilterSyntaxError(text, start + 1, "unterminated string")


def _number(text: str, raw: str, column: int) -> int | float:
    literal = raw.lstrip("-")
    negative = raw.startswith("-")
    try:
        is_float = literal[:2].lower() not in ("0x", "0o", "0b") and any(
            c in literal for c in ".eE"
        )
        if "__" in literal or literal.endswith("_") or "_." in literal or "._" in literal:
            raise ValueError
        value: int | float = float(literal) if is_float else int(literal, 0)
    except ValueError:
        raise FilterSyntaxError(text, column, f"malformed number {raw!r}") from None
    return -value if negative else value


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            hint = " (strings go in double quotes)" if text[pos] == "'" else ""
            raise FilterSyntaxError(text, pos + 1, f"unexpected character {text[pos]!r}{hint}")
        kind = m.lastgroup
        assert kind is not None
        if kind == "string":
            value, end = _read_string(text, pos)
            tokens.append(_Token("string", text[pos:end], value, pos + 1))
            pos = end
            continue
        raw = m.group()
        if kind == "number":
            nxt = text[m.end() : m.end() + 1]
            if nxt and (nxt.isalnum() or nxt in "_."):
                raise FilterSyntaxError(text, pos + 1, f"malformed number {raw + nxt!r}")
            tokens.append(_Token("number", raw, _number(text, raw, pos + 1), pos + 1))
        elif kind != "space":
            tokens.append(_Token(kind, raw, raw, pos + 1))
        pos = m.end()
    tokens.append(_Token("end", "", None, len(text) + 1))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0

    def error(self, token: _Token, expected: str) -> FilterSyntaxError:
        return FilterSyntaxError(
            self.text, token.column, f"expected {expected}, found {token.describe()}"
        )

    def next(self) -> _Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def parse(self) -> Filter:
        first = self.tokens[0]
        if first.kind == "word" and first.text == "true" and self.tokens[1].kind == "end":
            return Filter()
        if first.kind == "end":
            raise self.error(first, "a constraint or 'true'")
        constraints = [self.constraint()]
        while True:
            token = self.next()
            if token.kind == "end":
                return Filter(constraints)
            if token.kind != "word" or token.text != "and":
                raise self.error(token, "'and' or the end of the filter")
            constraints.append(self.constraint())

    def constraint(self) -> Constraint:
        name = self.next()
        if name.kind != "word":
            raise self.error(name, "an attribute name")
        op_token = self.next()
        if op_token.kind == "word" and op_token.text == "exists":
            return Constraint(name.text, Op.EXISTS)
        op = _SYMBOL_OPS.get(op_token.text) if op_token.kind == "symbol" else None
        if op is None and op_token.kind == "word":
            op = _WORD_OPS.get(op_token.text)
        if op is None:
            raise self.error(op_token, _EXPECTED_OP)
        value_token = self.next()
        value = self.value(value_token)
        try:
            return Constraint(name.text, op, value)
        except (TypeError, ValueError) as exc:
            raise FilterSyntaxError(self.text, value_token.column, str(exc)) from None

    def value(self, token: _Token) -> Any:
        if token.kind in ("string", "number"):
            return token.value
        if token.kind == "word" and token.text in ("true", "false"):
            return token.text == "true"
        raise self.error(token, 'a value (a number, a "string", true or false)')


def parse_filter(text: str) -> Filter:
    """Parse filter text such as `family = 7 and price < 120.5`.

    Raises FilterSyntaxError (a ValueError) naming the column of the problem.
    """
    if not isinstance(text, str):
        raise FilterSyntaxError(
            str(text), 1, f"filter text must be a str, got {type(text).__name__}"
        )
    return _Parser(text).parse()
