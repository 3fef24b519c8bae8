"""Inference messages read and written around their tensors' bytes (`grpc_service.wire`): the
same request and answer protobuf would make, with no copy of a raw tensor on the way in and one
on the way out."""

from __future__ import annotations

import numpy as np
import pytest

pb = pytest.importorskip("tritonclient.grpc.service_pb2")

from sluice.domain.errors import InvalidInput  # noqa: E402
from sluice.grpc_service.tensors import tensors_of  # noqa: E402
from sluice.grpc_service.wire import InferReply, read_infer_request, write_stream_response  # noqa: E402


def _request(*arrays: np.ndarray, **fields: object) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m", model_version="2", id="r-1", **fields)
    request.parameters["routing_key"].string_param = "k"
    request.outputs.add(name="out").parameters["classification"].int64_param = 2
    for i, array in enumerate(arrays):
        request.inputs.add(name=f"in{i}", datatype="FP32", shape=list(array.shape))
        request.raw_input_contents.append(array.tobytes())
    return request


@pytest.mark.parametrize("name", ["m", "mm", "mmm", "mmmm"])  # the raw contents at each offset mod 4
def test_a_request_reads_as_protobuf_reads_it_and_its_tensors_are_aligned_views_of_the_bytes_it_came_in(name: str) -> None:
    big = np.arange(262_144, dtype=np.float32).reshape(1, -1)  # 1 MiB
    small = np.array([[1.5, -2.0]], dtype=np.float32)
    request = _request(big, small)
    request.model_name = name
    data = request.SerializeToString()
    read = read_infer_request(data)
    parsed = pb.ModelInferRequest.FromString(data)
    assert [bytes(raw) for raw in read.raw_input_contents] == list(parsed.raw_input_contents)
    rest = pb.ModelInferRequest()
    rest.CopyFrom(parsed)
    rest.ClearField("raw_input_contents")
    assert read.message == rest
    assert (read.model_name, read.id, read.parameters["routing_key"].string_param) == (name, "r-1", "k")
    first, second = tensors_of(read)
    assert np.array_equal(first.data.reshape(first.shape), big) and np.array_equal(second.data.reshape(second.shape), small)
    # As ONNX Runtime reads fastest: aligned to the values' size. Where the bytes are, no copy of
    # the megabyte; where the message put them off (tritonclient's names move them), one copy.
    assert first.data.flags.aligned and second.data.flags.aligned
    in_place = np.frombuffer(read.raw_input_contents[0], dtype=np.uint8).ctypes.data % 4 == 0
    assert np.shares_memory(first.data, np.frombuffer(data, dtype=np.uint8)) == in_place


def test_fields_in_any_order_repeated_in_pieces_or_unknown_read_as_protobuf_merges_them() -> None:
    a = _request(np.ones((1, 3), np.float32)).SerializeToString()
    b = pb.ModelInferRequest(id="r-2", raw_input_contents=[b"\x00" * 8]).SerializeToString()
    unknown = bytes([0x98, 0x06, 0x05]) + bytes([0xA5, 0x06]) + b"abcd" + bytes([0xA1, 0x06]) + b"12345678"  # fields 99/100/101
    data = b + unknown + a  # raw contents split around other fields: the order is kept
    read = read_infer_request(data)
    parsed = pb.ModelInferRequest.FromString(data)
    assert [bytes(raw) for raw in read.raw_input_contents] == list(parsed.raw_input_contents)
    assert (read.id, read.model_name, len(read.inputs)) == (parsed.id, parsed.model_name, len(parsed.inputs))


def test_a_broken_request_is_read_as_malformed_in_protobufs_words() -> None:
    """Not raised inside the deserializer (a stream answers each message alone): kept for the
    handler, which answers it as the error every RPC gives such bytes, with protobuf's reason."""
    from sluice.grpc_service.wire import read_request

    data = _request(np.ones((1, 4), np.float32)).SerializeToString()
    ours = read_infer_request(data[:-3])
    with pytest.raises(Exception) as theirs:
        pb.ModelInferRequest.FromString(data[:-3])
    assert ours.malformed is not None and (ours.malformed.message, ours.malformed.field) == (
        f"the request is not a ModelInferRequest: {str(theirs.value)[:200]}",
        "body",
    )
    with pytest.raises(type(ours.malformed)) as read:  # any other RPC's request: raised by its deserializer
        read_request(pb.ModelInferRequest)(data[:-3])
    assert (read.value.status, read.value.message, read.value.field) == (ours.malformed.status, ours.malformed.message, "body")
    assert read_infer_request(data).malformed is None


def test_raw_contents_of_the_wrong_size_are_still_refused_by_name() -> None:
    request = _request(np.ones((1, 4), np.float32))
    request.inputs[0].shape[:] = [1, 5]
    with pytest.raises(InvalidInput, match="input 'in0' has 16 bytes"):
        tensors_of(read_infer_request(request.SerializeToString()))


@pytest.mark.parametrize(
    "arrays",
    [
        [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([True, False])],
        [np.arange(6, dtype=">i4"), np.arange(10, dtype=np.float64)[::2], np.array(3.5, dtype=np.float16)],
        [np.array([b"a", b"bc"], dtype=object), np.zeros((0, 3), np.int64)],
        [np.ones(70_000, np.uint8)],  # a length over two varint bytes
    ],
)
def test_an_answer_is_the_bytes_protobuf_writes_for_the_whole_message(arrays: list[np.ndarray]) -> None:
    message = pb.ModelInferResponse(model_name="m", model_version="1", id="r")
    message.parameters["latency_ms"].double_param = 0.5
    for i, array in enumerate(arrays):
        message.outputs.add(name=f"o{i}", datatype="FP32", shape=list(array.shape))
    reply = InferReply(message, arrays)
    whole = reply.as_message()
    assert reply.serialize() == whole.SerializeToString()
    assert reply.byte_size() == whole.ByteSize()
    back = pb.ModelInferResponse.FromString(reply.serialize())
    for raw, array in zip(back.raw_output_contents, arrays, strict=True):
        if array.dtype != object:
            assert np.array_equal(np.frombuffer(raw, dtype=array.dtype.newbyteorder("<")), array.reshape(-1))
    streamed = pb.ModelStreamInferResponse.FromString(write_stream_response(reply))
    assert streamed.infer_response == whole
    error = pb.ModelStreamInferResponse(error_message="no")
    assert write_stream_response(error) == error.SerializeToString()
