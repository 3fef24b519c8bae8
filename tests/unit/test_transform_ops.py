"""Each transform op against NumPy written by hand, and a row's answer the same alone as among
other rows (one code path for one row and for many)."""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.domain.errors import InvalidInput, InvalidRequest, Unprocessable
from sluice.domain.policy import parse_policy
from sluice.domain.signature import TensorSpec
from sluice.domain.transform_specs import answer_specs
from sluice.domain.transforms import Transform
from sluice.routing.transforms import plan_of, run_transform, stable_bucket

X = TensorSpec("x", "FP32", (-1, 3), feature_names=("a", "b", "c"))
S = TensorSpec("s", "BYTES", (-1,))
N = TensorSpec("n", "INT64", (-1, 1))
SPECS = (X, S, N)
VOCAB = ["red", "green", "blue"]


def run(ops: list[dict[str, Any]], arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, TensorSpec]]:
    node = Transform.model_validate({"kind": "transform", "ops": ops})
    columns: dict[int, list[int]] = {}
    specs = answer_specs(node, SPECS, columns=columns)
    return run_transform(node, arrays, columns), {s.name: s for s in specs}


def rows(x: np.ndarray) -> dict[str, np.ndarray]:
    n = x.shape[0]
    return {"x": x, "s": np.array([VOCAB[i % 3] if i % 4 else "other" for i in range(n)], dtype=object), "n": np.arange(n, dtype=np.int64).reshape(-1, 1) * 7}


with_nan = st.one_of(st.floats(-1e3, 1e3, width=32), st.just(float("nan")))
CASES: list[tuple[list[dict[str, Any]], str, Any]] = [
    ([{"op": "select", "input": "x", "columns": ["c", 0], "output": "y"}], "y", lambda a: a["x"][:, [2, 0]]),
    ([{"op": "fill", "input": "x", "value": 0.5}], "x", lambda a: np.nan_to_num(a["x"], nan=0.5)),
    ([{"op": "standardize", "input": "x", "mean": [1, 2, 3], "std": 2}], "x", lambda a: (a["x"] - np.float32([1, 2, 3])) / np.float32(2)),
    ([{"op": "min_max", "input": "x", "min": -5, "max": 5}], "x", lambda a: (a["x"] + np.float32(5)) / np.float32(10)),
    ([{"op": "clip", "input": "x", "min": -1, "max": 1}], "x", lambda a: np.clip(a["x"], -1, 1)),
    ([{"op": "bucketize", "input": "x", "boundaries": [-10, 0, 10]}], "x", lambda a: np.digitize(a["x"], [-10, 0, 10])),
    ([{"op": "one_hot", "input": "s", "vocabulary": VOCAB, "unknown": "column", "output": "o"}], "o",
     lambda a: np.array([[float(v == w) for w in VOCAB] + [float(v not in VOCAB)] for v in a["s"]], np.float32).reshape(-1, 4)),
    ([{"op": "ordinal", "input": "s", "vocabulary": VOCAB, "output": "o"}], "o",
     lambda a: np.array([VOCAB.index(v) if v in VOCAB else -1 for v in a["s"]], np.float32).reshape(-1, 1)),
    ([{"op": "hash", "input": "n", "buckets": 13, "output": "h"}], "h", lambda a: np.array([[stable_bucket(int(v), 13)] for v in a["n"][:, 0]], np.int64).reshape(-1, 1)),
    ([{"op": "concat", "inputs": ["x", "n"], "output": "z"}], "z", lambda a: np.concatenate([a["x"], a["n"].astype(np.float32)], axis=1)),
    ([{"op": "softmax", "input": "x"}], "x", lambda a: np.exp(a["x"] - a["x"].max(1, keepdims=True)) / np.exp(a["x"] - a["x"].max(1, keepdims=True)).sum(1, keepdims=True)),
    ([{"op": "argmax", "input": "x", "labels": ["a", "b", "c"], "output": "l"}], "l", lambda a: np.array(["a", "b", "c"], dtype=object)[np.argmax(a["x"], 1)]),
    ([{"op": "platt", "input": "x", "a": 2, "b": -1}], "x", lambda a: 1 / (1 + np.exp(-(2 * a["x"] - 1)))),
    ([{"op": "top_k", "input": "x", "k": 2, "indices": "i"}], "x", lambda a: -np.sort(-a["x"], axis=1)[:, :2]),
]


