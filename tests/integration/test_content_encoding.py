"""Compressed bodies, as Triton's HTTP server takes and gives them: gzip and deflate requests
inflated under the body limit (held by the inflated size), other codings a 415 naming the ones
taken, and responses gzipped for a client that accepts it, locally and through API Gateway."""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.api.app import create_app
from tests.integration.conftest import auth
from tests.integration.test_edge import _call
from tests.support import LambdaContext

if TYPE_CHECKING:
    from sluice.wiring import Container

ROWS = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]
INFER = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 4], "data": [*ROWS[0], *ROWS[1]]}]}
CODINGS = {"gzip": gzip.compress, "deflate": zlib.compress, "raw deflate": lambda b: zlib.compress(b, wbits=-15)}


def _labels(body: dict[str, Any]) -> list[str]:
    return {o["name"]: o for o in body["outputs"]}["output_label"]["data"]


@pytest.mark.parametrize("coding", CODINGS)
def test_gzip_and_deflate_bodies_are_inflated_on_hot_and_framework_routes(client: TestClient, keys: dict[str, str], coding: str) -> None:
    compress = CODINGS[coding]
    headers = {**auth(keys["acme"]), "Content-Encoding": coding.split()[-1], "Content-Type": "application/json"}
    r = client.post("/v2/models/iris/infer", content=compress(json.dumps(INFER).encode()), headers=headers)
    assert r.status_code == 200, r.text
    assert _labels(r.json()) == ["setosa", "virginica"]
    # A route behind the framework reads the inflated body too.
    index = client.post("/v2/repository/index", content=compress(b'{"ready": false}'), headers=headers)
    assert index.status_code == 200 and "iris" in [m["name"] for m in index.json()]


def test_tritonclient_compressed_requests_binary_and_json(client: TestClient, keys: dict[str, str]) -> None:
    """The bodies tritonclient.http sends with request_compression_algorithm: its binary
    header length counts the inflated body."""
    import tritonclient.http as httpclient

    from tests.integration.test_binary_tensors import fp32, result_of

    rows = np.array(ROWS, dtype=np.float32)
    for algorithm, compress in (("gzip", gzip.compress), ("deflate", zlib.compress)):
        body, json_size = httpclient.InferenceServerClient.generate_request_body([fp32("input", rows)])
        headers = {**auth(keys["acme"]), "Content-Encoding": algorithm, "Inference-Header-Content-Length": str(json_size)}
        r = client.post("/v2/models/iris/infer", content=compress(body), headers=headers)
        assert [x.decode() for x in result_of(r).as_numpy("output_label")] == ["setosa", "virginica"]


def test_another_coding_is_a_415_naming_the_ones_taken(client: TestClient, keys: dict[str, str]) -> None:
    for path in ("/v2/models/iris/infer", "/api/v1/predictions", "/v2/repository/index"):
        r = client.post(path, content=b"\x0b\x01\x80{}\x03", headers={**auth(keys["acme"]), "Content-Encoding": "br"})
        assert r.status_code == 415, (path, r.text)
        assert r.json()["code"] == "unsupported_media_type" and r.json()["field"] == "content-encoding"
        assert "'br'" in r.json()["error"] and "gzip or deflate" in r.json()["error"]
        assert r.headers["accept-encoding"] == "gzip, deflate"
    plain = client.post("/v2/models/iris/infer", json=INFER, headers={**auth(keys["acme"]), "Content-Encoding": "identity"})
    assert plain.status_code == 200


