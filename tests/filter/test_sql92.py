"""The SQL92 filter against a reference evaluation written the plainest way (Kleene logic
over generated expression trees), through the real path: tree -> SQL text -> parser ->
compiled predicate; and bad expressions named with their position."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.filter.sql92 import SqlError, compile_sql

PROPS = ["a", "b", "TAGS"]
VALUES = ["1", "2", "5", "-3", "2.5", "x", "it's"]
nums = st.sampled_from([-3, 1, 2, 5])
strs = st.sampled_from(["1", "x", "it's", "y"])


def quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


leaf = st.one_of(
    st.tuples(st.just("cmp"), st.sampled_from(["=", "<>", "<", "<=", ">", ">="]),
              st.sampled_from(PROPS), nums),
    st.tuples(st.just("cmps"), st.sampled_from(["=", "<>"]), st.sampled_from(PROPS), strs),
    st.tuples(st.just("between"), st.sampled_from(PROPS), nums, nums, st.booleans()),
    st.tuples(st.just("in"), st.sampled_from(PROPS), st.lists(strs, min_size=1, max_size=3),
              st.booleans()),
    st.tuples(st.just("null"), st.sampled_from(PROPS), st.booleans()),
)
trees = st.recursive(leaf, lambda sub: st.one_of(
    st.tuples(st.just("and"), sub, sub), st.tuples(st.just("or"), sub, sub),
    st.tuples(st.just("not"), sub)), max_leaves=8)


def render(t) -> str:
    kind = t[0]
    if kind in ("cmp", "cmps"):
        _, op, p, v = t
        return f"{p} {op} {v if kind == 'cmp' else quote(v)}"
    if kind == "between":
        _, p, lo, hi, neg = t
        return f"{p} {'NOT ' if neg else ''}BETWEEN {lo} AND {hi}"
    if kind == "in":
        _, p, items, neg = t
        return f"{p} {'not ' if neg else ''}IN ({', '.join(map(quote, items))})"
    if kind == "null":
        return f"{t[1]} IS {'NOT ' if t[2] else ''}NULL"
    if kind == "not":
        return f"NOT ({render(t[1])})"
    return f"({render(t[1])}) {kind.upper()} ({render(t[2])})"


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def ref(t, props):
    """True, False or None (unknown), as SQL's three-valued logic has it."""
    kind = t[0]
    if kind == "cmp":
        _, op, p, v = t
        x = num(props.get(p))
        if x is None:
            return None
        return {"=": x == v, "<>": x != v, "<": x < v, "<=": x <= v, ">": x > v,
                ">=": x >= v}[op]
    if kind == "cmps":
        _, op, p, v = t
        x = props.get(p)
        return None if x is None else (x == v) == (op == "=")
    if kind == "between":
        _, p, lo, hi, neg = t
        x = num(props.get(p))
        if x is None:
            return None
        return (lo <= x <= hi) != neg
    if kind == "in":
        _, p, items, neg = t
        x = props.get(p)
        return None if x is None else (x in items) != neg
    if kind == "null":
        return (props.get(t[1]) is None) != t[2]
    if kind == "not":
        r = ref(t[1], props)
        return None if r is None else not r
    a, b = ref(t[1], props), ref(t[2], props)
    if kind == "and":
        return False if False in (a, b) else (None if None in (a, b) else True)
    return True if True in (a, b) else (None if None in (a, b) else False)


@settings(max_examples=400, deadline=None)
@given(trees, st.dictionaries(st.sampled_from(PROPS), st.sampled_from(VALUES)))
def test_the_filter_selects_what_the_reference_says(tree, props):
    text = render(tree)
    assert compile_sql(text)(props) == (ref(tree, props) is True), text


@pytest.mark.parametrize("text, column, words", [
    ("a >", 4, "end of the expression"),
    ("a = = 1", 5, "unexpected '='"),
    ("(a = 1", 7, "expected ')'"),
    ("a IN ()", 7, "expected a 'string'"),
    ("a b", 3, "unexpected 'b'"),
    ("", 1, "empty"),
])
def test_a_bad_expression_says_where_and_why(text, column, words):
    with pytest.raises(SqlError) as e:
        compile_sql(text)
    assert e.value.column == column and words in str(e.value), str(e.value)


def test_keywords_any_case_strings_with_quotes_and_the_string_functions():
    f = compile_sql("name = 'it''s' and TAGS startswith 'or' Or flag = TRUE")
    assert f({"name": "it's", "TAGS": "order"})
    assert f({"flag": "true"}) and not f({"flag": "false"})
    assert compile_sql("s CONTAINS 'bc' AND s ENDSWITH 'd'")({"s": "abcd"})
