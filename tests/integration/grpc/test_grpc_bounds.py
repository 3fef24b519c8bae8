"""What one gRPC call may cost the server, through Triton's own clients against an in-process
server: answers no larger than the response limit, calls at once bounded, typed contents
decoded without a Python object per element, and a decoded tensor not copied again by the core
(`benchmarks/grpc_memory.py` measures the process's memory around such calls)."""

from __future__ import annotations

import time
import tracemalloc
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from tests.integration.grpc.conftest import auth, run_server

if TYPE_CHECKING:
    from sluice.wiring import Container

grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.grpc import service_pb2 as pb  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402


def _rows(n: int) -> Any:
    tensor = grpcclient.InferInput("input", [n, 10], "FP32")
    tensor.set_data_from_numpy(np.zeros((n, 10), dtype=np.float32))
    return tensor


def test_an_answer_over_the_response_limit_is_refused_saying_why(served: Container, keys: dict[str, str]) -> None:
    served.settings.limits.max_response_bytes = 64 * 1024
    with run_server(served) as url:
        client = grpcclient.InferenceServerClient(url)
        assert client.infer("diabetes", [_rows(1000)], headers=auth(keys["acme"])).as_numpy("variable").shape == (1000, 1)
        with pytest.raises(InferenceServerException) as refused:  # 20,000 rows: an 80 KB answer
            client.infer("diabetes", [_rows(20_000)], headers=auth(keys["acme"]))
        assert refused.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert "the answer is" in refused.value.message() and "over the 65536" in refused.value.message()


def test_a_streamed_answer_at_the_response_limit_is_sent_and_the_stream_goes_on(served: Container, keys: dict[str, str]) -> None:
    """A stream's answer is wrapped in ModelStreamInferResponse (a few bytes more): one of
    exactly the limit ended the whole stream (gRPC's own bound was the limit itself); now it is
    sent, one over it is that request's error_message, and the stream answers the next."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc as pb_grpc

    def request(n: int, rid: str) -> Any:
        message = pb.ModelInferRequest(model_name="diabetes", id=rid)
        message.inputs.add(name="input", datatype="FP32", shape=[n, 10])
        message.raw_input_contents.append(np.zeros((n, 10), dtype=np.float32).tobytes())
        return message

    metadata = tuple(auth(keys["acme"]).items())
    with run_server(served) as url:  # the streamed answer's size for 1,000 rows, under the default limit
        (first,) = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(url)).ModelStreamInfer(iter([request(1000, "s1")]), metadata=metadata)
        exact = first.infer_response.ByteSize()
    served.settings.limits.max_response_bytes = exact
    with run_server(served) as url:
        stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(url))
        answers = list(stub.ModelStreamInfer(iter([request(1000, "s1"), request(1001, "s2"), request(1, "s3")]), metadata=metadata))
    assert [a.infer_response.id for a in answers] == ["s1", "s2", "s3"]
    assert answers[0].error_message == "" and answers[0].infer_response.ByteSize() == exact
    assert "over the" in answers[1].error_message and answers[2].error_message == ""


def test_the_server_starts_with_the_largest_response_limit_the_setting_takes(served: Container) -> None:
    """The stream's room above the limit is never past what gRPC's C int holds."""
    from sluice.settings.process import C_INT_MAX

    served.settings.limits.max_response_bytes = C_INT_MAX
    with run_server(served) as url:
        assert grpcclient.InferenceServerClient(url).is_server_live()


def test_grpc_request_parameters_are_held_to_the_rule_rest_holds_them_to(served: Container, keys: dict[str, str]) -> None:
    """At most 32, names of 64 characters, each a string, a number or a boolean: a parameter
    sent with no value (none of its fields set) read as nothing, and 40 of them were taken."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc as pb_grpc

    def request(**parameters: Any) -> Any:
        message = pb.ModelInferRequest(model_name="diabetes")
        message.inputs.add(name="input", datatype="FP32", shape=[1, 10])
        message.raw_input_contents.append(np.zeros((1, 10), dtype=np.float32).tobytes())
        for name, value in parameters.items():
            if value is not None:
                setattr(message.parameters[name], {bool: "bool_param", int: "int64_param", str: "string_param", float: "double_param"}[type(value)], value)
            else:
                message.parameters[name].Clear()  # named, no value
        return message

    metadata = tuple(auth(keys["acme"]).items())
    with run_server(served) as url:
        stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(url))
        assert stub.ModelInfer(request(tier="gold", priority=1, sequence_id=7, weight=0.5, flag=True), metadata=metadata).model_name == "diabetes"
        for parameters, said in (({"nothing": None}, "a parameter is a string, a number or a boolean"), ({f"k{i}": i for i in range(33)}, "at most 32 parameters"), ({"x" * 65: 1}, "at most 64 characters")):
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelInfer(request(**parameters), metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and said in refused.value.details(), refused.value.details()
            assert dict(refused.value.trailing_metadata())["sluice-code"] == "invalid_request"  # REST's code for the same parameters


def test_calls_at_once_are_bounded(served: Container, keys: dict[str, str]) -> None:
    served.settings.serve.grpc_max_concurrent_rpcs = 2
    streams = []
    with run_server(served) as url:
        try:
            for _ in range(2):  # two open streams: two calls in progress for as long as they are open
                client = grpcclient.InferenceServerClient(url)
                answers: list[Any] = []
                client.start_stream(callback=lambda result, error, answers=answers: answers.append(error or result), headers=auth(keys["acme"]))
                client.async_stream_infer("diabetes", [_rows(1)])
                deadline = time.monotonic() + 30
                while not answers and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert answers and not isinstance(answers[0], InferenceServerException), answers
                streams.append(client)
            caller = grpcclient.InferenceServerClient(url)
            with pytest.raises(InferenceServerException) as refused:
                caller.infer("diabetes", [_rows(1)], headers=auth(keys["acme_predict"]))  # another key: the bound is the server's
            assert refused.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
            streams.pop().stop_stream()
            assert caller.infer("diabetes", [_rows(1)], headers=auth(keys["acme"])).as_numpy("variable").shape == (1, 1)
        finally:
            for client in streams:
                client.stop_stream()


def test_typed_contents_take_no_python_object_per_element() -> None:
    from sluice.grpc_service.tensors import tensors_of

    values = np.arange(1_000_000, dtype=np.float32)  # 4 MB
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[100_000, 10]).contents.fp32_contents.extend(values.tolist())
    tracemalloc.start()
    try:
        (tensor,) = tensors_of(request)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(tensor.data, values)
    # The array itself, and not the ~32 MB a list of a million Python floats would take on the way.
    assert peak < 1.5 * values.nbytes, f"{peak} bytes allocated to decode {values.nbytes}"