@pytest.mark.parametrize(("ops", "name", "reference"), CASES, ids=[c[0][0]["op"] for c in CASES])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_an_op_matches_numpy_and_a_row_alone_gets_its_answer_among_others(ops: list[dict[str, Any]], name: str, reference: Any, data: Any) -> None:
    n = data.draw(st.integers(1, 12))
    finite = ops[0]["op"] not in ("fill",)
    values = data.draw(st.lists(st.floats(-50, 50, width=32) if finite else with_nan, min_size=3 * n, max_size=3 * n))
    arrays = rows(np.asarray(values, np.float32).reshape(n, 3))
    out, specs = run(ops, arrays)
    expected = reference(arrays)
    if out[name].dtype == object:
        assert out[name].tolist() == expected.tolist()
    else:
        np.testing.assert_allclose(out[name], expected, rtol=1e-5, atol=1e-6)
    assert out[name].shape[1:] == tuple(d for d in specs[name].shape[1:])  # the derived signature holds
    for i in range(n):
        alone, _ = run(ops, {k: v[i : i + 1] for k, v in arrays.items()})
        assert alone[name].tolist() == out[name][i : i + 1].tolist()


def test_the_hash_is_stable_across_processes() -> None:
    assert [stable_bucket("red", 1000), stable_bucket(42, 1000)] == [stable_bucket("red", 1000), stable_bucket(42, 1000)]
    assert stable_bucket("red", 2**31) == int.from_bytes(__import__("hashlib").blake2b(b"red", digest_size=8).digest(), "little") % 2**31



@pytest.mark.parametrize("b", [0, -1.25])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_platt_gives_the_same_bits_as_its_formula_written_out(b: float, dtype: Any) -> None:
    x = np.concatenate([np.random.default_rng(3).normal(0, 20, 500), [0.0, -0.0, 1e30, -1e30, np.inf, -np.inf]]).astype(dtype).reshape(-1, 1)
    with np.errstate(over="ignore"):
        out, _ = run([{"op": "platt", "input": "n", "a": 1.7, "b": b, "output": "p"}], {"n": x})
        a_, b_, one = dtype(1.7), dtype(b), dtype(1.0)
        expected = one / (one + np.exp(-(a_ * x + b_)))
    assert out["p"].dtype == dtype and out["p"].tobytes() == expected.tobytes()

def test_threshold_labels_a_score() -> None:
    out, specs = run([{"op": "threshold", "input": "n", "cutoff": 7, "labels": ["low", "high"], "output": "l"}], {"n": np.array([[0], [7], [14]])})
    assert out["l"].tolist() == ["low", "high", "high"] and specs["l"].role == "label"
    # A float tensor compares in its own type: FP32 0.7 is at the cutoff 0.7, not below it.
    x = np.array([[0.7], [0.6999], [np.inf], [-np.inf]], np.float32)
    out, _ = run([{"op": "threshold", "input": "n", "cutoff": 0.7, "labels": ["no", "yes"], "output": "l"}], {"n": x})
    assert out["l"].tolist() == ["yes", "no", "yes", "no"]


@pytest.mark.parametrize(
    ("ops", "field"),
    [
        ([{"op": "select", "input": "x", "columns": ["zz"]}], "policy.ops.0.columns.0"),
        ([{"op": "select", "input": "x", "columns": [3]}], "policy.ops.0.columns.0"),
        ([{"op": "standardize", "input": "x", "mean": [1, 2], "std": 1}], "policy.ops.0.mean"),
        ([{"op": "one_hot", "input": "x", "vocabulary": [1]}], "policy.ops.0.input"),
        ([{"op": "ordinal", "input": "s", "vocabulary": [1, 2]}], "policy.ops.0.vocabulary"),
        ([{"op": "top_k", "input": "x", "k": 4, "indices": "i"}], "policy.ops.0.k"),
        ([{"op": "keep", "names": ["x", "nope"]}], "policy.ops.0.names"),
        ([{"op": "rename", "input": "x", "output": "y"}, {"op": "log1p", "input": "x"}], "policy.ops.1.input"),
    ],
)
def test_an_op_that_does_not_fit_its_input_names_its_field(ops: list[dict[str, Any]], field: str) -> None:
    with pytest.raises(Unprocessable) as caught:
        answer_specs(Transform.model_validate({"kind": "transform", "ops": ops}), SPECS)
    assert caught.value.field == field


