"""The SageMaker runtime against a fake sagemaker-runtime client: what it sends, and how
SageMaker's errors and throttling map to sluice errors."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from sluice.codecs.triton import encode_request
from sluice.domain import ModelVersion
from sluice.domain.errors import (
    BackendError,
    BadRequest,
    DeadlineExceeded,
    InvalidInput,
    PayloadTooLarge,
    Unavailable,
)
from sluice.domain.signature import Signature, TensorSpec
from sluice.runtimes.sagemaker import SageMakerRuntime

SIGNATURE = Signature(
    inputs=(TensorSpec("x", "FP32", (-1, 2)),),
    outputs=(TensorSpec("label", "INT64", (-1,), role="label"), TensorSpec("p", "FP32", (-1, 2), role="probabilities")),
)


def _version(**config: Any) -> ModelVersion:
    return ModelVersion(
        "acme", "m", 1, "sagemaker", "s3://bucket/m.tar.gz", "0" * 64, 1, SIGNATURE,
        config={"endpoint_name": "m-endpoint", **config},
    )


def _client_error(code: str, status: int, message: str = "", **extra: Any) -> ClientError:
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}, **extra}
    return ClientError(response, "InvokeEndpoint")


class FakeSageMaker:
    """Answers like a Triton endpoint: the request's inputs echoed as outputs, after any scripted failures."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls: list[dict[str, Any]] = []

    def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        if self.failures:
            raise self.failures.pop(0)
        rows = 3
        answer = encode_request(
            {"label": np.arange(rows, dtype=np.int64)[:, None], "p": np.full((rows, 2), 0.5, np.float32)},
            binary_inputs=params["ContentType"] != "application/json",
        )
        end = answer.header_size or len(answer.body)
        header = json.loads(answer.body[:end])
        body = json.dumps({"outputs": header["inputs"]}).encode()
        content_type = "application/json"
        if answer.header_size is not None:
            content_type = f"application/vnd.sagemaker-triton.binary+json;json-header-size={len(body)}"
        return {"Body": io.BytesIO(body + answer.body[end:]), "ContentType": content_type}


def _runtime(client: FakeSageMaker, **kwargs: Any) -> SageMakerRuntime:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    runtime = SageMakerRuntime(client, sleep=sleep, **kwargs)
    runtime.delays = delays  # type: ignore[attr-defined]
    return runtime


def _infer(runtime: SageMakerRuntime, version: ModelVersion | None = None, rows: int = 3) -> dict[str, np.ndarray]:
    inputs = {"x": np.ones((rows, 2), np.float32)}
    return asyncio.run(runtime.infer(version or _version(), inputs)).outputs


def test_it_sends_the_triton_body_to_the_named_endpoint() -> None:
    client = FakeSageMaker()
    outputs = _infer(_runtime(client), _version(target_model="a.tar.gz", variant="blue"))
    (call,) = client.calls
    assert call["EndpointName"] == "m-endpoint"
    assert (call["TargetModel"], call["TargetVariant"]) == ("a.tar.gz", "blue")
    assert call["ContentType"] == "application/json"
    assert json.loads(call["Body"])["inputs"][0]["shape"] == [3, 2]
    assert outputs["label"].tolist() == [0, 1, 2]  # [batch, 1] on the wire, [batch] as signed
    assert outputs["p"].shape == (3, 2)


def test_large_requests_go_binary_and_parse_binary_answers() -> None:
    client = FakeSageMaker()
    outputs = _infer(_runtime(client, binary_threshold_bytes=16))
    assert client.calls[0]["ContentType"].startswith("application/vnd.sagemaker-triton.binary+json;json-header-size=")
    assert outputs["p"].tolist() == [[0.5, 0.5]] * 3


def test_over_six_megabytes_is_refused_before_calling() -> None:
    client = FakeSageMaker()
    with pytest.raises(PayloadTooLarge, match="asynchronous inference"):
        _infer(_runtime(client), rows=800_000)
    assert client.calls == []


