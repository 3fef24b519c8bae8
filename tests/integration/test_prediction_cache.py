"""The prediction cache through the API and the prediction service: a hit is the same answer
marked `cached: true`; anything that could change the answer misses; non-deterministic routes
are refused; tenants never share; the shared tier works across containers (SQLite here; the
DynamoDB twin in tests/integration/aws/test_prediction_cache_dynamodb.py)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from sluice.domain.policy import Variant
from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.inference.prediction_cache import PredictionCache
from sluice.metrics import PrometheusMetrics
from sluice.routing.choose import sticky_pick
from sluice.wiring import Container
from tests.conftest import MODELS
from tests.integration.conftest import auth
from tests.support import single, split_policy

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.settings import Settings

ROW = [[5.9, 3.0, 5.1, 1.8]]
OTHER_ROW = [[5.1, 3.5, 1.4, 0.2]]
CACHE = {"ttl_s": 60, "max_entries": 100}


def create(client: TestClient, key: str, name: str, policy: dict[str, Any], cache: Any = CACHE) -> Any:
    return client.post("/api/v1/deployments", json={"name": name, "policy": policy, "cache": cache}, headers=auth(key))


def predict(client: TestClient, key: str, deployment: str, rows: Any = ROW, **extra: Any) -> dict[str, Any]:
    r = client.post("/api/v1/predictions", json={"deployment": deployment, "inputs": rows, **extra}, headers=auth(key))
    assert r.status_code == 200, r.text
    return r.json()


def same_answer(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal but for what differs per request: its id, latency, and the cached mark."""
    drop = ("request_id", "latency_ms", "cached", "id")
    strip = lambda d: {k: v for k, v in d.items() if k not in drop}  # noqa: E731
    if "parameters" in a:
        a, b = {**a, "parameters": strip(a["parameters"])}, {**b, "parameters": strip(b["parameters"])}
    return strip(a) == strip(b)


@pytest.fixture
def two_irises(demo: Container, acme: Principal) -> Container:
    """iris:1 (logistic regression) and iris:2 (random forest)."""
    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    return demo


@pytest.fixture
def cached(client: TestClient, keys: dict[str, str], two_irises: Container) -> TestClient:
    """acme's `ic`: iris:1 with the cache on."""
    r = create(client, keys["acme"], "ic", single("iris", 1))
    assert r.status_code == 201, r.text
    assert r.json()["cache"] == {"ttl_s": 60.0, "max_entries": 100}
    return client


# Hits and misses -------------------------------------------------------------------------
def test_a_hit_is_the_same_answer_marked_cached(cached: TestClient, keys: dict[str, str]) -> None:
    first = predict(cached, keys["acme"], "ic")
    second = predict(cached, keys["acme"], "ic")
    assert "cached" not in first and second["cached"] is True
    assert same_answer(first, second)
    # The v2 protocol says it in `parameters`; the same inputs share the entry.
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": ROW[0]}]}
    v2 = cached.post("/v2/models/ic/infer", json=body, headers=auth(keys["acme"])).json()
    assert v2["parameters"]["cached"] is True
    assert v2["outputs"][0]["data"] == [second["prediction"]]


def test_the_binary_v2_answer_says_cached_in_its_header(cached: TestClient, keys: dict[str, str]) -> None:
    from tests.integration.test_binary_tensors import fp32, request_body, result_of

    for expected in (None, True):
        body, headers = request_body([fp32("input", np.array(ROW))])
        r = cached.post("/v2/models/ic/infer", content=body, headers={**auth(keys["acme"]), **headers})
        result = result_of(r)
        assert result.get_response()["parameters"].get("cached") is expected
        assert [x.decode() for x in result.as_numpy("output_label")] == ["virginica"]


def test_different_inputs_outputs_or_versions_miss(cached: TestClient, keys: dict[str, str]) -> None:
    key = keys["acme"]
    predict(cached, key, "ic")
    assert "cached" not in predict(cached, key, "ic", OTHER_ROW)
    assert "cached" not in predict(cached, key, "ic", [[5.9, 3.0, 5.1, 1.8000001]])  # one bit differs
    assert "cached" not in predict(cached, key, "ic", ROW + ROW)  # another shape
    pinned = predict(cached, key, "ic", version=2)  # another version answers
    assert "cached" not in pinned and pinned["version"] == 2
    assert predict(cached, key, "ic", version=2)["cached"] is True
    # Fewer outputs asked for: another entry.
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": ROW[0]}], "outputs": [{"name": "output_label"}]}
    v2 = cached.post("/v2/models/ic/infer", json=body, headers=auth(key)).json()
    assert "cached" not in v2["parameters"] and [o["name"] for o in v2["outputs"]] == ["output_label"]
    v2 = cached.post("/v2/models/ic/infer", json=body, headers=auth(key)).json()
    assert v2["parameters"]["cached"] is True and [o["name"] for o in v2["outputs"]] == ["output_label"]