def test_bad_parameters_are_refused_when_parsed_naming_the_field() -> None:
    first = {"kind": "transform", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}], "ops": [{"op": "bucketize", "input": "x", "boundaries": [2, 1]}]}
    policy = {"kind": "sequence", "steps": [{"name": "t", "target": first}, {"name": "m", "target": {"model": "m", "version": 1}}]}
    with pytest.raises(InvalidRequest) as caught:
        parse_policy(policy)
    assert caught.value.field == "policy.steps.0.target.ops.0" and "boundaries must increase" in caught.value.message


def test_text_is_coded_whatever_its_python_type_and_unknown_words_stay_unknown() -> None:
    words = np.array(["red", b"blue", "teal", "teal", 7, "green"], dtype=object)
    ops = [{"op": "ordinal", "input": "s", "vocabulary": VOCAB, "output": "o"}, {"op": "one_hot", "input": "s", "vocabulary": VOCAB, "output": "h"}]
    for _ in range(2):  # the second time, from what the first remembered
        out, _ = run(ops, {"s": words})
        assert out["o"][:, 0].tolist() == [0, 2, -1, -1, -1, 1]
        assert out["h"].tolist() == [[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 1, 0]]


def test_concat_of_tensors_with_different_numbers_of_rows_is_the_callers_error() -> None:
    with pytest.raises(InvalidInput) as caught:
        run([{"op": "concat", "inputs": ["x", "n"], "output": "z"}], {"x": np.zeros((3, 3), np.float32), "n": np.zeros((2, 1), np.int64)})
    assert "rows" in caught.value.message


@pytest.mark.parametrize(
    ("ops", "checked", "finite"),
    [
        ([{"op": "ordinal", "input": "s", "vocabulary": VOCAB, "output": "o"}, {"op": "concat", "inputs": ["o", "n"], "output": "z"}], True, {"x", "s", "n", "o", "z"}),
        ([{"op": "standardize", "input": "x", "mean": 0, "std": 2}], True, {"s", "n"}),  # a division may overflow
        ([{"op": "log1p", "input": "x", "output": "y"}, {"op": "keep", "names": ["x", "y"]}], True, {"x"}),
        ([{"op": "cast", "input": "x", "datatype": "FP64"}, {"op": "concat", "inputs": ["x"], "output": "z"}], True, {"x", "s", "n"}),  # FP64 into FP32
        ([{"op": "fill", "input": "x", "value": float("inf")}], True, {"s", "n"}),
        ([{"op": "select", "input": "x", "columns": [0], "output": "y"}, {"op": "one_hot", "input": "s", "vocabulary": VOCAB}], False, {"s"}),
    ],
)
def test_a_plan_knows_which_outputs_are_finite_by_construction(ops: list[dict[str, Any]], checked: bool, finite: set[str]) -> None:
    """What a model step after the transform need not look through for NaN or infinity: the
    request's checked inputs and what ops make of them that cannot overflow; never what came
    from a model unchecked (`checked` False)."""
    declared = [{"name": s.name, "datatype": s.datatype, "shape": list(s.shape)} for s in SPECS]
    node = Transform.model_validate({"kind": "transform", "inputs": declared, "ops": ops})
    columns: dict[int, list[int]] = {}
    answer_specs(node, SPECS, columns=columns)
    assert plan_of(node, columns).finite[checked] == finite


_PARAMETER = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**1000), 2**1000).map(lambda i: i if abs(i) < 1e308 else 7))