@pytest.mark.parametrize("path", ["/v2/models/iris/infer", "/api/v1/deployments", "/api/v1/keys"])
def test_a_broken_compressed_body_is_a_400_naming_the_coding(client: TestClient, keys: dict[str, str], path: str) -> None:
    """On every route: a framework route's body reader passes the error on, rather than
    answering its own "error parsing the body" with no field."""
    whole = gzip.compress(json.dumps(INFER).encode())
    for body, why in ((b"not gzip at all", ""), (whole[:-12], "ends before"), (whole + b"junk", "bytes after")):
        r = client.post(path, content=body, headers={**auth(keys["acme"]), "Content-Encoding": "gzip", "Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["field"] == "body", r.text
        assert r.json()["code"] == "bad_request"
        assert r.json()["error"].startswith("the body is not valid gzip") and why in r.json()["error"]


@pytest.mark.parametrize("path", ["/v2/models/iris/infer", "/api/v1/models"])
def test_a_small_body_inflating_past_the_limit_is_a_413_never_inflated_whole(demo: Container, keys: dict[str, str], path: str) -> None:
    limit = 64 * 1024
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bomb.compress(b"0" * (16 * 1024 * 1024)) + bomb.flush()  # 16 MiB of zeros in ~16 KiB
    assert len(chunk) < limit
    pieces = [chunk[i : i + 1024] for i in range(0, len(chunk), 1024)]
    status, body, read = _call(create_app(demo, max_request_bytes=limit), "POST", path, {**auth(keys["acme"]), "content-encoding": "gzip"}, pieces)
    assert status == 413 and body["code"] == "payload_too_large" and body["field"] == "body"
    assert read < len(pieces)  # refused once the inflated bytes passed the limit


def test_a_body_inflating_within_the_limit_is_answered(demo: Container, keys: dict[str, str]) -> None:
    raw = json.dumps(INFER).encode()
    client = TestClient(create_app(demo, max_request_bytes=len(raw)))
    headers = {**auth(keys["acme"]), "Content-Encoding": "gzip"}
    assert client.post("/v2/models/iris/infer", content=gzip.compress(raw), headers=headers).status_code == 200
    over = TestClient(create_app(demo, max_request_bytes=len(raw) - 1))
    assert over.post("/v2/models/iris/infer", content=gzip.compress(raw), headers=headers).status_code == 413


def test_responses_are_gzipped_when_accepted_and_large_enough(client: TestClient, keys: dict[str, str]) -> None:
    many = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [100, 4], "data": ROWS[0] * 100}]}
    r = client.post("/v2/models/iris/infer", json=many, headers={**auth(keys["acme"]), "Accept-Encoding": "gzip"})
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
    assert int(r.headers["content-length"]) < len(r.content) / 3  # what came was far smaller than what it reads as
    assert len(_labels(r.json())) == 100
    # Not asked: not compressed. Too small to gain: not compressed.
    plain = client.post("/v2/models/iris/infer", json=many, headers={**auth(keys["acme"]), "Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.json()["outputs"] == r.json()["outputs"]
    small = client.get("/v2/health/live", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in small.headers
    # The framework's routes too (Starlette's middleware).
    document = client.get("/openapi.json", headers={"Accept-Encoding": "gzip"})
    assert document.headers["content-encoding"] == "gzip" and document.json()["info"]["title"] == "sluice"
    assert "content-encoding" not in client.get("/openapi.json", headers={"Accept-Encoding": "identity"}).headers


def test_tritonclient_reads_a_gzipped_binary_answer(client: TestClient, keys: dict[str, str]) -> None:
    import tritonclient.http as httpclient

    from tests.integration.test_binary_tensors import fp32

    rows = np.array(ROWS * 200, dtype=np.float32)
    body, json_size = httpclient.InferenceServerClient.generate_request_body([fp32("input", rows)])
    headers = {**auth(keys["acme"]), "Inference-Header-Content-Length": str(json_size), "Accept-Encoding": "gzip"}
    r = client.post("/v2/models/iris/infer", content=body, headers=headers)
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
    result = httpclient.InferResult.from_response_body(r.content, header_length=int(r.headers["inference-header-content-length"]))
    assert result.as_numpy("output_probability").shape == (400, 3)


@pytest.mark.parametrize("accept", ["gzip", "identity", None], ids=["gzip", "identity", "not-said"])
def test_every_answer_whose_coding_accept_encoding_picks_says_vary_accept_encoding(client: TestClient, keys: dict[str, str], accept: str | None) -> None:
    """A cache must not give one client's gzipped answer to another that did not ask: every
    answer that would have been gzipped for a client asking (a large enough one) says
    `Vary: Accept-Encoding`, whether it was gzipped (asked) or not (not asked, or too small),
    on the hot routes and the framework's. The protocol's other routes, never gzipped, do not."""
    many = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [100, 4], "data": ROWS[0] * 100}]}
    said = {"Accept-Encoding": accept} if accept is not None else {}
    with TestClient(client.app, headers={"Accept-Encoding": ""}) as plain:
        plain.headers.pop("Accept-Encoding")  # httpx asks for gzip unless told
        answers = [
            plain.post("/v2/models/iris/infer", json=many, headers={**auth(keys["acme"]), **said}),
            plain.post("/v2/models/iris/infer", json=INFER, headers={**auth(keys["acme"]), **said}),  # too small to gain
            plain.post("/api/v1/predictions", json={"deployment": "iris", "inputs": ROWS}, headers={**auth(keys["acme"]), **said}),
            plain.get("/openapi.json", headers=said),
            plain.get("/api/v1/deployments", headers={**auth(keys["acme"]), **said}),
        ]
        for r in answers:
            assert r.status_code == 200, r.text
            assert [v.strip().lower() for v in r.headers.get("vary", "").split(",")].count("accept-encoding") == 1, (r.url, r.headers)
            assert ("content-encoding" in r.headers) == (accept == "gzip" and len(r.content) >= 1024), (r.url, r.headers)
        assert "vary" not in plain.get("/v2/health/live", headers=said).headers


