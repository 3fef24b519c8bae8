"""Sequence and switch nodes as data: what parsing accepts and refuses (a 4xx naming the
field), and how a switch's conditions decide, row by row, the same for a row alone as among
others."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sluice.domain.errors import InvalidInput, InvalidRequest
from sluice.domain.graphs import deterministic
from sluice.domain.policy import parse_policy, policy_dict, uncacheable
from sluice.routing.conditions import Facts, decide

A = {"model": "a", "version": 1}
B = {"model": "b", "version": 1}


def switch(*cases: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "switch", "cases": [{"name": n, "when": w, "target": A} for n, w in cases], "default": B}


def sequence(*steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"kind": "sequence", "steps": list(steps), **extra}


def refused(policy: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse_policy(policy)
    return caught.value


def test_a_sequence_and_a_switch_read_back_as_written() -> None:
    written = sequence(
        {"name": "embed", "target": {"kind": "single", **A}},
        {"name": "score", "target": {"kind": "single", **B}, "map": {"z": "embedding"}},
        expose=["embed.embedding"],
    )
    assert policy_dict(parse_policy(written)) == written
    when = {"any": [{"field": "headers.x-region", "op": "==", "value": "eu"}, {"field": "inputs.input", "column": "petal_length", "op": "<", "value": 2.5}]}
    node = parse_policy(switch(("eu", when)))
    assert policy_dict(node)["cases"][0]["when"] == when
    assert [c.kind for c in node.children()] == ["single", "single"]


@pytest.mark.parametrize(
    ("policy", "field", "words"),
    [
        (sequence({"name": "a", "target": A}), "policy.steps", "at least 2"),
        (sequence(*({"name": f"s{i}", "target": A} for i in range(16))), "policy.steps", "at most 15"),
        (sequence({"name": "a", "target": A}, {"name": "a", "target": B}), "policy.steps.1.name", "used twice"),
        (sequence({"name": "a", "target": A, "map": {"x": "y"}}, {"name": "b", "target": B}), "policy.steps.0.map", "first step"),
        (sequence({"name": "a", "target": A}, {"name": "b", "target": B}, expose=["c.out"]), "policy.expose.0", "step.output"),
        (sequence({"name": "a", "target": A}, {"name": "b", "target": B}, expose=["b.out"]), "policy.expose.0", "is the last"),
        (switch(("x", {"field": "headers.h", "op": "<", "value": "3"})), "policy.cases.0.when", "compares with a number"),
        (switch(("x", {"field": "headers.h", "op": "in", "value": ["a", 1]})), "policy.cases.0.when", "all strings or all numbers"),
        (switch(("x", {"field": "headers.h", "op": "exists", "value": 1})), "policy.cases.0.when", "takes no value"),
        (switch(("x", {"field": "headers.h", "op": "==", "value": [1]})), "policy.cases.0.when", "one value"),
        (switch(("x", {"field": "headers.h", "op": "~=", "value": 1})), "policy.cases.0.when.op", "'=='"),
        (switch(("x", {"field": "body.h", "op": "==", "value": 1})), "policy.cases.0.when.field", "routing_key, headers"),
        (switch(("x", {"field": "routing_key", "column": 1, "op": "==", "value": "a"})), "policy.cases.0.when", "only for inputs"),
        (switch(("x", {"all": [{"any": [{"all": [{"any": [{"field": "routing_key", "op": "exists"}]}]}]}]})), "policy.cases.0.when", "4 levels"),
        (switch(("default", {"field": "routing_key", "op": "exists"})), "policy.cases.0.name", "names the switch's default"),
        (switch(("x", {"field": "routing_key", "op": "exists"}), ("x", {"field": "routing_key", "op": "exists"})), "policy.cases.1.name", "used twice"),
        ({"kind": "switch", "cases": [], "default": B}, "policy.cases", "at least 1"),
        # a column is a JSON integer or a feature name: true and 1.0 are not column 1
        (switch(("x", {"field": "inputs.input", "column": True, "op": "<", "value": 2.5})), "policy.cases.0.when.column", "valid"),
        (switch(("x", {"field": "inputs.input", "column": 1.0, "op": "<", "value": 2.5})), "policy.cases.0.when.column", "valid"),
        (switch(("x", {"field": "inputs.input", "column": -1, "op": "<", "value": 2.5})), "policy.cases.0.when.column", "greater than or equal to 0"),
        (switch(("x", {"field": "routing_key", "op": "in", "value": [None]})), "policy.cases.0.when.value", "valid"),
        ({"kind": "precomputed", "table": "recs", "key": "inputs.input", "column": True, "live": B}, "policy.column", "valid"),
        ({"kind": "precomputed", "table": "recs", "key": "inputs.input", "column": 1.0, "live": B}, "policy.column", "valid"),
    ],
)
def test_a_graph_node_that_cannot_work_is_refused_naming_its_field(policy: dict[str, Any], field: str, words: str) -> None:
    error = refused(policy)
    assert error.field == field
    assert words in error.message
    assert error.status == 422


@pytest.mark.parametrize("name", ["int", "str", "none", "float", "bool", "bytes", "constrained-int", "list[int]"])
def test_a_map_key_spelled_like_a_type_stays_in_the_field(name: str) -> None:
    """pydantic labels a plain union's members by their types (`…value.int`); a step's map
    whose key is spelled so (a tensor named `int`) keeps it in the field its error names."""
    policy = sequence({"name": "a", "target": A}, {"name": "b", "target": B, "map": {name: 5}})
    with pytest.raises(InvalidRequest) as caught:
        parse_policy(policy)
    assert caught.value.field == f"policy.steps.1.map.{name}"


def test_graph_nodes_are_deterministic_and_a_random_step_is_refused_for_the_cache_naming_it() -> None:
    node = parse_policy(switch(("x", {"field": "routing_key", "op": "exists"})))
    assert deterministic(node) and uncacheable(node) is None
    coin = {"kind": "split", "variants": [{"name": "a", "weight": 1, "target": A}, {"name": "b", "weight": 1, "target": B}]}
    chained = parse_policy(sequence({"name": "a", "target": A}, {"name": "b", "target": coin}))
    field, reason = uncacheable(chained)  # type: ignore[misc]
    assert field == "policy.steps.1.target.routing_key" and "at random" in reason
    cased = parse_policy({**switch(("x", {"field": "routing_key", "op": "exists"})), "default": coin})
    assert uncacheable(cased)[0] == "policy.default.routing_key"  # type: ignore[index]


@pytest.mark.parametrize("declared", [False, True])
def test_a_function_step_is_cached_only_when_its_author_declares_it_deterministic(declared: bool) -> None:
    step = {"kind": "function", "function": "features:embed", "deterministic": declared,
            "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}],
            "outputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]}
    node = parse_policy(sequence({"name": "own", "target": step}, {"name": "a", "target": A}))
    assert deterministic(node) is declared
    found = uncacheable(node)
    assert (found is None) if declared else (found is not None and found[0] == "policy.steps.0.target" and "not deterministic" in found[1])


def facts(arrays: dict[str, np.ndarray], *, key: str | None = None, headers: dict[str, str] | None = None) -> Facts:
    rows = next(iter(arrays.values())).shape[0] if arrays else 1
    return Facts(rows, key, headers or {}, arrays, {"input": ("a", "b")})


def conditions(policy: dict[str, Any]) -> list[Any]:
    return [c.when for c in parse_policy(policy).cases]  # type: ignore[union-attr]


def test_request_fields_decide_for_every_row_and_are_typed() -> None:
    policy = switch(
        ("beta", {"field": "headers.x-beta", "op": "exists"}),
        ("eu", {"all": [{"field": "headers.x-region", "op": "in", "value": ["eu", "uk"]}, {"field": "headers.x-tier", "op": ">=", "value": 2}]}),
        ("keyed", {"field": "routing_key", "op": "==", "value": "user-1"}),
    )
    when = conditions(policy)
    two = {"input": np.zeros((2, 2), np.float32)}
    assert decide(when, facts(two, headers={"x-beta": "1"})).tolist() == [0, 0]
    assert decide(when, facts(two, headers={"x-region": "uk", "x-tier": "2"})).tolist() == [1, 1]
    assert decide(when, facts(two, headers={"x-region": "uk", "x-tier": "two"})).tolist() == [3, 3]  # not a number: no match
    assert decide(when, facts(two, key="user-1")).tolist() == [2, 2]
    assert decide(when, facts(two)).tolist() == [3, 3]


def test_request_parameters_decide_for_every_row_by_their_type() -> None:
    when = conditions(switch(
        ("gold", {"field": "parameters.tier", "op": "in", "value": ["gold", "platinum"]}),
        ("urgent", {"all": [{"field": "parameters.priority", "op": ">=", "value": 5}, {"field": "parameters.live", "op": "==", "value": True}]}),
        ("tagged", {"field": "parameters.tags", "op": "exists"}),
    ))  # fmt: skip
    two = {"input": np.zeros((2, 2), np.float32)}

    def taken(parameters: dict[str, Any]) -> list[int]:
        return decide(when, Facts(2, None, {}, two, {}, parameters)).tolist()

    assert taken({"tier": "gold"}) == [0, 0]
    assert taken({"priority": 7, "live": True}) == [1, 1]
    assert taken({"priority": 7.5, "live": False}) == [3, 3]
    assert taken({"priority": "7", "live": "true"}) == [1, 1]  # text reads as a header's would
    assert taken({"tier": 3, "tags": ["a"]}) == [2, 2]  # a list exists, and equals nothing
    assert taken({}) == [3, 3]


@pytest.mark.parametrize(
    ("field", "words"),
    [("parameters.routing_key", "as the field 'routing_key'"), ("parameters.upload_id", "itself"), ("parameters.a b", "parameters.<name>")],
)
def test_a_parameter_sluice_reads_itself_or_a_bad_name_is_refused(field: str, words: str) -> None:
    error = refused(switch(("x", {"field": field, "op": "exists"})))
    assert error.field == "policy.cases.0.when.field" and words in error.message


def test_input_values_decide_row_by_row_by_column_name_or_index() -> None:
    when = conditions(switch(
        ("small", {"field": "inputs.input", "column": "b", "op": "<", "value": 1.0}),
        ("seven", {"field": "inputs.input", "column": 0, "op": "==", "value": 7}),
        ("missing", {"field": "inputs.input", "column": "a", "op": "!=", "value": 7}),
    ))  # fmt: skip
    x = np.array([[7.0, 0.5], [7.0, 5.0], [np.nan, 5.0]], dtype=np.float32)
    assert decide(when, facts({"input": x})).tolist() == [0, 1, 2]
    present = conditions(switch(("known", {"field": "inputs.input", "column": 0, "op": "exists"})))
    assert decide(present, facts({"input": x})).tolist() == [0, 0, 1]  # NaN is missing
    with pytest.raises(InvalidInput, match="no feature 'c'"):
        decide(conditions(switch(("c", {"field": "inputs.input", "column": "c", "op": "==", "value": 1}))), facts({"input": x}))


def test_string_inputs_compare_as_strings() -> None:
    when = conditions(switch(("eu", {"field": "inputs.region", "op": "in", "value": ["eu", "uk"]})))
    regions = np.array([[b"eu"], [b"us"], ["uk"]], dtype=object)
    assert decide(when, Facts(3, None, {}, {"region": regions}, {})).tolist() == [0, 1, 0]


ROWS = st.lists(st.tuples(st.sampled_from([-1.0, 0.0, 0.5, 2.5, 7.0, float("nan")]), st.sampled_from([-1.0, 1.0, 3.0])), min_size=1, max_size=12)
OPS = st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "exists"])


@st.composite
def row_conditions(draw: st.DrawFn) -> dict[str, Any]:
    op = draw(OPS)
    compare: dict[str, Any] = {"field": "inputs.input", "column": draw(st.sampled_from(["a", "b", 0, 1])), "op": op}
    if op != "exists":
        compare["value"] = draw(st.sampled_from([0, 0.5, 2.5, 7]))
    return compare


@settings(max_examples=100, deadline=None)
@given(rows=ROWS, cases=st.lists(st.one_of(row_conditions(), st.builds(lambda a, b: {"any": [a, b]}, row_conditions(), row_conditions())), min_size=1, max_size=4))
def test_a_row_takes_the_same_case_alone_and_among_others(rows: list[tuple[float, float]], cases: list[dict[str, Any]]) -> None:
    when = conditions(switch(*((f"c{i}", c) for i, c in enumerate(cases))))
    together = decide(when, facts({"input": np.array(rows, dtype=np.float32)}))
    alone = [int(decide(when, facts({"input": np.array([row], dtype=np.float32)}))[0]) for row in rows]
    assert together.tolist() == alone


PAST_EVERY_FLOAT = st.integers(min_value=2**1024, max_value=10**400).flatmap(lambda n: st.sampled_from([n, -n]))
COMPARED = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


@settings(max_examples=100, deadline=None)
@given(
    value=PAST_EVERY_FLOAT,
    op=st.sampled_from([*COMPARED, "in"]),
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    rows=st.lists(st.floats(allow_nan=False, width=16), min_size=1, max_size=6),
)
def test_an_integer_past_every_float_is_compared_exactly_with_input_and_parameter_values(value: int, op: str, dtype: type, rows: list[float]) -> None:
    """A policy may hold an integer of hundreds of digits (JSON has no bound): a float row, or a
    number parameter, compares with it as Python compares them (it equals none), never a 500.
    (An infinite parameter is no number: it is left to the input rows.)"""
    wanted: Any = [value, 0.5] if op == "in" else value
    x = np.array([[r, 0.0] for r in rows], dtype=dtype)
    expected = [(r == 0.5) if op == "in" else COMPARED[op](float(r), value) for r in x[:, 0].tolist()]
    when = conditions(switch(("hit", {"field": "inputs.input", "column": 0, "op": op, "value": wanted})))
    assert decide(when, facts({"input": x})).tolist() == [0 if e else 1 for e in expected]
    by_parameter = conditions(switch(("hit", {"field": "parameters.p", "op": op, "value": wanted})))
    for row, e in zip(x[:, 0].tolist(), expected, strict=True):
        if math.isfinite(row):
            assert decide(by_parameter, Facts(1, None, {}, {}, {}, {"p": row})).tolist() == [0 if e else 1]


INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=150, deadline=None)
@given(found=INT64, delta=st.integers(min_value=-2, max_value=2), op=st.sampled_from(list(COMPARED)), wanted_as_float=st.booleans())
@example(found=9007199254740993, delta=0, op="==", wanted_as_float=False)
@example(found=9007199254740993, delta=-1, op="==", wanted_as_float=False)
@example(found=2**63 - 1, delta=1, op="<", wanted_as_float=False)
@example(found=9007199254740993, delta=0, op="<", wanted_as_float=True)
def test_a_whole_number_header_parameter_or_key_compares_exactly(found: int, delta: int, op: str, wanted_as_float: bool) -> None:
    """An id past 2**53 in a header, a parameter or the routing key is told from its neighbours,
    as the same id in an input is: a whole number is compared as an integer, never rounded to
    a float first (a float in the policy compares with it as Python compares them, exactly)."""
    wanted: Any = found + delta
    if wanted_as_float:
        wanted = float(wanted)
    expected = [0] if COMPARED[op](found, wanted) else [1]
    for field, given_facts in [
        ("parameters.customer", Facts(1, None, {}, {}, {}, {"customer": found})),
        ("parameters.customer", Facts(1, None, {}, {}, {}, {"customer": str(found)})),
        ("headers.x-customer", Facts(1, None, {"x-customer": str(found)}, {}, {})),
        ("routing_key", Facts(1, str(found), {}, {}, {})),
    ]:
        when = conditions(switch(("hit", {"field": field, "op": op, "value": wanted})))
        assert decide(when, given_facts).tolist() == expected, field


def test_a_long_digit_header_is_read_as_a_number_once_per_condition_and_no_longer_than_ids_need(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever sets a header sets its length: against an `in` list of the most values a
    condition holds, a 4,300-digit header is read once, as a float (past MAX_WHOLE_CHARS no id
    needs int()'s exactness, whose time grows faster than the digits)."""
    from sluice.domain.conditions import MAX_IN_VALUES, Compare
    from sluice.routing import conditions

    calls: list[str] = []
    real = conditions._number
    monkeypatch.setattr(conditions, "_number", lambda text: calls.append(text) or real(text))
    compare = Compare(field="headers.x-tier", op="in", value=list(range(MAX_IN_VALUES)))
    assert conditions._scalar_holds(compare, "9" * 4300) is False
    assert len(calls) == 1
    assert conditions._scalar_holds(Compare(field="headers.x-tier", op="==", value="gold"), "gold") is True
    assert len(calls) == 1  # text against text reads no number
    assert real("9" * 41) == float("9" * 41) and real("9" * 40) == int("9" * 40)
