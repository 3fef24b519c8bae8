from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.codecs.classification import asked
from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.codecs.plain import present_columns, present_rows
from sluice.codecs.plain_inputs import arrays_from_request
from sluice.codecs.tensors import decode_tensor, encode_tensor, json_data
from sluice.domain.errors import BadRequest, InvalidInput
from sluice.domain.results import InferenceResult
from sluice.domain.signature import Signature, TensorSpec


@pytest.mark.parametrize("datatype", sorted(V2_TO_NUMPY))
def test_every_v2_datatype_round_trips(datatype: str) -> None:
    values = {"BOOL": [True, False, True, False], "BYTES": ["a", "b", "c", "d"]}.get(datatype, [0, 1, 2, 3])
    array = decode_tensor("t", datatype, [2, 2], values, field="inputs.t")
    assert array.shape == (2, 2)
    assert array.dtype == V2_TO_NUMPY[datatype]
    encoded = encode_tensor("t", array)
    assert encoded["datatype"] == datatype and encoded["shape"] == [2, 2]
    assert list(np.asarray(encoded["data"]).tolist()) == values


def test_nested_data_is_accepted_and_sizes_are_checked() -> None:
    assert decode_tensor("t", "FP32", [2, 2], [[1, 2], [3, 4]], field="f").tolist() == [[1, 2], [3, 4]]
    with pytest.raises(InvalidInput) as err:
        decode_tensor("t", "FP32", [2, 2], [1, 2, 3], field="inputs.t")
    assert err.value.field == "inputs.t.data" and "needs 4" in err.value.message


