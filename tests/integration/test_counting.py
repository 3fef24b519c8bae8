"""Every prediction request counted once, by outcome, whichever door it came through and
wherever it failed: Prometheus's requests and errors, and the deployment's statistics."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.api.app import create_app
from sluice.metrics import PrometheusMetrics
from tests.integration.conftest import auth
from tests.integration.test_metrics import value

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container

SETOSA = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}
V2 = "/v2/models/iris/infer"


@pytest.fixture
def metered(demo: Container) -> Container:
    demo.telemetry.sink = PrometheusMetrics()  # type: ignore[union-attr]
    return demo


def figures(container: Container, principal: Principal) -> dict[str, float]:
    """What a dashboard reads for iris: Prometheus's requests and 4xx errors, and the
    deployment statistics' requests and errors."""
    text = container.telemetry.sink.exposition(principal.tenant).decode()  # type: ignore[union-attr]
    overall = container.deployments.stats(principal, "iris")["overall"]
    return {
        "requests": value(text, "ml_inference_requests_total", deployment="iris"),
        "refused": value(text, "ml_inference_requests_total", deployment="iris", **{"class": "4xx"}),
        "errors_400": value(text, "ml_inference_errors_total", deployment="iris", status="400", **{"class": "4xx"}),
        "stats_requests": overall["requests"],
        "stats_errors": overall["errors"],
        "stats_invalid": overall["invalid_inputs"],
    }


def moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


ONE_400 = {"requests": 1, "refused": 1, "errors_400": 1, "stats_requests": 1, "stats_errors": 1, "stats_invalid": 1}


def test_a_refused_simple_json_request_is_counted(metered: Container, keys: dict[str, str], acme: Principal) -> None:
    client = TestClient(create_app(metered))
    before = figures(metered, acme)
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "features": {"sepal_length": 5.1}}, headers=auth(keys["acme"]))
    assert r.status_code == 400, r.text
    assert moved(before, figures(metered, acme)) == ONE_400


