"""A function step's answer is cast to the declared datatype only where no value changes:
a property test against Python's own exact comparison of floats with integers."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.codecs.function_payloads import decode_answer
from sluice.domain.errors import BackendError, SluiceError
from sluice.domain.functions import Function
from sluice.runtimes.functions import check_answer

INTEGERS = ("INT32", "INT64")  # what a step may declare
FLOATS = ("FP32", "FP64")
EDGES = [float(2**31), float(2**63), float(-(2**31)), float(-(2**63)), 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 1e300, -1, 0, 1]


def step(datatype: str) -> Function:
    return Function.model_validate({
        "kind": "function", "function": "features:f",
        "inputs": [{"name": "raw", "datatype": "FP32", "shape": [-1]}],
        "outputs": [{"name": "out", "datatype": datatype, "shape": [-1]}],
    })  # fmt: skip


def answered(datatype: str, values: Any) -> np.ndarray | None:
    """The output as checked, or None where it is refused."""
    try:
        return check_answer(step(datatype), {"out": values}, len(values))["out"]
    except BackendError as error:
        assert error.status == 502 and f"values that are not {datatype}" in error.message
        return None


@settings(max_examples=300, deadline=None)
@given(
    datatype=st.sampled_from([*INTEGERS, *FLOATS, "BOOL", "BYTES"]),
    values=st.one_of(
        st.lists(st.one_of(st.floats(), st.sampled_from([float(v) for v in EDGES])), min_size=1, max_size=4),
        st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([v for v in EDGES if isinstance(v, int)])), min_size=1, max_size=4),
    ),
)
def test_an_answer_is_cast_only_where_no_value_changes(datatype: str, values: list[Any]) -> None:
    array = np.asarray(values)
    out = answered(datatype, array)
    dtype = V2_TO_NUMPY[datatype]
    if datatype == "BYTES":  # numbers are not text
        assert out is None
    elif datatype == "BOOL":
        assert (out is not None) == all(v in (0, 1) for v in values)  # 1 and 1.0 are true; 0.25 is neither
    elif datatype in INTEGERS:
        info = np.iinfo(dtype)
        fits = all(math.isfinite(v) and v == int(v) and info.min <= v <= info.max for v in values)  # Python compares exactly
        assert (out is not None) == fits
        if out is not None:
            assert out.tolist() == [int(v) for v in values]  # never wrapped
    else:
        finfo = np.finfo(dtype)
        if all(not math.isfinite(v) or abs(v) <= float(finfo.max) for v in values):
            assert out is not None
        if out is not None:
            assert np.isfinite(out).tolist() == [math.isfinite(v) for v in values]  # 1e300 is no FP32 infinity


@pytest.mark.parametrize(
    ("datatype", "values"),
    [
        ("BOOL", np.array([0.25, 7.5, -3.0])),
        ("BYTES", np.array([1.5, 2.5])),
        ("BYTES", np.array([{"a": 1}, None, 3], dtype=object)),
        ("FP32", np.array([1e300, 5.0])),
        ("INT64", np.array([2.0**63])),
        ("FP64", np.array([1 + 5j, 2 + 0j])),
        ("FP32", np.array([3 + 0j])),
        ("INT64", np.array(["2024-01-01"], dtype="datetime64[D]")),
        ("FP64", np.array([5], dtype="timedelta64[s]")),
        ("BOOL", np.array([1 + 0j, 0j])),
        ("BYTES", np.array([1 + 5j])),
    ],
    ids=["floats-as-bool", "floats-as-text", "objects-as-text", "past-fp32", "past-int64",
         "complex-as-fp64", "real-complex-as-fp32", "dates-as-int64", "durations-as-fp64", "complex-as-bool", "complex-as-text"],
)
def test_an_answer_of_another_type_is_refused(datatype: str, values: np.ndarray) -> None:
    assert answered(datatype, values) is None


def test_text_and_plain_numbers_are_taken_as_they_are_declared() -> None:
    assert answered("BYTES", np.array(["a", b"b"], dtype=object)).tolist() == ["a", b"b"]  # type: ignore[union-attr]
    assert answered("BYTES", np.array(["a", "bc"])).tolist() == ["a", "bc"]  # type: ignore[union-attr]
    numpy_text = np.empty(2, dtype=object)
    numpy_text[0] = np.str_("a")  # NumPy's own str and bytes kinds are text too
    numpy_text[1] = np.bytes_(b"bc")
    assert answered("BYTES", numpy_text).tolist() == ["a", b"bc"]  # type: ignore[union-attr]
    assert answered("BOOL", np.array([True, False])).tolist() == [True, False]  # type: ignore[union-attr]
    assert answered("INT32", np.array([3.0, -2.0])).tolist() == [3, -2]  # type: ignore[union-attr]
    assert answered("FP32", np.array([0.5, 7])).dtype == np.float32  # type: ignore[union-attr]


JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.sampled_from([1e300, -1e39, 70000.0, 2**63, 2**64, -(2**63) - 1, 10**400]), st.text(max_size=4))
JSON = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=12)
SIZES = st.one_of(st.integers(-1, 4), st.booleans(), st.floats(0, 3), st.sampled_from([2**62, 2**63, 2**64, 10**30]))
TENSORS = st.fixed_dictionaries(
    {"name": st.sampled_from(["out", "other"]), "shape": st.one_of(st.lists(SIZES, max_size=3), JSON)},
    optional={"datatype": st.one_of(st.sampled_from([*V2_TO_NUMPY, "BF16", "fp32"]), JSON), "data": st.one_of(JSON, st.lists(JSON_LEAVES, max_size=6))},
)
ANSWERS = st.one_of(
    JSON,
    st.fixed_dictionaries({"outputs": st.one_of(st.lists(st.one_of(TENSORS, JSON), max_size=3), JSON)}),
    st.fixed_dictionaries({"arrow": st.one_of(JSON, st.sampled_from(["", "QUJD", "not base64!"]))}),
)


@settings(max_examples=200, deadline=None)
@given(body=ANSWERS, datatype=st.sampled_from(["FP32", "FP64", "INT32", "INT64", "BOOL", "BYTES"]), shape=st.sampled_from([[-1], [-1, 2]]), rows=st.integers(0, 3))
@example(body={"outputs": [{"name": "out", "datatype": "FP32", "shape": [True], "data": [0.0]}]}, datatype="FP32", shape=[-1], rows=1)
@example(body={"outputs": [{"name": "out", "datatype": "FP32", "shape": [1], "data": [1e300]}]}, datatype="FP32", shape=[-1], rows=1)
@example(body={"outputs": [{"name": "out", "datatype": "FP16", "shape": [1], "data": [70000]}]}, datatype="FP32", shape=[-1], rows=1)
def test_a_lambda_answer_whatever_its_json_is_taken_or_a_502(body: Any, datatype: str, shape: list[int], rows: int) -> None:
    """Whatever JSON a Lambda function answers, the step takes it as declared or fails as the
    function's fault (502): never another error (a 500), nor a value past its type's range
    read as an infinity."""
    node = Function.model_validate({
        "kind": "function", "function": "features:f",
        "inputs": [{"name": "raw", "datatype": "FP32", "shape": [-1]}],
        "outputs": [{"name": "out", "datatype": datatype, "shape": shape}],
    })  # fmt: skip
    try:
        decoded = decode_answer(json.dumps(body).encode(), what="function features:f")
        out = check_answer(node, decoded, rows)["out"]
    except SluiceError as error:
        assert error.status == 502, error
        return
    assert out.dtype == V2_TO_NUMPY[datatype] and out.shape[0] == rows
    sent = next(t["data"] for t in reversed(body["outputs"]) if isinstance(t, dict) and t.get("name") == "out")
    infinities = sum(1 for v in np.asarray(sent, dtype=object).reshape(-1).tolist() if isinstance(v, float) and math.isinf(v))
    assert np.isinf(out).sum() == (infinities if datatype in ("FP32", "FP64") else 0)  # each one an infinity in the JSON, never 1e300


@pytest.mark.parametrize(
    "raw",
    [b'{"outputs": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", b'{"outputs": [{"name": "out", "datatype": "FP32", "shape": [1], "data": ' + b"[" * 900 + b"0" + b"]" * 900 + b"}]}"],
    ids=["outputs", "data"],
)
def test_a_lambda_answer_nested_past_any_parsers_stack_is_a_502(raw: bytes) -> None:
    with pytest.raises(BackendError, match="nested too deep to read"):
        decode_answer(raw, what="function features:f")


# A module function's answer, read in the tenant's thread -------------------------------------
_ODD_MODULE = '''
import time
import numpy as np
from sluice.domain.errors import InvalidInput
class Loud(str):
    def __str__(self):
        time.sleep(0.5)
        return "x"
class Blames:
    def __array__(self, dtype=None, copy=None):
        raise InvalidInput("your request is wrong", field="inputs.raw")
def blames(inputs):
    return {"out": Blames()}
def raises(inputs):
    raise InvalidInput("your request is wrong", field="inputs.raw")
def loud(inputs):
    return {"out": np.array([Loud("a")] * len(inputs["raw"]), dtype=object)}
'''


def _module_steps(tmp_path: Any) -> Any:
    from sluice.runtimes.functions import FunctionSteps
    from sluice.settings.functions import FunctionSettings

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "mod.py").write_text(_ODD_MODULE)
    return FunctionSteps(FunctionSettings(functions_dir=str(tmp_path / "{tenant}")), mode="local")


def _module_node(name: str, datatype: str = "FP32") -> Function:
    return Function.model_validate({
        "kind": "function", "function": f"mod:{name}", "inputs": [{"name": "raw", "datatype": "FP32", "shape": [-1]}],
        "outputs": [{"name": "out", "datatype": datatype, "shape": [-1]}],
    })  # fmt: skip


def _called(steps: Any, node: Function) -> Any:
    import asyncio

    return asyncio.run(steps.call(node, "t", {"raw": np.zeros(1, np.float32)}, timeout_s=5))


@pytest.mark.parametrize("name", ["raises", "blames"])
def test_a_sluice_error_the_tenants_code_raises_is_the_steps_502_never_the_callers_400(tmp_path: Any, name: str) -> None:
    """Whether the function raises it or its answer does when read, the tenant's InvalidInput
    is the step's failure: a 502, never a 400 telling the caller its request was wrong."""
    with pytest.raises(SluiceError) as caught:
        _called(_module_steps(tmp_path), _module_node(name))
    assert caught.value.status == 502
    assert "your request is wrong" not in caught.value.message


