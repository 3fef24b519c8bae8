"""The Open Inference Protocol over gRPC against the same over REST, for any request: the same
models, keys and tensors (any name, datatype, shape, and data of the shape's length or not, any
outputs asked for, any version) sent both ways to one container answer with the same outcome
(gRPC's status for the REST status, as `sluice.grpc_service.service.CODES` maps them) and, when
answered, with the same outputs; and the same message on a gRPC stream is answered as the unary
call (a failure as its `error_message`, with the same words)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.integration.grpc.conftest import auth
from tests.support import V2_DTYPES, v2_values

if TYPE_CHECKING:
    from sluice.wiring import Container

pytest.importorskip("tritonclient.grpc")

_CONTENTS = {"FP32": "fp32_contents", "FP64": "fp64_contents", "INT64": "int64_contents", "INT32": "int_contents", "BOOL": "bool_contents"}


@st.composite
def _tensor(draw: Any) -> dict[str, Any]:
    datatype = draw(st.sampled_from(["FP32", "FP32", "FP32", *V2_DTYPES]))
    shape = draw(st.sampled_from([[1, 4], [2, 4], [1, 10], [3, 10]]) | st.lists(st.integers(0, 4), min_size=1, max_size=3))
    size = max(math.prod(shape) + draw(st.sampled_from([0, 0, 0, 0, -1, 1])), 0)
    name = draw(st.sampled_from(["input", "input", "input", "other"]))
    return {"name": name, "datatype": datatype, "shape": shape, "data": draw(st.lists(v2_values(datatype), min_size=size, max_size=size))}


# What routing reads from a request's parameters, of each type a gRPC InferParameter holds
# (bool, int64, string, double) and JSON gives alike: refused or taken the same both ways.
_PARAMETERS = st.dictionaries(
    st.sampled_from(["routing_key", "variant"]),
    st.text(max_size=3) | st.text(min_size=255, max_size=258) | st.integers(-(2**63), 2**63 - 1) | st.booleans() | st.floats(allow_nan=False, allow_infinity=False),
    max_size=2,
)


_REQUEST = st.fixed_dictionaries({
    "model": st.sampled_from(["iris", "iris", "diabetes", "diabetes", "nope"]),
    "version": st.sampled_from(["", "", "", "1", "7"]),
    "inputs": st.lists(_tensor(), min_size=1, max_size=1) | st.lists(_tensor(), min_size=2, max_size=2),
    "outputs": st.one_of(st.none(), st.none(), st.lists(st.sampled_from(["output_label", "output_probability", "variable", "nope"]), min_size=1, max_size=2, unique=True)),
    "key": st.sampled_from(["acme", "acme", "acme_predict", "globex", "wrong"]),
    "parameters": st.none() | _PARAMETERS,
})  # fmt: skip


@st.composite
def _right(draw: Any) -> dict[str, Any]:
    """A request the model answers: its rows of FP32, of any values."""
    model, width = draw(st.sampled_from([("iris", 4), ("diabetes", 10)]))
    rows = draw(st.integers(1, 3))
    data = draw(st.lists(v2_values("FP32"), min_size=rows * width, max_size=rows * width))
    outputs = draw(st.sampled_from([None, ["output_label"], ["output_probability", "output_label"]] if model == "iris" else [None, ["variable"]]))
    tensor = {"name": "input", "datatype": "FP32", "shape": [rows, width], "data": data}
    parameters = draw(st.none() | st.none() | _PARAMETERS)
    return {"model": model, "version": draw(st.sampled_from(["", "1"])), "inputs": [tensor], "outputs": outputs, "key": draw(st.sampled_from(["acme", "acme_predict"])), "parameters": parameters}


@pytest.fixture
def rest(served: Container) -> TestClient:
    from sluice.api.app import create_app

    return TestClient(create_app(served))


def _rest_outputs(body: dict[str, Any]) -> dict[str, tuple[str, list[int], list[Any]]]:
    return {o["name"]: (o["datatype"], o["shape"], o["data"]) for o in body["outputs"]}


def _grpc_outputs(response: Any) -> dict[str, tuple[str, list[int], list[Any]]]:
    from tritonclient.utils import deserialize_bytes_tensor

    out = {}
    for i, o in enumerate(response.outputs):
        raw = response.raw_output_contents[i]
        data = [b.decode() for b in deserialize_bytes_tensor(raw)] if o.datatype == "BYTES" else np.frombuffer(raw, dtype=V2_DTYPES[o.datatype]).tolist()
        out[o.name] = (o.datatype, list(o.shape), data)
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(request=_REQUEST | _right())
def test_grpc_answers_as_rest_for_any_request(grpc_url: str, rest: TestClient, keys: dict[str, str], request: dict[str, Any]) -> None:
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    from sluice.grpc_service.calls import CODES

    key = keys.get(request["key"], "sk_nokey_nosecret")
    model, version = request["model"], request["version"]
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    body: dict[str, Any] = {"inputs": request["inputs"]}
    if request["outputs"] is not None:
        body["outputs"] = [{"name": n} for n in request["outputs"]]
    if request["parameters"] is not None:
        body["parameters"] = request["parameters"]
    answered = rest.post(path, content=json.dumps(body), headers={**auth(key), "content-type": "application/json"})

    message = pb.ModelInferRequest(model_name=model, model_version=version)
    for t in request["inputs"]:
        tensor = pb.ModelInferRequest.InferInputTensor(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        getattr(tensor.contents, _CONTENTS[t["datatype"]]).extend(t["data"])
        message.inputs.append(tensor)
    for name in request["outputs"] or ():
        message.outputs.append(pb.ModelInferRequest.InferRequestedOutputTensor(name=name))
    for name, value in (request["parameters"] or {}).items():
        kind = {bool: "bool_param", int: "int64_param", str: "string_param", float: "double_param"}[type(value)]
        setattr(message.parameters[name], kind, value)
    with grpc.insecure_channel(grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            answer, code, details = stub.ModelInfer(message, metadata=tuple(auth(key).items())), grpc.StatusCode.OK, ""
        except grpc.RpcError as exc:
            answer, code, details = None, exc.code(), exc.details()
        try:  # the same message on a stream: answered alike, a failure as its `error_message`
            (streamed,) = list(stub.ModelStreamInfer(iter([message]), metadata=tuple(auth(key).items())))
        except grpc.RpcError as exc:  # the stream itself refused: its caller
            assert (exc.code(), exc.details()) == (code, details)
        else:
            assert streamed.error_message == details
            if answer is not None:
                assert _grpc_outputs(streamed.infer_response) == _grpc_outputs(answer)
    event(f"{answered.status_code}")
    assert code == (grpc.StatusCode.OK if answered.status_code == 200 else CODES.get(answered.status_code)), answered.text
    if answer is not None:
        got, expected = _grpc_outputs(answer), _rest_outputs(answered.json())
        assert got.keys() == expected.keys()
        for name, (datatype, shape, data) in expected.items():
            assert got[name][:2] == (datatype, shape), name
            if datatype == "BYTES":
                assert got[name][2] == data, name
            else:
                # JSON writes a float as its shortest text that reads back to the same value of
                # the output's type: the same values once read as that type.
                np.testing.assert_array_equal(np.asarray(got[name][2], dtype=V2_DTYPES[datatype]), np.asarray(data, dtype=V2_DTYPES[datatype]))