@pytest.mark.parametrize(
    ("datatype", "shape", "data", "field"),
    [
        ("FP99", [1], [1], "inputs.t.datatype"),
        ("FP32", [-1], [1], "inputs.t.shape"),
        ("FP32", [2], ["x", "y"], "inputs.t.data"),
        ("INT8", [1], [1000], "inputs.t.data"),
    ],
)
def test_bad_tensors_name_the_field(datatype: str, shape: list[int], data: list[object], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        decode_tensor("t", datatype, shape, data, field="inputs.t")
    assert err.value.field == field


IRIS = Signature(
    inputs=(TensorSpec("input", "FP32", (-1, 2), feature_names=("a", "b")),),
    outputs=(
        TensorSpec("label", "INT64", (-1,), role="label"),
        TensorSpec("probs", "FP32", (-1, -1), role="probabilities"),
    ),
)


def test_features_follow_the_signature_order() -> None:
    arrays = arrays_from_request(IRIS, features={"b": 2.0, "a": 1.0})
    assert arrays["input"].tolist() == [[1.0, 2.0]]


def test_a_single_row_list_gains_its_batch_axis() -> None:
    assert arrays_from_request(IRIS, inputs=[1.0, 2.0])["input"].shape == (1, 2)
    assert arrays_from_request(IRIS, inputs=[[1.0, 2.0], [3.0, 4.0]])["input"].shape == (2, 2)


def test_batch_of_feature_objects_and_of_rows() -> None:
    arrays = arrays_from_request(IRIS, batch=[{"a": 1, "b": 2}, [3, 4]])
    assert arrays["input"].tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"features": {"a": 1}}, "features.b"),
        ({"features": {"a": 1, "b": 2, "c": 3}}, "features.c"),
        ({"batch": [{"a": 1, "b": 2}, {"a": 1}]}, "batch.1.b"),
        ({"batch": []}, "batch"),
        ({}, "inputs"),
        ({"inputs": [[1, 2]], "features": {"a": 1, "b": 2}}, "inputs"),
        ({"inputs": [[1, 2], [3]]}, "inputs"),
    ],
)
def test_plain_request_errors_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        arrays_from_request(IRIS, **kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_classifier_rows_carry_label_probabilities_and_confidence() -> None:
    result = InferenceResult(
        {"label": np.array([1, 0]), "probs": np.array([[0.2, 0.8], [0.9, 0.1]], dtype=np.float32)},
        classes={"probs": ["no", "yes"]},
    )
    rows = present_rows(IRIS, result)
    assert rows[0]["prediction"] == 1
    assert rows[0]["probabilities"] == pytest.approx({"no": 0.2, "yes": 0.8})
    assert rows[0]["confidence"] == pytest.approx(0.8)
    assert rows[1]["confidence"] == pytest.approx(0.9)
    assert "probabilities" not in present_rows(IRIS, result, return_probabilities=False)[0]


def test_regressor_rows_are_scalars_and_vectors_lists() -> None:
    sig = Signature(inputs=IRIS.inputs, outputs=(TensorSpec("y", "FP32", (-1, 1), role="value"),))
    rows = present_rows(sig, InferenceResult({"y": np.array([[1.5], [2.5]], dtype=np.float32)}))
    assert [r["prediction"] for r in rows] == [1.5, 2.5]
    sig2 = Signature(inputs=IRIS.inputs, outputs=(TensorSpec("y", "FP32", (-1, 2), role="value"),))
    rows = present_rows(sig2, InferenceResult({"y": np.array([[1, 2]], dtype=np.float32)}))
    assert rows[0]["prediction"] == [1.0, 2.0]


def test_classifier_columns_are_prediction_probability_and_confidence() -> None:
    result = InferenceResult(
        {"label": np.array(["a", "b"], dtype=object), "probs": np.array([[0.9, 0.1], [0.2, 0.8]], np.float32)},
        classes={"probs": ["a", "b"]},
    )
    columns = present_columns(IRIS, result, flat=False)
    assert list(columns) == ["prediction", "probability_a", "probability_b", "confidence"]
    assert columns["prediction"].to_pylist() == ["a", "b"]
    assert columns["confidence"].to_numpy().tolist() == pytest.approx([0.9, 0.8])
    vector = Signature(inputs=IRIS.inputs, outputs=(TensorSpec("y", "FP32", (-1, 2), role="value"),))
    values = InferenceResult({"y": np.array([[1, 2], [3, 4]], np.float32)})
    assert list(present_columns(vector, values, flat=True)) == ["prediction_0", "prediction_1"]
    assert present_columns(vector, values, flat=False)["prediction"].to_pylist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize(
    ("outputs", "result"),
    [
        (IRIS.outputs, InferenceResult({"label": np.array([1, 0]), "probs": np.array([[0.2, 0.8], [0.9, 0.1]], np.float32)}, classes={"probs": ["no", "yes"]})),
        ((TensorSpec("probs", "FP32", (-1, -1), role="probabilities"),), InferenceResult({"probs": np.array([[0.2, 0.8], [0.9, 0.1]], np.float32)}, classes={"probs": [3, 7]})),
        ((TensorSpec("y", "FP32", (-1, 1), role="value"),), InferenceResult({"y": np.array([[1.5], [2.5]], np.float32)})),
        ((TensorSpec("y", "FP32", (-1, 3), role="value"),), InferenceResult({"y": np.arange(6, dtype=np.float32).reshape(2, 3)})),
        ((TensorSpec("y", "FP32", (-1,), role="value"), TensorSpec("z", "INT64", (-1,), role="value")), InferenceResult({"y": np.array([0.5, 1.5], np.float32), "z": np.array([4, 5])})),
    ],
    ids=["label", "top-class", "value", "vector", "two-values"],
)
def test_columns_say_what_rows_say(outputs: tuple[TensorSpec, ...], result: InferenceResult) -> None:
    """Batch parts (columns) and JSON answers (rows) present the same answer alike."""
    signature = Signature(inputs=IRIS.inputs, outputs=outputs)
    rows = present_rows(signature, result)
    columns = {name: column.to_pylist() for name, column in present_columns(signature, result, flat=False).items()}
    for i, row in enumerate(rows):
        prediction = row["prediction"]
        if isinstance(prediction, dict):  # several values: a column each
            assert {name: columns[f"prediction_{name}"][i] for name in prediction} == pytest.approx(prediction)
        else:
            assert columns["prediction"][i] == pytest.approx(prediction)
        for label, p in (row.get("probabilities") or {}).items():
            assert columns[f"probability_{label}"][i] == pytest.approx(p)
        if "confidence" in row:
            assert columns["confidence"][i] == pytest.approx(row["confidence"])


@given(
    datatype=st.sampled_from(["FP32", "FP64", "FP16", "INT8", "INT16", "INT32", "INT64", "UINT16", "UINT64", "BOOL"]),
    rows=st.integers(0, 40),
    offset=st.integers(0, 15),
    seed=st.integers(0, 2**16),
)
def test_a_raw_tensor_reads_as_its_values_aligned_wherever_its_bytes_sit(datatype: str, rows: int, offset: int, seed: int) -> None:
    """The binary tensor extension's bytes (`sluice.codecs.binary.from_bytes`) at any place in a
    body: the same values, aligned to their size as ONNX Runtime reads fastest, the body's own
    bytes where they are aligned already."""
    from sluice.codecs.binary import from_bytes

    dtype = V2_TO_NUMPY[datatype]
    values = (np.random.default_rng(seed).random((rows, 3)) * 100).astype(dtype)
    body = bytearray(offset) + values.astype(dtype.newbyteorder("<")).tobytes()
    chunk = memoryview(bytes(body))[offset:]
    got = from_bytes("x", datatype, [rows, 3], chunk, field="inputs.0")
    assert got.dtype == dtype and got.flags.aligned and np.array_equal(got, values)
    in_place = np.frombuffer(chunk, np.uint8).ctypes.data % dtype.alignment == 0 if len(chunk) else True
    assert np.shares_memory(got, np.frombuffer(chunk, np.uint8)) == (in_place and got.size > 0)


FLOATS = st.sampled_from([np.float16, np.float32, np.float64])


@given(
    dtype=FLOATS,
    values=st.lists(st.one_of(st.floats(width=16), st.sampled_from([float("nan"), float("inf"), float("-inf")])), max_size=12),
)
def test_a_json_float_output_reads_back_to_its_values_nan_and_infinity_included(dtype: type, values: list[float]) -> None:
    """As Triton writes them: `NaN`, `Infinity`, `-Infinity`, which Python's json reads (orjson
    alone would write null, and a NaN would come back as None)."""
    import json

    import orjson

    array = np.array(values, dtype=dtype)
    data = json_data("y", encode_tensor("y", array)["datatype"], array)
    got = json.loads(orjson.dumps({"data": data}, option=orjson.OPT_SERIALIZE_NUMPY))["data"]
    np.testing.assert_array_equal(np.array(got, dtype=dtype), array)  # NaN equals NaN here


def test_a_bf16_output_is_named_bf16_and_refused_in_json_naming_it() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    array = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    tensor = encode_tensor("y", array)
    assert tensor["datatype"] == "BF16"
    with pytest.raises(BadRequest) as err:
        json_data("y", tensor["datatype"], tensor["data"])
    assert err.value.field == "outputs.y" and "binary" in err.value.message


@given(value=st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=3), st.lists(st.integers(), max_size=2)))
def test_classification_is_a_positive_integer_or_not_asked_at_all(value: object) -> None:
    """`false`, `0`, `0.0` are not "not asked": only a missing value is. Any other value that is
    not a positive integer is refused naming the output, never answered with the raw tensor."""
    if value is None:
        assert asked([("p", {"classification": value})]) == {}
    elif type(value) is int and value > 0:
        assert asked([("p", {"classification": value})]) == {"p": value}
    else:
        with pytest.raises(BadRequest) as err:
            asked([("p", {"classification": value})])
        assert err.value.field == "outputs.p.parameters.classification"


