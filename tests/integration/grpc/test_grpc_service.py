"""The Open Inference Protocol over gRPC, through Triton's own clients (`tritonclient.grpc`
and `tritonclient.grpc.aio`) against an in-process server: what a Triton user's code sees."""

from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import MODELS
from tests.integration.grpc.conftest import auth, fails, run_server

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container

grpcclient = pytest.importorskip("tritonclient.grpc")

SETOSA, VIRGINICA = [5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]


def fp32(name: str, array: np.ndarray) -> Any:
    tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array.astype(np.float32))
    return tensor


def test_server_calls_need_no_key_and_model_calls_do(grpc_url: str, keys: dict[str, str]) -> None:
    client = grpcclient.InferenceServerClient(grpc_url)
    assert client.is_server_live() and client.is_server_ready()
    assert client.get_server_metadata().name == "sluice"
    meta = client.get_model_metadata("diabetes", headers=auth(keys["acme_predict"]))
    assert (meta.name, list(meta.versions), meta.platform) == ("diabetes", ["1"], "onnxruntime_onnx")
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("input", "FP32", [-1, 10])]
    assert client.is_model_ready("iris", headers=auth(keys["acme"]))
    assert client.is_model_ready("iris", "1", headers=auth(keys["acme"]))
    missing = fails(client.is_model_ready, "iris")
    assert missing.status() == "StatusCode.UNAUTHENTICATED" and "Bearer" in missing.message()
    assert fails(client.get_model_metadata, "iris", "9", headers=auth(keys["acme"])).status() == "StatusCode.NOT_FOUND"


def test_fp32_infer_matches_onnx_runtime(grpc_url: str, keys: dict[str, str]) -> None:
    import onnxruntime as ort

    rows = np.random.default_rng(0).normal(0, 0.05, size=(3, 10)).astype(np.float32)
    client = grpcclient.InferenceServerClient(grpc_url)
    result = client.infer("diabetes", [fp32("input", rows)], request_id="req-9", headers=auth(keys["acme_predict"]))
    (expected,) = ort.InferenceSession(str(MODELS / "diabetes_mlp.onnx")).run(None, {"input": rows})
    np.testing.assert_allclose(result.as_numpy("variable"), expected, rtol=1e-6)
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == ("diabetes", "1", "req-9")
    params = response.parameters
    assert params["model"].string_param == "diabetes" and params["version"].int64_param == 1
    assert params["latency_ms"].double_param > 0


def test_classifier_outputs_labels_and_probabilities(grpc_url: str, keys: dict[str, str]) -> None:
    client = grpcclient.InferenceServerClient(grpc_url)
    rows = np.array([SETOSA, VIRGINICA], dtype=np.float32)
    result = client.infer("iris", [fp32("input", rows)], headers=auth(keys["acme"]))
    assert result.as_numpy("output_label").tolist() == [b"setosa", b"virginica"]
    probs = result.as_numpy("output_probability")
    assert probs.shape == (2, 3) and probs[0].argmax() == 0 and probs[1].argmax() == 2
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    output = result.get_output("output_probability")
    assert output.parameters["classes"].string_param == '["setosa","versicolor","virginica"]'
    only = client.infer(
        "iris", [fp32("input", rows)], outputs=[grpcclient.InferRequestedOutput("output_label")], headers=auth(keys["acme"])
    )
    assert [o.name for o in only.get_response().outputs] == ["output_label"]


def test_bytes_inputs_and_outputs(grpc_url: str, keys: dict[str, str]) -> None:
    client = grpcclient.InferenceServerClient(grpc_url)
    words = np.array(["cat", "émeu", "newt"], dtype=object)
    tensor = grpcclient.InferInput("word", [3], "BYTES")
    tensor.set_data_from_numpy(words)
    result = client.infer("words", [tensor], headers=auth(keys["acme"]))
    assert result.as_numpy("code").tolist() == [1, 3, -1]
    assert [w.decode() for w in result.as_numpy("echo")] == ["cat", "émeu", "newt"]


