"""Asynchronous inference through the API: 202 with the result resource, then the result,
for the caller's tenant only. The sagemaker runtime runs as the local twin does (its queue a
thread, its store the home's folder) against a container that echoes a fixed answer."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from sluice.demo import install_demo
from sluice.runtimes.sagemaker import SageMakerRuntime
from sluice.settings import Settings
from sluice.wiring import Container
from tests.conftest import MODELS
from tests.integration.conftest import api_keys, app_for, auth
from tests.integration.traffic_fakes import async_echo

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal


@pytest.fixture
def runtime(demo: Container, acme: Principal) -> SageMakerRuntime:
    return async_echo(demo, acme)[0]


def test_an_async_deployment_answers_202_and_the_result_is_the_callers_only(
    client: TestClient, keys: dict[str, str], runtime: SageMakerRuntime
) -> None:
    answer = client.post(
        "/api/v1/predictions", json={"deployment": "big", "inputs": [[1, 2, 3, 4], [5, 6, 7, 8]]}, headers=auth(keys["acme_predict"])
    )
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["status"] == "pending" and answer.headers["location"] == body["result"] == f"/api/v1/results/{body['id']}"
    runtime._queue.shutdown(wait=True)  # type: ignore[union-attr]  # the twin's queue has run it

    got = client.get(body["result"], headers=auth(keys["acme_predict"]))
    assert got.status_code == 200, got.text
    result = got.json()
    assert result["status"] == "succeeded" and result["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [2, 1], "data": [7.0, 7.0]}]
    other = client.get(body["result"], headers=auth(keys["globex"]))
    assert other.status_code == 404 and other.json()["field"] == "result_id"
    bad = client.get("/api/v1/results/not-an-id", headers=auth(keys["acme"]))
    assert bad.status_code == 400 and bad.json()["field"] == "result_id"
    assert client.get(body["result"]).status_code == 401


def test_v2_infer_answers_202_too(client: TestClient, keys: dict[str, str], runtime: SageMakerRuntime) -> None:
    request = {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    answer = client.post("/v2/models/big/infer", json=request, headers=auth(keys["acme"]))
    assert answer.status_code == 202 and answer.json()["id"]
    runtime._queue.shutdown(wait=True)  # type: ignore[union-attr]
    # queued requests are neither answers nor errors in the deployment's statistics
    stats = client.get("/api/v1/deployments/big/stats", headers=auth(keys["acme"])).json()
    assert (stats["overall"]["requests"], stats["overall"]["errors"]) == (0, 0)


@pytest.mark.parametrize("folder", ["Application Support", "josé"])
def test_results_are_served_from_a_home_whose_path_a_uri_escapes(tmp_path: Path, acme: Principal, folder: str) -> None:
    """`sluice serve` keeps results in its home, named by file:// URIs, which escape a space or
    a non-ASCII letter: a home under `~/Library/Application Support` or `/home/josé` serves them."""
    settings = Settings(mode="local", home=tmp_path / folder / "home", registry="", store="", deployment_cache_ttl_s=0)
    demo = Container.from_settings(settings)
    install_demo(demo, acme, MODELS)
    runtime, _ = async_echo(demo, acme)
    keys = api_keys(demo)
    app = app_for(demo)
    try:
        with TestClient(app) as client:
            queued = client.post("/api/v1/predictions", json={"deployment": "big", "inputs": [[1, 2, 3, 4]]}, headers=auth(keys["acme"]))
            assert queued.status_code == 202, queued.text
            runtime._queue.shutdown(wait=True)  # type: ignore[union-attr]
            got = client.get(queued.json()["result"], headers=auth(keys["acme"]))
            assert got.status_code == 200 and got.json()["status"] == "succeeded", got.text

            # an answer from an upload too large to send in line, kept as a result
            body = json.dumps({"batch": [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]}).encode()
            upload = client.post("/api/v1/uploads", json={"deployment": "iris", "size": len(body)}, headers=auth(keys["acme"])).json()
            posted = client.post(upload["url"], data=upload["fields"], files={"file": ("body", body, "application/json")})
            assert posted.status_code == 204, posted.text
            settings.limits.max_response_bytes = 64
            request = {"deployment": "iris", "upload_id": upload["upload_id"]}
            kept = client.post("/api/v1/predictions", json=request, headers=auth(keys["acme"]), follow_redirects=False)
            assert kept.status_code == 303, kept.text
            fetched = client.get(kept.headers["location"], headers=auth(keys["acme"]))
            assert fetched.status_code == 200 and [p["prediction"] for p in fetched.json()["predictions"]] == ["setosa", "virginica"]
            assert client.get(kept.headers["location"], headers=auth(keys["globex"])).status_code == 404
    finally:
        app.state.container = None


def test_the_openapi_schema_has_the_results_route(demo: Container) -> None:
    schema = TestClient(create_app(demo)).get("/openapi.json").json()
    assert "/api/v1/results/{result_id}" in schema["paths"]


def test_grpc_says_where_the_result_will_be() -> None:
    import grpc

    from sluice.domain.errors import Accepted
    from sluice.grpc_service.calls import status_of

    code, message, trailer = status_of(Accepted("queued", result_id="b" * 32, location="/api/v1/results/" + "b" * 32))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and message.endswith("/api/v1/results/" + "b" * 32)
    assert ("sluice-result", "/api/v1/results/" + "b" * 32) in trailer


ODD_ANSWERS = {  # what an endpoint's container may write where SageMaker keeps its answer
    "ragged": (b'{"outputs":[{"name":"y","datatype":"FP32","shape":[2],"data":[[1.0],[2.0,3.0]]}]}', None),
    "parameters of text": (b'{"outputs":[{"name":"y","datatype":"FP32","shape":[1],"data":[1.0],"parameters":"x"}]}', None),
    "past UINT8": (b'{"outputs":[{"name":"y","datatype":"UINT8","shape":[1],"data":[300]}]}', None),
    # Triton writes non-finite floats so in JSON: a model's log(0), an overflow
    "NaN and Infinity": (b'{"outputs":[{"name":"y","datatype":"FP32","shape":[3],"data":[NaN,-Infinity,Infinity]}]}', ["NaN", "-Infinity", "Infinity"]),
}


@pytest.mark.parametrize("case", sorted(ODD_ANSWERS))
def test_an_answer_of_an_odd_shape_is_a_failed_result_and_non_finite_numbers_are_read(demo: Container, case: str) -> None:
    """An answer the decoder tripped on was a 500 (whatever the container wrote), and one holding
    NaN or Infinity as Triton writes them a failed result (a 502 on the synchronous path)."""
    import time
    import uuid

    from sluice.storage.results import RECORD, record_bytes

    body, numbers = ODD_ANSWERS[case]
    store, rid, now = demo.results.store, uuid.uuid4().hex, time.time()
    output = store.put("acme", rid, "output", body, content_type="application/json")
    record = {"id": rid, "tenant": "acme", "model": "m", "version": 1, "created_at": now, "expires_at": now + 3600,
              "input": store.uri("acme", rid, "input"), "output": output, "failure": store.uri("acme", rid, "error")}  # fmt: skip
    store.put("acme", rid, RECORD, record_bytes(record))
    with TestClient(create_app(demo), raise_server_exceptions=False) as client:
        r = client.get(f"/api/v1/results/{rid}", headers=auth(api_keys(demo)["acme"]))
    assert r.status_code == 200, r.text
    if numbers is None:
        assert r.json()["status"] == "failed" and r.json()["error"]["code"] == "backend_error"
    else:
        assert b'"data":[NaN,-Infinity,Infinity]' in r.content, r.text  # as a v2 answer writes them (orjson wrote null)
        assert json.loads(r.content)["status"] == "succeeded"