@settings(max_examples=150, deadline=None)
@given(
    op=st.sampled_from(["clip_min", "clip_max", "fill", "platt", "ordinal"]),
    value=_PARAMETER,
    other=_PARAMETER,
    data=st.lists(st.floats(-3.0000000054977558e38, 3.0000000054977558e38, width=32), min_size=3, max_size=12).map(lambda v: v[: len(v) // 3 * 3]),
)
def test_an_output_said_finite_by_construction_is_finite_whatever_the_parameters(op: str, value: float, other: float, data: list[float]) -> None:
    """What a plan says a model step need not look through (`finite`) holds for any finite
    parameter a policy may give, a number past FP32's range included (in FP32 it is infinite:
    a clip to it, a fill with it or a platt scaled by it made infinity or NaN the model was fed)."""
    ops = {
        "clip_min": {"op": "clip", "input": "x", "min": value},
        "clip_max": {"op": "clip", "input": "x", "max": value},
        "fill": {"op": "fill", "input": "x", "value": value},
        "platt": {"op": "platt", "input": "x", "a": value, "b": other},
        "ordinal": {"op": "ordinal", "input": "s", "vocabulary": VOCAB, "unknown": value, "output": "x"},
    }[op]
    declared = [{"name": s.name, "datatype": s.datatype, "shape": list(s.shape)} for s in SPECS]
    node = Transform.model_validate({"kind": "transform", "inputs": declared, "ops": [ops]})
    columns: dict[int, list[int]] = {}
    answer_specs(node, SPECS, columns=columns)
    x = np.asarray(data or [0.0, 0.0, 0.0], np.float32).reshape(-1, 3)
    with np.errstate(all="ignore"):
        out = run_transform(node, rows(x), columns)["x"]
    if "x" in plan_of(node, columns).finite[True]:
        assert np.isfinite(out).all(), (ops, out)


_BOUNDS = [2**31, 2**31 - 1, -(2**31), -(2**31) - 1, 2**63, 2**63 - 1, -(2**63), 2**32, 3e9]


@settings(max_examples=200, deadline=None)
@given(
    source=st.sampled_from(["FP32", "FP64"]),
    target=st.sampled_from(["INT32", "INT64"]),
    value=st.one_of(st.floats(), st.sampled_from(_BOUNDS).map(float), st.sampled_from(_BOUNDS).map(lambda b: float(np.nextafter(float(b), 0.0)))),
)
def test_a_cast_to_an_integer_refuses_a_value_past_its_range_and_never_wraps(source: str, target: str, value: float) -> None:
    """Against Python's exact comparison of a float with an integer: NumPy's, in float, takes
    INT32's largest value for 2**31 (and INT64's for 2**63), which then wrapped to the least."""
    with np.errstate(over="ignore"):
        x = np.asarray([value], np.float64).astype(V2_TO_NUMPY[source])
    held = x.item()  # the value as the source type holds it
    info = np.iinfo(V2_TO_NUMPY[target])
    node = Transform.model_validate({"kind": "transform", "ops": [{"op": "cast", "input": "v", "datatype": target}]})
    columns: dict[int, list[int]] = {}
    answer_specs(node, (TensorSpec("v", source, (-1,)),), columns=columns)
    try:
        out = run_transform(node, {"v": x}, columns)["v"]
    except InvalidInput as refused:
        assert refused.field == "inputs.v"
        assert not math.isfinite(held) or not info.min <= held <= info.max
    else:
        assert math.isfinite(held) and info.min <= held <= info.max
        assert out.item() == math.trunc(held)  # a fraction is cut, nothing wraps


_WHOLE = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(2**53 - 3, 2**53 + 3), st.integers(-(2**53) - 3, -(2**53) + 3))
_BOUND = st.one_of(st.integers(-(2**64), 2**64), st.floats(allow_nan=False, allow_infinity=False), st.integers(2**53 - 3, 2**53 + 3).map(float))


@given(values=st.lists(_WHOLE, min_size=1, max_size=20), low=st.one_of(st.none(), _BOUND), high=st.one_of(st.none(), _BOUND))
def test_clip_keeps_whole_numbers_exact_and_within_its_bounds(values: list[int], low: Any, high: Any) -> None:
    """Python's integers by hand: a value within [min, max] is itself, exactly (as floats, past
    2^53 it moved); one outside, the nearest whole number inside."""
    if low is not None and high is not None and low > high:
        low, high = high, low
    if low is not None and high is not None and math.ceil(low) > math.floor(high):
        return  # no whole number between them
    op = {"op": "clip", "input": "n", "output": "c", **({"min": low} if low is not None else {}), **({"max": high} if high is not None else {})}
    if low is None and high is None:
        return
    out, _ = run([op], {"n": np.asarray(values, np.int64).reshape(-1, 1), "x": np.zeros((len(values), 3), np.float32), "s": np.array(["red"] * len(values), dtype=object)})
    lo = -(2**63) if low is None else max(-(2**63), min(2**63 - 1, math.ceil(low)))
    hi = 2**63 - 1 if high is None else max(-(2**63), min(2**63 - 1, math.floor(high)))
    assert out["c"].dtype == np.int64 and out["c"].reshape(-1).tolist() == [min(max(v, lo), hi) for v in values]


@given(values=st.lists(_WHOLE, min_size=1, max_size=20), boundaries=st.lists(_BOUND, min_size=1, max_size=5, unique=True))
def test_bucketize_counts_the_boundaries_a_whole_number_is_at_or_above_exactly(values: list[int], boundaries: list[Any]) -> None:
    boundaries = sorted(boundaries, key=float)
    if any(float(b) <= float(a) for a, b in pairwise(boundaries)):
        return  # the op takes boundaries that increase as floats
    op = {"op": "bucketize", "input": "n", "boundaries": boundaries, "output": "b"}
    try:
        out, _ = run([op], {"n": np.asarray(values, np.int64).reshape(-1, 1), "x": np.zeros((len(values), 3), np.float32), "s": np.array(["red"] * len(values), dtype=object)})
    except (InvalidRequest, Unprocessable):
        return  # a boundary no 64-bit float holds
    assert out["b"].reshape(-1).tolist() == [sum(1 for b in boundaries if v >= b) for v in values]


def test_bucketize_compares_an_fp32_value_in_its_own_type_as_threshold_does() -> None:
    x = np.array([[0.7, 0.1, 0.2]], dtype=np.float32)
    ops = [{"op": "select", "input": "x", "columns": [0], "output": "a"}, {"op": "bucketize", "input": "a", "boundaries": [0.7], "output": "b"}, {"op": "threshold", "input": "a", "cutoff": 0.7, "output": "t"}]
    out, _ = run(ops, {"x": x, "s": np.array(["red"], dtype=object), "n": np.zeros((1, 1), np.int64)})
    assert out["b"].reshape(-1).tolist() == [1] and out["t"].reshape(-1).tolist() == [True]  # at or above, both


def test_hash_tells_text_from_the_same_text_with_nuls_after_it() -> None:
    words = np.array(["a", "a\x00", "a\x00\x00", "b"], dtype=object)
    out, _ = run([{"op": "hash", "input": "s", "buckets": 1000003, "output": "h"}], {"s": words, "x": np.zeros((4, 3), np.float32), "n": np.zeros((4, 1), np.int64)})
    got = out["h"].reshape(-1).tolist()
    assert got == [stable_bucket(w, 1000003) for w in words] and len(set(got)) == 4


@pytest.mark.parametrize("op", [
    {"op": "one_hot", "input": "s", "vocabulary": VOCAB, "output": "o"},
    {"op": "ordinal", "input": "s", "vocabulary": VOCAB, "output": "o"},
    {"op": "hash", "input": "s", "buckets": 16, "output": "o"},
])  # fmt: skip
def test_text_of_bytes_that_are_not_utf8_is_no_class_and_stays_itself(op: dict[str, Any]) -> None:
    """A function step's BYTES answer may hold bytes that are not UTF-8: in no vocabulary, each
    itself (two such values two), hashed as the bytes they are — never a 500 (UnicodeDecodeError)."""
    text = np.array([b"\xff", b"red", b"\xfe", b"\xff", "red", "purple"], dtype=object)
    out, _ = run([op], {**rows(np.zeros((6, 3), np.float32)), "s": text})
    got = [row.tolist() for row in out["o"]]
    assert got[1] == got[4] and got[0] == got[3]  # b"red" and "red" one value; the same bytes one code
    if op["op"] != "hash":  # in no vocabulary: as a word that is not in it
        assert got[0] == got[2] == got[5] != got[1]


def test_select_past_the_columns_an_open_count_holds_is_refused_naming_the_input() -> None:
    """A tensor whose count of columns the signature leaves open: a column past what came is a
    4xx naming the input (an IndexError, a 500)."""
    open_spec = TensorSpec("y", "FP32", (-1, -1))
    node = Transform.model_validate({"kind": "transform", "ops": [{"op": "select", "input": "y", "columns": [7]}]})
    columns: dict[int, list[int]] = {}
    answer_specs(node, (open_spec,), columns=columns)
    with pytest.raises(InvalidInput, match="select takes column 7 of 'y', which has 3") as refused:
        run_transform(node, {"y": np.zeros((2, 3), np.float32)}, columns)
    assert refused.value.field == "y"
    stored = Transform.model_validate({"kind": "transform", "ops": [{"op": "select", "input": "y", "columns": [-3]}]})  # written before the rule
    answer_specs(stored, (open_spec,), columns=(kept := {}))
    with pytest.raises(InvalidInput, match="select takes column -3 of 'y', which has 2"):
        run_transform(stored, {"y": np.zeros((2, 2), np.float32)}, kept)