def test_a_bytes_element_that_is_not_utf8_is_refused_naming_it_on_both_gRPC_forms(grpc_url: str, keys: dict[str, str]) -> None:
    """BYTES elements are text to a model here, on every door: one that is not UTF-8 (a JPEG's
    first bytes) is refused naming the element, as REST's binary form says it; it said the data
    was 'not a list of BYTES values', naming a field gRPC does not have."""
    from tritonclient.grpc import service_pb2 as pb

    client = grpcclient.InferenceServerClient(grpc_url)
    tensor = grpcclient.InferInput("word", [2], "BYTES")
    tensor.set_data_from_numpy(np.array([b"cat", b"\xff\xd8\xff\xe0JFIF"], dtype=object))
    refused = fails(client.infer, "words", [tensor], headers=auth(keys["acme"]))
    assert refused.status() == "StatusCode.INVALID_ARGUMENT" and refused.message() == "element 1 of BYTES input 'word' is not UTF-8"
    channel, stub = _stub(grpc_url)
    with channel:
        typed = pb.ModelInferRequest.InferInputTensor(name="word", datatype="BYTES", shape=[2])
        typed.contents.bytes_contents.extend([b"\xff", b"cat"])
        import grpc

        with pytest.raises(grpc.RpcError) as typed_refused:
            stub(channel).ModelInfer(pb.ModelInferRequest(model_name="words", inputs=[typed]), metadata=tuple(auth(keys["acme"]).items()))
    assert typed_refused.value.details() == "element 0 of BYTES input 'word' is not UTF-8"


def _stub(url: str) -> Any:
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    return grpc.insecure_channel(url), service_pb2_grpc.GRPCInferenceServiceStub


def test_typed_contents_are_read_too(grpc_url: str, keys: dict[str, str]) -> None:
    from tritonclient.grpc import service_pb2 as pb

    channel, stub = _stub(grpc_url)
    with channel:
        tensor = pb.ModelInferRequest.InferInputTensor(name="input", datatype="FP32", shape=[1, 4])
        tensor.contents.fp32_contents.extend(VIRGINICA)
        words = pb.ModelInferRequest.InferInputTensor(name="word", datatype="BYTES", shape=[2])
        words.contents.bytes_contents.extend([b"dog", b"cat"])
        metadata = tuple(auth(keys["acme"]).items())
        iris = stub(channel).ModelInfer(pb.ModelInferRequest(model_name="iris", inputs=[tensor]), metadata=metadata)
        coded = stub(channel).ModelInfer(pb.ModelInferRequest(model_name="words", inputs=[words]), metadata=metadata)
    labels = iris.raw_output_contents[[o.name for o in iris.outputs].index("output_label")]
    assert labels == struct.pack("<I", 9) + b"virginica"
    assert np.frombuffer(coded.raw_output_contents[1], dtype="<i8").tolist() == [2, 1]


def test_bad_inputs_are_invalid_argument_naming_the_input(grpc_url: str, keys: dict[str, str]) -> None:
    client = grpcclient.InferenceServerClient(grpc_url)
    wrong = fails(client.infer, "iris", [fp32("input", np.zeros((1, 3)))], headers=auth(keys["acme"]))
    assert wrong.status() == "StatusCode.INVALID_ARGUMENT"
    assert "input 'input' needs size 4 on axis 1" in wrong.message()
    unknown = fails(client.infer, "iris", [fp32("petals", np.zeros((1, 4)))], headers=auth(keys["acme"]))
    assert unknown.status() == "StatusCode.INVALID_ARGUMENT" and "'petals'" in unknown.message()
    typed = grpcclient.InferInput("input", [1, 4], "FP64")
    typed.set_data_from_numpy(np.zeros((1, 4)))
    assert "input 'input' is FP32, not FP64" in fails(client.infer, "iris", [typed], headers=auth(keys["acme"])).message()


def test_an_upload_id_is_refused_naming_it_not_ignored(grpc_url: str, keys: dict[str, str]) -> None:
    """An upload is the HTTP API's: a gRPC request naming one is refused, as a WebSocket
    message's is, rather than answered from the inputs it carries as if the upload were read."""
    client = grpcclient.InferenceServerClient(grpc_url)
    refused = fails(client.infer, "iris", [fp32("input", np.zeros((1, 4)))], parameters={"upload_id": "a" * 32}, headers=auth(keys["acme"]))
    assert refused.status() == "StatusCode.INVALID_ARGUMENT" and "upload_id" in refused.message()


def test_a_request_id_is_at_most_128_characters_as_over_rest(grpc_url: str, keys: dict[str, str]) -> None:
    """`id` is part of a registry key (a split's assignment, a kept prediction): one longer than
    REST takes is INVALID_ARGUMENT naming it, on every registry, not a 5xx on DynamoDB alone."""
    client = grpcclient.InferenceServerClient(grpc_url)
    tensor = fp32("input", np.array([VIRGINICA]))
    assert client.infer("iris", [tensor], request_id="r" * 128, headers=auth(keys["acme"])).get_response().id == "r" * 128
    refused = fails(client.infer, "iris", [tensor], request_id="r" * 129, headers=auth(keys["acme"]))
    assert refused.status() == "StatusCode.INVALID_ARGUMENT" and refused.message().startswith("id: ")


