"""A deployment's kept answers against answers computed: any sequence of requests (inputs drawn
from a few rows, so that some are asked again; simple JSON rows or features, or v2; a version
pinned or not; outputs, classification and options asked or not) sent to a deployment with the
prediction cache and to the same policy without it gets the same answers, request by request,
but for what marks an answer kept (`cached`) and what differs per request (its id, latency)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import MODELS
from tests.integration.conftest import api_keys, auth
from tests.support import steady

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

ROWS = ([5.9, 3.0, 5.1, 1.8], [5.1, 3.5, 1.4, 0.2], [6.3, 2.8, 4.9, 1.5])
NAMES = ("sepal_length", "sepal_width", "petal_length", "petal_width")
NOT_THE_ANSWER = ("request_id", "latency_ms", "cached", "id", "deployment", "model_name")

_REQUEST = st.fixed_dictionaries({
    "form": st.sampled_from(["rows", "features", "v2"]),
    "rows": st.lists(st.sampled_from(range(len(ROWS))), min_size=1, max_size=2),
    "version": st.sampled_from([None, None, 1, 2]),
    "outputs": st.sampled_from([None, None, ["output_label"], ["output_probability"], ["output_label", "output_probability"]]),
    "classification": st.sampled_from([None, None, 1, 3]),
    "probabilities": st.sampled_from([None, True, False]),
})  # fmt: skip


def _send(client: TestClient, key: str, deployment: str, r: dict[str, Any]) -> tuple[int, Any]:
    rows = [ROWS[i] for i in r["rows"]]
    if r["form"] == "v2":
        outputs = [{"name": n, **({"parameters": {"classification": r["classification"]}} if r["classification"] else {})} for n in r["outputs"] or ()]
        body: dict[str, Any] = {"inputs": [{"name": "input", "shape": [len(rows), 4], "datatype": "FP32", "data": [v for row in rows for v in row]}]}
        if outputs:
            body["outputs"] = outputs
        path = f"/v2/models/{deployment}" + (f"/versions/{r['version']}" if r["version"] else "") + "/infer"
    else:
        body = {"deployment": deployment, **({"version": r["version"]} if r["version"] else {})}
        body |= {"inputs": rows} if r["form"] == "rows" else {"features": dict(zip(NAMES, rows[0], strict=True))}
        if r["probabilities"] is not None:
            body["options"] = {"return_probabilities": r["probabilities"]}
        path = "/api/v1/predictions"
    response = client.post(path, json=body, headers=auth(key))
    return response.status_code, response.json()


_KEYS: dict[int, str] = {}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(requests=st.lists(_REQUEST, min_size=1, max_size=12))
def test_a_kept_answer_is_the_computed_one(demo: Container, acme: Principal, client: TestClient, requests: list[dict[str, Any]]) -> None:
    key = _KEYS.get(id(demo))
    if key is None:  # once per container: hypothesis calls this with the same fixtures
        _KEYS.clear()
        demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())  # iris:2 beside iris:1
        key = _KEYS[id(demo)] = api_keys(demo)["acme"]
        policy = {"kind": "single", "model": "iris", "version": 1}
        for name, cache in (("kept", {"ttl_s": 600, "max_entries": 100}), ("computed", None)):
            created = client.post("/api/v1/deployments", json={"name": name, "policy": policy, "cache": cache}, headers=auth(key))
            assert created.status_code == 201, created.text
    for request in requests:
        (status, kept), (expected_status, computed) = _send(client, key, "kept", request), _send(client, key, "computed", request)
        event("kept" if kept.get("cached") or (kept.get("parameters") or {}).get("cached") else "computed")
        assert status == expected_status, (request, kept, computed)
        assert steady(kept, NOT_THE_ANSWER) == steady(computed, NOT_THE_ANSWER), request
