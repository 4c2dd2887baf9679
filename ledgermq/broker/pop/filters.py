"""What a POP consumer asks to receive, as the pop service filters it: a tag expression
("*", "a || b") as tag codes, or an SQL92 expression as a predicate over properties."""
from __future__ import annotations

from typing import Callable

from ...filter.sql92 import compile_sql
from ..meta.consumers import parse_subscription

Filter = tuple["frozenset[int] | None", "Callable[[dict[str, str]], bool] | None"]


def pop_filter(sql: bool, expression: str, sql_enabled: bool) -> Filter:
    """(tag codes, SQL92 predicate); ValueError (SqlError) for an expression that does not
    parse, or SQL92 where `enablePropertyFilter` is off."""
    if sql:
        if not sql_enabled:
            raise ValueError("SQL92 filtering is off on this broker: set "
                             "enablePropertyFilter=true in its broker.conf")
        return None, compile_sql(expression)
    return parse_subscription(expression or "*"), None