@pytest.fixture
def handler(demo: Container) -> Any:
    from sluice.handlers import api

    previous = api.app.state.container
    api.app.state.container = demo
    yield api.handler
    api.app.state.container = previous


def _event(path: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """A REST API event: every body base64-encoded (the API's binary media types are */*)."""
    from tests.integration.test_lambda_api import load

    event = load("api_rest_v2_infer.json")
    return {
        **event,
        "path": path,
        "resource": "/{proxy+}",
        "headers": {**event["headers"], **headers},
        "multiValueHeaders": {k: [v] for k, v in {**event["headers"], **headers}.items()},
        "body": base64.b64encode(body).decode(),
        "isBase64Encoded": True,
    }


def test_through_api_gateway_a_gzipped_request_is_read_and_the_answer_goes_back_gzipped(handler: Any, keys: dict[str, str]) -> None:
    many = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [100, 4], "data": ROWS[1] * 100}]}
    headers = {**auth(keys["acme"]), "Content-Encoding": "gzip", "Accept-Encoding": "gzip", "Content-Type": "application/json"}
    response = handler(_event("/v2/models/iris/infer", gzip.compress(json.dumps(many).encode()), headers), LambdaContext())
    assert response["statusCode"] == 200, response
    out = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    out |= {k.lower(): v[0] for k, v in (response.get("multiValueHeaders") or {}).items()}
    assert out["content-encoding"] == "gzip" and response["isBase64Encoded"] is True  # bytes, not text, to API Gateway
    assert _labels(json.loads(gzip.decompress(base64.b64decode(response["body"])))) == ["virginica"] * 100
    refused = handler(_event("/v2/models/iris/infer", b"x", {**headers, "Content-Encoding": "br"}), LambdaContext())
    assert refused.get("statusCode") == 415


def test_through_api_gateway_a_body_it_inflated_already_is_taken_as_it_is(handler: Any, keys: dict[str, str]) -> None:
    """API Gateway inflates a gzip or deflate request itself where it can, passing the
    Content-Encoding header on: the plain body is read, not refused as broken gzip."""
    headers = {**auth(keys["acme"]), "Content-Type": "application/json"}
    for coding in ("gzip", "deflate"):
        response = handler(_event("/v2/models/iris/infer", json.dumps(INFER).encode(), {**headers, "Content-Encoding": coding}), LambdaContext())
        assert response["statusCode"] == 200, response
        body = response["body"] if not response.get("isBase64Encoded") else base64.b64decode(response["body"]).decode()
        assert _labels(json.loads(body)) == ["setosa", "virginica"]
    # A framework route too (the ASGI path, not the hot one).
    index = handler(_event("/v2/repository/index", b"{}", {**headers, "Content-Encoding": "gzip"}), LambdaContext())
    assert index["statusCode"] == 200, index


def test_locally_a_plain_body_said_to_be_gzip_is_a_400(client: TestClient, keys: dict[str, str]) -> None:
    """Only API Gateway inflates on the way: elsewhere a body must be what it says it is."""
    r = client.post("/v2/models/iris/infer", content=json.dumps(INFER).encode(), headers={**auth(keys["acme"]), "Content-Encoding": "gzip"})
    assert r.status_code == 400 and r.json()["error"].startswith("the body is not valid gzip")


def test_the_protocols_other_routes_are_never_gzipped(demo: Container, keys: dict[str, str], acme: Any) -> None:
    """As Triton, which compresses inference answers alone: tritonclient.http.aio sends
    `Accept-Encoding: gzip` (aiohttp's default) on every call but reads only an inference
    answer compressed."""
    for i in range(40):
        demo.deployments.create(acme, f"iris-{i:02}", {"kind": "single", "model": "iris", "version": 1})
    client = TestClient(create_app(demo))
    headers = {**auth(keys["acme"]), "Accept-Encoding": "gzip, deflate, br"}
    index = client.post("/v2/repository/index", headers=headers)
    assert len(index.content) > 1024 and "content-encoding" not in index.headers
    assert "content-encoding" not in client.get("/v2/models/stats", headers=headers).headers
    # sluice's own routes are gzipped when large enough.
    listed = client.get("/api/v1/deployments", headers=headers)
    assert listed.status_code == 200 and listed.headers["content-encoding"] == "gzip" and "iris-39" in listed.text