HUGE = st.integers(2**62, 2**80)


@given(
    dims=st.one_of(
        st.integers(65, 80).map(lambda n: [1] * n),
        st.tuples(HUGE, st.integers(0, 64)).map(lambda t: [0] + [t[0]] + [8] * (t[1] % 3)),
        st.tuples(HUGE, st.integers(1, 4)).map(lambda t: [t[0]] * t[1] + [0]),
    ),
    door=st.sampled_from(["json", "binary"]),
)
def test_a_shape_no_array_can_have_is_refused_naming_it(dims: list[int], door: str) -> None:
    """More than 64 dimensions, or a size past NumPy's index range beside a 0 (the element
    count matches, so every other check passes): a 400 naming the shape, on JSON and binary
    alike (gRPC's tensors are JSON's, `decode_tensor`)."""
    from sluice.codecs.binary import from_bytes

    count = 1 if 0 not in dims else 0
    with pytest.raises(InvalidInput) as refused:
        if door == "json":
            decode_tensor("x", "FP32", dims, [0.5] * count, field="inputs.x")
        else:
            from_bytes("x", "FP32", dims, memoryview(b"\0" * 4 * count), field="inputs.x")
    assert refused.value.field == "inputs.x.shape" and "no array can have" in refused.value.message


INTEGER_TYPES = ["INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"]