def test_short_raw_content_is_refused(grpc_url: str, keys: dict[str, str]) -> None:
    from tritonclient.grpc import service_pb2 as pb

    channel, stub = _stub(grpc_url)
    request = pb.ModelInferRequest(model_name="iris", inputs=[pb.ModelInferRequest.InferInputTensor(name="input", datatype="FP32", shape=[1, 4])])
    request.raw_input_contents.append(np.zeros(3, dtype=np.float32).tobytes())
    import grpc

    with channel, pytest.raises(grpc.RpcError) as caught:
        stub(channel).ModelInfer(request, metadata=tuple(auth(keys["acme"]).items()))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "input 'input' has 12 bytes of raw content but shape [1, 4] of FP32 needs 16" in caught.value.details()
    assert ("sluice-field", "inputs.input") in caught.value.trailing_metadata()


def test_keys_and_tenants(grpc_url: str, keys: dict[str, str], served: Container, acme: Principal) -> None:
    client = grpcclient.InferenceServerClient(grpc_url)
    rows = [fp32("input", np.array([SETOSA]))]
    assert fails(client.infer, "iris", rows).status() == "StatusCode.UNAUTHENTICATED"
    assert fails(client.infer, "iris", rows, headers=auth("sk_not_a_key")).status() == "StatusCode.UNAUTHENTICATED"
    assert client.infer("iris", rows, headers={"x-api-key": keys["acme_predict"]}).as_numpy("output_label").tolist() == [b"setosa"]
    # Another tenant's deployment does not exist for this key.
    other = fails(client.infer, "iris", rows, headers=auth(keys["globex"]))
    assert other.status() == "StatusCode.NOT_FOUND" and "iris" in other.message()
    # A revoked key stops working at once.
    record, key = served.keys.create("acme", ["predict"])
    assert client.infer("iris", rows, headers=auth(key)).as_numpy("output_label").tolist() == [b"setosa"]
    served.keys.revoke(acme, record.key_id)
    assert fails(client.infer, "iris", rows, headers=auth(key)).status() == "StatusCode.UNAUTHENTICATED"


@pytest.mark.parametrize("name", ["authorization", "x-api-key"])
def test_a_key_given_twice_is_refused_whichever_copy_works(grpc_url: str, keys: dict[str, str], name: str) -> None:
    """Two copies of the key's metadata are INVALID_ARGUMENT naming it, as two headers are a
    400 over HTTP, on unary calls and streams alike: never answered as either copy's tenant."""
    import grpc
    from tritonclient.grpc import service_pb2 as pb

    value = (lambda k: f"Bearer {k}") if name.lower() == "authorization" else (lambda k: k)
    request = pb.ModelInferRequest(model_name="iris", inputs=[pb.ModelInferRequest.InferInputTensor(name="input", datatype="FP32", shape=[1, 4])])
    request.inputs[0].contents.fp32_contents.extend(SETOSA)
    channel, stub = _stub(grpc_url)
    for pair in ((keys["globex"], keys["acme"]), (keys["acme"], keys["globex"]), (keys["acme"], keys["acme"]), ("sk_not_a_key", keys["acme"])):
        metadata = tuple((name.lower(), value(k)) for k in pair)
        calls = (
            lambda md=metadata: stub(channel).ModelInfer(request, metadata=md),
            lambda md=metadata: stub(channel).ModelMetadata(pb.ModelMetadataRequest(name="iris"), metadata=md),
            lambda md=metadata: next(iter(stub(channel).ModelStreamInfer(iter([request]), metadata=md))),
        )
        for call in calls:
            with pytest.raises(grpc.RpcError) as caught:
                call()
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (pair, caught.value.details())
            assert f"the {name.lower()} metadata is given twice" in caught.value.details()
            assert ("sluice-field", name.lower()) in caught.value.trailing_metadata()
    channel.close()


