"""Triton request and response bodies: v2 JSON and binary+json, both ways."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from sluice.codecs.triton import (
    BINARY_JSON_CONTENT_TYPE,
    JSON_CONTENT_TYPE,
    batchable,
    config_dims,
    decode_response,
    decode_sagemaker_response,
    deserialize_bytes_tensor,
    encode_request,
    header_size_of,
    inputs_for_wire,
    outputs_from_wire,
    serialize_bytes_tensor,
)
from sluice.domain.errors import BackendError, InvalidInput
from sluice.domain.signature import Signature, TensorSpec

CLASSIFIER = Signature(
    inputs=(TensorSpec("x", "FP32", (-1, 4)),),
    outputs=(TensorSpec("label", "BYTES", (-1,), role="label"), TensorSpec("p", "FP32", (-1, 3), role="probabilities")),
)


def _as_response(body: bytes, header_size: int | None) -> bytes:
    """A request body turned into the response Triton would send with the same tensors."""
    end = len(body) if header_size is None else header_size
    header = json.loads(body[:end])
    out = json.dumps({"model_name": "m", "outputs": header["inputs"]}).encode()
    return out + body[end:], len(out)


def test_small_tensors_encode_as_v2_json() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    encoded = encode_request({"x": x, "n": np.array([[1], [2]], dtype=np.int64)})
    assert encoded.header_size is None
    assert encoded.content_type == JSON_CONTENT_TYPE
    request = json.loads(encoded.body)
    first = request["inputs"][0]
    assert (first["name"], first["shape"], first["datatype"]) == ("x", [2, 3], "FP32")
    # float32 written in its shortest form: the server reads back the very same float32s
    np.testing.assert_array_equal(np.asarray(first["data"], dtype=np.float32), x.reshape(-1))
    assert request["inputs"][1]["datatype"] == "INT64"
    assert "outputs" not in request and "parameters" not in request


def test_binary_json_puts_raw_little_endian_bytes_after_the_header() -> None:
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    encoded = encode_request({"x": x}, binary_inputs=True, binary_outputs=True)
    assert encoded.content_type == f"{BINARY_JSON_CONTENT_TYPE};json-header-size={encoded.header_size}"
    header = json.loads(encoded.body[: encoded.header_size])
    assert header["inputs"][0]["parameters"] == {"binary_data_size": 48}
    assert "data" not in header["inputs"][0]
    assert header["parameters"] == {"binary_data_output": True}
    assert encoded.body[encoded.header_size :] == x.astype("<f4").tobytes()


def test_named_outputs_carry_their_binary_flag() -> None:
    encoded = encode_request({"x": np.zeros((1, 2), np.float32)}, outputs=["a", "b"], binary_outputs=True)
    request = json.loads(encoded.body)
    assert request["outputs"] == [
        {"name": "a", "parameters": {"binary_data": True}},
        {"name": "b", "parameters": {"binary_data": True}},
    ]


def test_half_precision_always_travels_binary() -> None:
    encoded = encode_request({"h": np.ones((2, 2), np.float16), "f": np.ones((1,), np.float32)})
    assert encoded.header_size is not None
    header = json.loads(encoded.body[: encoded.header_size])
    assert header["inputs"][0]["parameters"] == {"binary_data_size": 8}
    assert header["inputs"][1]["data"] == [1.0]


def test_bytes_tensors_are_length_prefixed() -> None:
    labels = np.array(["a", "bé", ""], dtype=object)
    raw = serialize_bytes_tensor(labels)
    assert raw == struct.pack("<I", 1) + b"a" + struct.pack("<I", 3) + "bé".encode() + struct.pack("<I", 0)
    assert deserialize_bytes_tensor(raw, 3).tolist() == ["a", "bé", ""]
    with pytest.raises(BackendError):
        deserialize_bytes_tensor(raw[:3], 3)


def test_unknown_dtypes_are_refused_by_name() -> None:
    with pytest.raises(InvalidInput) as err:
        encode_request({"c": np.ones(2, dtype=np.complex64)})
    assert err.value.field == "inputs.c"


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary+json"])
def test_every_datatype_round_trips(binary: bool) -> None:
    tensors = {
        "f32": np.array([[1.5, -2.25]], np.float32),
        "f64": np.array([1e-300, 3.0]),
        "i8": np.array([-128, 127], np.int8),
        "u16": np.array([0, 65535], np.uint16),
        "i64": np.array([[-(2**62)], [2**62]], np.int64),
        "b": np.array([True, False]),
        "s": np.array([["x", "yz"]], dtype=object),
    }
    encoded = encode_request(tensors, binary_inputs=binary)
    body, header_size = _as_response(encoded.body, encoded.header_size)
    decoded = decode_response(body, header_size=header_size)
    for name, array in tensors.items():
        assert decoded[name].shape == array.shape
        assert decoded[name].tolist() == array.tolist(), name
        if array.dtype != object:
            assert decoded[name].dtype == array.dtype
            assert decoded[name].flags.writeable


def test_sagemaker_responses_name_their_header_size_in_the_content_type() -> None:
    p = np.array([[0.25, 0.75]], np.float32)
    encoded = encode_request({"p": p}, binary_inputs=True)
    body, header_size = _as_response(encoded.body, encoded.header_size)
    content_type = f"{BINARY_JSON_CONTENT_TYPE};json-header-size={header_size}"
    np.testing.assert_array_equal(decode_sagemaker_response(body, content_type)["p"], p)
    plain, _ = _as_response(encode_request({"p": p}).body, None)
    np.testing.assert_array_equal(decode_sagemaker_response(plain, "application/json")["p"], p)


@pytest.mark.parametrize(
    ("content_type", "size"),
    [
        ("application/json", None),
        (None, None),
        ("application/vnd.sagemaker-triton.binary+json;json-header-size=120", 120),
        ("Application/Vnd.Sagemaker-Triton.Binary+JSON; json-header-size = 7", 7),
    ],
)
def test_header_size_of(content_type: str | None, size: int | None) -> None:
    assert header_size_of(content_type) == size


def test_broken_responses_are_backend_errors() -> None:
    with pytest.raises(BackendError):
        header_size_of(f"{BINARY_JSON_CONTENT_TYPE};json-header-size=abc")
    with pytest.raises(BackendError):
        decode_response(b"<html>bad gateway</html>")
    with pytest.raises(BackendError):
        decode_response(b'{"error": "model failed"}')
    header = json.dumps({"outputs": [{"name": "y", "datatype": "FP32", "shape": [4], "parameters": {"binary_data_size": 16}}]}).encode()
    with pytest.raises(BackendError, match="shorter"):
        decode_response(header + b"\0" * 8, header_size=len(header))
    with pytest.raises(BackendError):
        decode_response(header, header_size=len(header) + 1)
    wrong = json.dumps({"outputs": [{"name": "y", "datatype": "FP32", "shape": [3], "data": [1, 2]}]}).encode()
    with pytest.raises(BackendError, match="2 values"):
        decode_response(wrong)


def test_batching_needs_a_dynamic_first_axis_everywhere() -> None:
    assert batchable(CLASSIFIER)
    fixed = Signature(inputs=(TensorSpec("x", "FP32", (1, 4)),), outputs=CLASSIFIER.outputs)
    assert not batchable(fixed)


def test_rank_one_tensors_are_declared_with_a_reshape() -> None:
    assert config_dims((-1, 4), batched=True) == ((4,), None)
    assert config_dims((-1,), batched=True) == ((1,), ())
    assert config_dims((1, 4), batched=False) == ((1, 4), None)


def test_wire_shapes_add_and_drop_the_trailing_axis() -> None:
    signature = Signature(inputs=(TensorSpec("ids", "INT64", (-1,)),), outputs=CLASSIFIER.outputs)
    wire = inputs_for_wire({"ids": np.arange(3)}, signature, batched=True)
    assert wire["ids"].shape == (3, 1)
    assert inputs_for_wire({"ids": np.arange(3)}, signature, batched=False)["ids"].shape == (3,)
    back = outputs_from_wire(
        {"label": np.array([["a"], ["b"]], dtype=object), "p": np.zeros((2, 3), np.float32)}, CLASSIFIER
    )
    assert back["label"].tolist() == ["a", "b"]
    assert back["p"].shape == (2, 3)


def test_binary_min_bytes_picks_each_tensor_by_its_size() -> None:
    big = np.arange(8, dtype=np.float32)  # 32 bytes
    small = np.array([1, 2], np.int32)  # 8 bytes
    half = np.ones(1, np.float16)  # 2 bytes, but FP16 is always binary
    encoded = encode_request({"big": big, "small": small, "half": half}, binary_min_bytes=16)
    header = json.loads(encoded.body[: encoded.header_size])
    assert [("data" in t, (t.get("parameters") or {}).get("binary_data_size")) for t in header["inputs"]] == [
        (False, 32),
        (True, None),
        (False, 2),
    ]
    assert encoded.body[encoded.header_size :] == big.tobytes() + half.tobytes()


def test_binary_bodies_are_the_header_then_each_tensors_little_endian_bytes() -> None:
    tensors = {
        "t": np.arange(12, dtype=np.float32).reshape(3, 4).T,  # not C-contiguous
        "i": np.arange(3, dtype=np.int64)[::-1],  # a negative stride
        "b": np.array([True, False, True]),
        "s": np.array(["ab", "ü"], dtype=object),
        "e": np.zeros((0, 2), np.float64),
    }
    encoded = encode_request(tensors, binary_inputs=True)
    header = encoded.body[: encoded.header_size]
    tail = b"".join(
        [
            np.ascontiguousarray(tensors["t"]).astype("<f4").tobytes(),
            np.array([2, 1, 0], dtype="<i8").tobytes(),
            b"\x01\x00\x01",
            serialize_bytes_tensor(tensors["s"]),
        ]
    )
    assert encoded.body == header + tail
    sizes = [t["parameters"]["binary_data_size"] for t in json.loads(header)["inputs"]]
    assert sizes == [48, 24, 3, len(serialize_bytes_tensor(tensors["s"])), 0]


def _answer(outputs: list[tuple[str, str, list[int], bytes]], first_offset: int) -> tuple[bytes, int]:
    header = json.dumps(
        {"outputs": [{"name": n, "datatype": d, "shape": s, "parameters": {"binary_data_size": len(b)}} for n, d, s, b in outputs]}
    ).encode()
    header += b" " * ((first_offset - len(header)) % 8)
    return header + b"".join(b for *_, b in outputs), len(header)


def test_outputs_can_be_read_in_place_read_only() -> None:
    y = np.arange(6, dtype=np.float64).reshape(2, 3)
    body, size = _answer([("y", "FP64", [2, 3], y.tobytes())], first_offset=0)
    view = decode_response(body, header_size=size, copy=False)["y"]
    assert view.tolist() == y.tolist() and view.dtype == np.float64
    assert not view.flags.writeable
    assert np.shares_memory(view, np.frombuffer(body, np.uint8))  # no copy: the body's own bytes
    copied = decode_response(body, header_size=size)["y"]  # the default: a writable copy
    assert copied.flags.writeable and copied.tolist() == y.tolist()


def test_unaligned_outputs_are_copied_once_and_stay_read_only() -> None:
    y = np.array([1.5, -2.0], np.float32)
    n = np.array([3], np.int8)
    body, size = _answer([("n", "INT8", [1], n.tobytes()), ("y", "FP32", [2], y.tobytes())], first_offset=0)
    got = decode_response(body, header_size=size, copy=False)
    assert got["y"].flags.aligned  # y sat 1 past a multiple of 8 in the body
    assert not np.shares_memory(got["y"], np.frombuffer(body, np.uint8))
    assert not got["y"].flags.writeable and not got["n"].flags.writeable
    assert got["y"].tolist() == y.tolist() and got["n"].tolist() == [3]


def test_bf16_is_read_only_where_the_caller_names_its_dtype() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([1.0, -0.5], dtype=ml_dtypes.bfloat16)
    body, size = _answer([("y", "BF16", [2], values.tobytes())], first_offset=1)
    with pytest.raises(BackendError, match="usable name, datatype"):
        decode_response(body, header_size=size)
    got = decode_response(body, header_size=size, copy=False, dtypes={"BF16": np.dtype(ml_dtypes.bfloat16)})["y"]
    assert got.dtype == np.dtype(ml_dtypes.bfloat16) and got.tobytes() == values.tobytes()


def test_outputs_with_impossible_shapes_or_sizes_are_backend_errors() -> None:
    for shape, raw in (([-1], b"\0" * 4), (["2"], b"\0" * 8), ([1], b"\0" * 3)):
        body, size = _answer([("y", "FP32", shape, raw)], first_offset=0)
        with pytest.raises(BackendError):
            decode_response(body, header_size=size, copy=False)
