"""Inference components that scale to zero, and the fallback while a copy starts: the runtime
names the component in InvokeEndpoint (botocore's Stubber checks the real request and response
shapes), maps SageMaker's "no capacity" answer to 503, and, where the version asks for it,
answers in process from the same ONNX artifact instead."""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import boto3
import numpy as np
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from sluice.domain.errors import BackendError, BadRequest, Unavailable
from sluice.runtimes.sagemaker import SageMakerRuntime
from sluice.services.models import sagemaker_config

if TYPE_CHECKING:
    from sluice.domain import ModelVersion, Principal
    from sluice.wiring import Container

# What SageMaker answers while an inference component has no copy (it has scaled to zero).
NO_CAPACITY = (
    "Inference Component has no capacity to process this request. ApplicationAutoScaling may be in-progress "
    "(if configured) or try to increase the capacity by invoking UpdateInferenceComponentRuntimeConfig API."
)
ROWS = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]], np.float32)


def _on_component(version: ModelVersion, **config: Any) -> ModelVersion:
    """iris:1 as a version bound to an inference component (its ONNX artifact and signature)."""
    return replace(version, runtime="sagemaker", config={"endpoint_name": "sluice-iris", "inference_component": "iris-ic", **config})


def _stubbed(fallback: Any = None) -> tuple[SageMakerRuntime, Stubber]:
    client = boto3.client("sagemaker-runtime", region_name="us-east-1")
    stub = Stubber(client)
    stub.activate()
    return SageMakerRuntime(client, fallback=fallback), stub


def _answer(rows: int) -> dict[str, Any]:
    body = json.dumps({"outputs": [
        {"name": "output_label", "datatype": "BYTES", "shape": [rows], "data": ["setosa"] * rows},
        {"name": "output_probability", "datatype": "FP32", "shape": [rows, 3], "data": [1.0, 0.0, 0.0] * rows},
    ]}).encode()  # fmt: skip
    return {"Body": StreamingBody(io.BytesIO(body), len(body)), "ContentType": "application/json", "InvokedProductionVariant": "AllTraffic"}


@pytest.fixture
def iris(demo: Container, acme: Principal) -> ModelVersion:
    return demo.registry.get_version("acme", "iris", 1)


def test_the_component_is_named_in_invoke_endpoint(iris: ModelVersion) -> None:
    runtime, stub = _stubbed()
    stub.add_response(
        "invoke_endpoint",
        _answer(2),
        expected_params={
            "EndpointName": "sluice-iris",
            "InferenceComponentName": "iris-ic",
            "Body": ANY,
            "ContentType": "application/json",
        },
    )
    result = asyncio.run(runtime.infer(_on_component(iris), {"input": ROWS}))
    stub.assert_no_pending_responses()
    assert result.outputs["output_label"].tolist() == ["setosa", "setosa"]


def test_no_capacity_is_a_503_without_a_fallback(iris: ModelVersion) -> None:
    runtime, stub = _stubbed(fallback=None)
    stub.add_client_error("invoke_endpoint", "ValidationError", NO_CAPACITY, 400)
    with pytest.raises(Unavailable, match="scaled to zero") as refused:
        asyncio.run(runtime.infer(_on_component(iris, fallback="in_process"), {"input": ROWS}))
    from sluice.api.errors import error_content

    status, _, headers = error_content(refused.value)
    assert (status, headers) == (503, {"Retry-After": "60"})  # a copy starts in minutes: said when to come back
    # and the fallback is taken only when the version asks for it
    calls: list[str] = []
    runtime, stub = _stubbed(fallback=lambda: calls.append("asked") or None)
    stub.add_client_error("invoke_endpoint", "ValidationError", NO_CAPACITY, 400)
    with pytest.raises(Unavailable):
        asyncio.run(runtime.infer(_on_component(iris), {"input": ROWS}))
    assert calls == []


def test_while_a_copy_starts_the_same_onnx_artifact_answers_in_process(demo: Container, iris: ModelVersion) -> None:
    onnx = demo.runtimes["onnx"]
    runtime, stub = _stubbed(fallback=lambda: onnx)
    stub.add_client_error("invoke_endpoint", "ValidationError", NO_CAPACITY, 400)
    stub.add_response("invoke_endpoint", _answer(2))  # the next call: a copy is up
    fell_back = asyncio.run(runtime.infer(_on_component(iris, fallback="in_process"), {"input": ROWS}))
    direct = asyncio.run(onnx.infer(iris, {"input": ROWS}))
    assert fell_back.outputs["output_label"].tolist() == direct.outputs["output_label"].tolist() == ["setosa", "virginica"]
    np.testing.assert_allclose(fell_back.outputs["output_probability"], direct.outputs["output_probability"])
    served = asyncio.run(runtime.infer(_on_component(iris, fallback="in_process"), {"input": ROWS}))
    assert served.outputs["output_label"].tolist() == ["setosa", "setosa"]  # from the endpoint again
    stub.assert_no_pending_responses()


def test_other_failures_never_fall_back(demo: Container, iris: ModelVersion) -> None:
    runtime, stub = _stubbed(fallback=lambda: demo.runtimes["onnx"])
    stub.add_client_error("invoke_endpoint", "ValidationError", "Endpoint sluice-iris of account 1 not found.", 400)
    with pytest.raises(BackendError, match="does not exist"):
        asyncio.run(runtime.infer(_on_component(iris, fallback="in_process"), {"input": ROWS}))


def test_a_version_without_an_onnx_artifact_cannot_fall_back(demo: Container, iris: ModelVersion) -> None:
    runtime, stub = _stubbed(fallback=lambda: demo.runtimes["onnx"])
    stub.add_client_error("invoke_endpoint", "ValidationError", NO_CAPACITY, 400)
    archive = replace(iris, artifact_uri="s3://bucket/triton/model.tar.gz")
    with pytest.raises(Unavailable):
        asyncio.run(runtime.infer(_on_component(archive, fallback="in_process"), {"input": ROWS}))


def test_the_config_keys_are_checked() -> None:
    ok = {"endpoint_name": "sluice-iris", "inference_component": "iris-ic", "fallback": "in_process"}
    assert sagemaker_config(ok) == ok
    for bad, field in (
        ({"endpoint_name": "e", "inference_component": "under_score"}, "config.inference_component"),
        ({"endpoint_name": "e", "fallback": "elsewhere"}, "config.fallback"),
    ):
        with pytest.raises(BadRequest) as caught:
            sagemaker_config(bad)
        assert caught.value.field == field


def test_the_wired_runtime_falls_back_to_the_containers_onnx_runtime(demo: Container) -> None:
    runtime = demo.runtimes["sagemaker"]
    assert runtime._fallback is not None and runtime._fallback() is demo.runtimes["onnx"]