@given(datatype=st.sampled_from(INTEGER_TYPES), values=st.lists(st.integers(0, 100), min_size=1, max_size=8), data=st.data())
def test_v2_json_numbers_reach_an_integer_input_exactly_or_are_refused(datatype: str, values: list[int], data: st.DataObject) -> None:
    """Integers, and floats that are integers (2.0), are the same values; a fraction is never
    truncated (1.5 is not 1) and text never read as a number ("7"): both a 400 naming the data,
    as simple JSON refuses them."""
    assert decode_tensor("x", datatype, [len(values)], [float(v) if v % 2 else v for v in values], field="inputs.x").tolist() == values
    at = data.draw(st.integers(0, len(values) - 1))
    odd = data.draw(st.one_of(st.floats(0.01, 100).filter(lambda f: not f.is_integer()), st.integers(0, 100).map(str)))
    with pytest.raises(InvalidInput) as refused:
        decode_tensor("x", datatype, [len(values)], [*values[:at], odd, *values[at + 1 :]], field="inputs.x")
    assert refused.value.field == "inputs.x.data"


@given(datatype=st.sampled_from(INTEGER_TYPES), data=st.data())
def test_v2_json_integers_beside_a_whole_float_keep_every_digit(datatype: str, data: st.DataObject) -> None:
    """A whole float among the values (`2.0`) never sends the others through float64: an
    integer past 2**53 reaches the input as written, one past the type's range is refused."""
    info = np.iinfo(np.dtype(datatype.lower()))
    values = data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=6))
    nested = data.draw(st.booleans())
    sent = [*values, 2.0]
    want = [*values, 2]
    shape = [len(sent)]
    if nested:
        sent, want, shape = [[v] for v in sent], [[v] for v in want], [len(sent), 1]
    assert decode_tensor("x", datatype, shape, sent, field="inputs.x").tolist() == want
    with pytest.raises(InvalidInput):
        decode_tensor("x", datatype, [2], [int(info.max) + 1, 1.0], field="inputs.x")
    assert decode_tensor("x", "INT64", [2], [2**53 + 1, 2.0], field="inputs.x").tolist() == [2**53 + 1, 2]  # float64 would round it


@given(datatype=st.sampled_from(["FP16", "FP32", "FP64"]), text=st.sampled_from(["6.7", " 3.5 ", "1e3", "-0", "nan", ""]), nested=st.booleans())
def test_v2_json_text_for_a_float_input_is_refused_not_read_as_a_number(datatype: str, text: str, nested: bool) -> None:
    data = [[1.0, text]] if nested else [1.0, text]
    with pytest.raises(InvalidInput) as refused:
        decode_tensor("x", datatype, [1, 2] if nested else [2], data, field="inputs.x")
    assert refused.value.field == "inputs.x.data"
    assert decode_tensor("x", datatype, [2], [6.5, 3], field="inputs.x").tolist() == [6.5, 3.0]