def test_a_refused_v2_request_is_counted(metered: Container, keys: dict[str, str], acme: Principal) -> None:
    client = TestClient(create_app(metered))
    before = figures(metered, acme)
    body = {"inputs": [{"name": "input", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
    r = client.post(V2, json=body, headers=auth(keys["acme"]))
    assert r.status_code == 400, r.text
    assert moved(before, figures(metered, acme)) == ONE_400


def test_a_binary_body_refused_before_the_prediction_is_counted(metered: Container, keys: dict[str, str], acme: Principal) -> None:
    """Refused by the door's decoding, before the prediction call: counted all the same."""
    client = TestClient(create_app(metered))
    before = figures(metered, acme)
    header = json.dumps({"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]}).encode()
    r = client.post(
        V2, content=header + struct.pack("<2f", 1, 2),
        headers={**auth(keys["acme"]), "Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"},
    )  # fmt: skip
    assert r.status_code == 400 and "binary_data_size" in r.json()["error"], r.text
    assert moved(before, figures(metered, acme)) == ONE_400


def test_a_refused_grpc_request_is_counted(metered: Container, keys: dict[str, str], acme: Principal) -> None:
    pytest.importorskip("grpc", reason="needs the grpc extra")
    grpcclient = pytest.importorskip("tritonclient.grpc")
    import numpy as np

    from tests.integration.grpc.conftest import auth as grpc_auth
    from tests.integration.grpc.conftest import fails, run_server

    before = figures(metered, acme)
    with run_server(metered) as url:
        client = grpcclient.InferenceServerClient(url)
        tensor = grpcclient.InferInput("input", [1, 3], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 3), dtype=np.float32))
        refused = fails(client.infer, "iris", [tensor], headers=grpc_auth(keys["acme"]))
        assert refused.status() == "StatusCode.INVALID_ARGUMENT"
        streamed: list[Any] = []
        client.start_stream(callback=lambda result, error: streamed.append(error), headers=grpc_auth(keys["acme"]))
        client.async_stream_infer("iris", [tensor])
        client.stop_stream()
        assert len(streamed) == 1 and streamed[0] is not None  # a stream's failed message
        client.close()
    twice = {k: 2 * v for k, v in ONE_400.items()}
    assert moved(before, figures(metered, acme)) == twice


def test_a_refused_websocket_message_is_counted(metered: Container, keys: dict[str, str], acme: Principal) -> None:
    client = TestClient(create_app(metered))
    before = figures(metered, acme)
    with client.websocket_connect("/api/v1/stream", headers=auth(keys["acme"])) as ws:
        ws.send_json({"deployment": "iris", "features": {"sepal_length": 5.1}})
        answer = ws.receive_json()
    assert answer["status"] == 400, answer
    assert moved(before, figures(metered, acme)) == ONE_400


def test_a_stream_record_refused_as_it_is_read_is_counted(metered: Container, acme: Principal) -> None:
    """As a refused request is on every door: each record refused before its call (a value out
    of FP32's range, a shape, an id past its length) is one failed request of the stream's
    deployment, its inputs refused. They were counted nowhere: a rollout gate never saw them."""
    import asyncio

    from sluice.stream.core import StreamScorer
    from sluice.stream.records import StreamRecord

    bodies = [{"inputs": [[1e39, 1, 1, 1]]}, {"inputs": [[1, 2, 3]]}, {"id": "a" * 129, "features": SETOSA}]
    records = [StreamRecord(json.dumps(b), "kafka:t", n, {"offset": n}) for n, b in enumerate(bodies)]
    before = figures(metered, acme)
    outputs = [o.output for o in asyncio.run(StreamScorer(metered.predictions, "acme", "iris").score(records))]
    assert all("error" in o for o in outputs), outputs
    metered.predictions.stats.flush()
    moved_by = moved(before, figures(metered, acme))
    assert {k: moved_by[k] for k in ("requests", "refused", "stats_requests", "stats_errors", "stats_invalid")} == dict.fromkeys(
        ("requests", "refused", "stats_requests", "stats_errors", "stats_invalid"), 3
    ), moved_by


def test_a_simple_json_body_refused_by_its_schema_is_counted_under_the_deployment_it_names(metered: Container, keys: dict[str, str], acme: Principal) -> None:
    """As a WebSocket message's is: it was counted under no deployment over HTTP."""
    client = TestClient(create_app(metered))
    before = figures(metered, acme)
    r = client.post("/api/v1/predictions", json={"deployment": "iris", "features": SETOSA, "zzz": 1}, headers=auth(keys["acme"]))
    assert r.status_code == 422, r.text
    moved_by = moved(before, figures(metered, acme))
    assert (moved_by["requests"], moved_by["stats_requests"], moved_by["stats_errors"]) == (1, 1, 1), moved_by


def test_a_name_that_finds_no_deployment_is_counted_under_none(metered: Container, keys: dict[str, str], acme: Principal) -> None:
    client = TestClient(create_app(metered))
    r = client.post("/v2/models/made-up/infer", json={"inputs": []}, headers=auth(keys["acme"]))
    assert r.status_code == 404, r.text
    r = client.post("/api/v1/predictions", content=b"{not json", headers={**auth(keys["acme"]), "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    text = metered.telemetry.sink.exposition("acme").decode()  # type: ignore[union-attr]
    assert value(text, "ml_inference_errors_total", deployment="", status="404", code="not_found") == 1
    assert value(text, "ml_inference_errors_total", deployment="", status="422", code="invalid_request") == 1
    assert value(text, "ml_inference_requests_total", deployment="") == 2
    assert "made-up" not in text  # a caller's made-up names make no series


# Each kind of request, and whether iris's statistics see it (False: no deployment was named).
KINDS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "good_simple": ("/api/v1/predictions", {"deployment": "iris", "features": SETOSA}, True),
    "good_v2": (V2, {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}]}, True),
    "bad_input": ("/api/v1/predictions", {"deployment": "iris", "features": {"petal_width": "wide"}}, True),
    "bad_shape": (V2, {"inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32", "data": [1.0]}]}, True),
    "bad_version": ("/v2/models/iris/versions/99/infer", {"inputs": []}, True),
    "unknown": ("/api/v1/predictions", {"deployment": "nope", "features": SETOSA}, False),
    "unparsed": ("/api/v1/predictions", {"deployment": 3}, False),
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=12))
def test_any_mix_of_requests_is_counted_once_each(metered: Container, keys: dict[str, str], acme: Principal, mix: list[str]) -> None:
    client = TestClient(create_app(metered))
    metered.telemetry.sink = sink = PrometheusMetrics()  # type: ignore[union-attr]
    before = metered.deployments.stats(acme, "iris")["overall"]
    statuses, seen_by_iris = [], []
    for kind in mix:
        path, body, named = KINDS[kind]
        statuses.append(client.post(path, json=body, headers=auth(keys["acme"])).status_code)
        seen_by_iris.append(named)
    text = sink.exposition("acme").decode()
    failed = [s for s in statuses if not 200 <= s < 300]
    assert value(text, "ml_inference_requests_total") == len(mix)
    assert value(text, "ml_inference_errors_total") == len(failed)
    assert value(text, "ml_inference_requests_total", **{"class": "2xx"}) == len(mix) - len(failed)
    for cls in ("4xx", "5xx"):
        assert value(text, "ml_inference_errors_total", **{"class": cls}) == sum(1 for s in failed if f"{s // 100}xx" == cls)
    after = metered.deployments.stats(acme, "iris")["overall"]
    assert after["requests"] - before["requests"] == sum(seen_by_iris)
    assert after["errors"] - before["errors"] == sum(1 for s, n in zip(statuses, seen_by_iris, strict=True) if n and s >= 300)