def test_a_new_policy_revision_never_gets_an_old_answer(cached: TestClient, keys: dict[str, str], two_irises: Container, acme: Principal) -> None:
    key = keys["acme"]
    old = predict(cached, key, "ic")
    r = cached.put("/api/v1/deployments/ic", json={"policy": single("iris", 2)}, headers=auth(key))
    assert r.status_code == 200 and r.json()["cache"] == {"ttl_s": 60.0, "max_entries": 100}  # kept
    new = predict(cached, key, "ic")
    assert "cached" not in new and new["version"] == 2 and new["probabilities"] != old["probabilities"]
    # Even where the change was not announced (another container wrote it): the revision is in
    # the key, so a new revision misses though its route is the same.
    assert predict(cached, key, "ic")["cached"] is True
    dep = two_irises.registry.get_deployment("acme", "ic")
    two_irises.registry.update_deployment(replace(dep, policy=single("iris", 2)), expected_revision=dep.revision)
    again = predict(cached, key, "ic")  # no forget() ran: only the revision tells
    assert "cached" not in again and again["version"] == 2


def test_turning_the_cache_off_and_on_again(cached: TestClient, keys: dict[str, str]) -> None:
    key = keys["acme"]
    predict(cached, key, "ic")
    r = cached.put("/api/v1/deployments/ic", json={"cache": None}, headers=auth(key))
    assert r.status_code == 200 and r.json()["cache"] is None and r.json()["policy"] == single("iris", 1)
    assert "cached" not in predict(cached, key, "ic") and "cached" not in predict(cached, key, "ic")
    r = cached.put("/api/v1/deployments/ic", json={"cache": {"ttl_s": 5, "max_entries": 3}}, headers=auth(key))
    assert r.status_code == 200 and r.json()["cache"] == {"ttl_s": 5.0, "max_entries": 3}
    predict(cached, key, "ic")
    assert predict(cached, key, "ic")["cached"] is True


def test_ttl_expiry_and_max_entries_eviction(cached: TestClient, keys: dict[str, str], two_irises: Container) -> None:
    now = [1000.0]
    two_irises.predictions.cache = PredictionCache(timer=lambda: now[0])
    key = keys["acme"]
    r = cached.put("/api/v1/deployments/ic", json={"cache": {"ttl_s": 10, "max_entries": 2}}, headers=auth(key))
    assert r.status_code == 200
    predict(cached, key, "ic")
    now[0] += 9.5
    assert predict(cached, key, "ic")["cached"] is True
    now[0] += 1.0  # 10.5 s after it was kept
    assert "cached" not in predict(cached, key, "ic")
    assert predict(cached, key, "ic")["cached"] is True
    # Two entries at most: a third input pushes out the least recently used.
    a, b, c = ROW, OTHER_ROW, [[6.7, 3.0, 5.2, 2.3]]
    predict(cached, key, "ic", b)  # entries: a (just used), b
    predict(cached, key, "ic", a)  # a is now the most recent
    predict(cached, key, "ic", c)  # b goes
    assert predict(cached, key, "ic", a)["cached"] is True
    assert predict(cached, key, "ic", c)["cached"] is True
    assert "cached" not in predict(cached, key, "ic", b)