def test_two_content_encoding_fields_are_one_list_of_codings(client: TestClient, keys: dict[str, str]) -> None:
    """`gzip` twice says the body was gzipped twice: refused as a coding not taken, never read
    as if once."""
    body = gzip.compress(gzip.compress(json.dumps(INFER).encode()))
    headers = [("authorization", f"Bearer {keys['acme']}"), ("content-encoding", "gzip"), ("content-encoding", "gzip")]
    r = client.post("/v2/models/iris/infer", content=body, headers=headers)
    assert r.status_code == 415 and r.json()["field"] == "content-encoding", r.text


@given(cuts=st.lists(st.integers(0, len(json.dumps(INFER))), max_size=4), piece=st.integers(1, 64))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_a_gzip_body_of_several_members_is_read_whole_under_the_limit(demo: Container, keys: dict[str, str], cuts: list[int], piece: int) -> None:
    """RFC 1952: a gzip file is members one after another (`gzip.compress(a) + gzip.compress(b)`,
    which Python's and Go's readers take), however the body arrives in pieces; the limit holds
    for all of them together."""
    raw = json.dumps(INFER).encode()
    bounds = [0, *sorted(cuts), len(raw)]
    body = b"".join(gzip.compress(raw[a:b]) for a, b in pairwise(bounds))
    pieces = [body[i : i + piece] for i in range(0, len(body), piece)]
    headers = {**auth(keys["acme"]), "content-encoding": "gzip"}
    status, answer, _ = _call(create_app(demo, max_request_bytes=len(raw)), "POST", "/v2/models/iris/infer", headers, pieces)
    assert status == 200 and _labels(answer) == ["setosa", "virginica"], answer
    status, answer, _ = _call(create_app(demo, max_request_bytes=len(raw) - 1), "POST", "/v2/models/iris/infer", headers, pieces)
    assert status == 413 and answer["field"] == "body"


_GZIP_SPELLINGS = st.sampled_from(["gzip", "GZIP", "Gzip", "x-gzip", "X-GZIP", " gzip", "gzip\t"])
_NOTHING = st.sampled_from(["", " ", "identity", "IDENTITY", " identity "])


@given(
    before=st.lists(_NOTHING, max_size=3), after=st.lists(_NOTHING, max_size=3), spelling=_GZIP_SPELLINGS,
    twice=st.booleans(), fields=st.integers(1, 3),
)  # fmt: skip
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_a_coding_list_is_read_as_rfc_9110_says_whatever_its_spelling(
    client: TestClient, keys: dict[str, str], before: list[str], after: list[str], spelling: str, twice: bool, fields: int
) -> None:
    """Empty members are ignored, `x-gzip` is gzip, `identity` is no coding, over any number of
    fields: one gzip among them is read as gzip, two as gzipped twice (a 415, never read as
    once)."""
    members = [*before, spelling, *([spelling] if twice else []), *after]
    cut = sorted({round(i * len(members) / fields) for i in range(1, fields)})
    values = [",".join(members[a:b]) for a, b in pairwise([0, *cut, len(members)])]
    raw = json.dumps(INFER).encode()
    body = gzip.compress(gzip.compress(raw)) if twice else gzip.compress(raw)
    headers = [("authorization", f"Bearer {keys['acme']}"), *(("content-encoding", v) for v in values)]
    r = client.post("/v2/models/iris/infer", content=body, headers=headers)
    if twice:
        assert r.status_code == 415 and r.json()["field"] == "content-encoding" and "'gzip, gzip'" in r.json()["error"], (values, r.text)
    else:
        assert r.status_code == 200 and _labels(r.json()) == ["setosa", "virginica"], (values, r.text)


def test_nothing_but_empty_members_and_identity_is_no_coding(client: TestClient, keys: dict[str, str]) -> None:
    for value in (",", " , ", "identity, ,identity"):
        r = client.post("/v2/models/iris/infer", json=INFER, headers={**auth(keys["acme"]), "Content-Encoding": value})
        assert r.status_code == 200, (value, r.text)