@given(raw=st.binary(min_size=1, max_size=16), offset=st.integers(0, 3))
def test_raw_bool_bytes_other_than_0_and_1_are_refused(raw: bytes, offset: int) -> None:
    """JSON's BOOL takes 0 and 1 only; the binary form's bytes (REST's binary extension and
    gRPC's raw contents, both `raw_values`) say the same: 2 is no boolean (a model's `Not`
    would answer 3, still true)."""
    from sluice.codecs.binary import from_bytes

    chunk = memoryview(bytes(offset) + raw)[offset:]
    if max(raw) <= 1:
        assert from_bytes("x", "BOOL", [len(raw)], chunk, field="inputs.x").tolist() == [b == 1 for b in raw]
    else:
        with pytest.raises(InvalidInput) as refused:
            from_bytes("x", "BOOL", [len(raw)], chunk, field="inputs.x")
        assert refused.value.field == "inputs.x" and "0 (false) and 1 (true)" in refused.value.message


# JSON from outside the HTTP API: nested too deep to read ------------------------------------------
_WRAPS = (("[", "]"), ('{"k": ', "}"), ('[1, "[[", ', "]"), ('{"a": "}", "b": ', "}"))  # a level's text before and after what it holds


def _json_nested(depth: int, draw: st.DrawFn) -> str:
    """A record's JSON text exactly `depth` levels deep (itself counted) in its member `m`:
    arrays and objects mixed, strings holding brackets beside them, and a shallow member `s`."""
    value = draw(st.sampled_from(["1", '"]]}{"'])) if depth == 1 else draw(st.sampled_from(["[]", "{}", "[1]", '{"z": "]]"}']))
    # Each level around it one of four wrappings, their choices drawn as one number (a digit in
    # base 4 a level: one draw, shrinking toward the first) and the text joined once, not
    # rebuilt level by level (1,500 draws and copies an example made the test ~20 s).
    levels = max(depth - 2, 0)
    choices = draw(st.integers(0, 4**levels - 1)) if levels else 0
    opened, closed = [], []
    for _ in range(levels):
        choices, k = divmod(choices, 4)
        opened.append(_WRAPS[k][0])
        closed.append(_WRAPS[k][1])
    value = "".join(reversed(opened)) + value + "".join(closed)
    shallow = draw(st.sampled_from(['"{[{["', "[[1]]", '{"x": [2]}']))
    return f'{{"s": {shallow}, "m": {value}}}'


def _python_reads(text: str) -> object:
    """json.loads with a stack deep enough for any text here: the reference."""
    import json
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        return json.loads(text)
    finally:
        sys.setrecursionlimit(limit)


DEPTHS = st.sampled_from([1, 199, 200, 201, 202, 900, 1023, 1024, 1025, 1500]) | st.integers(1, 1500)