def test_a_decoded_tensor_is_not_copied_by_the_core() -> None:
    from sluice.codecs.tensors import decode_tensor

    data = np.frombuffer(np.arange(40, dtype=np.float32).tobytes(), dtype=np.float32)  # as gRPC's raw contents decode
    array = decode_tensor("x", "FP32", [4, 10], data, field="inputs.x")
    assert array.shape == (4, 10) and np.shares_memory(array, data)
    with pytest.raises(Exception, match="has 40 values but shape"):  # a count that does not fit is still refused
        decode_tensor("x", "FP32", [5, 10], data, field="inputs.x")


def test_typed_contents_out_of_their_datatypes_range_are_invalid_argument(grpc_url: str, keys: dict[str, str]) -> None:
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    request = pb.ModelInferRequest(model_name="iris")
    request.inputs.add(name="input", datatype="INT8", shape=[1, 4]).contents.int_contents.extend([1, 2, 300, 4])
    with grpc.insecure_channel(grpc_url) as channel, pytest.raises(grpc.RpcError) as caught:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, metadata=tuple(auth(keys["acme"]).items()))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "out of its range" in caught.value.details()
    assert ("sluice-field", "inputs.input") in caught.value.trailing_metadata()


def test_bytes_that_are_no_request_are_an_invalid_argument_on_both_calls(grpc_url: str, keys: dict[str, str]) -> None:
    """Not protobuf, or a field cut short: INVALID_ARGUMENT in sluice's words (grpcio alone would
    say UNKNOWN, naming its exception); on a stream, that message's error, the stream going on."""
    import grpc

    metadata = (("authorization", f"Bearer {keys['acme']}"),)
    plain = {"request_serializer": lambda b: b, "response_deserializer": lambda b: b}
    with grpc.insecure_channel(grpc_url) as channel:
        unary = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer", **plain)
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer", **plain)
        for data in (b"\xff\xff\xff\xff\x0f", b"\x0a\x10iris"):
            with pytest.raises(grpc.RpcError) as refused:
                unary(data, metadata=metadata, timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a ModelInferRequest" in refused.value.details()
            answers = list(stream(iter([data, data]), metadata=metadata, timeout=10))
            assert len(answers) == 2 and all(b"not a ModelInferRequest" in a for a in answers)


def test_bytes_that_are_no_request_are_an_invalid_argument_on_every_call(grpc_url: str, keys: dict[str, str]) -> None:
    """Every unary RPC, those that need no key too, reads its message as ModelInfer does: bytes
    that are no such message are INVALID_ARGUMENT naming the message's type, with ModelInfer's
    trailers (not UNKNOWN naming protobuf's exception)."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    metadata = (("authorization", f"Bearer {keys['acme']}"),)
    plain = {"request_serializer": lambda b: b, "response_deserializer": lambda b: b}
    rpcs = [name for name in vars(service_pb2_grpc.GRPCInferenceServiceServicer) if name[0].isupper() and name != "ModelStreamInfer"]
    assert len(rpcs) > 15
    with grpc.insecure_channel(grpc_url) as channel:
        for data in (b"\xff\xff\xff\xff\x0f", b"\x0a\x05ir"):
            refusals = {}
            for rpc in rpcs:
                with pytest.raises(grpc.RpcError) as refused:
                    channel.unary_unary(f"/inference.GRPCInferenceService/{rpc}", **plain)(data, metadata=metadata, timeout=10)
                error = refused.value
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (rpc, error.details())
                assert error.details().startswith(f"the request is not a {rpc}Request: "), rpc
                refusals[rpc] = [(k, v) for k, v in error.trailing_metadata() if k.startswith("sluice-")]
            assert refusals["ModelInfer"] == [("sluice-code", refusals["ModelInfer"][0][1]), ("sluice-field", "body")]
            assert all(trailer == refusals["ModelInfer"] for trailer in refusals.values()), refusals