# Tenants ---------------------------------------------------------------------------------
def test_tenants_with_the_same_deployment_name_and_inputs_never_share(
    client: TestClient, keys: dict[str, str], demo: Container, globex: Principal
) -> None:
    demo.models.push(globex, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    for tenant in ("acme", "globex"):
        assert create(client, keys[tenant], "same", single("iris", 1)).status_code == 201
    acme_answer = predict(client, keys["acme"], "same")
    globex_answer = predict(client, keys["globex"], "same")
    assert "cached" not in globex_answer and globex_answer["probabilities"] != acme_answer["probabilities"]
    assert predict(client, keys["globex"], "same")["probabilities"] == globex_answer["probabilities"]
    assert predict(client, keys["acme"], "same")["probabilities"] == acme_answer["probabilities"]


# Routes ----------------------------------------------------------------------------------
SPLIT = split_policy({"stable": (50, single("iris", 1)), "canary": (50, single("iris", 2))}, routing_key="x-user-id")


def users_by_variant() -> dict[str, str]:
    variants = [Variant(name=v["name"], weight=v["weight"], target=v["target"]) for v in SPLIT["variants"]]  # type: ignore[index]
    found: dict[str, str] = {}
    for i in range(100):
        found.setdefault(sticky_pick(variants, f"user-{i}").name, f"user-{i}")
    return found


def test_a_sticky_split_caches_per_resolved_variant(client: TestClient, keys: dict[str, str], two_irises: Container) -> None:
    key = keys["acme"]
    assert create(client, key, "ab", SPLIT).status_code == 201
    users = users_by_variant()
    call = lambda user: client.post(  # noqa: E731
        "/api/v1/predictions", json={"deployment": "ab", "inputs": ROW}, headers={**auth(key), "x-user-id": user}
    ).json()
    first = call(users["stable"])
    assert first["variant"] == "stable" and "cached" not in first
    again = call(users["stable"])
    assert again["cached"] is True and again["variant"] == "stable"
    canary = call(users["canary"])  # the same input, the other variant: not the stable answer
    assert "cached" not in canary and canary["variant"] == "canary" and canary["version"] == 2
    # Another user on the stable variant shares its entry: the key has the variant, not the user.
    other_stable = next(f"user-{i}" for i in range(100, 300) if call(f"user-{i}")["variant"] == "stable")
    assert call(other_stable)["cached"] is True
    # No routing key this time: routed at random, so never cached.
    plain = [predict(client, key, "ab") for _ in range(4)]
    assert all("cached" not in p for p in plain)


@pytest.mark.parametrize(
    ("policy", "field", "words"),
    [
        ({**SPLIT, "routing_key": None}, "policy.routing_key", "without a routing_key"),
        ({**SPLIT, "routing_key": None, "bandit": {"algorithm": "thompson"}}, "policy.bandit", "bandit"),
        (
            {"kind": "ensemble", "aggregator": "first_success", "members": [{"name": "a", "target": single("iris", 1)}, {"name": "b", "target": single("iris", 2)}]},
            "policy.aggregator",
            "hedged",
        ),
        (
            {"kind": "ensemble", "aggregator": "soft_vote", "min_members": 1, "members": [{"name": "a", "target": single("iris", 1)}, {"name": "b", "target": single("iris", 2)}]},
            "policy.min_members",
            "without all its members",
        ),
        (
            {"kind": "shadow", "primary": {**SPLIT, "routing_key": None}, "mirrors": [{"name": "m", "target": single("iris", 2)}]},
            "policy.primary.routing_key",
            "at random",
        ),
    ],
)
def test_non_deterministic_routes_are_refused_when_the_cache_is_on(
    client: TestClient, keys: dict[str, str], two_irises: Container, policy: dict[str, Any], field: str, words: str
) -> None:
    policy = {k: v for k, v in policy.items() if v is not None}
    r = create(client, keys["acme"], "nd", policy)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field and words in r.json()["error"] and "cache" in r.json()["error"]
    assert create(client, keys["acme"], "nd", policy, cache=None).status_code == 201  # fine without
    r = client.put("/api/v1/deployments/nd", json={"cache": CACHE}, headers=auth(keys["acme"]))
    assert r.status_code == 422 and r.json()["field"] == field


def test_a_reference_to_a_random_split_is_refused_and_a_deterministic_ensemble_is_cached(
    client: TestClient, keys: dict[str, str], two_irises: Container
) -> None:
    key = keys["acme"]
    assert create(client, key, "coin", {**{k: v for k, v in SPLIT.items() if k != "routing_key"}}, cache=None).status_code == 201
    r = create(client, key, "viaref", {"kind": "ref", "deployment": "coin"})
    assert r.status_code == 422 and r.json()["field"] == "policy" and "'coin'" in r.json()["error"]
    vote = {"kind": "ensemble", "aggregator": "soft_vote", "members": [{"name": "a", "target": single("iris", 1)}, {"name": "b", "target": single("iris", 2)}]}
    assert create(client, key, "vote", vote).status_code == 201
    first, second = predict(client, key, "vote"), predict(client, key, "vote")
    assert second["cached"] is True and same_answer(first, second) and second["members"] == first["members"]


@pytest.mark.parametrize(
    ("cache", "field"),
    [
        ({"ttl_s": 0, "max_entries": 5}, "cache.ttl_s"),
        ({"ttl_s": -1, "max_entries": 5}, "cache.ttl_s"),
        ({"ttl_s": "soon", "max_entries": 5}, "cache.ttl_s"),
        ({"ttl_s": 10**9, "max_entries": 5}, "cache.ttl_s"),
        ({"ttl_s": 5, "max_entries": 0}, "cache.max_entries"),
        ({"ttl_s": 5, "max_entries": 2.5}, "cache.max_entries"),
        ({"ttl_s": 5, "max_entries": 10**7}, "cache.max_entries"),
        ({"ttl_s": 5}, "cache.max_entries"),
        ({"ttl_s": 5, "max_entries": 5, "shared": True}, "cache.shared"),
    ],
)
def test_bad_cache_settings_are_422_naming_the_field(client: TestClient, keys: dict[str, str], cache: dict[str, Any], field: str) -> None:
    r = create(client, keys["acme"], "bad", single("iris", 1), cache=cache)
    assert r.status_code == 422 and r.json()["field"] == field, r.text


def test_the_service_checks_cache_settings_too(demo: Container, acme: Principal) -> None:
    from sluice.domain.errors import InvalidRequest

    with pytest.raises(InvalidRequest) as caught:
        demo.deployments.create(acme, "bad", single("iris", 1), cache={"ttl_s": float("nan"), "max_entries": 1})
    assert caught.value.field == "cache.ttl_s"


# Shadows, statistics, metrics --------------------------------------------------------------
def test_a_hit_feeds_no_shadow_job_and_is_counted_as_an_answered_request_and_a_cache_hit(
    client: TestClient, keys: dict[str, str], two_irises: Container, acme: Principal
) -> None:
    policy = {"kind": "shadow", "primary": single("iris", 1), "mirrors": [{"name": "forest", "target": single("iris", 2)}]}
    assert create(client, keys["acme"], "sh", policy).status_code == 201
    service = two_irises.predictions

    def run() -> Any:
        request = PredictionRequest(deployment="sh", inputs=ArrayInputs({"input": np.array(ROW, dtype=np.float32)}))
        return asyncio.run(service.predict(acme, request))

    first, second, third = run(), run(), run()
    assert (first.cached, first.mirrored) == (False, 1)
    assert (second.cached, second.mirrored) == (True, 0) and (third.cached, third.mirrored) == (True, 0)
    stats = two_irises.deployments.stats(acme, "sh")
    overall = stats["overall"]
    assert (overall["requests"], overall["errors"], overall["cache_hits"], overall["cache_misses"], overall["cache_hit_rate"]) == (3, 0, 2, 1, round(2 / 3, 6))
    assert stats["mirrors"]["forest"]["requests"] == 1  # the mirror compared the live computation alone


def test_the_v2_statistics_count_hits_as_triton_does(cached: TestClient, keys: dict[str, str]) -> None:
    """A hit is a success and a `cache_hit`, not an execution nor `compute_infer`; a computed
    answer the cache kept is a `cache_miss`; a deployment without the cache has neither."""
    for rows in (ROW, ROW, ROW, OTHER_ROW, OTHER_ROW):
        predict(cached, keys["acme"], "ic", rows)
    predict(cached, keys["acme"], "iris")
    (stats,) = cached.get("/v2/models/ic/stats", headers=auth(keys["acme"])).json()["model_stats"]
    infer = stats["inference_stats"]
    assert (stats["inference_count"], stats["execution_count"]) == (2, 2)  # Triton's inferences: no cache hit among them
    assert (infer["success"]["count"], infer["compute_infer"]["count"], infer["cache_hit"]["count"], infer["cache_miss"]["count"]) == (5, 2, 3, 2)
    assert infer["cache_hit"]["ns"] > 0 and infer["cache_miss"]["ns"] > 0 and infer["compute_infer"]["ns"] > 0
    # A hit's success time is its request's, of which its cache_hit time (the lookup) is a part.
    assert infer["success"]["ns"] > infer["compute_infer"]["ns"] + infer["cache_hit"]["ns"]
    assert stats["last_inference"] > 0
    (plain,) = cached.get("/v2/models/iris/stats", headers=auth(keys["acme"])).json()["model_stats"]
    assert plain["inference_stats"]["cache_hit"] == plain["inference_stats"]["cache_miss"] == {"count": 0, "ns": 0}
    assert plain["execution_count"] == plain["inference_stats"]["success"]["count"] == 1
    # The deployment's own statistics: every request, the latency quantiles of the computed ones.
    overall = cached.get("/api/v1/deployments/ic/stats", headers=auth(keys["acme"])).json()["overall"]
    assert (overall["requests"], overall["cache_hits"], overall["cache_misses"], overall["cache_hit_rate"]) == (5, 3, 2, 0.6)
    assert "cache_hits" not in cached.get("/api/v1/deployments/iris/stats", headers=auth(keys["acme"])).json()["overall"]


def test_hits_and_misses_are_prometheus_series_per_deployment(cached: TestClient, keys: dict[str, str], two_irises: Container) -> None:
    from tests.integration.test_metrics import value

    sink = PrometheusMetrics()
    two_irises.telemetry.sink = sink  # type: ignore[union-attr]
    for rows in (ROW, ROW, ROW, OTHER_ROW):
        predict(cached, keys["acme"], "ic", rows)
    predict(cached, keys["acme"], "iris")  # no cache: neither
    text = sink.exposition("acme").decode()
    assert value(text, "ml_inference_prediction_cache_hits_total", deployment="ic") == 2
    assert value(text, "ml_inference_prediction_cache_misses_total", deployment="ic") == 2
    assert value(text, "ml_inference_prediction_cache_misses_total", deployment="iris") == 0
    assert value(text, "ml_inference_requests_total", deployment="ic") == 4
    assert value(text, "ml_inference_latency_ms_count", deployment="ic") == 2  # computations only


# The shared tier ---------------------------------------------------------------------------
def test_the_shared_tier_in_sqlite_answers_another_container(settings: Settings, acme: Principal, globex: Principal) -> None:
    shared = settings.replace(prediction_cache_shared=True)
    first, second = Container.from_settings(shared), Container.from_settings(shared)
    version = first.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())
    first.deployments.create(acme, "ic", single("iris", version.version), cache=CACHE)
    first.models.push(globex, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    first.deployments.create(globex, "ic", single("iris", 1), cache=CACHE)

    def run(container: Container, principal: Principal) -> Any:
        request = PredictionRequest(deployment="ic", inputs=ArrayInputs({"input": np.array(ROW, dtype=np.float32)}))
        return asyncio.run(container.predictions.predict(principal, request))

    computed = run(first, acme)
    kept = run(second, acme)
    assert not computed.cached and kept.cached
    assert kept.answer.version.ref == "iris:1"
    for name, array in computed.result.outputs.items():
        np.testing.assert_array_equal(kept.result.outputs[name], array)
    assert kept.result.classes == computed.result.classes
    assert not run(second, globex).cached  # another tenant's entry is not this one's
    # A process without the shared tier keeps its own.
    alone = Container.from_settings(settings)
    assert not run(alone, acme).cached


def test_cli_turns_the_cache_on_and_off(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from sluice import cli
    from sluice.wiring import get_container
    from tests.support import cli_environment

    with cli_environment(monkeypatch, tmp_path / "home"):
        assert cli.main(["models", "push", "iris", str(MODELS / "iris.onnx")]) == 0
        assert cli.main(["deployments", "create", "ic", "--model", "iris", "--cache-ttl", "30"]) == 0
        assert "cache: ttl 30 s, 1024 entries" in capsys.readouterr().out
        assert cli.main(["deployments", "set", "ic", "--cache-max-entries", "7"]) == 0
        out = capsys.readouterr().out
        assert "revision 2" in out and "cache: ttl 30 s, 7 entries" in out
        shown = json.loads((cli.main(["deployments", "show", "ic"]), capsys.readouterr().out)[1])
        assert shown["cache"] == {"ttl_s": 30.0, "max_entries": 7}
        assert cli.main(["deployments", "set", "ic", "--cache-ttl", "0"]) != 0
        assert "cache.ttl_s" in capsys.readouterr().err
        assert cli.main(["deployments", "set", "ic", "--no-cache"]) == 0
        assert "cache:" not in capsys.readouterr().out
        assert get_container().registry.get_deployment("default", "ic").cache is None