@pytest.mark.parametrize("what", ["input", "output", "model", "datatype"])
@pytest.mark.parametrize("letter", ["x", "\N{LATIN SMALL LETTER E WITH ACUTE}"])
def test_an_error_echoing_a_long_name_keeps_its_status(grpc_url: str, keys: dict[str, str], what: str, letter: str) -> None:
    """The status travels in trailers a client refuses past its metadata limit: an error naming
    a 20,000-character name is still INVALID_ARGUMENT or NOT_FOUND, its message cut short, never
    RESOURCE_EXHAUSTED with the error lost."""
    import grpc
    from tritonclient.grpc import service_pb2 as pb

    long = letter * 20_000
    request = pb.ModelInferRequest(model_name=long if what == "model" else "iris")
    tensor = pb.ModelInferRequest.InferInputTensor(name=long if what == "input" else "input", datatype=long if what == "datatype" else "FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend(SETOSA)
    request.inputs.append(tensor)
    if what == "output":
        request.outputs.append(pb.ModelInferRequest.InferRequestedOutputTensor(name=long))
    channel, stub = _stub(grpc_url)
    with channel, pytest.raises(grpc.RpcError) as caught:
        stub(channel).ModelInfer(request, metadata=tuple(auth(keys["acme"]).items()))
    assert caught.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), caught.value.details()[:200]
    assert len(caught.value.details().encode()) <= 1024 and letter * 20 in caught.value.details()
    field = dict(caught.value.trailing_metadata())["sluice-field"]
    from urllib.parse import unquote

    expected = {"input": f"inputs.{letter * 20}", "output": f"outputs.{letter * 20}", "model": "deployment", "datatype": "inputs.input.datatype"}[what]
    assert unquote(field).startswith(expected) and len(field.encode()) <= 3 * 256 and field.isascii(), field[:80]


def test_other_extensions_say_unimplemented(grpc_url: str, keys: dict[str, str]) -> None:
    client = grpcclient.InferenceServerClient(grpc_url)
    for call in (client.get_system_shared_memory_status, client.get_cuda_shared_memory_status, client.get_trace_settings):
        refused = fails(call, headers=auth(keys["acme"]))
        assert refused.status() == "StatusCode.UNIMPLEMENTED" and "sluice does not support" in refused.message()


def test_the_request_size_limit_holds(served: Container, keys: dict[str, str]) -> None:
    served.settings.limits.max_request_bytes = 64 * 1024
    with run_server(served) as url:
        client = grpcclient.InferenceServerClient(url)
        big = np.zeros((20_000, 4), dtype=np.float32)  # 320 KB
        assert fails(client.infer, "iris", [fp32("input", big)], headers=auth(keys["acme"])).status() == "StatusCode.RESOURCE_EXHAUSTED"


def test_asyncio_client_and_stream(grpc_url: str, keys: dict[str, str]) -> None:
    import tritonclient.grpc.aio as aioclient

    async def go() -> tuple[list[bytes], list[str]]:
        async with aioclient.InferenceServerClient(grpc_url) as client:
            assert await client.is_server_live()
            tensor = aioclient.InferInput("input", [1, 4], "FP32")
            tensor.set_data_from_numpy(np.array([VIRGINICA], dtype=np.float32))
            result = await client.infer("iris", [tensor], headers=auth(keys["acme"]))
            labels = result.as_numpy("output_label").tolist()

            async def requests() -> Any:
                yield {"model_name": "iris", "inputs": [tensor], "request_id": "a", "enable_empty_final_response": True}
                yield {"model_name": "nope", "inputs": [tensor], "request_id": "b"}

            seen = []
            async for answer, error in client.stream_infer(requests(), headers=auth(keys["acme"])):
                # A client that reads each request's answers until the one that says it is the last
                # (tritonclient's enable_empty_final_response) stops at this one, as with Triton.
                seen.append(error.message() if error else (answer.get_response().id, answer.get_response().parameters["triton_final_response"].bool_param))
            return labels, seen

    labels, seen = asyncio.run(go())
    assert labels == [b"virginica"]
    assert seen[0] == ("a", True) and "nope" in seen[1]


def test_a_port_in_use_is_an_error(grpc_url: str, served: Container) -> None:
    from sluice.grpc_service.server import start

    port = int(grpc_url.rsplit(":", 1)[1])
    with pytest.raises(RuntimeError):
        asyncio.run(start(served, "127.0.0.1", port))


def test_a_prediction_cache_hit_says_so_in_the_parameters(grpc_url: str, keys: dict[str, str], served: Container, acme: Principal) -> None:
    served.deployments.create(acme, "iris-cached", {"kind": "single", "model": "iris", "version": 1}, cache={"ttl_s": 60, "max_entries": 10})
    client = grpcclient.InferenceServerClient(grpc_url)
    rows = np.array([VIRGINICA], dtype=np.float32)
    first, second = (client.infer("iris-cached", [fp32("input", rows)], headers=auth(keys["acme"])) for _ in range(2))
    assert "cached" not in first.get_response().parameters
    assert second.get_response().parameters["cached"].bool_param is True
    np.testing.assert_array_equal(second.as_numpy("output_probability"), first.as_numpy("output_probability"))
    assert second.as_numpy("output_label").tolist() == [b"virginica"]


