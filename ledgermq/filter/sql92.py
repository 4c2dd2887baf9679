"""RocketMQ's SQL92 message filter (`MessageSelector.bySql`), over a message's properties.

Grammar (RocketMQ's, from ActiveMQ's selectors): comparisons `= <> < <= > >=`,
`[NOT] BETWEEN a AND b`, `[NOT] IN ('x', ...)`, `IS [NOT] NULL`, `AND` / `OR` / `NOT`,
parentheses, string literals in single quotes ('' is a quote), integer and decimal
numbers, `TRUE` / `FALSE`, and RocketMQ's `CONTAINS`, `STARTSWITH`, `ENDSWITH`. Keywords
are case-insensitive; property names are case-sensitive.

Values: every property is a string. Compared with a number, it is read as one (a property
that is not a number makes the comparison unknown); `=` and `<>` with a string compare
strings; `TRUE`/`FALSE` match the strings "true"/"false". Three-valued logic as SQL: a
missing property makes a comparison unknown, `NOT unknown` is unknown, and a message is
selected only when the whole expression is true.

`compile_sql(text)` parses once (cached) and returns a predicate over a property dict;
`SqlError` carries the position and the reason of a bad expression."""
from __future__ import annotations

import functools
from collections.abc import Callable

from lark import Lark, Token, Transformer, UnexpectedInput, v_args

GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*         -> or_
?and_expr: not_expr (_AND not_expr)*       -> and_
?not_expr: _NOT not_expr                   -> not_
         | predicate
?predicate: value COMP value               -> compare
          | value _BETWEEN value _AND value  -> between
          | value NOTBETWEEN value _AND value -> not_between
          | value NOTIN "(" string ("," string)* ")"  -> not_in
          | value _IN "(" string ("," string)* ")"    -> in_
          | value _IS _NULL                 -> is_null
          | value _IS _NOT _NULL            -> is_not_null
          | value STRFN string              -> strfn
          | "(" or_expr ")"
          | value
?value: NUMBER                              -> number
      | string
      | _TRUE                               -> true
      | _FALSE                              -> false
      | IDENT                               -> prop
