"""A sticky split picks by the routing key alone, however it comes: for any key, the variant
that answers is the same whether the key is the header the policy names (in whatever case the
client spells it) or the request's own `routing_key`, over simple JSON, v2 (its
`parameters.routing_key`) and a WebSocket message (the header its handshake carried)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import MODELS
from tests.integration.conftest import api_keys, auth
from tests.support import single, split_policy

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

ROW = [5.9, 3.0, 5.1, 1.8]
_KEYS: dict[int, str] = {}
_USER = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)  # a header's visible ASCII
_SPELLING = st.sampled_from(["x-user-id", "X-User-Id", "X-USER-ID"])  # the policy names X-User-Id


def _versions(client: TestClient, key: str, user: str, spelling: str) -> dict[str, Any]:
    header = {**auth(key), spelling: user}
    simple = {"deployment": "split", "inputs": [ROW]}
    v2 = {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": ROW}]}
    seen = {
        "simple, header": client.post("/api/v1/predictions", json=simple, headers=header).json()["version"],
        "simple, routing_key": client.post("/api/v1/predictions", json={**simple, "routing_key": user}, headers=auth(key)).json()["version"],
        "v2, header": client.post("/v2/models/split/infer", json=v2, headers=header).json()["model_version"],
        "v2, parameters": client.post("/v2/models/split/infer", json={**v2, "parameters": {"routing_key": user}}, headers=auth(key)).json()["model_version"],
    }
    with client.websocket_connect("/api/v1/stream", headers=auth(key)) as ws:
        ws.send_json({**simple, "routing_key": user})
        seen["websocket, routing_key"] = ws.receive_json()["version"]
    with client.websocket_connect("/api/v1/stream", headers=header) as ws:
        ws.send_json(simple)
        seen["websocket, handshake header"] = ws.receive_json()["version"]
    return {k: str(v) for k, v in seen.items()}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(user=_USER, spelling=_SPELLING)
def test_the_same_key_finds_the_same_variant_everywhere(demo: Container, acme: Principal, client: TestClient, user: str, spelling: str) -> None:
    key = _KEYS.get(id(demo))
    if key is None:  # once per container: hypothesis calls this with the same fixtures
        _KEYS.clear()
        demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())  # iris:2 beside iris:1
        key = _KEYS[id(demo)] = api_keys(demo)["acme"]
        policy = split_policy({"stable": (50.0, single("iris", 1)), "canary": (50.0, single("iris", 2))}, routing_key="X-User-Id")
        created = client.post("/api/v1/deployments", json={"name": "split", "policy": policy}, headers=auth(key))
        assert created.status_code == 201, created.text
    versions = _versions(client, key, user, spelling)
    event(f"version {versions['simple, header']}")
    assert len(set(versions.values())) == 1, versions


def test_a_v2_routing_key_is_text_or_a_whole_number_and_nothing_else(demo: Container, acme: Principal, client: TestClient) -> None:
    """`parameters.routing_key` is free-form JSON in v2: a whole number routes as its digits
    (a user id sent as a number finds the variant its text does), and anything else (an
    object, a list, true, a fraction) or text past 256 characters is refused naming it, never
    read as its Python spelling (`{'a': 1}`, `True`) or, for false and 0, as no key at all."""
    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    key = api_keys(demo)["acme"]
    policy = split_policy({"stable": (50.0, single("iris", 1)), "canary": (50.0, single("iris", 2))}, routing_key="X-User-Id")
    assert client.post("/api/v1/deployments", json={"name": "split", "policy": policy}, headers=auth(key)).status_code == 201
    v2 = {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": ROW}]}

    def infer(routing_key: Any) -> Any:
        return client.post("/v2/models/split/infer", json={**v2, "parameters": {"routing_key": routing_key}}, headers=auth(key))

    for number in (0, 7, 12345678901234567890):
        as_number, as_text = infer(number), infer(str(number))
        assert as_number.status_code == 200 and as_number.json()["model_version"] == as_text.json()["model_version"], as_number.text
    for wrong in ({"a": 1}, ["u1"], True, False, 1.5, "u" * 257):
        r = infer(wrong)
        # An object or a list is no parameter at all (422, as the body's schema refuses it); the others no routing key (400).
        assert r.status_code == (422 if isinstance(wrong, dict | list) else 400) and r.json()["field"] == "parameters.routing_key", (wrong, r.text)
    # The header the split names is held to the same length, on either door (it was taken whole),
    # and under an ensemble too: the request's fault, not a member failing (a 502, or a member
    # dropped); a hedge refused by every member says why too.
    for aggregator in ("first_success", "mean"):
        other = {"kind": "ref", "deployment": "split"} if aggregator == "first_success" else single("iris", 1)
        members = [{"name": "split", "target": {"kind": "ref", "deployment": "split"}}, {"name": "other", "target": other}]
        policy = {"kind": "ensemble", "aggregator": aggregator, "members": members, "min_members": 1}
        made = client.post("/api/v1/deployments", json={"name": f"ens-{aggregator.replace('_', '-')}", "policy": policy}, headers=auth(key))
        assert made.status_code == 201, made.text
    for door, body in (
        ("/v2/models/split/infer", v2), ("/api/v1/predictions", {"deployment": "split", "inputs": [ROW]}),
        ("/api/v1/predictions", {"deployment": "ens-first-success", "inputs": [ROW]}), ("/v2/models/ens-mean/infer", v2),
    ):  # fmt: skip
        at_limit = client.post(door, json=body, headers={**auth(key), "X-User-Id": "u" * 256})
        over = client.post(door, json=body, headers={**auth(key), "X-User-Id": "u" * 257})
        assert at_limit.status_code == 200 and (over.status_code, over.json().get("field")) == (400, "headers.X-User-Id"), (door, body, at_limit.text, over.text)


def _streamed(demo: Container, deployment: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import asyncio
    import json

    from sluice.stream.core import StreamScorer
    from sluice.stream.records import StreamRecord

    records = [StreamRecord(json.dumps(b), "kafka:t", n, {"offset": n}) for n, b in enumerate(bodies)]
    return [o.output for o in asyncio.run(StreamScorer(demo.predictions, "acme", deployment).score(records))]


def test_a_stream_record_routes_by_the_field_a_sticky_split_names_wherever_the_split_stands(demo: Container, acme: Principal) -> None:
    """docs/streaming.md: `routing_key` (or the field a sticky split names) routes a record. A
    split that is a shadow's primary, or nested in another, reads its field too (the record was
    refused: 'unknown field'), and the record goes where a request with that key goes; one key
    routes a record, so two such fields that differ are refused, naming the second."""
    import numpy as np

    from sluice.domain.requests import ArrayInputs, PredictionRequest
    from sluice.inference.loop import run

    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    split = split_policy({"stable": (50.0, single("iris", 1)), "canary": (50.0, single("iris", 2))}, routing_key="x-user-id")
    demo.deployments.create(acme, "shadowed", {"kind": "shadow", "primary": split, "mirrors": [{"name": "m", "target": single("iris", 2), "sample_percent": 0}]})
    teams = split_policy({"stable": (50.0, single("iris", 1)), "canary": (50.0, single("iris", 2))}, routing_key="x-team")
    demo.deployments.create(acme, "nested", split_policy({"one": (50.0, teams), "two": (50.0, teams)}, routing_key="x-user-id"))
    users = [f"user-{n}" for n in range(12)]

    def alone(deployment: str, user: str) -> str:
        request = PredictionRequest(deployment, ArrayInputs({"input": np.asarray([ROW], np.float32)}), routing_key=user)
        return str(run(demo.predictions.predict(acme, request)).answer.variant)

    demo.deployments.create(acme, "through", {"kind": "shadow", "primary": {"kind": "ref", "deployment": "nested"}, "mirrors": [{"name": "m", "target": single("iris", 2), "sample_percent": 0}]})
    for deployment, field in (("shadowed", "x-user-id"), ("nested", "x-user-id"), ("nested", "x-team"), ("through", "x-team")):
        out = _streamed(demo, deployment, [{"id": n, field: u, "inputs": [ROW]} for n, u in enumerate(users)])
        assert [o.get("variant") for o in out] == [alone(deployment, u) for u in users], (deployment, field, out[0])
    # A variant asked for, and a key for the split below it: the key still routes there.
    def variant_alone(user: str) -> str:
        request = PredictionRequest("nested", ArrayInputs({"input": np.asarray([ROW], np.float32)}), routing_key=user, variant="one")
        return str(run(demo.predictions.predict(acme, request)).answer.variant)

    out = _streamed(demo, "nested", [{"id": n, "variant": "one", "routing_key": u, "inputs": [ROW]} for n, u in enumerate(users)])
    assert [o.get("variant") for o in out] == [variant_alone(u) for u in users] and len({o.get("variant") for o in out}) == 2
    bodies = [{"id": 0, "x-user-id": "u", "x-team": "u"}, {"id": 1, "x-user-id": "u", "x-team": "t"}, {"id": 2, "x-user-id": "", "x-team": "t"}]
    [same, differ, empty] = _streamed(demo, "nested", [{**b, "inputs": [ROW]} for b in bodies])
    assert same.get("variant") == alone("nested", "u") and empty.get("variant") == alone("nested", "t"), (same, empty)  # "" is no key
    assert differ["field"] == "x-team" and "both give this record's routing key" in differ["error"], differ