@settings(deadline=None)  # text 1,500 levels deep read by json.loads: hundreds of ms on a busy machine
@given(depth=DEPTHS, data=st.data(), as_bytes=st.booleans(), wording=st.booleans())
def test_outside_json_is_read_as_orjson_reads_it_and_past_its_limit_refused_naming_the_member(depth: int, data: st.DataObject, as_bytes: bool, wording: bool) -> None:
    """What orjson reads (1,024 levels, the outermost counted; a string's brackets are text) is
    read as it reads it, the HTTP API's 200 no limit here; deeper text is bad input naming the
    top-level member that nests too deep, whatever orjson's versions call their refusal."""
    import orjson

    from sluice.codecs import json_text

    parse = orjson.loads

    def worded(text: bytes | str) -> object:  # as orjson 3.10 and 3.11 word their refusal
        try:
            return parse(text)
        except orjson.JSONDecodeError as exc:
            raise orjson.JSONDecodeError("array and object recursion depth exceeded", exc.doc, exc.pos) from None

    text = _json_nested(depth, data.draw)
    given_text: bytes | str = text.encode() if as_bytes else text
    with pytest.MonkeyPatch.context() as patch:
        if wording:
            patch.setattr(json_text.orjson, "loads", worded)
        if depth > 1024:
            with pytest.raises(json_text.NestedTooDeep) as refused:
                json_text.loads(given_text)
            assert (refused.value.status, refused.value.field) == (400, "m")
            assert refused.value.message.startswith("'m' is nested too deep to read: more than 1,024 levels"), refused.value.message
        else:
            assert json_text.loads(given_text) == _python_reads(text)
        with pytest.raises(orjson.JSONDecodeError):  # not JSON from its second character: not too deep, however deep the rest
            json_text.loads(given_text[:1] + given_text)


@settings(deadline=None, max_examples=60)  # as the test above: deep text drawn level by level, then read by recursion; slow on a busy machine
@given(depth=DEPTHS, data=st.data(), as_bytes=st.booleans())
def test_json_a_reader_ran_out_of_stack_on_is_refused_naming_its_deepest_member(depth: int, data: st.DataObject, as_bytes: bool) -> None:
    """A door whose reader walks the value by recursion (Python's json module, the checks after
    orjson) and runs out of stack refuses that text alone: bad input naming the member that nests
    deepest and how deep (found in the text, strings' brackets not counted), when it nests past
    the HTTP API's 200 levels; shallower, the stack ran out for another reason (no refusal)."""
    from sluice.codecs.json_text import NestedTooDeep, loads_as_python, too_deep

    text = _json_nested(depth, data.draw)
    given_text: bytes | str = text.encode() if as_bytes else text
    refused = too_deep(given_text)
    if depth > 200:
        assert isinstance(refused, NestedTooDeep) and (refused.status, refused.field) == (400, "m")
        assert refused.message.startswith(f"'m' is nested too deep to read: {depth:,} levels of arrays and objects, the outermost counted")
    else:
        assert refused is None
    try:  # Python's json module: as deep as the stack holds
        assert loads_as_python(given_text) == _python_reads(text)
    except NestedTooDeep as exc:
        assert depth > 200 and exc.field == "m"


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from(["int8", "uint8", "int32", "int64", "uint64"]),
    data=st.data(),
)
def test_top_k_of_integers_ranks_them_in_their_own_type(dtype: str, data: st.DataObject) -> None:
    """Triton's classification ranks scores as they are: two INT64 scores above 2**53 (equal
    as doubles) are not tied, the least INT64 ranks last, and among equals the lower index
    comes first. Checked against Python's own integers."""
    from sluice.codecs.classification import classify

    info = np.iinfo(dtype)
    near = st.integers(max(info.min, info.max - 8), info.max) | st.integers(info.min, min(info.max, info.min + 8)) | st.integers(info.min, info.max)
    width = data.draw(st.integers(1, 6))
    row = data.draw(st.lists(near, min_size=width, max_size=width))
    k = data.draw(st.integers(1, width + 2))
    got = classify("y", np.asarray([row], dtype=dtype), k).tolist()[0]
    ranked = sorted(range(width), key=lambda i: (-row[i], i))[:k]
    assert got == [f"{row[i]}:{i}" for i in ranked]


def test_a_row_refusal_copies_and_pickles_as_said() -> None:
    """A refusal of a row, with what a step said of it since, survives a copy (a batch's own
    error) and a pickle (a process pool's hop) whole, and renumbers as said."""
    import copy
    import pickle

    from sluice.domain.errors import RowInvalid

    refused = RowInvalid("input 'a' holds lookup key 'k': ", 3, " is float '1.5'", field="inputs.a")
    refused.message, refused.details = f"step 's': {refused.message}", {**refused.details, "step": "s"}  # as a sequence names its step
    refused.args = (refused.message,)
    for again in (copy.copy(refused), pickle.loads(pickle.dumps(refused))):
        assert (type(again), str(again), again.field, again.details, again.row) == (RowInvalid, str(refused), "inputs.a", {"row": 3, "step": "s"}, 3)
    assert refused.at(7).message == "step 's': input 'a' holds lookup key 'k': row 7 is float '1.5'"


