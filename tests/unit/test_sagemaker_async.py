"""Asynchronous inference through the sagemaker runtime: the path chosen by size, the input
and record written under the tenant's results, `InvokeEndpointAsync` with its real shapes
(botocore's Stubber; moto for S3 and, where it models it, for the call itself), and reading
results back per tenant."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from sluice.domain import ModelVersion, Principal
from sluice.domain.errors import (
    Accepted,
    BackendError,
    BadRequest,
    Forbidden,
    NotFound,
    PayloadTooLarge,
)
from sluice.domain.signature import Signature, TensorSpec
from sluice.inference.results import ResultService
from sluice.runtimes.sagemaker import SageMakerRuntime
from sluice.storage.results import RECORD, FolderResults, S3Results
from sluice.storage.s3 import S3Store

SIGNATURE = Signature(inputs=(TensorSpec("x", "FP32", (-1, 4)),), outputs=(TensorSpec("y", "FP32", (-1, 4)),))
ACME = Principal("acme", frozenset({"predict"}), "k1")
GLOBEX = Principal("globex", frozenset({"predict", "admin"}), "k2")
MiB = 1024 * 1024


def _version(tenant: str = "acme", **config: Any) -> ModelVersion:
    return ModelVersion(
        tenant, "m", 1, "sagemaker", "s3://b/m.tar.gz", "0" * 64, 1, SIGNATURE, config={"endpoint_name": "m-ep", **config}
    )


def _rows(n: int) -> dict[str, np.ndarray]:
    return {"x": np.arange(n * 4, dtype=np.float32).reshape(n, 4)}


def _answer(rows: int = 2) -> bytes:
    """What Triton writes for a JSON answer: v2 JSON outputs."""
    y = np.full((rows, 4), 0.5, np.float32)
    return json.dumps({"outputs": [{"name": "y", "datatype": "FP32", "shape": [rows, 4], "data": y.ravel().tolist()}]}).encode()


class EchoSageMaker:
    """A synchronous endpoint that answers every request with `_answer`."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        return {"Body": io.BytesIO(_answer()), "ContentType": "application/json"}