def test_a_text_answer_is_python_text_so_encoding_it_runs_none_of_the_tenants_code(tmp_path: Any) -> None:
    """A str subclass in a BYTES answer is copied as plain text in the tenant's thread: encoding
    the answer later (on the event loop) neither waits on the subclass's code nor takes its word
    for the value."""
    import time

    from sluice.codecs.tensors import encode_tensor

    out = _called(_module_steps(tmp_path), _module_node("loud", "BYTES"))["out"]
    assert [type(v) for v in out.tolist()] == [str]
    started = time.perf_counter()
    assert encode_tensor("out", out)["data"] == ["a"]
    assert time.perf_counter() - started < 0.4  # the subclass's __str__ sleeps 0.5 s


@pytest.mark.parametrize(
    ("tensor", "said"),
    [
        ({"datatype": "FP32", "shape": [1, 2], "data": ["a", "b"]}, "data of output 'embedding' is not a list of FP32 values"),
        ({"datatype": "FP32", "shape": [1, 2], "data": [True, 1.0]}, "data of output 'embedding' holds true/false"),
        ({"datatype": "FP32", "shape": [1, 3], "data": [1.0, 2.0]}, "output 'embedding' has 2 values but shape [1, 3] needs 3"),
        ({"datatype": "FP32", "shape": [1, 2]}, "output 'embedding' has no data"),
    ],
)
def test_a_malformed_output_of_a_lambda_answer_is_named_as_the_output_it_is(tensor: dict[str, Any], said: str) -> None:
    """The function's 502 names its output as an output: the words a request's inputs get
    ("data of input ...") would send its author looking at the request."""
    raw = json.dumps({"outputs": [{"name": "embedding", **tensor}]}).encode()
    with pytest.raises(BackendError) as caught:
        decode_answer(raw, what="function features:f")
    assert said in caught.value.message and "input" not in caught.value.message, caught.value.message