def test_an_unknown_version_pickles_with_its_protocol_words() -> None:
    """A process pool's hop keeps what each door says of a version a request names: sluice's
    words of the model, and Triton's of the deployment for the protocol's doors."""
    import pickle

    from sluice.domain.errors import UnknownVersion

    refused = pickle.loads(pickle.dumps(UnknownVersion("recs", 9, "model 'mlp' has no version 9")))
    assert (type(refused), refused.message, refused.field, refused.status) == (UnknownVersion, "model 'mlp' has no version 9", "version", 404)
    assert refused.protocol_message == "Request for unknown model: 'recs' version 9 is not found"


@given(rows=st.integers(1, 6), width=st.integers(1, 4), constant=st.integers(2, 6), flat=st.booleans())
def test_rows_and_columns_give_an_output_that_is_not_per_row_whole_to_every_row(rows: int, width: int, constant: int, flat: bool) -> None:
    """Plain rows (`present_rows`) and batch columns (`present_columns`) agree, row by row,
    and give each row its own `y` and the whole `bias` (declared without a batch dimension,
    whatever its length but 1, a batch of one: equal to the rows too) and `mean` (a scalar),
    for any rows."""
    import numpy as np

    from sluice.codecs.plain import present_columns, present_rows
    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature, TensorSpec

    signature = Signature(
        (TensorSpec("x", "FP32", (-1, width)),),
        (TensorSpec("y", "FP32", (-1, width)), TensorSpec("bias", "FP32", (constant,)), TensorSpec("mean", "FP32", ())),
    )
    y = np.arange(rows * width, dtype=np.float32).reshape(rows, width)
    bias = np.arange(constant, dtype=np.float32) + 100
    result = InferenceResult({"y": y, "bias": bias, "mean": np.float32(y.mean())[()]})
    answers = present_rows(signature, result)
    assert [a["prediction"]["y"] for a in answers] == (y if width > 1 else y[:, 0]).tolist()
    assert all(a["prediction"]["bias"] == bias.tolist() for a in answers)
    assert all(a["prediction"]["mean"] == float(y.mean()) for a in answers)
    columns = present_columns(signature, result, flat=flat)
    assert {len(c) for c in columns.values()} == {rows}
    bias_columns = [c for name, c in columns.items() if "bias" in name]
    assert [[c[i].as_py() for c in bias_columns] for i in range(rows)] == [bias.tolist() if flat else [bias.tolist()]] * rows


def test_an_output_declared_with_a_fixed_leading_one_that_comes_with_the_rows_is_the_rows() -> None:
    """An exporter that left an output's batch axis out declares it [1, 3]; it comes [rows, 3]
    and is the rows' (each row its own, not every row all of them); a dynamic output of another
    length than the rows is the model's fault, named."""
    from sluice.codecs.plain import by_row
    from sluice.domain.errors import ModelFailed

    signature = Signature((TensorSpec("x", "FP32", (-1, 3)),), (TensorSpec("y", "FP32", (-1, 3)), TensorSpec("z", "FP32", (1, 3))))
    for rows in (1, 2, 5):
        x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        answers = present_rows(signature, InferenceResult({"y": x, "z": x * 2}))
        assert [a["prediction"]["z"] for a in answers] == (x * 2).tolist()
    with pytest.raises(ModelFailed, match="output 'y' has 2 rows for 3 asked"):
        by_row(signature, InferenceResult({"y": np.ones((2, 3), np.float32), "z": np.ones((1, 3), np.float32)}), 3)
