"""Uploads on `sluice serve`'s local twin: the form posted to the service itself (checked as S3
checks a presigned POST), then a prediction naming the upload: queued as it lies for an
asynchronous endpoint (202, the result), read and scored for a deployment served in process,
and kept as a result when its answer is too large to send (303)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from sluice.codecs.triton import encode_request
from tests.integration.conftest import auth
from tests.integration.traffic_fakes import Echo, add_fake, async_echo
from tests.support import steady

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container


@pytest.fixture
def echo(demo: Container, acme: Principal) -> Echo:
    return async_echo(demo, acme)[1]


def binary_body(rows: int) -> tuple[bytes, int]:
    encoded = encode_request({"input": np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)}, binary_inputs=True)
    assert encoded.header_size is not None
    return encoded.body, encoded.header_size


def make_upload(client: TestClient, key: str, **body: Any) -> Any:
    return client.post("/api/v1/uploads", json=body, headers=auth(key))


def post_form(client: TestClient, upload: dict[str, Any], data: bytes) -> Any:
    """The client S3 takes: multipart/form-data, the fields first, the body last as `file`."""
    assert upload["method"] == "POST"
    return client.post(upload["url"], data=upload["fields"], files={"file": ("body", data, "application/octet-stream")})


def test_an_upload_goes_to_the_asynchronous_endpoint_as_it_lies(client: TestClient, keys: dict[str, str], echo: Echo, demo: Container) -> None:
    data, header = binary_body(3)
    made = make_upload(client, keys["acme_predict"], deployment="big", content_type="application/octet-stream", size=len(data), header_size=header)
    assert made.status_code == 201, made.text
    upload = made.json()
    assert upload["content_type"] == f"application/vnd.sagemaker-triton.binary+json;json-header-size={header}"
    assert upload["max_bytes"] == len(data) and upload["url"].endswith(f"/api/v1/uploads/{upload['upload_id']}/body")
    assert set(upload["fields"]) == {"key", "Content-Type", "policy", "x-sluice-signature"}
    # no API key on the form: its signed policy authorizes it, as S3's does
    posted = post_form(client, upload, data)
    assert posted.status_code == 204, posted.text

    answer = client.post("/v2/models/big/infer", json={"inputs": [], "parameters": {"upload_id": upload["upload_id"]}}, headers=auth(keys["acme_predict"]))
    assert answer.status_code == 202, answer.text
    accepted = answer.json()
    assert answer.headers["location"] == accepted["result"]
    demo.runtimes["sagemaker"]._queue.shutdown(wait=True)  # type: ignore[attr-defined]
    (call,) = echo.calls
    assert call["Body"] == data and call["ContentType"] == upload["content_type"]  # the bytes posted, unchanged
    result = client.get(accepted["result"], headers=auth(keys["acme_predict"])).json()
    assert result["status"] == "succeeded" and result["outputs"][0]["data"] == [7.0, 7.0, 7.0]
    record = json.loads((demo.store.root / "results/tenants/acme" / accepted["id"] / "record.json").read_bytes())  # type: ignore[attr-defined]
    assert record["input"].endswith(f"uploads/tenants/acme/{upload['upload_id']}/body") and record["upload"] == upload["upload_id"]

    # a large answer is sent as itself: the bytes here (a 303 to S3 on AWS)
    demo.results.max_response_bytes = 10
    raw = client.get(accepted["result"], headers=auth(keys["acme_predict"]))
    assert raw.status_code == 200 and raw.json()["outputs"][0]["shape"] == [3, 1]


def test_an_in_process_deployment_reads_and_scores_the_upload(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    body = json.dumps({"batch": [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]}).encode()
    upload = make_upload(client, keys["acme_predict"], deployment="iris", size=len(body)).json()
    assert post_form(client, upload, body).status_code == 204
    answer = client.post("/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"]}, headers=auth(keys["acme_predict"]))
    assert answer.status_code == 200, answer.text
    assert [p["prediction"] for p in answer.json()["predictions"]] == ["setosa", "virginica"]
    # an upload may be predicted from again until it expires
    again = client.post("/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"]}, headers=auth(keys["acme"]))
    assert again.status_code == 200

    # counted as a Lambda result carries it, each quote escaped: under the limit by its length alone, it is kept
    size, quotes = len(again.content), again.content.count(b'"')
    demo.settings.limits.max_response_bytes = size + quotes // 2
    escaped = client.post("/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"]}, headers=auth(keys["acme"]), follow_redirects=False)
    assert escaped.status_code == 303, escaped.text

    # an answer over the response limit is kept as a result: 303 to it, which answers the bytes
    demo.settings.limits.max_response_bytes = 64
    kept = client.post(
        "/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"]}, headers=auth(keys["acme_predict"]), follow_redirects=False
    )
    assert kept.status_code == 303, kept.text
    assert kept.headers["location"] == kept.json()["result"] and kept.json()["status"] == "succeeded"
    fetched = client.get(kept.headers["location"], headers=auth(keys["acme_predict"]))
    assert fetched.status_code == 200 and [p["prediction"] for p in fetched.json()["predictions"]] == ["setosa", "virginica"]
    assert client.get(kept.headers["location"], headers=auth(keys["globex"])).status_code == 404


def test_a_kept_binary_v2_answer_is_read_as_the_one_sent_in_line(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    """A binary v2 answer is split by its JSON header's length; kept as a result (too large to
    send), it keeps that length: in its content type, which a presigned S3 GET answers too, and
    on `sluice serve` as the `Inference-Header-Content-Length` an answer sent in line has."""
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 4], "data": [6.7, 3.0, 5.2, 2.3] * 2}]}).encode()
    upload = make_upload(client, keys["acme"], deployment="iris", size=len(body)).json()
    assert post_form(client, upload, body).status_code == 204
    request = {"inputs": [], "parameters": {"upload_id": upload["upload_id"], "binary_data_output": True}}
    sent = client.post("/v2/models/iris/infer", json=request, headers=auth(keys["acme"]))
    assert sent.status_code == 200, sent.text
    inline = int(sent.headers["inference-header-content-length"])

    demo.settings.limits.max_response_bytes = 64  # now too large to send: kept, 303
    kept = client.post("/v2/models/iris/infer", json=request, headers=auth(keys["acme"]), follow_redirects=False)
    assert kept.status_code == 303, kept.text
    fetched = client.get(kept.headers["location"], headers=auth(keys["acme"]))
    assert fetched.status_code == 200
    length = int(fetched.headers["inference-header-content-length"])
    assert fetched.headers["content-type"] == f"application/vnd.sagemaker-triton.binary+json;json-header-size={length}"
    header = json.loads(fetched.content[:length])  # the JSON header, whole, and nothing after it
    assert [o["name"] for o in header["outputs"]] == [o["name"] for o in json.loads(sent.content[:inline])["outputs"]]
    assert fetched.content[length:] == sent.content[inline:]  # the tensors' bytes, as sent in line


@pytest.mark.parametrize(("depth", "inner"), [(201, "1"), (900, "true"), (1100, "1")])
def test_a_json_upload_nested_too_deep_to_read_is_a_400_naming_the_member(client: TestClient, keys: dict[str, str], depth: int, inner: str) -> None:
    """An upload's JSON is read as orjson reads it (1,024 levels, the HTTP API's 200 no limit
    here): deeper is a 400 naming `upload_id` and the member; one too deep for decoding to walk
    (the check for true/false recurses) a 400 naming the member; never a 500 from the stack
    running out. A shallower one is read, and refused for what it holds."""
    body = ('{"batch": ' + "[" * (depth - 1) + inner + "]" * (depth - 1) + "}").encode()
    upload = make_upload(client, keys["acme"], deployment="iris", size=len(body)).json()
    assert post_form(client, upload, body).status_code == 204
    answer = client.post("/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"]}, headers=auth(keys["acme"]))
    assert answer.status_code == 400, answer.text
    error, field = answer.json()["error"], answer.json()["field"]
    if depth > 1024:
        assert field == "upload_id" and f"upload '{upload['upload_id']}': 'batch' is nested too deep to read: more than 1,024 levels" in error, error
    elif inner == "true":
        assert field == "batch" and "'batch' is nested too deep to read" in error, error
    else:  # read, then refused for what it holds
        assert field == "batch" and "nested too deep" not in error, error


def test_v2_json_upload_scored_in_process(client: TestClient, keys: dict[str, str]) -> None:
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [6.7, 3.0, 5.2, 2.3]}]}).encode()
    upload = make_upload(client, keys["acme"], deployment="iris", size=len(body)).json()
    assert post_form(client, upload, body).status_code == 204
    answer = client.post("/v2/models/iris/infer", json={"inputs": [], "parameters": {"upload_id": upload["upload_id"]}}, headers=auth(keys["acme"]))
    assert answer.status_code == 200, answer.text
    assert {o["name"]: o for o in answer.json()["outputs"]}["output_label"]["data"] == ["virginica"]


def test_sizes_are_refused_at_the_upload_and_at_the_form(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    over = make_upload(client, keys["acme"], deployment="iris", size=demo.settings.uploads.upload_max_bytes + 1)
    assert over.status_code == 413 and over.json()["field"] == "size"
    upload = make_upload(client, keys["acme"], deployment="iris", size=10).json()
    refused = post_form(client, upload, b"x" * 11)
    assert refused.status_code == 413 and refused.json()["field"] == "file"
    # nothing was kept: the upload is still incomplete
    answer = client.post("/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"]}, headers=auth(keys["acme"]))
    assert answer.status_code == 409 and answer.json()["field"] == "upload_id"
    # a form past its declared length is refused before it is read
    long = client.post(upload["url"], content=b"x", headers={"content-length": str(10**12), "content-type": "multipart/form-data; boundary=x"})
    assert long.status_code == 413


def test_forms_are_checked_as_s3_checks_a_policy(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    upload = make_upload(client, keys["acme"], deployment="iris", size=100).json()
    tampered = {**upload["fields"], "Content-Type": "text/plain"}
    assert client.post(upload["url"], data=tampered, files={"file": ("b", b"{}")}).status_code == 403
    other = make_upload(client, keys["acme"], deployment="iris", size=100).json()
    moved = client.post(other["url"], data=upload["fields"], files={"file": ("b", b"{}")})  # another upload's form
    assert moved.status_code == 403 and moved.json()["field"] == "key"
    assert client.post(upload["url"], data=upload["fields"]).status_code == 400  # no file part
    # what is read before the signature can be checked is bounded
    padded = {**{f"f{i}": "x" * 32 for i in range(4000)}, **upload["fields"]}
    assert client.post(upload["url"], data=padded, files={"file": ("b", b"{}")}).status_code == 400
    store = demo.uploads.store
    store.clock = lambda: 9e12  # type: ignore[union-attr]
    expired = client.post(upload["url"], data=upload["fields"], files={"file": ("b", b"{}")})
    assert expired.status_code == 403 and "expired" in expired.json()["error"]


def test_uploads_are_the_tenants_own(client: TestClient, keys: dict[str, str], demo: Container, globex: Principal) -> None:
    body = json.dumps({"inputs": [[5.1, 3.5, 1.4, 0.2]]}).encode()
    upload = make_upload(client, keys["acme"], deployment="iris", size=len(body)).json()
    assert post_form(client, upload, body).status_code == 204
    # another tenant's deployment cannot be uploaded to; its upload id is not found
    assert make_upload(client, keys["globex"], deployment="iris", size=10).status_code == 404
    from sluice.demo import install_demo
    from tests.conftest import MODELS

    install_demo(demo, globex, MODELS)
    stranger = client.post("/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"]}, headers=auth(keys["globex"]))
    assert stranger.status_code == 404 and stranger.json()["field"] == "upload_id"
    wrong = client.post("/api/v1/predictions", json={"deployment": "diabetes", "upload_id": upload["upload_id"]}, headers=auth(keys["acme"]))
    assert wrong.status_code == 400 and wrong.json()["field"] == "upload_id"
    both = client.post("/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"], "inputs": [[1, 2, 3, 4]]}, headers=auth(keys["acme"]))
    assert both.status_code == 400 and both.json()["field"] == "upload_id"
    missing = client.post("/api/v1/predictions", json={"deployment": "iris", "upload_id": "0" * 32}, headers=auth(keys["acme"]))
    assert missing.status_code == 404 and missing.json()["field"] == "upload_id"
    bad = client.post("/api/v1/predictions", json={"deployment": "iris", "upload_id": "../x"}, headers=auth(keys["acme"]))
    assert bad.status_code == 400 and bad.json()["field"] == "upload_id"


def test_an_expired_upload_is_refused(client: TestClient, keys: dict[str, str], demo: Container) -> None:
    body = json.dumps({"inputs": [[5.1, 3.5, 1.4, 0.2]]}).encode()
    upload = make_upload(client, keys["acme"], deployment="iris", size=len(body)).json()
    assert post_form(client, upload, body).status_code == 204
    demo.uploads.clock = lambda: upload["usable_until"] + 1
    answer = client.post("/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"]}, headers=auth(keys["acme"]))
    assert answer.status_code == 404 and answer.json()["field"] == "upload_id" and "expired" in answer.json()["error"]


def test_a_revoked_key_cannot_upload(client: TestClient, keys: dict[str, str], demo: Container, acme: Principal) -> None:
    record, key = demo.keys.create("acme", ["predict"])
    assert make_upload(client, key, deployment="iris", size=10).status_code == 201
    demo.keys.revoke(acme, record.key_id)
    refused = make_upload(client, key, deployment="iris", size=10)
    assert refused.status_code == 401
    assert make_upload(client, "", deployment="iris", size=10).status_code == 401


def test_bad_upload_requests_name_their_field(client: TestClient, keys: dict[str, str]) -> None:
    for body, field in [
        ({"deployment": "iris", "size": 10, "content_type": "text/csv"}, "content_type"),
        ({"deployment": "iris", "size": 10, "content_type": "application/octet-stream"}, "header_size"),
        ({"deployment": "iris", "size": 10, "header_size": 4}, "header_size"),
        ({"deployment": "iris", "size": 0}, "size"),
    ]:
        answer = make_upload(client, keys["acme"], **body)
        assert answer.status_code in (400, 422) and answer.json()["field"] == field, (body, answer.text)


def test_a_binary_upload_is_not_a_simple_json_body(client: TestClient, keys: dict[str, str], echo: Echo) -> None:
    data, header = binary_body(1)
    upload = make_upload(client, keys["acme"], deployment="big", content_type="application/octet-stream", size=len(data), header_size=header).json()
    assert post_form(client, upload, data).status_code == 204
    answer = client.post("/api/v1/predictions", json={"deployment": "big", "upload_id": upload["upload_id"]}, headers=auth(keys["acme"]))
    assert answer.status_code == 400 and answer.json()["field"] == "upload_id"


@pytest.mark.parametrize(
    "shape",
    [
        {"parameters": ["binary_data_size", 16]},  # parameters not an object
        {"name": ["input"]},  # a name not a string
    ],
)
def test_a_binary_upload_with_a_header_of_the_wrong_shape_is_a_400_naming_it(
    client: TestClient, keys: dict[str, str], echo: Echo, shape: dict[str, Any]
) -> None:
    head = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], **shape}], "outputs": 3}).encode()
    data = head + bytes(16)
    made = make_upload(client, keys["acme"], deployment="big", content_type="application/octet-stream", size=len(data), header_size=len(head))
    assert post_form(client, made.json(), data).status_code == 204
    answer = client.post("/v2/models/big/infer", json={"inputs": [], "parameters": {"upload_id": made.json()["upload_id"]}}, headers=auth(keys["acme"]))
    assert answer.status_code == 400 and answer.json()["field"] == "upload_id", answer.text
    assert answer.json()["error"].startswith("the upload's JSON header"), answer.text
    assert not echo.calls  # nothing handed on


def test_the_openapi_schema_has_the_upload_routes(demo: Container) -> None:
    from sluice.api.app import create_app

    paths = TestClient(create_app(demo)).get("/openapi.json").json()["paths"]
    assert "/api/v1/uploads" in paths and "/api/v1/uploads/{upload_id}/body" in paths


UPLOADED = [  # (route, what the upload holds): each answered as the same body sent in line is, or refused naming upload_id
    ("plain", {"batch": [[5.1, 3.5, 1.4, 0.2]]}),
    ("plain", {"batch": [[5.1, 3.5, 1.4, 0.2]], "version": 7}),
    ("plain", {"features": {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}, "options": {"return_probabilities": False}}),
    ("plain", {"inputs": [[5.1, 3.5, 1.4, 0.2]], "no_such_field": 1}),
    ("plain", {"batch": [[5.1, 3.5, 1.4, 0.2]], "version": None, "request_id": None, "options": None, "inputs": None}),
    ("v2", {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [6.7, 3.0, 5.2, 2.3]}]}),
    ("v2", {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [6.7, 3.0, 5.2, 2.3]}], "outputs": [{"name": "output_label"}]}),
    ("v2", {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [6.7, 3.0, 5.2, 2.3]}], "outputs": [{"name": "output_label", "parameters": {}}], "parameters": {}}),
    ("v2", {"id": "mine", "inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [6.7, 3.0, 5.2, 2.3]}]}),
    ("v2", {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [6.7, 3.0, 5.2, 2.3]}], "parameters": {"binary_data_output": True}}),
    ("v2", {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [6.7, 3.0, 5.2, 2.3]}], "outputs": [{"name": "output_probability", "parameters": {"classification": 2}}]}),
]  # fmt: skip


@pytest.mark.parametrize(("route", "held"), UPLOADED)
def test_an_uploaded_body_answers_as_in_line_or_is_refused_never_read_in_part(client: TestClient, keys: dict[str, str], route: str, held: dict[str, Any]) -> None:
    """What an upload holds beyond the rows a route reads from it (a version, options, a field
    the API does not know, a v2 request's parameters or its outputs' parameters) is never
    dropped on the way: the answer is the one the same body gets in line, or a 400 naming
    upload_id that says what to send in the request instead."""
    body = json.dumps(held).encode()  # NaN and big integers as Python writes them, as a client may
    upload = make_upload(client, keys["acme"], deployment="iris", size=len(body)).json()
    assert post_form(client, upload, body).status_code == 204
    if route == "plain":
        sent = json.dumps({"deployment": "iris", **held}).encode()
        in_line = client.post("/api/v1/predictions", content=sent, headers={**auth(keys["acme"]), "content-type": "application/json"})
        uploaded = client.post("/api/v1/predictions", json={"deployment": "iris", "upload_id": upload["upload_id"]}, headers=auth(keys["acme"]))
    else:
        in_line = client.post("/v2/models/iris/infer", content=body, headers={**auth(keys["acme"]), "content-type": "application/json"})
        uploaded = client.post("/v2/models/iris/infer", json={"inputs": [], "parameters": {"upload_id": upload["upload_id"]}}, headers=auth(keys["acme"]))
    if uploaded.status_code == 200:
        assert in_line.status_code == 200 and uploaded.headers["content-type"] == in_line.headers["content-type"]
        assert steady(uploaded.json()) == steady(in_line.json())
    elif uploaded.json()["field"] != "upload_id":  # refused by the checks a body in line meets: alike
        assert (uploaded.status_code, uploaded.json()["code"], uploaded.json()["field"]) == (in_line.status_code, in_line.json()["code"], in_line.json()["field"])
    else:
        assert uploaded.status_code == 400 and uploaded.json()["field"] == "upload_id", uploaded.text
        error = uploaded.json()["error"]  # what it held, named
        assert any(repr(k) in error for k in held if k not in ("inputs", "features", "batch")) if route == "plain" else ("parameters" in error or "an id" in error)


def test_an_upload_of_more_rows_than_an_asynchronous_endpoint_batches_is_refused_as_a_request_is(
    client: TestClient, keys: dict[str, str], echo: Echo, demo: Container, acme: Principal
) -> None:
    add_fake(demo.registry, "acme", "small", endpoint_name="small-ep", endpoint_url="http://127.0.0.1:9", invocation="async", max_batch_size=2)
    demo.deployments.create(acme, "small", {"kind": "single", "model": "small", "version": 1})
    data, header = binary_body(3)
    upload = make_upload(client, keys["acme"], deployment="small", content_type="application/octet-stream", size=len(data), header_size=header).json()
    assert post_form(client, upload, data).status_code == 204
    rows = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [3, 4], "data": list(range(12))}]}
    in_line = client.post("/v2/models/small/infer", json=rows, headers=auth(keys["acme"]))
    uploaded = client.post("/v2/models/small/infer", json={"inputs": [], "parameters": {"upload_id": upload["upload_id"]}}, headers=auth(keys["acme"]))
    assert in_line.status_code == uploaded.status_code == 400, (in_line.text, uploaded.text)
    assert "at most 2 rows" in uploaded.json()["error"] and uploaded.json()["field"] == "upload_id"
    assert echo.calls == []  # nothing queued


@pytest.mark.parametrize(
    ("beside", "field"),
    [
        ({"outputs": [{"name": "output"}]}, "outputs"),
        ({"outputs": [{"name": "output", "parameters": {"classification": 1}}]}, "outputs"),
        ({"parameters": {"binary_data_output": True}}, "parameters.binary_data_output"),
    ],
)
def test_what_is_asked_beside_an_upload_queued_as_it_lies_is_refused_never_dropped(
    client: TestClient, keys: dict[str, str], echo: Echo, demo: Container, beside: dict[str, Any], field: str
) -> None:
    """The asynchronous endpoint gets the uploaded body and nothing else: outputs, their
    classification or binary outputs asked in the request that names the upload would be
    dropped, so the request is refused naming the field, and nothing is queued."""
    data, header = binary_body(2)
    upload = make_upload(client, keys["acme_predict"], deployment="big", content_type="application/octet-stream", size=len(data), header_size=header).json()
    assert post_form(client, upload, data).status_code == 204
    body = {"inputs": [], **beside, "parameters": {**beside.get("parameters", {}), "upload_id": upload["upload_id"]}}
    answer = client.post("/v2/models/big/infer", json=body, headers=auth(keys["acme_predict"]))
    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == field and "upload" in answer.json()["error"]
    assert demo.runtimes["sagemaker"]._queue is None  # type: ignore[attr-defined]  # nothing queued
    # the same upload, asked for nothing beside it, is queued
    answer = client.post("/v2/models/big/infer", json={"inputs": [], "parameters": {"upload_id": upload["upload_id"]}}, headers=auth(keys["acme_predict"]))
    assert answer.status_code == 202, answer.text
    demo.runtimes["sagemaker"]._queue.shutdown(wait=True)  # type: ignore[attr-defined]
    assert len(echo.calls) == 1 and echo.calls[0]["Body"] == data