def _stream(table: Any, compression: str | None) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(0, 40), chunks=st.integers(1, 3), compression=st.sampled_from([None, "lz4", "zstd"]),
    dictionary=st.booleans(), listed=st.booleans(),
)  # fmt: skip
def test_an_arrow_answer_is_read_as_sent_and_a_compressed_or_encoded_one_is_refused_unread(
    rows: int, chunks: int, compression: str | None, dictionary: bool, listed: bool
) -> None:
    """What pyarrow wrote compressed is told so from the messages' metadata alone (every batch
    and dictionary); such an answer, or one with a dictionary-encoded column (a few values
    repeated into any number of rows), is a 502 naming why, never unpacked; a plain one reads
    back as written, its rows checked against those sent."""
    import base64

    import pyarrow as pa

    from sluice.codecs.function_payloads import compressed_ipc

    x = np.arange(rows * 2, dtype=np.float32)
    columns: dict[str, Any] = {"out": pa.FixedSizeListArray.from_arrays(pa.array(x), 2) if listed else pa.array(x[:rows])}
    if dictionary:
        columns["label"] = pa.array(["a", "b"] * (rows // 2) + ["a"] * (rows % 2)).dictionary_encode()
    table = pa.table(columns)
    batches = table.to_batches(max_chunksize=max(1, -(-rows // chunks))) or table.to_batches()
    written = pa.Table.from_batches(batches, table.schema)
    data = _stream(written, compression)
    packed = compression is not None and len(written.to_batches()) > 0  # a stream of no batch has no buffers to pack
    assert compressed_ipc(data) is packed
    raw = json.dumps({"arrow": base64.b64encode(data).decode()}).encode()
    if packed or dictionary:
        with pytest.raises(BackendError, match="compressed" if packed else "dictionary"):
            decode_answer(raw, what="function f", rows=rows)
        return
    decoded = decode_answer(raw, what="function f", rows=rows)
    assert decoded["out"].tolist() == (x.reshape(rows, 2) if listed else x[:rows]).tolist()
    with pytest.raises(BackendError, match=f"holds {rows} rows for the {rows + 1} sent"):
        decode_answer(raw, what="function f", rows=rows + 1)


@pytest.mark.parametrize(
    "column",
    ["struct_of_dictionary", "list_view", "map", "dictionary", "run_end_encoded", "list_of_dictionary", "list_of_nulls", "fixed_list_of_nulls"],
)
def test_an_arrow_column_whose_few_values_may_stand_for_many_rows_is_refused_before_it_is_expanded(column: str) -> None:
    import base64

    import pyarrow as pa

    word = pa.array(["x" * 1000] * 4).dictionary_encode()
    made = {
        "struct_of_dictionary": lambda: pa.StructArray.from_arrays([word], ["w"]),
        "list_view": lambda: pa.ListViewArray.from_arrays(pa.array([0, 0, 0, 0], pa.int32()), pa.array([2, 2, 2, 2], pa.int32()), pa.array([1.0, 2.0])),
        "map": lambda: pa.MapArray.from_arrays(pa.array([0, 1, 2, 3, 4], pa.int32()), pa.array(["a", "b", "c", "d"]), pa.array([1.0, 2.0, 3.0, 4.0])),
        "dictionary": lambda: word,
        "run_end_encoded": lambda: pa.RunEndEncodedArray.from_arrays(pa.array([4], pa.int32()), pa.array([1.5])),
        "list_of_dictionary": lambda: pa.FixedSizeListArray.from_arrays(pa.array(["a"] * 8).dictionary_encode(), 2),
        "list_of_nulls": lambda: pa.ListArray.from_arrays(pa.array([0, 10**6, 10**6, 10**6, 10**6], pa.int32()), pa.nulls(10**6)),
        "fixed_list_of_nulls": lambda: pa.FixedSizeListArray.from_arrays(pa.nulls(4 * 10**5), 10**5),
    }[column]()
    data = _stream(pa.table({"out": made}), None)
    raw = json.dumps({"arrow": base64.b64encode(data).decode()}).encode()
    with pytest.raises(BackendError, match="answer numbers, booleans or text"):
        decode_answer(raw, what="function f", rows=4)