# the path, by size -----------------------------------------------------------------------------
def test_the_path_is_chosen_per_request_by_size() -> None:
    runtime = SageMakerRuntime(EchoSageMaker(), results=None)
    sync = _version()
    both = _version(async_endpoint_name="m-ep-async")
    assert runtime.path_for(sync, _rows(4)) == "json"
    assert runtime.path_for(sync, _rows(8192)) == "binary+json"  # 128 KiB of floats
    big = _rows(2 * MiB // 4 + 1)  # 8 MiB + 16 bytes raw
    assert runtime.path_for(both, big) == "async"
    with pytest.raises(PayloadTooLarge) as caught:
        runtime.path_for(sync, big)
    assert caught.value.field == "inputs"
    assert runtime.path_for(_version(invocation="async"), _rows(1)) == "async"


def test_a_bad_invocation_names_its_field() -> None:
    with pytest.raises(BadRequest) as caught:
        SageMakerRuntime(EchoSageMaker()).path_for(_version(invocation="later"), _rows(1))
    assert caught.value.field == "config.invocation"


def test_without_a_result_store_large_requests_are_still_refused() -> None:
    client = EchoSageMaker()
    runtime = SageMakerRuntime(client, results=None)
    with pytest.raises(PayloadTooLarge, match="result store"):
        asyncio.run(runtime.infer(_version(async_endpoint_name="m-ep-async"), _rows(2 * MiB // 4 + 1)))
    assert client.calls == []


# on AWS: S3 in moto, InvokeEndpointAsync stubbed with its real shapes ------------------------
@pytest.fixture
def s3() -> Any:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="art")
        yield client


def _aws_runtime(s3: Any, **kwargs: Any) -> tuple[SageMakerRuntime, Stubber, S3Results]:
    results = S3Results(S3Store("art", "sluice", client=s3, server_side_encryption="AES256"))
    sm = boto3.client("sagemaker-runtime", region_name="us-east-1")
    stub = Stubber(sm)
    stub.activate()
    return SageMakerRuntime(sm, results=results, **kwargs), stub, results


def test_a_large_request_goes_through_s3_and_invoke_endpoint_async(s3: Any) -> None:
    runtime, stub, results = _aws_runtime(s3, async_timeout_s=600)
    out = "s3://art/sluice/results/tenants/acme/sagemaker/abc.out"
    fail = "s3://art/sluice/results/tenants/acme/sagemaker-errors/abc-error.out"
    stub.add_response(
        "invoke_endpoint_async",
        {"InferenceId": "abc", "OutputLocation": out, "FailureLocation": fail},
        expected_params={
            "EndpointName": "m-ep-async",
            "InputLocation": ANY,
            "ContentType": ANY,
            "Accept": "application/json",
            "InferenceId": ANY,
            "InvocationTimeoutSeconds": 600,
        },
    )
    big = _rows(2 * MiB // 4 + 1)
    with pytest.raises(Accepted) as caught:
        asyncio.run(runtime.infer(_version(async_endpoint_name="m-ep-async"), big))
    stub.assert_no_pending_responses()
    accepted = caught.value
    assert accepted.status == 202 and accepted.location == f"/api/v1/results/{accepted.result_id}"
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="art")["Contents"]}
    prefix = f"sluice/results/tenants/acme/{accepted.result_id}/"
    assert keys == {prefix + "input", prefix + RECORD}
    stored = s3.get_object(Bucket="art", Key=prefix + "input")
    assert stored["ContentType"].startswith("application/vnd.sagemaker-triton.binary+json;json-header-size=")
    assert stored["ServerSideEncryption"] == "AES256"
    header = json.loads(stored["Body"].read()[: int(stored["ContentType"].rsplit("=", 1)[1])])
    assert header["inputs"][0]["shape"] == [2 * MiB // 4 + 1, 4]
    assert header["inputs"][0]["parameters"]["binary_data_size"] == 8 * MiB + 16
    record = json.loads(s3.get_object(Bucket="art", Key=prefix + RECORD)["Body"].read())
    assert record["input"] == f"s3://art/{prefix}input"
    assert (record["output"], record["failure"], record["tenant"]) == (out, fail, "acme")

    service = ResultService(results)
    assert service.get(ACME, accepted.result_id)["status"] == "pending"
    with pytest.raises(NotFound):
        service.get(GLOBEX, accepted.result_id)  # another tenant's id is not there at all
    # SageMaker writes the answer where it said it would.
    s3.put_object(Bucket="art", Key="sluice/results/tenants/acme/sagemaker/abc.out", Body=_answer(), ContentType="application/json")
    done = service.get(ACME, accepted.result_id)
    assert done["status"] == "succeeded" and (done["model"], done["version"]) == ("m", 1)
    (y,) = done["outputs"]
    assert (y["name"], y["shape"], y["data"][:2]) == ("y", [2, 4], [0.5, 0.5])


def test_an_endpoint_that_writes_outside_the_tenants_results_is_refused(s3: Any) -> None:
    runtime, stub, _ = _aws_runtime(s3)
    stub.add_response(
        "invoke_endpoint_async",
        {"InferenceId": "abc", "OutputLocation": "s3://art/sluice/results/tenants/globex/x.out"},
    )
    with pytest.raises(BackendError, match="outside this tenant's results"):
        asyncio.run(runtime.infer(_version(invocation="async"), _rows(1)))


def test_throttled_async_calls_are_retried_then_mapped(s3: Any) -> None:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    runtime, stub, _ = _aws_runtime(s3, throttle_retries=1, sleep=sleep)
    for _ in range(2):
        stub.add_client_error("invoke_endpoint_async", "ThrottlingException", "Rate exceeded", 400)
    with pytest.raises(Exception) as caught:
        asyncio.run(runtime.infer(_version(invocation="async"), _rows(1)))
    assert type(caught.value).__name__ == "Unavailable" and len(delays) == 1


def test_moto_takes_the_call_and_its_own_output_bucket_is_refused() -> None:
    """moto models InvokeEndpointAsync (answers in a bucket of its own): the request sluice
    sends is one it parses, and an answer outside the tenant's results is never read."""
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="art")
        results = S3Results(S3Store("art", "", client=s3, server_side_encryption="AES256"))
        runtime = SageMakerRuntime(boto3.client("sagemaker-runtime", region_name="us-east-1"), results=results)
        with pytest.raises(BackendError, match="outside"):
            asyncio.run(runtime.infer(_version(invocation="async"), _rows(1)))
        (key,) = [o["Key"] for o in s3.list_objects_v2(Bucket="art")["Contents"] if o["Key"].endswith("/input")]
        assert key.startswith("results/tenants/acme/")


# results ----------------------------------------------------------------------------------------
def test_failures_expiry_and_bad_ids(tmp_path: Path) -> None:
    results = FolderResults(tmp_path)
    now = [1000.0]
    service = ResultService(results, clock=lambda: now[0])
    rid = "0" * 32
    record = {"id": rid, "tenant": "acme", "model": "m", "version": 1, "created_at": 1000.0, "expires_at": 2000.0,
              "output": results.uri("acme", rid, "output"), "failure": results.uri("acme", rid, "error")}  # fmt: skip
    results.put("acme", rid, RECORD, json.dumps(record).encode())
    results.put("acme", rid, "error", b'{"error": "the model container failed (500)", "code": "backend_error"}')
    failed = service.get(ACME, rid)
    assert failed["status"] == "failed" and failed["error"]["error"] == "the model container failed (500)"
    with pytest.raises(NotFound):
        service.get(GLOBEX, rid)
    now[0] = 2000.0
    with pytest.raises(NotFound, match="expired"):
        service.get(ACME, rid)
    with pytest.raises(BadRequest) as caught:
        service.get(ACME, "../../etc")
    assert caught.value.field == "result_id"


def test_a_record_pointing_outside_the_tenant_is_not_followed(tmp_path: Path) -> None:
    results = FolderResults(tmp_path)
    rid = "1" * 32
    results.put("globex", rid, "output", _answer())
    record = {"id": rid, "tenant": "acme", "expires_at": 9e18, "output": results.uri("globex", rid, "output")}
    results.put("acme", rid, RECORD, json.dumps(record).encode())
    with pytest.raises(BackendError):
        ResultService(results).get(ACME, rid)


def test_a_result_uri_is_read_as_the_path_it_escapes_and_checked_there(tmp_path: Path) -> None:
    """A folder under `Application Support` or `josé` is `%20` or `%C3%A9` in its URIs; the
    tenant's ownership is checked on the path decoded, so an escaped `..` leads nowhere."""
    results = FolderResults(tmp_path / "Application Support" / "josé")
    rid = "2" * 32
    uri = results.put("acme", rid, "output", b"answer", content_type="application/json")
    assert "%20" in uri and results.read("acme", uri) == (b"answer", "application/json")
    results.put("globex", rid, "output", b"globex's")
    sideways = results.uri("acme", rid, "output").replace(f"/acme/{rid}/output", f"/acme/%2E%2E/globex/{rid}/output")
    assert not results.owns("acme", sideways)
    with pytest.raises(Forbidden):
        results.read("acme", sideways)


# the local twin: the queue is a thread, the store the folder --------------------------------
def test_the_local_twin_runs_async_requests_on_a_thread(tmp_path: Path) -> None:
    client = EchoSageMaker()
    url = "http://127.0.0.1:9"
    runtime = SageMakerRuntime(client, endpoint_url=url, results=FolderResults(tmp_path))
    version = _version(endpoint_url=url, async_endpoint_name="m-ep")
    with pytest.raises(Accepted) as caught:
        asyncio.run(runtime.infer(version, _rows(2 * MiB // 4 + 1)))
    runtime._queue.shutdown(wait=True)  # type: ignore[union-attr]  # the queued call has run
    (call,) = client.calls  # the container got the body written to the folder
    rid = caught.value.result_id
    stored = (tmp_path / "results/tenants/acme" / rid / "input").read_bytes()
    assert call["Body"] == stored and call["ContentType"].startswith("application/vnd.sagemaker-triton.binary+json")
    done = ResultService(FolderResults(tmp_path)).get(ACME, rid)
    assert done["status"] == "succeeded" and done["outputs"][0]["shape"] == [2, 4]
    # a small request to the same version stays synchronous
    small = asyncio.run(runtime.infer(version, _rows(2)))
    assert small.outputs["y"].shape == (2, 4) and len(client.calls) == 2
    runtime.close()


def test_the_local_twin_writes_the_error_where_sagemaker_would(tmp_path: Path) -> None:
    from botocore.exceptions import ClientError

    class Failing(EchoSageMaker):
        def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
            body = {"Error": {"Code": "ModelError", "Message": "boom"}, "OriginalStatusCode": 500, "OriginalMessage": "boom"}
            raise ClientError(body, "InvokeEndpoint")

    url = "http://127.0.0.1:9"
    runtime = SageMakerRuntime(Failing(), endpoint_url=url, results=FolderResults(tmp_path))
    with pytest.raises(Accepted) as caught:
        asyncio.run(runtime.infer(_version(endpoint_url=url, invocation="async"), _rows(1)))
    runtime._queue.shutdown(wait=True)  # type: ignore[union-attr]
    failed = ResultService(FolderResults(tmp_path)).get(ACME, caught.value.result_id)
    assert failed["status"] == "failed" and failed["error"]["code"] == "backend_error"


def test_accepted_is_answered_as_202_with_the_result() -> None:
    from sluice.api.errors import error_content

    status, body, headers = error_content(Accepted("queued", result_id="a" * 32, location="/api/v1/results/" + "a" * 32))
    assert status == 202 and headers == {"Location": "/api/v1/results/" + "a" * 32}
    assert body["status"] == "pending" and body["id"] == "a" * 32



def test_a_caller_that_reads_answers_in_place_is_refused_what_would_be_queued() -> None:
    """A batch job's or a stream's call (`ANSWERS_IN_PLACE`): too large for InvokeEndpoint is
    refused (the caller splits it), and an asynchronous endpoint's version answers nothing;
    neither is queued. Others' requests are queued as before."""
    from sluice.domain.errors import Unprocessable
    from sluice.domain.results import ANSWERS_IN_PLACE

    client = EchoSageMaker()
    runtime = SageMakerRuntime(client, results=None)
    big = _rows(2 * MiB // 4 + 1)

    async def in_place(version: ModelVersion, rows: dict[str, np.ndarray]) -> Any:
        ANSWERS_IN_PLACE.set(True)
        return await runtime.infer(version, rows)

    with pytest.raises(PayloadTooLarge) as caught:
        asyncio.run(in_place(_version(async_endpoint_name="m-ep-async"), big))
    assert caught.value.field == "inputs"
    with pytest.raises(Unprocessable, match="asynchronous endpoint"):
        asyncio.run(in_place(_version(invocation="async"), _rows(1)))
    assert client.calls == []
    assert asyncio.run(in_place(_version(async_endpoint_name="m-ep-async"), _rows(2))).outputs["y"].shape == (2, 4)
    with pytest.raises(PayloadTooLarge, match="result store"):  # not in place: queued (here: no store to queue in)
        asyncio.run(runtime.infer(_version(async_endpoint_name="m-ep-async"), big))