def test_a_prediction_past_its_keys_rate_is_counted(tmp_path: Path, acme: Principal) -> None:
    from sluice.demo import install_demo
    from sluice.settings import Settings
    from sluice.wiring import Container
    from tests.conftest import MODELS

    container = Container.from_settings(Settings(mode="local", home=tmp_path / "home", rate_limit="1/minute"))
    install_demo(container, acme, MODELS)
    container.telemetry.sink = sink = PrometheusMetrics()  # type: ignore[union-attr]
    _, key = container.keys.create("acme", ["admin", "predict"])
    client = TestClient(create_app(container))
    body = {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}]}
    assert client.post(V2, json=body, headers=auth(key)).status_code == 200
    assert client.post(V2, json=body, headers=auth(key)).status_code == 429
    text = sink.exposition("acme").decode()
    assert value(text, "ml_inference_requests_total", deployment="iris") == 2
    assert value(text, "ml_inference_errors_total", deployment="iris", status="429", code="rate_limited") == 1


def test_a_grpc_answer_too_large_to_send_is_counted_once(metered: Container, keys: dict[str, str], acme: Principal) -> None:
    pytest.importorskip("grpc", reason="needs the grpc extra")
    grpcclient = pytest.importorskip("tritonclient.grpc")
    import numpy as np

    from tests.integration.grpc.conftest import auth as grpc_auth
    from tests.integration.grpc.conftest import fails, run_server

    metered.settings.limits.max_response_bytes = 1024
    rows = grpcclient.InferInput("input", [2000, 10], "FP32")
    rows.set_data_from_numpy(np.zeros((2000, 10), dtype=np.float32))
    with run_server(metered) as url:
        client = grpcclient.InferenceServerClient(url)
        refused = fails(client.infer, "diabetes", [rows], headers=grpc_auth(keys["acme"]))
        assert refused.status() == "StatusCode.RESOURCE_EXHAUSTED"
        client.close()
    text = metered.telemetry.sink.exposition("acme").decode()  # type: ignore[union-attr]
    assert value(text, "ml_inference_requests_total", deployment="diabetes") == 1  # the model answered: once


def test_sluice_deployments_stats_shows_the_refused_inputs(cli_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import MODELS
    from tests.integration.conftest import run_cli

    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    policy = json.dumps({"kind": "single", "model": "iris", "version": 1})
    assert run_cli(capsys, "deployments", "create", "iris", "--policy", policy)[0] == 0
    assert run_cli(capsys, "predict", "iris", "--inputs", json.dumps([[5.1, 3.5, 1.4, 0.2]]))[0] == 0
    code, _, err = run_cli(capsys, "predict", "iris", "--inputs", json.dumps([[5.1, 3.5, 1.4]]))
    assert code != 0 and "input" in err
    code, out, _ = run_cli(capsys, "deployments", "stats", "iris")
    header, everything = (line.split() for line in out.splitlines()[1:3])
    shown = dict(zip([h.lower() for h in header], everything, strict=False))
    assert (shown["requests"], shown["errors"], shown["invalid_inputs"]) == ("2", "1", "1")
    shown = json.loads(run_cli(capsys, "deployments", "stats", "iris", "--json")[1])["overall"]
    assert (shown["invalid_inputs"], shown["invalid_input_rate"], shown["error_rate"]) == (1, 0.5, 0.5)
