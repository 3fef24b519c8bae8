"""Uploads on the AWS shape: the API Lambda fed API Gateway events (`events/`), the store in
S3 (moto), the body posted to S3 with the presigned POST the API answered (`requests`, which
moto intercepts), `InvokeEndpointAsync` stubbed with its real shapes, and large results
answered with a 303 to a presigned GET."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import boto3
import numpy as np
import pytest
import requests
from botocore.stub import ANY, Stubber

from sluice.codecs.triton import encode_request
from sluice.domain import Principal
from sluice.runtimes.sagemaker import SageMakerRuntime
from sluice.settings import Settings
from sluice.storage.results import results_for
from sluice.wiring import Container
from tests.conftest import EVENTS, MODELS
from tests.integration.aws.conftest import REGION
from tests.integration.traffic_fakes import add_fake
from tests.support import LambdaContext

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
BUCKET = "sluice-artifacts"


def event(name: str, body: dict[str, Any] | None = None, path: str | None = None) -> dict[str, Any]:
    found = json.loads((EVENTS / name).read_text())
    if body is not None:
        found["body"] = json.dumps(body)
    if path is not None:
        found["path"] = path
        found["pathParameters"]["proxy"] = path.lstrip("/")
        found["requestContext"]["path"] = "/prod" + path
    return found


def answer(response: dict[str, Any]) -> Any:
    body = response["body"]
    if response.get("isBase64Encoded"):
        body = base64.b64decode(body).decode()
    return json.loads(body)


def headers_of(response: dict[str, Any]) -> dict[str, str]:
    found = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    return found | {k.lower(): v[0] for k, v in (response.get("multiValueHeaders") or {}).items()}


@pytest.fixture
def app(aws: None, tmp_path: Path) -> Iterator[tuple[Any, Container, Stubber]]:
    from sluice.demo import install_demo
    from sluice.handlers import api

    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    settings = Settings(mode="local", home=tmp_path / "home", store=f"s3://{BUCKET}/artifacts", region=REGION, deployment_cache_ttl_s=0)
    container = Container.from_settings(settings)
    install_demo(container, ACME, MODELS)
    sagemaker = boto3.client("sagemaker-runtime", region_name=REGION)
    stub = Stubber(sagemaker)
    stub.activate()
    container.runtimes["sagemaker"] = SageMakerRuntime(sagemaker, results=results_for(container.store))
    add_fake(container.registry, "acme", "segmenter", endpoint_name="seg-ep", invocation="async")
    container.deployments.create(ACME, "segmenter", {"kind": "single", "model": "segmenter", "version": 1})
    previous = api.app.state.container
    api.app.state.container = container
    yield api.handler, container, stub
    api.app.state.container = previous


def test_upload_predict_and_result_through_s3(app: tuple[Any, Container, Stubber]) -> None:
    handler, container, stub = app
    encoded = encode_request({"input": np.ones((2, 4), np.float32)}, binary_inputs=True)
    data, header = encoded.body, encoded.header_size
    made = handler(
        event("api_rest_create_upload.json", {"deployment": "segmenter", "content_type": "application/octet-stream", "size": len(data), "header_size": header}),
        LambdaContext(),
    )
    assert made["statusCode"] == 201, made
    upload = answer(made)
    key = f"artifacts/uploads/tenants/acme/{upload['upload_id']}/body"
    # a presigned POST: the key fixed under the tenant's prefix, the size bounded, encrypted as the store is
    policy = json.loads(base64.b64decode(upload["fields"]["policy"]))
    assert {"key": key} in policy["conditions"] and {"bucket": BUCKET} in policy["conditions"]
    assert ["content-length-range", 1, len(data)] in policy["conditions"]
    assert {"Content-Type": upload["content_type"]} in policy["conditions"]
    assert {"x-amz-server-side-encryption": "aws:kms"} in policy["conditions"]
    # SigV4, to the bucket's regional address (the global one redirects for buckets elsewhere)
    assert upload["fields"]["x-amz-algorithm"] == "AWS4-HMAC-SHA256" and upload["url"] == f"https://{BUCKET}.s3.{REGION}.amazonaws.com/"

    posted = requests.post(upload["url"], data=upload["fields"], files={"file": ("body", data)}, timeout=10)
    assert posted.status_code == 204, posted.text
    s3 = boto3.client("s3", region_name=REGION)
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == data

    out = "s3://sluice-artifacts/artifacts/results/tenants/acme/sagemaker/abc.out"
    stub.add_response(
        "invoke_endpoint_async",
        {"InferenceId": "abc", "OutputLocation": out},
        # the object as the client wrote it: no copy through the function
        expected_params={
            "EndpointName": "seg-ep", "InputLocation": f"s3://{BUCKET}/{key}", "ContentType": upload["content_type"],
            "Accept": "application/json", "InferenceId": ANY, "InvocationTimeoutSeconds": ANY,
        },
    )  # fmt: skip
    infer = event("api_rest_v2_infer_upload.json", {"inputs": [], "parameters": {"upload_id": upload["upload_id"]}})
    queued = handler(infer, LambdaContext())
    assert queued["statusCode"] == 202, queued
    stub.assert_no_pending_responses()
    location = headers_of(queued)["location"]
    # the client called the stage's URL (/prod/...): the Location works from there
    assert location == "/prod" + answer(queued)["result"]

    get = event("api_rest_get_result.json", path=answer(queued)["result"])
    assert answer(handler(get, LambdaContext()))["status"] == "pending"
    written = json.dumps({"outputs": [{"name": "y", "datatype": "FP32", "shape": [2, 1], "data": [0.5, 0.5]}]}).encode()
    s3.put_object(Bucket=BUCKET, Key=out.split(f"{BUCKET}/", 1)[1], Body=written, ContentType="application/json")
    done = handler(get, LambdaContext())
    assert done["statusCode"] == 200 and answer(done)["outputs"][0]["data"] == [0.5, 0.5]

    # an answer over the response limit: a 303 to a short-lived presigned GET of the answer itself
    container.results.max_response_bytes = 16
    redirected = handler(get, LambdaContext())
    assert redirected["statusCode"] == 303, redirected
    link = headers_of(redirected)["location"]
    assert link.startswith(f"https://{BUCKET}.s3.{REGION}.amazonaws.com/") and "X-Amz-Expires=300" in link and "X-Amz-Signature=" in link
    assert requests.get(link, timeout=10).content == written


def test_an_in_process_deployment_scores_an_upload_from_s3(app: tuple[Any, Container, Stubber]) -> None:
    handler, _, _ = app
    body = json.dumps({"features": {"sepal_length": 6.7, "sepal_width": 3.0, "petal_length": 5.2, "petal_width": 2.3}}).encode()
    made = handler(event("api_rest_create_upload.json", {"deployment": "iris", "size": len(body)}), LambdaContext())
    upload = answer(made)
    assert requests.post(upload["url"], data=upload["fields"], files={"file": ("b", body)}, timeout=10).status_code == 204
    predicted = handler(event("api_rest_predict.json", {"deployment": "iris", "upload_id": upload["upload_id"]}), LambdaContext())
    assert predicted["statusCode"] == 200, predicted
    assert answer(predicted)["prediction"] == "virginica"
    # globex: not its upload
    other = event("api_rest_predict.json", {"deployment": "iris", "upload_id": upload["upload_id"]})
    other["requestContext"]["authorizer"]["tenant"] = "globex"
    assert handler(other, LambdaContext())["statusCode"] == 404
    # before the body has arrived: 409, naming upload_id
    fresh = answer(handler(event("api_rest_create_upload.json", {"deployment": "iris", "size": 10}), LambdaContext()))
    early = handler(event("api_rest_predict.json", {"deployment": "iris", "upload_id": fresh["upload_id"]}), LambdaContext())
    assert early["statusCode"] == 409 and answer(early)["field"] == "upload_id"
    too_big = handler(event("api_rest_create_upload.json", {"deployment": "iris", "size": 10**10}), LambdaContext())
    assert too_big["statusCode"] == 413 and answer(too_big)["field"] == "size"


def test_a_kept_binary_answer_fetched_from_s3_says_its_header_length(app: tuple[Any, Container, Stubber]) -> None:
    """A presigned GET answers S3's headers, never ours: a binary v2 answer kept there says its
    JSON header's length in its content type, or the header could not be told from the tensors."""
    handler, container, _ = app
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 4], "data": [6.7, 3.0, 5.2, 2.3] * 2}]}).encode()
    upload = answer(handler(event("api_rest_create_upload.json", {"deployment": "iris", "size": len(body)}), LambdaContext()))
    assert requests.post(upload["url"], data=upload["fields"], files={"file": ("b", body)}, timeout=10).status_code == 204
    infer = event("api_rest_predict.json", {"inputs": [], "parameters": {"upload_id": upload["upload_id"], "binary_data_output": True}}, path="/v2/models/iris/infer")
    sent = handler(infer, LambdaContext())
    assert sent["statusCode"] == 200 and sent["isBase64Encoded"], sent
    # now too large to send: kept, 303 (the limit a little under its size: the answer says its
    # latency, whose digits vary from one call to the next)
    container.settings.limits.max_response_bytes = len(sent["body"]) - 24
    kept = handler(infer, LambdaContext())
    assert kept["statusCode"] == 303, kept
    redirected = handler(event("api_rest_get_result.json", path=answer(kept)["result"]), LambdaContext())
    assert redirected["statusCode"] == 303, redirected
    fetched = requests.get(headers_of(redirected)["location"], timeout=10)
    kind, _, size = fetched.headers["content-type"].partition(";json-header-size=")
    assert kind == "application/vnd.sagemaker-triton.binary+json", fetched.headers
    header = json.loads(fetched.content[: int(size)])  # the JSON header, whole, and nothing after it
    inline = base64.b64decode(sent["body"])
    tail = inline[int(headers_of(sent)["inference-header-content-length"]) :]
    assert sum(o["parameters"]["binary_data_size"] for o in header["outputs"]) == len(tail)
    assert fetched.content[int(size) :] == tail  # the tensors' bytes, as sent in line


def test_forms_are_signed_by_the_tenants_upload_role(aws: None) -> None:
    """With a signer role, the form is signed with credentials of that role assumed for the
    tenant (session tag `tenant`), not with the function's own."""
    from sluice.storage.s3 import S3Store
    from sluice.storage.uploads import uploads_for

    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="sluice-upload-signer", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    uploads = uploads_for(S3Store(BUCKET, "artifacts", region=REGION), signer_role_arn=role, region=REGION)
    form = uploads.form("acme", "a" * 32, content_type="application/json", max_bytes=10, expires_in=900, base_url="")  # type: ignore[union-attr]
    credential = form.fields["x-amz-credential"]
    assert not credential.startswith("testing/") and form.fields["x-amz-security-token"]
    again = uploads.form("acme", "b" * 32, content_type="application/json", max_bytes=10, expires_in=900, base_url="")  # type: ignore[union-attr]
    assert again.fields["x-amz-credential"].split("/")[0] == credential.split("/")[0]  # kept per tenant