def test_a_key_revoked_while_its_stream_is_open_ends_the_stream(served: Container, acme: Principal, keys: dict[str, str]) -> None:
    """A revoke (here by another worker on the same registry) reaches an open stream at its
    next request: the stream ends UNAUTHENTICATED; what came before was answered."""
    import queue

    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    from sluice.wiring import Container

    _, key = served.keys.create("acme", ["predict"])
    message = service_pb2.ModelInferRequest(model_name="iris")
    tensor = service_pb2.ModelInferRequest.InferInputTensor(name="input", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend([5.1, 3.5, 1.4, 0.2])
    message.inputs.append(tensor)
    requests: queue.Queue[Any] = queue.Queue()
    with run_server(served) as url, grpc.insecure_channel(url) as channel:
        answers = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter(requests.get, None), metadata=tuple(auth(key).items()))
        requests.put(message)
        first = next(answers)
        assert first.error_message == "" and first.infer_response.model_name == "iris"
        Container.from_settings(served.settings).keys.revoke(acme, key.split("_")[1])  # another worker
        requests.put(message)
        with pytest.raises(grpc.RpcError) as ended:
            next(answers)
        assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
        requests.put(None)


def test_a_stream_cancelled_with_answers_on_their_way_ends_quietly(
    served: Container, keys: dict[str, str], caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A client that gives up on a stream while its answers are on their way (here: large ones
    it does not read): the server logs no error and leaves no task failing behind it. (The
    stream's generator, closed from another task as it was finalized, once reset the tenant's
    scope there, failed, and answered an error while being closed.)"""
    import queue
    import time

    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    rows = 20_000  # answers larger than the connection's window: their sending waits for the client
    message = service_pb2.ModelInferRequest(model_name="iris")
    message.inputs.add(name="input", datatype="FP32", shape=[rows, 4])
    message.raw_input_contents.append(np.tile(np.float32(VIRGINICA), (rows, 1)).tobytes())
    window = [("grpc.http2.bdp_probe", 0)]  # the client's window stays small: an unread answer waits
    with run_server(served) as url, grpc.insecure_channel(url, options=window) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for _ in range(3):
            requests: queue.Queue[Any] = queue.Queue()
            answers = stub.ModelStreamInfer(iter(requests.get, None), metadata=tuple(auth(keys["acme"]).items()))
            for _ in range(3):
                requests.put(message)
            time.sleep(0.5)
            answers.cancel()
        time.sleep(0.5)
    logged = capfd.readouterr().err + caplog.text
    assert "unhandled gRPC error" not in logged
    assert "GeneratorExit" not in logged and "Task exception was never retrieved" not in logged


_STREAMED = st.fixed_dictionaries({
    "id": st.text(max_size=4) | st.text(min_size=126, max_size=130),  # over 128 characters: refused
    "model": st.sampled_from(["iris", "iris", "nope"]),
    "version": st.sampled_from(["", "", "1", "7", "v1"]),
    "raw": st.sampled_from([16, 16, 0, 1, 8]),  # of the 16 bytes [1, 4] FP32 takes
})  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sent=st.lists(_STREAMED, min_size=1, max_size=5))
def test_every_answer_on_a_stream_says_which_request_it_answers(grpc_url: str, keys: dict[str, str], sent: list[dict[str, Any]]) -> None:
    """Several requests in flight on one stream, any of them failing: each answer, an error or
    not, carries its request's id, and an error its request's model name and version too (as
    Triton's stream says which request failed)."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    messages = []
    for s in sent:
        message = service_pb2.ModelInferRequest(model_name=s["model"], model_version=s["version"], id=s["id"])
        message.inputs.add(name="input", datatype="FP32", shape=[1, 4])
        message.raw_input_contents.append(np.array(VIRGINICA, dtype=np.float32).tobytes()[: s["raw"]])
        messages.append(message)
    with grpc.insecure_channel(grpc_url) as channel:
        answers = list(service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter(messages), metadata=tuple(auth(keys["acme"]).items())))
    assert len(answers) == len(messages)
    for message, answer in zip(messages, answers, strict=True):
        assert answer.infer_response.id == message.id
        assert answer.infer_response.parameters["triton_final_response"].bool_param is True  # each its request's last, as Triton says
        if answer.error_message:
            said = answer.infer_response
            assert (said.model_name, said.model_version) == (message.model_name, message.model_version)