def test_throttling_is_retried_a_bounded_number_of_times() -> None:
    throttled = _client_error("ThrottlingException", 400, "Rate exceeded")
    client = FakeSageMaker(throttled, throttled)
    runtime = _runtime(client, throttle_retries=3, backoff_s=0.1)
    assert _infer(runtime)["label"].tolist() == [0, 1, 2]
    assert len(client.calls) == 3
    assert len(runtime.delays) == 2 and all(0 <= d <= 0.2 for d in runtime.delays)  # type: ignore[attr-defined]

    client = FakeSageMaker(*[throttled] * 5)
    with pytest.raises(Unavailable, match="throttling"):
        _infer(_runtime(client, throttle_retries=2))
    assert len(client.calls) == 3


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_client_error("ModelError", 424, "Received client error (400)", OriginalStatusCode=400,
                       OriginalMessage="{\"error\":\"unexpected shape for input 'x' for model 'm'. Expected [-1,2], got [3,5]. \"}"),
         InvalidInput),
        (_client_error("ModelError", 424, "Received server error (500)", OriginalStatusCode=500, OriginalMessage="boom"), BackendError),
        (_client_error("ModelError", 424, "Your invocation timed out while waiting for a response from container primary."), DeadlineExceeded),
        (_client_error("ServiceUnavailable", 503), Unavailable),
        (_client_error("ModelNotReadyException", 429), Unavailable),
        (_client_error("ValidationError", 400, "Endpoint m-endpoint of account 1 not found."), BackendError),
        (_client_error("InternalFailure", 500), BackendError),
        (ReadTimeoutError(endpoint_url="https://runtime.sagemaker"), DeadlineExceeded),
        (EndpointConnectionError(endpoint_url="https://runtime.sagemaker"), Unavailable),
    ],
    ids=["model-400-input", "model-500", "model-timeout", "unavailable", "not-ready", "no-endpoint", "internal", "read-timeout", "no-connection"],
)
def test_errors_map_to_statuses_and_are_not_retried(error: Exception, expected: type[Exception]) -> None:
    client = FakeSageMaker(error)
    with pytest.raises(expected) as err:
        _infer(_runtime(client))
    assert len(client.calls) == 1
    assert "account" not in str(err.value)  # SageMaker's own text stays in the log
    if expected is InvalidInput:
        assert err.value.field == "inputs.x"  # type: ignore[attr-defined]


def test_a_known_max_batch_size_splits_the_request() -> None:
    client = FakeSageMaker()
    outputs = _infer(_runtime(client), _version(max_batch_size=2), rows=5)
    assert [json.loads(c["Body"])["inputs"][0]["shape"][0] for c in client.calls] == [2, 2, 1]
    assert outputs["label"].shape == (9,)  # the fake answers 3 rows per call


def test_a_version_without_an_endpoint_is_a_bad_request() -> None:
    version = ModelVersion("acme", "m", 1, "sagemaker", "s3://b/m", "0" * 64, 1, SIGNATURE, config={})
    with pytest.raises(BadRequest, match="endpoint_name"):
        _infer(_runtime(FakeSageMaker()), version)


def test_a_versions_own_server_is_called_only_if_configured_or_started_by_the_local_twin() -> None:
    from sluice.runtimes.sagemaker_target import EndpointTarget

    running = ["http://127.0.0.1:18102", "http://127.0.0.1:18105"]  # what the twin started and runs now
    runtime = SageMakerRuntime(FakeSageMaker(), local_servers=["http://127.0.0.1:8102"], started_servers=lambda: running)
    for url in ("http://127.0.0.1:8102", "http://127.0.0.1:18102"):
        assert runtime.client_for(EndpointTarget.of(_version(endpoint_url=url))) is not None
    for url in ("http://127.0.0.1:6379", "http://127.0.0.1:18103", "http://localhost:18102"):
        with pytest.raises(BackendError):
            runtime.client_for(EndpointTarget.of(_version(endpoint_url=url)))
    running.remove("http://127.0.0.1:18105")  # that server stopped: its port is no longer admitted
    with pytest.raises(BackendError):
        runtime.client_for(EndpointTarget.of(_version(endpoint_url="http://127.0.0.1:18105")))


def test_with_no_servers_configured_no_local_server_is_called() -> None:
    from sluice.runtimes.sagemaker_target import EndpointTarget

    with pytest.raises(BackendError):
        SageMakerRuntime(FakeSageMaker()).client_for(EndpointTarget.of(_version(endpoint_url="http://127.0.0.1:6379")))