string: STRING
COMP: "<>" | "<=" | ">=" | "=" | "<" | ">"
NOTIN.3: /NOT\s+IN\b/i
NOTBETWEEN.3: /NOT\s+BETWEEN\b/i
STRFN.2: /(CONTAINS|STARTSWITH|ENDSWITH)\b/i
_OR.2: /OR\b/i
_AND.2: /AND\b/i
_NOT.2: /NOT\b/i
_BETWEEN.2: /BETWEEN\b/i
_IN.2: /IN\b/i
_IS.2: /IS\b/i
_NULL.2: /NULL\b/i
_TRUE.2: /TRUE\b/i
_FALSE.2: /FALSE\b/i
IDENT: /[A-Za-z_$][A-Za-z0-9_.$]*/
NUMBER: /-?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?[lLdDfF]?/
STRING: /'([^']|'')*'/
%import common.WS
%ignore WS
"""

@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    """Built on first use: its LALR tables cost ~60 ms, paid by every broker at start
    while few consumers ever send a SQL92 filter."""
    return Lark(GRAMMAR, parser="lalr", maybe_placeholders=False)
MAX_EXPRESSION = 4096  # characters: a subscription is not a program


class SqlError(ValueError):
    """A bad SQL92 expression: where (`column`, 1-based) and why."""

    def __init__(self, text: str, column: int, reason: str):
        super().__init__(f"SQL92 expression {text!r}: at position {column}: {reason}")
        self.column, self.reason = column, reason


Props = dict[str, str]
Eval = Callable[[Props], "bool | float | str | None"]


def _num(v) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _compare(op: str, a, b) -> bool | None:
    if a is None or b is None:
        return None
    if op in ("=", "<>") and (isinstance(a, str) and isinstance(b, str)):
        return (a == b) == (op == "=")
    if isinstance(a, bool) or isinstance(b, bool):  # TRUE / FALSE against "true"/"false"
        x = a if isinstance(a, bool) else str(a).lower() == "true"
        y = b if isinstance(b, bool) else str(b).lower() == "true"
        return (x == y) == (op == "=") if op in ("=", "<>") else None
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return None
    return {"=": x == y, "<>": x != y, "<": x < y, "<=": x <= y, ">": x > y,
            ">=": x >= y}[op]


@v_args(inline=True)
class _Compile(Transformer):
    """The parse tree to nested closures: each returns True / False / None (unknown) or a
    value; nothing walks the tree per message."""

    def number(self, tok: Token) -> Eval:
        text = tok.rstrip("lLdDfF")
        v = float(text) if any(c in text for c in ".eE") else int(text)
        return lambda p: v

    def string(self, tok: Token) -> Eval:
        v = tok[1:-1].replace("''", "'")
        return lambda p: v

    def true(self) -> Eval:
        return lambda p: True

    def false(self) -> Eval:
        return lambda p: False

    def prop(self, tok: Token) -> Eval:
        name = str(tok)
        return lambda p: p.get(name)

    def compare(self, a: Eval, op: Token, b: Eval) -> Eval:
        op = str(op)
        return lambda p: _compare(op, a(p), b(p))

    def between(self, v: Eval, lo: Eval, hi: Eval) -> Eval:
        def f(p):
            x = v(p)
            return _and3(_compare(">=", x, lo(p)), _compare("<=", x, hi(p)))
        return f

    def not_between(self, v: Eval, _kw: Token, lo: Eval, hi: Eval) -> Eval:
        inside = self.between(v, lo, hi)
        return lambda p: None if (r := inside(p)) is None else not r

    def in_(self, v: Eval, *items: Eval) -> Eval:
        allowed = frozenset(i(None) for i in items)
        return lambda p: None if (x := v(p)) is None else (str(x) in allowed)

    def not_in(self, v: Eval, _kw: Token, *items: Eval) -> Eval:
        allowed = frozenset(i(None) for i in items)
        return lambda p: None if (x := v(p)) is None else (str(x) not in allowed)

    def is_null(self, v: Eval) -> Eval:
        return lambda p: v(p) is None

    def is_not_null(self, v: Eval) -> Eval:
        return lambda p: v(p) is not None

    def strfn(self, v: Eval, fn: Token, s: Eval) -> Eval:
        name, needle = str(fn).upper(), s(None)
        test = {"CONTAINS": lambda x: needle in x, "STARTSWITH": lambda x: x.startswith(needle),
                "ENDSWITH": lambda x: x.endswith(needle)}[name]
        return lambda p: None if not isinstance(x := v(p), str) else test(x)

    def not_(self, a: Eval) -> Eval:
        return lambda p: None if (r := _truth(a(p))) is None else not r

    def and_(self, *parts: Eval) -> Eval:
        return _junction(parts, decisive=False)

    def or_(self, *parts: Eval) -> Eval:
        return _junction(parts, decisive=True)


def _junction(parts: tuple[Eval, ...], decisive: bool) -> Eval:
    """AND (a False decides) or OR (a True decides) in Kleene's logic: without a deciding
    part, unknown if any part is unknown."""
    def f(p):
        out = not decisive
        for part in parts:
            r = _truth(part(p))
            if r is decisive:
                return decisive
            if r is None:
                out = None
        return out
    return f


def _truth(v) -> bool | None:
    """A value as a condition: booleans and unknown as they are; anything else is not a
    condition (a bare property or literal), which selects nothing."""
    return v if v is None or isinstance(v, bool) else None


def _and3(a, b):
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


_READABLE = {"IDENT": "a property name", "NUMBER": "a number", "STRING": "a 'string'",
             "RPAR": "')'", "LPAR": "'('", "COMMA": "','", "COMP": "a comparison",
             "NOTIN": "NOT IN", "NOTBETWEEN": "NOT BETWEEN", "STRFN": "CONTAINS"}


@functools.lru_cache(maxsize=1024)
def compile_sql(text: str) -> Callable[[Props], bool]:
    """The predicate of a SQL92 expression (True: the message is selected)."""
    if not text or not text.strip():
        raise SqlError(text, 1, "the expression is empty")
    if len(text) > MAX_EXPRESSION:
        raise SqlError(text, MAX_EXPRESSION, f"longer than {MAX_EXPRESSION} characters")
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as e:
        tok = getattr(e, "token", None)
        at_end = tok is not None and tok.type == "$END"
        column = len(text) + 1 if at_end else (getattr(e, "column", 0) or 0)
        if at_end:
            reason = "unexpected end of the expression"
        elif tok is not None:
            reason = f"unexpected {str(tok)!r}"
        else:
            reason = f"unexpected {text[column - 1:column]!r}"
        expected = getattr(e, "expected", None) or getattr(e, "allowed", None) or ()
        names = sorted({_READABLE.get(t, t.strip("_")) for t in expected})
        if names:
            reason += f"; expected {' or '.join(names[:8])}"
        raise SqlError(text, max(column, 1), reason) from None
    f = _Compile().transform(tree)
    return lambda props: _truth(f(props)) is True
