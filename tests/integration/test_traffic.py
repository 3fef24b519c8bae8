"""Traffic policies end to end through the API: splits, shadows, ensembles, verdicts."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.api.app import create_app
from sluice.domain import Model, ModelVersion
from sluice.domain.errors import Unprocessable
from sluice.domain.signature import Signature, TensorSpec
from sluice.registry.guards import MAX_REFS_READ, RECHECKS
from sluice.wiring import Container
from tests.conftest import MODELS
from tests.integration.conftest import auth
from tests.integration.traffic_fakes import SleepyRuntime, add_fake
from tests.support import Together, at_once, single, split_policy

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.settings import Settings

ROW = [[5.9, 3.0, 5.1, 1.8]]


@pytest.fixture
def fake(demo: Container) -> SleepyRuntime:
    runtime = SleepyRuntime()
    demo.runtimes[runtime.kind] = runtime
    return runtime


@pytest.fixture
def two_irises(demo: Container, acme: Principal) -> Container:
    """iris:1 (logistic regression) and iris:2 (random forest)."""
    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    return demo


def deploy(client: TestClient, key: str, name: str, policy: dict[str, Any], *, update: bool = False) -> Any:
    if update:
        return client.put(f"/api/v1/deployments/{name}", json={"policy": policy}, headers=auth(key))
    return client.post("/api/v1/deployments", json={"name": name, "policy": policy}, headers=auth(key))


def predict(client: TestClient, key: str, deployment: str, **extra: Any) -> Any:
    return client.post("/api/v1/predictions", json={"deployment": deployment, "inputs": ROW, **extra}, headers=auth(key))


# Splits ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cache", [False, True])
def test_a_nested_sticky_split_reusing_the_outer_names_keeps_its_own_weights(client: TestClient, keys: dict[str, str], two_irises: Container, cache: bool) -> None:
    """Outer a/b 50/50, inner a/b 20/80 under outer a, both keyed by the same header: the keys
    outer `a` gets reach inner `b` about four times in five (they all reached inner `a`), each
    key stays where it went, and the prediction cache answers each as the walk would."""
    inner = split_policy({"a": (20, single("iris", 1)), "b": (80, single("iris", 2))}, routing_key="x-user-id")
    policy = split_policy({"a": (50, inner), "b": (50, single("iris", 1))}, routing_key="x-user-id")
    extra = {"cache": {"ttl_s": 300, "max_entries": 1000}} if cache else {}
    assert client.post("/api/v1/deployments", json={"name": "nest", "policy": policy, **extra}, headers=auth(keys["acme"])).status_code == 201
    first = {u: predict(client, keys["acme"], "nest", routing_key=f"user-{u}").json()["variant"] for u in range(240)}
    again = {u: predict(client, keys["acme"], "nest", routing_key=f"user-{u}").json()["variant"] for u in range(0, 240, 3)}
    assert all(first[u] == variant for u, variant in again.items())
    share = Counter(first.values())
    assert 0.35 < (share["a/a"] + share["a/b"]) / 240 < 0.65 and 0.65 < share["a/b"] / (share["a/a"] + share["a/b"]) < 0.93, share


def test_canary_split_is_sticky_by_routing_key_and_names_the_variant(client: TestClient, keys: dict[str, str], two_irises: Container) -> None:
    policy = split_policy({"stable": (80, single("iris", 1)), "canary": (20, single("iris", 2))}, routing_key="x-user-id")
    assert deploy(client, keys["acme"], "iris-ab", policy).status_code == 201
    seen: dict[str, str] = {}
    for user in range(200):
        body = predict(client, keys["acme"], "iris-ab", routing_key=f"user-{user}").json()
        assert body["version"] == (1 if body["variant"] == "stable" else 2)
        seen[f"user-{user}"] = body["variant"]
    share = sum(v == "canary" for v in seen.values()) / len(seen)
    assert 0.1 < share < 0.3
    again = client.post("/api/v1/predictions", json={"deployment": "iris-ab", "inputs": ROW}, headers={**auth(keys["acme"]), "x-user-id": "user-7"})
    assert again.json()["variant"] == seen["user-7"]  # the header the policy names works too
    forced = predict(client, keys["acme"], "iris-ab", variant="canary", routing_key="user-7").json()
    assert forced["variant"] == "canary" and forced["version"] == 2
    bad = predict(client, keys["acme"], "iris-ab", variant="nope")
    assert bad.status_code == 400 and bad.json()["field"] == "variant"


def test_bandit_split_learns_from_feedback(client: TestClient, keys: dict[str, str], two_irises: Container) -> None:
    policy = {
        "kind": "split",
        "bandit": {"algorithm": "epsilon_greedy", "epsilon": 0.1},
        "variants": [{"name": "lr", "weight": 1, "target": single("iris", 1)}, {"name": "rf", "weight": 1, "target": single("iris", 2)}],
    }
    assert deploy(client, keys["acme"], "iris-bandit", policy).status_code == 201
    for i in range(60):
        body = predict(client, keys["acme"], "iris-bandit", request_id=f"r{i}").json()
        reward = 1.0 if body["variant"] == "rf" else 0.0
        fb = client.post("/api/v1/deployments/iris-bandit/feedback", json={"request_id": f"r{i}", "reward": reward}, headers=auth(keys["acme_predict"]))
        assert fb.status_code == 200 and fb.json()["variant"] == body["variant"]
        two_irises.predictions.bandits._rewards.clear()  # this test does not wait for the 2 s reward cache
    later = [predict(client, keys["acme"], "iris-bandit").json()["variant"] for _ in range(100)]
    assert later.count("rf") >= 80
    stats = client.get("/api/v1/deployments/iris-bandit/stats", headers=auth(keys["acme"])).json()
    assert stats["variants"]["rf"]["mean_reward"] == 1.0
    missing = client.post("/api/v1/deployments/iris-bandit/feedback", json={"request_id": "never", "reward": 1}, headers=auth(keys["acme"]))
    assert missing.status_code == 400 and missing.json()["field"] == "request_id"
    # A request is rewarded once: a second feedback for it cannot tilt the bandit.
    again = client.post("/api/v1/deployments/iris-bandit/feedback", json={"request_id": "r0", "reward": 1}, headers=auth(keys["acme"]))
    assert again.status_code == 409 and again.json()["field"] == "request_id"
    after = client.get("/api/v1/deployments/iris-bandit/stats", headers=auth(keys["acme"])).json()
    assert sum(v.get("rewards", 0) for v in after["variants"].values()) == 60


def test_feedback_is_credited_to_the_revision_that_answered_the_request(client: TestClient, keys: dict[str, str], two_irises: Container) -> None:
    """A reward for a request revision 1 answered, posted after an edit (revision 2, which
    has no variant `rf`), shows in revision 1's statistics and never in revision 2's, whose
    bandit it does not steer."""
    policy = {
        "kind": "split",
        "bandit": {"algorithm": "epsilon_greedy", "epsilon": 1.0},
        "variants": [{"name": "lr", "weight": 1, "target": single("iris", 1)}, {"name": "rf", "weight": 1, "target": single("iris", 2)}],
    }
    key = keys["acme"]
    assert deploy(client, key, "iris-bandit", policy).status_code == 201
    answered: dict[str, str] = {}
    for i in range(200):
        answered[f"q{i}"] = predict(client, key, "iris-bandit", request_id=f"q{i}").json()["variant"]
        if {"lr", "rf"} <= set(answered.values()):
            break
    by = {variant: rid for rid, variant in answered.items()}
    edited = deploy(client, key, "iris-bandit", {**policy, "variants": policy["variants"][:1]}, update=True)
    assert edited.status_code == 200 and edited.json()["revision"] == 2
    for variant, reward in (("rf", 0.9), ("lr", 0.4)):
        fb = client.post("/api/v1/deployments/iris-bandit/feedback", json={"request_id": by[variant], "reward": reward}, headers=auth(key))
        assert fb.status_code == 200 and fb.json()["variant"] == variant
    first = client.get("/api/v1/deployments/iris-bandit/stats", params={"revision": 1}, headers=auth(key)).json()["variants"]
    assert (first["rf"]["rewards"], first["rf"]["mean_reward"], first["lr"]["rewards"], first["lr"]["mean_reward"]) == (1, 0.9, 1, 0.4)
    now = client.get("/api/v1/deployments/iris-bandit/stats", headers=auth(key)).json()
    assert now["revision"] == 2 and all("rewards" not in v for v in now["variants"].values()) and "rf" not in now["variants"]
    assert two_irises.deployments.read_stats("acme", "iris-bandit", 2).get("variant:lr", {}).get("reward_n") is None  # what its bandit reads


def test_a_bandit_created_again_takes_feedback_for_its_own_requests_only(client: TestClient, keys: dict[str, str], two_irises: Container) -> None:
    """A bandit deleted and created again under its name: feedback for a request only the
    deleted one answered is refused (400), and its own request under an id the deleted one
    was rewarded for is rewarded (200). Before, the old request tilted the new bandit and the
    new one's own was refused as given already (409)."""
    policy = {
        "kind": "split",
        "bandit": {"algorithm": "epsilon_greedy", "epsilon": 0.1},
        "variants": [{"name": "lr", "weight": 1, "target": single("iris", 1)}, {"name": "rf", "weight": 1, "target": single("iris", 2)}],
    }
    key = keys["acme"]

    def feedback(rid: str) -> Any:
        return client.post("/api/v1/deployments/iris-bandit/feedback", json={"request_id": rid, "reward": 1}, headers=auth(key))

    assert deploy(client, key, "iris-bandit", policy).status_code == 201
    for rid in ("old-only", "order-1"):
        assert predict(client, key, "iris-bandit", request_id=rid).status_code == 200
    assert feedback("order-1").status_code == 200
    assert client.delete("/api/v1/deployments/iris-bandit", headers=auth(key)).status_code == 204
    assert deploy(client, key, "iris-bandit", policy).status_code == 201
    old = feedback("old-only")
    assert old.status_code == 400 and old.json()["field"] == "request_id"
    own = predict(client, key, "iris-bandit", request_id="order-1").json()["variant"]
    fb = feedback("order-1")
    assert fb.status_code == 200 and fb.json()["variant"] == own
    assert feedback("order-1").status_code == 409  # and once only
    stats = client.get("/api/v1/deployments/iris-bandit/stats", headers=auth(key)).json()
    assert {name: v.get("rewards", 0) for name, v in stats["variants"].items() if v.get("rewards")} == {own: 1}


# Shadows --------------------------------------------------------------------------------
def test_shadow_compares_off_the_request_path_and_promote(client: TestClient, keys: dict[str, str], two_irises: Container) -> None:
    policy = {"kind": "shadow", "primary": single("iris", 1), "mirrors": [{"name": "forest", "target": single("iris", 2)}]}
    assert deploy(client, keys["acme"], "iris-shadow", policy).status_code == 201
    rows = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 5.1, 1.8]]
    for row in rows * 10:
        body = client.post("/api/v1/predictions", json={"deployment": "iris-shadow", "inputs": [row]}, headers=auth(keys["acme"])).json()
        assert body["version"] == 1 and "variant" not in body  # the client only ever sees the primary
    stats = client.get("/api/v1/deployments/iris-shadow/stats", headers=auth(keys["acme"])).json()
    mirror = stats["mirrors"]["forest"]
    assert mirror["requests"] == 30 and mirror["compared"] == 30 and mirror["errors"] == 0
    assert 0 < mirror["agreement"] <= 1
    low, high = mirror["agreement_ci95"]
    assert low <= mirror["agreement"] <= high
    assert mirror["max_abs_diff"] >= mirror["mean_abs_diff"] > 0
    assert mirror["latency_ms"]["p50"] > 0 and mirror["latency_ratio"] > 0
    assert stats["overall"]["requests"] == 30
    promoted = client.post("/api/v1/deployments/iris-shadow/promote", json={"mirror": "forest"}, headers=auth(keys["acme"]))
    assert promoted.status_code == 200 and promoted.json()["policy"] == single("iris", 2)
    assert predict(client, keys["acme"], "iris-shadow").json()["version"] == 2
    again = client.post("/api/v1/deployments/iris-shadow/promote", json={"mirror": "forest"}, headers=auth(keys["acme"]))
    assert again.status_code == 400 and again.json()["field"] == "mirror"


@pytest.mark.parametrize("bandit", [None, {"algorithm": "thompson"}, {"algorithm": "epsilon_greedy"}])
def test_a_mirror_that_is_a_split_answers_and_counts_as_the_mirror(client: TestClient, keys: dict[str, str], two_irises: Container, bandit: Any) -> None:
    """A mirror whose target splits (by weight, or as a bandit: no feedback ever rewards a
    mirror's choice) is compared on every request, counts as its mirror, and writes nothing
    under another deployment; its variants are none of the deployment's to ask for."""
    split: dict[str, Any] = {"kind": "split", "variants": [{"name": "a", "weight": 1, "target": single("iris", 1)}, {"name": "cand-b", "weight": 1, "target": single("iris", 2)}]}
    if bandit is not None:
        split["bandit"] = bandit
    policy = {"kind": "shadow", "primary": single("iris", 1), "mirrors": [{"name": "cand", "target": split}]}
    assert deploy(client, keys["acme"], "sh", policy).status_code == 201
    for _ in range(10):
        assert predict(client, keys["acme"], "sh").status_code == 200
    mirror = client.get("/api/v1/deployments/sh/stats", headers=auth(keys["acme"])).json()["mirrors"]["cand"]
    assert (mirror["requests"], mirror["errors"], mirror["compared"]) == (10, 0, 10)
    assert two_irises.registry.read_stats("acme", "(mirror)", 1) == {} and two_irises.registry.read_stats("acme", "(mirror)", 0) == {}

    asked = client.post("/api/v1/predictions", json={"deployment": "sh", "inputs": [[5.1, 3.5, 1.4, 0.2]], "variant": "cand-b"}, headers=auth(keys["acme"]))
    assert asked.status_code == 400 and asked.json()["field"] == "variant", asked.text  # a mirror's variant never answers


def test_a_slow_or_failing_mirror_never_delays_or_alters_the_primary(demo: Container, keys: dict[str, str], fake: SleepyRuntime) -> None:
    add_fake(demo.registry, "acme", "prim", value=1.0)
    add_fake(demo.registry, "acme", "slow", value=2.0, sleep_s=3.0)  # far past the bound below: a loaded machine's delays stay within it
    add_fake(demo.registry, "acme", "bad", fail=True)
    policy = {
        "kind": "shadow",
        "primary": single("prim", 1),
        "mirrors": [{"name": "slow", "target": single("slow", 1)}, {"name": "bad", "target": single("bad", 1)}],
    }
    with TestClient(create_app(demo)) as client:
        assert deploy(client, keys["acme"], "sh", policy).status_code == 201
        # The server side: the one call returns once the mirrors are handed off, not run.
        import asyncio

        from sluice.domain import Principal
        from sluice.domain.requests import ArrayInputs, PredictionRequest

        principal = Principal("acme", frozenset({"predict"}), "t")
        request = PredictionRequest("sh", ArrayInputs({"input": __import__("numpy").ones((1, 4), dtype="float32")}))
        started = time.perf_counter()
        prediction = asyncio.run(demo.predictions.predict(principal, request))
        assert time.perf_counter() - started < 1.5
        assert prediction.result.outputs["y"].tolist() == [[1.0]]
        assert prediction.mirrored == 2
        assert fake.calls[0] == "prim:1"
        # Over HTTP the answer is the primary's, untouched by the failing mirror.
        body = predict(client, keys["acme"], "sh").json()
        assert body["prediction"] == 1.0 and body["model"] == "prim"
    stats = demo.deployments.stats(principal_admin(), "sh")
    assert stats["mirrors"]["bad"]["errors"] == 2 and stats["mirrors"]["slow"]["requests"] == 2  # both calls mirrored
    assert stats["mirrors"]["slow"]["latency_ms"]["p50"] >= 500


def test_a_shadow_comparison_in_flight_at_shutdown_is_written_before_the_app_stops(
    demo: Container, keys: dict[str, str], fake: SleepyRuntime
) -> None:
    """The app's shutdown waits for the shadow jobs handed over before it writes its
    statistics: a mirror still running as the server stops is counted, not dropped or left."""
    add_fake(demo.registry, "acme", "prim", value=1.0)
    add_fake(demo.registry, "acme", "slow", value=2.0, sleep_s=0.3)
    policy = {"kind": "shadow", "primary": single("prim", 1), "mirrors": [{"name": "slow", "target": single("slow", 1)}]}
    with TestClient(create_app(demo)) as client:
        assert deploy(client, keys["acme"], "sh", policy).status_code == 201
        assert predict(client, keys["acme"], "sh").json()["prediction"] == 1.0
    revision = demo.registry.get_deployment("acme", "sh").revision
    written = demo.registry.read_stats("acme", "sh", revision)  # the registry itself: nothing flushed for the read
    assert written["mirror:slow"]["requests"] == 1 and written["deployment"]["requests"] == 1


@pytest.fixture
def hung(settings: Settings) -> Container:
    """A service with a 0.2 s prediction budget and two models on the fake runtime: `prim`,
    which answers at once, and `hung`, which would answer after 5 s."""
    c = Container.from_settings(settings.replace(request_timeout_s=0.2))
    fake = SleepyRuntime()
    c.runtimes[fake.kind] = fake
    add_fake(c.registry, "acme", "prim", value=1.0)
    add_fake(c.registry, "acme", "hung", value=2.0, sleep_s=5.0)
    return c


def test_a_mirror_that_runs_past_its_budget_is_counted_as_an_error(hung: Container, acme: Principal) -> None:
    """A mirror slower than the prediction budget (a hung endpoint) counts a request and an
    error, as a refusal does: its statistics never hide it, so a verdict or a promotion sees it."""
    policy = {"kind": "shadow", "primary": single("prim", 1), "mirrors": [{"name": "hung", "target": single("hung", 1)}]}
    hung.deployments.create(acme, "sh", policy)
    _, key = hung.keys.create("acme", ["predict"])
    with TestClient(create_app(hung)) as client:
        assert predict(client, key, "sh").json()["prediction"] == 1.0
    mirror = hung.deployments.stats(acme, "sh")["mirrors"]["hung"]
    assert (mirror["requests"], mirror["errors"]) == (1, 1)


def test_a_variant_that_runs_past_the_budget_counts_its_errors_for_the_rollout_gates(hung: Container, acme: Principal) -> None:
    """A canary that hangs: the request ends at its budget (504), and the canary's statistics
    count each such request as its error, so an `error_rate` gate sees it fail instead of
    seeing only the requests it answered."""
    hung.deployments.create(acme, "sp", split_policy({"stable": (1, single("prim", 1)), "canary": (99, single("hung", 1))}))
    _, key = hung.keys.create("acme", ["predict"])
    with TestClient(create_app(hung)) as client:
        codes = [predict(client, key, "sp").status_code for _ in range(6)]
    variants = hung.deployments.stats(acme, "sp")["variants"]
    timed_out = codes.count(504)
    assert timed_out and set(codes) <= {200, 504}, codes
    assert (variants["canary"]["requests"], variants["canary"]["errors"]) == (timed_out, timed_out)
    assert variants.get("stable", {}).get("errors", 0) == 0


def test_a_variant_whose_request_is_queued_for_asynchronous_inference_counts_no_error(demo: Container, acme: Principal, keys: dict[str, str], fake: SleepyRuntime) -> None:
    """A request the canary's endpoint queues (202, as one above its size limit is) is neither
    an answer nor a failure: the canary's statistics, which rollout gates read, count no error."""
    add_fake(demo.registry, "acme", "prim", value=1.0)
    add_fake(demo.registry, "acme", "queue", value=2.0, queued=True)
    demo.deployments.create(acme, "sp", split_policy({"stable": (1, single("prim", 1)), "canary": (99, single("queue", 1))}))
    with TestClient(create_app(demo)) as client:
        codes = [predict(client, keys["acme"], "sp").status_code for _ in range(6)]
    assert 202 in codes and set(codes) <= {200, 202}, codes
    canary = demo.deployments.stats(acme, "sp")["variants"].get("canary", {})
    assert canary.get("errors", 0) == 0 and canary.get("error_rate", 0) == 0


def principal_admin() -> Principal:
    from sluice.domain import Principal

    return Principal("acme", frozenset({"admin", "predict"}), "t")


def test_mirror_sampling(client: TestClient, keys: dict[str, str], two_irises: Container) -> None:
    policy = {"kind": "shadow", "primary": single("iris", 1), "mirrors": [{"name": "never", "sample_percent": 0, "target": single("iris", 2)}]}
    deploy(client, keys["acme"], "iris-s0", policy)
    for _ in range(10):
        predict(client, keys["acme"], "iris-s0")
    stats = client.get("/api/v1/deployments/iris-s0/stats", headers=auth(keys["acme"])).json()
    assert stats["mirrors"] == {} and stats["overall"]["requests"] == 10


# Ensembles ------------------------------------------------------------------------------
def _ensemble(aggregator: str, members: list[tuple[str, float | None]], **extra: Any) -> dict[str, Any]:
    return {
        "kind": "ensemble",
        "aggregator": aggregator,
        "members": [
            {"name": m, "target": single(m, 1), **({"timeout_ms": t} if t else {})} for m, t in members
        ],
        **extra,
    }


def test_ensemble_members_run_concurrently(demo: Container, client: TestClient, keys: dict[str, str], fake: SleepyRuntime) -> None:
    for name, value in (("m1", 1.0), ("m2", 2.0), ("m3", 6.0)):
        add_fake(demo.registry, "acme", name, value=value, sleep_s=0.3)
    assert deploy(client, keys["acme"], "ens", _ensemble("mean", [("m1", None), ("m2", None), ("m3", None)])).status_code == 201
    body = predict(client, keys["acme"], "ens").json()
    assert body["prediction"] == pytest.approx(3.0)
    assert fake.most == 3  # the three members asleep at once, not one after another (no clock: machines here are noisy)
    assert [m["name"] for m in body["members"]] == ["m1", "m2", "m3"] and all(m["ok"] for m in body["members"])


def test_ensemble_member_deadlines_and_min_members(demo: Container, client: TestClient, keys: dict[str, str], fake: SleepyRuntime) -> None:
    add_fake(demo.registry, "acme", "quick", value=4.0)
    add_fake(demo.registry, "acme", "late", value=100.0, sleep_s=5.0)
    add_fake(demo.registry, "acme", "broken", fail=True)
    policy = _ensemble("median", [("quick", None), ("late", 100), ("broken", None)], min_members=1)
    assert deploy(client, keys["acme"], "ens2", policy).status_code == 201
    started = time.perf_counter()
    body = predict(client, keys["acme"], "ens2").json()
    assert time.perf_counter() - started < 2.5  # not the late member's 5 s
    assert body["prediction"] == 4.0
    report = {m["name"]: m for m in body["members"]}
    assert report["quick"]["ok"] and report["late"]["error"] == "deadline_exceeded" and report["broken"]["error"] == "backend_error"
    strict = _ensemble("median", [("quick", None), ("late", 100), ("broken", None)], min_members=2)
    deploy(client, keys["acme"], "ens2", strict, update=True)
    r = predict(client, keys["acme"], "ens2")
    assert r.status_code == 502 and "1 of 3" in r.json()["error"]
    assert len(r.json()["details"]["members"]) == 3
    # Every member out of time: a 504 whatever the aggregator (first_success said 502).
    add_fake(demo.registry, "acme", "later", value=100.0, sleep_s=5.0)
    for aggregator in ("median", "first_success"):
        deploy(client, keys["acme"], "ens2", _ensemble(aggregator, [("late", 50), ("later", 80)]), update=True)
        r = predict(client, keys["acme"], "ens2")
        assert (r.status_code, r.json()["code"]) == (504, "deadline_exceeded"), (aggregator, r.text)


def test_first_success_answers_with_the_fastest(demo: Container, client: TestClient, keys: dict[str, str], fake: SleepyRuntime) -> None:
    add_fake(demo.registry, "acme", "tortoise", value=1.0, sleep_s=5.0)
    add_fake(demo.registry, "acme", "hare", value=2.0, sleep_s=0.05)
    add_fake(demo.registry, "acme", "dud", fail=True)
    deploy(client, keys["acme"], "hedge", _ensemble("first_success", [("tortoise", None), ("dud", None), ("hare", None)]))
    started = time.perf_counter()
    body = predict(client, keys["acme"], "hedge").json()
    assert time.perf_counter() - started < 2.5  # not the tortoise's 5 s
    assert body["prediction"] == 2.0 and body["model"] == "hare"
    # Every member is listed, in the policy's order: the one still running when the hare
    # answered as stopped, not left out.
    report = {m["name"]: m for m in body["members"]}
    assert [m["name"] for m in body["members"]] == ["tortoise", "dud", "hare"]
    assert report["tortoise"]["ok"] is False and report["tortoise"]["error"] == "cancelled" and report["tortoise"]["latency_ms"] < 500
    assert report["dud"]["error"] == "backend_error" and report["hare"]["ok"] and report["hare"]["model"] == "hare"


def test_ensemble_of_real_models_on_the_api(client: TestClient, keys: dict[str, str], two_irises: Container) -> None:
    policy = {
        "kind": "ensemble",
        "aggregator": "soft_vote",
        "members": [{"name": "lr", "target": single("iris", 1)}, {"name": "rf", "target": single("iris", 2)}],
    }
    assert deploy(client, keys["acme"], "iris-ens", policy).status_code == 201
    body = predict(client, keys["acme"], "iris-ens").json()
    lr = predict(client, keys["acme"], "iris", version=1).json()["probabilities"]
    rf = predict(client, keys["acme"], "iris", version=2).json()["probabilities"]
    for label, p in body["probabilities"].items():
        assert p == pytest.approx((lr[label] + rf[label]) / 2, rel=1e-5)
    assert body["prediction"] == max(body["probabilities"], key=body["probabilities"].get)


@pytest.mark.parametrize("aggregator", ["soft_vote", "mean", "max", "median", "weighted_mean", "majority", "first_success"])
@pytest.mark.parametrize("asked", [["output_label"], ["output_probability"], ["output_probability", "output_label"]])
def test_an_ensemble_answers_the_outputs_a_v2_request_asks_for(
    client: TestClient, keys: dict[str, str], two_irises: Container, aggregator: str, asked: list[str]
) -> None:
    """Every aggregator needs outputs the request may not ask for (probabilities to average,
    labels to vote): the members give them all, and the answer holds what was asked, as the
    ensemble with every output would have answered it."""
    name = f"ens-{aggregator.replace('_', '-')}-{len(asked)}-{asked[0][7]}"
    policy = {"kind": "ensemble", "aggregator": aggregator, "members": [{"name": "lr", "target": single("iris", 1)}, {"name": "rf", "target": single("iris", 2)}]}
    assert deploy(client, keys["acme"], name, policy).status_code == 201
    body = {"inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2, 6.0, 2.9, 4.5, 1.5]}]}
    whole = client.post(f"/v2/models/{name}/infer", json=body, headers=auth(keys["acme"]))
    narrowed = client.post(f"/v2/models/{name}/infer", json={**body, "outputs": [{"name": n} for n in asked]}, headers=auth(keys["acme"]))
    assert whole.status_code == narrowed.status_code == 200, narrowed.text
    by_name = {o["name"]: o for o in whole.json()["outputs"]}
    assert sorted(o["name"] for o in narrowed.json()["outputs"]) == sorted(asked)  # in the model's order, as a single model answers
    for output in narrowed.json()["outputs"] if aggregator != "first_success" else ():  # whichever member is first: the two may differ
        assert output["data"] == pytest.approx(by_name[output["name"]]["data"]) if output["datatype"] != "BYTES" else output["data"] == by_name[output["name"]]["data"]


_DEPLOYMENTS = itertools.count()


def _member_splits(bandit: dict[str, Any] | None = None) -> dict[str, Any]:
    """An ensemble of two members, each a split over variants `a` (model ra) and `b` (rb)."""
    def split(member: str) -> dict[str, Any]:
        variants = [{"name": "a", "weight": 1, "target": single("ra", 1)}, {"name": "b", "weight": 1, "target": single("rb", 1)}]
        return {"name": member, "target": {"kind": "split", "variants": variants, **({"bandit": bandit} if bandit else {})}}

    return {"kind": "ensemble", "aggregator": "mean", "members": [split("m1"), split("m2")]}


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(requests=st.integers(1, 12))
def test_splits_in_two_ensemble_members_count_each_request_once_per_member(
    demo: Container, client: TestClient, keys: dict[str, str], fake: SleepyRuntime, requests: int
) -> None:
    """Each member's split is counted under its member's path (`m1/a`), once per request: not
    both under a top-level `a`/`b` (every request counted twice, the two splits merged)."""
    add_fake(demo.registry, "acme", "ra", value=1.0)
    add_fake(demo.registry, "acme", "rb", value=2.0)
    name = f"ens-{next(_DEPLOYMENTS)}"  # one per example: the container is the test's
    assert deploy(client, keys["acme"], name, _member_splits()).status_code == 201
    for _ in range(requests):
        assert predict(client, keys["acme"], name).status_code == 200
    stats = client.get(f"/api/v1/deployments/{name}/stats", headers=auth(keys["acme"])).json()
    assert stats["overall"]["requests"] == requests
    assert set(stats["variants"]) <= {"m1/a", "m1/b", "m2/a", "m2/b"}
    for member in ("m1", "m2"):
        assert sum(v["requests"] for k, v in stats["variants"].items() if k.startswith(f"{member}/")) == requests


def test_bandits_in_two_members_are_each_rewarded_and_each_learns_from_its_own(
    demo: Container, client: TestClient, keys: dict[str, str], fake: SleepyRuntime
) -> None:
    """A request through two members' bandits: feedback rewards both choices, each under its
    member's path, and each bandit reads its own rewards. Rewarded when m1 took `a` and m2 `b`,
    m1 learns `a` and m2 learns `b`; before, one assignment per request kept one member's
    choice and both bandits read the same rewards. (Half the reward for each right choice: a
    reward for both at once left a bandit whose arm the other member's spoiled nothing to learn
    from in 60 requests, and the test failed one run in a few.)"""
    add_fake(demo.registry, "acme", "ra", value=1.0)
    add_fake(demo.registry, "acme", "rb", value=2.0)
    assert deploy(client, keys["acme"], "twin", _member_splits({"algorithm": "epsilon_greedy", "epsilon": 0.1})).status_code == 201

    def picks(body: dict[str, Any]) -> dict[str, str]:
        return {m["name"]: {"ra": "a", "rb": "b"}[m["model"]] for m in body["members"]}

    for i in range(60):
        took = picks(predict(client, keys["acme"], "twin", request_id=f"t{i}").json())
        reward = 0.5 * (took["m1"] == "a") + 0.5 * (took["m2"] == "b")  # each bandit's own choice moves it
        fb = client.post("/api/v1/deployments/twin/feedback", json={"request_id": f"t{i}", "reward": reward}, headers=auth(keys["acme"]))
        assert fb.status_code == 200 and sorted(fb.json()["variants"]) == [f"m1/{took['m1']}", f"m2/{took['m2']}"]
        demo.predictions.bandits._rewards.clear()  # this test does not wait for the 2 s reward cache
    later = [picks(predict(client, keys["acme"], "twin").json()) for _ in range(60)]
    assert sum(p["m1"] == "a" for p in later) >= 45 and sum(p["m2"] == "b" for p in later) >= 45
    variants = client.get("/api/v1/deployments/twin/stats", headers=auth(keys["acme"])).json()["variants"]
    assert sum(v.get("rewards", 0) for k, v in variants.items() if k.startswith("m1/")) == 60
    assert sum(v.get("rewards", 0) for k, v in variants.items() if k.startswith("m2/")) == 60
    assert "a" not in variants and "b" not in variants


def test_a_first_success_ensemble_rewards_the_bandit_of_the_member_that_answered_alone(
    demo: Container, client: TestClient, keys: dict[str, str], fake: SleepyRuntime
) -> None:
    """Two hedged members, each a bandit: the fast member answers, the slow one is stopped. The
    answer is the fast member's, so feedback on it rewards its bandit's choice alone; the slow
    member's bandit chose too, but its choice answered nothing (before, it was rewarded as well)."""
    add_fake(demo.registry, "acme", "ra", value=1.0, sleep_s=0.5)
    add_fake(demo.registry, "acme", "rb", value=1.0, sleep_s=0.5)
    add_fake(demo.registry, "acme", "fa", value=2.0)
    add_fake(demo.registry, "acme", "fb", value=2.0)
    bandit = {"algorithm": "epsilon_greedy", "epsilon": 0.5}

    def member(name: str, a: str, b: str) -> dict[str, Any]:
        variants = [{"name": "a", "weight": 1, "target": single(a, 1)}, {"name": "b", "weight": 1, "target": single(b, 1)}]
        return {"name": name, "target": {"kind": "split", "variants": variants, "bandit": bandit}}

    policy = {"kind": "ensemble", "aggregator": "first_success", "members": [member("slow", "ra", "rb"), member("fast", "fa", "fb")]}
    assert deploy(client, keys["acme"], "hedged-bandits", policy).status_code == 201
    for i in range(3):
        body = predict(client, keys["acme"], "hedged-bandits", request_id=f"h{i}").json()
        assert body["prediction"] == 2.0 and body["model"] in ("fa", "fb")
        report = {m["name"]: m for m in body["members"]}
        assert report["slow"]["error"] == "cancelled"
        took = {"fa": "a", "fb": "b"}[body["model"]]
        fb = client.post("/api/v1/deployments/hedged-bandits/feedback", json={"request_id": f"h{i}", "reward": 1}, headers=auth(keys["acme"]))
        assert fb.status_code == 200, fb.text
        assert fb.json()["variants"] == [f"fast/{took}"]
    variants = client.get("/api/v1/deployments/hedged-bandits/stats", headers=auth(keys["acme"])).json()["variants"]
    assert sum(v.get("rewards", 0) for k, v in variants.items() if k.startswith("fast/")) == 3
    assert not any(v.get("rewards", 0) for k, v in variants.items() if k.startswith("slow/"))


def test_splits_in_two_switch_cases_count_apart_by_their_case(demo: Container, client: TestClient, keys: dict[str, str], fake: SleepyRuntime) -> None:
    """Two cases each holding a split with a variant `v`: one request whose rows take both
    counts `low/v` and `default/v` once each, not one merged `v` twice."""
    add_fake(demo.registry, "acme", "ra", value=1.0)
    add_fake(demo.registry, "acme", "rb", value=2.0)
    only_v = lambda model: {"kind": "split", "variants": [{"name": "v", "weight": 1, "target": single(model, 1)}]}  # noqa: E731
    policy = {
        "kind": "switch",
        "cases": [{"name": "low", "when": {"field": "inputs.input", "column": 0, "op": "<", "value": 5}, "target": only_v("ra")}],
        "default": only_v("rb"),
    }
    assert deploy(client, keys["acme"], "sw", policy).status_code == 201
    r = client.post("/api/v1/predictions", json={"deployment": "sw", "inputs": [[1, 1, 1, 1], [9, 9, 9, 9]]}, headers=auth(keys["acme"]))
    assert r.status_code == 200
    stats = client.get("/api/v1/deployments/sw/stats", headers=auth(keys["acme"])).json()
    assert {k: v["requests"] for k, v in stats["variants"].items()} == {"low/v": 1, "default/v": 1}
    assert {k: v["requests"] for k, v in stats["cases"].items()} == {"low": 1, "default": 1}


# Graph validation -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "status", "field"),
    [
        ({"kind": "split", "variants": [{"name": "a", "weight": 0, "target": {"kind": "single", "model": "iris", "version": 1}}]}, 422, "policy.variants"),
        ({"kind": "split", "variants": [{"name": "a", "weight": -1, "target": {"kind": "single", "model": "iris", "version": 1}}]}, 422, "policy.variants.0.weight"),
        ({"kind": "split", "variants": [{"name": "a", "weight": 1, "target": {"kind": "single", "model": "iris", "version": 1}}, {"name": "a", "weight": 1, "target": {"kind": "single", "model": "iris", "version": 1}}]}, 422, "policy.variants.1.name"),
        ({"kind": "single", "model": "iris", "version": 99}, 422, "policy"),
        ({"kind": "ref", "deployment": "ghost"}, 422, "policy"),
        ({"kind": "ensemble", "aggregator": "majority", "members": [{"name": "a", "target": {"kind": "single", "model": "diabetes", "version": 1}}]}, 422, "policy.aggregator"),
        ({"kind": "ensemble", "aggregator": "mean", "members": [{"name": "a", "target": {"kind": "single", "model": "iris", "version": 1}}, {"name": "b", "target": {"kind": "single", "model": "diabetes", "version": 1}}]}, 422, "policy.aggregator"),
        ({"kind": "split", "variants": [{"name": "a", "weight": 1, "target": {"kind": "single", "model": "iris", "version": 1}}, {"name": "b", "weight": 1, "target": {"kind": "ref", "deployment": "diabetes"}}]}, 422, "policy.variants.1.target"),
        # Nested: the field of the node at fault, not the top's (it said policy.aggregator, a field the split has not).
        ({"kind": "split", "variants": [{"name": "a", "weight": 1, "target": {"kind": "single", "model": "diabetes", "version": 1}}, {"name": "b", "weight": 1, "target": {"kind": "ensemble", "aggregator": "majority", "members": [{"name": "a", "target": {"kind": "single", "model": "diabetes", "version": 1}}]}}]}, 422, "policy.variants.1.target.aggregator"),
        ({"kind": "shadow", "primary": {"kind": "single", "model": "iris", "version": 1}, "mirrors": [{"name": "m", "target": {"kind": "single", "model": "diabetes", "version": 1}}]}, 422, "policy.mirrors.0.target"),
        # A sticky split's header that no client could send (a space, a colon, a newline, not ASCII).
        *(({"kind": "split", "routing_key": name, "variants": [{"name": "a", "weight": 1, "target": {"kind": "single", "model": "iris", "version": 1}}]}, 422, "policy.routing_key") for name in ("user id", "x-user:id", "x\nuser", "\u00fc-user")),
        ({"kind": "split", "variants": [{"name": "a", "weight": 1, "target": {"kind": "split", "routing_key": "a b", "variants": [{"name": "b", "weight": 1, "target": {"kind": "single", "model": "iris", "version": 1}}]}}]}, 422, "policy.variants.0.target.routing_key"),
        ({"kind": "ensemble", "aggregator": "vote", "members": [{"name": "a", "target": {"kind": "single", "model": "iris", "version": 1}}]}, 422, "policy.aggregator"),
        ({"kind": "ensemble", "aggregator": "mean", "min_members": 3, "members": [{"name": "a", "target": {"kind": "single", "model": "iris", "version": 1}}]}, 422, "policy.min_members"),
        ({"kind": "shadow", "primary": {"kind": "single", "model": "iris", "version": 1}, "mirrors": [{"name": "m", "sample_percent": 150, "target": {"kind": "single", "model": "iris", "version": 1}}]}, 422, "policy.mirrors.0.sample_percent"),
        ({"kind": "split", "variants": [{"name": "a", "weight": 1, "target": {"kind": "split", "variants": [{"name": "b", "weight": 1, "target": {"kind": "split", "variants": [{"name": "c", "weight": 1, "target": {"kind": "split", "variants": [{"name": "d", "weight": 1, "target": {"kind": "single", "model": "iris", "version": 1}}]}}]}}]}}]}, 422, "policy.variants.0.target.variants.0.target.variants.0.target.variants.0.target"),
        ({"kind": "teleport"}, 422, "policy.kind"),
        ({"kind": "split", "variants": [{"name": "a", "weight": 1}]}, 422, "policy.variants.0.target"),
    ],
)
def test_graph_validation_rejects_bad_policies(client: TestClient, keys: dict[str, str], policy: dict, status: int, field: str) -> None:
    r = deploy(client, keys["acme"], "bad", policy)
    assert r.status_code == status, r.text
    assert r.json()["field"] == field and r.json()["error"]


def test_references_resolve_and_cycles_are_rejected(client: TestClient, keys: dict[str, str]) -> None:
    key = keys["acme"]
    assert deploy(client, key, "front", {"kind": "ref", "deployment": "iris"}).status_code == 201
    assert predict(client, key, "front").json()["model"] == "iris"
    assert deploy(client, key, "back", {"kind": "ref", "deployment": "front"}).status_code == 201
    r = deploy(client, key, "iris", {"kind": "ref", "deployment": "back"}, update=True)
    assert r.status_code == 422 and "cycle" in r.json()["error"] and "iris -> back -> front -> iris" in r.json()["error"]
    assert deploy(client, key, "selfish", {"kind": "ref", "deployment": "selfish"}).status_code == 422


def test_two_updates_that_would_close_a_cycle_at_once_store_none(demo: Container, keys: dict[str, str]) -> None:
    """p -> q and q -> p, through two workers at the same moment, each past its cycle check
    before either writes (`Together`): one is stored, the other is checked again on what is
    stored now and refused as the cycle it makes; both deployments still answer."""
    key = keys["acme"]
    meeting = Together(demo.registry, "update_deployment", parties=2)
    first, second = (TestClient(create_app(Container(demo.settings, meeting, demo.store, demo.runtimes))) for _ in range(2))  # type: ignore[arg-type]
    for name in ("p", "q"):
        assert deploy(first, key, name, single("iris", 1)).status_code == 201
    answers = at_once(
        lambda: deploy(first, key, "p", {"kind": "ref", "deployment": "q"}, update=True),
        lambda: deploy(second, key, "q", {"kind": "ref", "deployment": "p"}, update=True),
    )
    assert sorted(r.status_code for r in answers) == [200, 422], [r.text for r in answers]
    refused = next(r for r in answers if r.status_code == 422)
    assert refused.json()["field"] == "policy" and "cycle" in refused.json()["error"]
    for name in ("p", "q"):
        assert predict(first, key, name).status_code == 200
        assert first.get(f"/v2/models/{name}", headers=auth(key)).status_code == 200


class ChangesMeanwhile:
    """A registry where, just before each of the first `times` updates of another deployment,
    another writer changes `changed` (its description, a new revision): what a busy tenant's
    admin might do between a policy's check and its write."""

    def __init__(self, registry: Any, changed: str, times: int) -> None:
        self._registry = registry
        self._changed = changed
        self.times = times

    def __getattr__(self, name: str) -> Any:
        return getattr(self._registry, name)

    def update_deployment(self, deployment: Any, **kwargs: Any) -> Any:
        if self.times and deployment.name != self._changed:
            self.times -= 1
            current = self._registry.get_deployment(deployment.tenant, self._changed)
            self._registry.update_deployment(
                replace(current, description=f"r{current.revision + 1}"), expected_revision=current.revision
            )
        return self._registry.update_deployment(deployment, **kwargs)


@pytest.mark.parametrize(("times", "status"), [(1, 200), (RECHECKS, 409)])
def test_an_update_whose_reference_changes_before_its_write_is_checked_again(
    demo: Container, keys: dict[str, str], times: int, status: int
) -> None:
    """Checked again on what is stored now, it is written; a reference that changes before
    every one of its writes leaves it a 409 naming `policy`, to try again."""
    key = keys["acme"]
    meanwhile = ChangesMeanwhile(demo.registry, "q", times)
    client = TestClient(create_app(Container(demo.settings, meanwhile, demo.store, demo.runtimes)))  # type: ignore[arg-type]
    for name in ("p", "q"):
        assert deploy(client, key, name, single("iris", 1)).status_code == 201
    r = deploy(client, key, "p", {"kind": "ref", "deployment": "q"}, update=True)
    assert r.status_code == status, r.text
    assert meanwhile.times == 0 and demo.registry.get_deployment("acme", "q").revision == 1 + times
    history = [c.new_policy for c in demo.registry.deployment_history("acme", "p")]
    if status == 200:
        assert history == [single("iris", 1), {"kind": "ref", "deployment": "q"}]
    else:
        assert r.json()["field"] == "policy" and r.json()["code"] == "conflict"
        assert history == [single("iris", 1)]


def test_a_policy_reaching_more_deployments_than_one_write_can_rest_on_is_refused(demo: Container, acme: Principal) -> None:
    def split_over(names: list[str]) -> dict[str, Any]:
        variants = [{"name": f"v{i}", "weight": 1, "target": {"kind": "ref", "deployment": n}} for i, n in enumerate(names)]
        return {"kind": "split", "variants": variants}

    leaves = [f"leaf{i}" for i in range(MAX_REFS_READ)]
    for name in leaves:
        demo.deployments.create(acme, name, single("iris", 1))
    hubs = [f"hub{i}" for i in range(MAX_REFS_READ // 16)]
    for i, hub in enumerate(hubs):
        demo.deployments.create(acme, hub, split_over(leaves[16 * i : 16 * (i + 1)]))
    demo.deployments.create(acme, "most", split_over(hubs[:3] + leaves[48:61]))  # 3 hubs, 48 + 13 leaves: 64
    with pytest.raises(Unprocessable) as refused:
        demo.deployments.create(acme, "beyond", split_over(hubs))  # 64 leaves and their 4 hubs
    assert refused.value.field == "policy" and str(MAX_REFS_READ) in refused.value.message


def test_references_never_cross_tenants(client: TestClient, keys: dict[str, str]) -> None:
    r = deploy(client, keys["globex"], "borrow", {"kind": "ref", "deployment": "iris"})
    assert r.status_code == 422  # acme's iris does not exist for globex


def test_policy_changes_are_recorded_with_who_and_what(client: TestClient, keys: dict[str, str], two_irises: Container) -> None:
    split = {"kind": "split", "variants": [{"name": "a", "weight": 90, "target": single("iris", 1)}, {"name": "b", "weight": 10, "target": single("iris", 2)}]}
    deploy(client, keys["acme"], "iris", split, update=True)
    history = client.get("/api/v1/deployments/iris/history", headers=auth(keys["acme"])).json()
    assert history[-1]["old_policy"] == single("iris", 1) and history[-1]["new_policy"]["kind"] == "split"


# Statistics stored by releases that counted nested nodes by their own names ---------------
def _case_bandit(*bandits: str) -> dict[str, Any]:
    """A switch whose cases (each named in `bandits`, every row takes the first) each hold a
    bandit over `a` (model ra) and `b` (model rb)."""
    bandit = {
        "kind": "split", "bandit": {"algorithm": "epsilon_greedy", "epsilon": 0.1},
        "variants": [{"name": "a", "weight": 1, "target": single("ra", 1)}, {"name": "b", "weight": 1, "target": single("rb", 1)}],
    }  # fmt: skip
    cases = [{"name": name, "when": {"field": "inputs.input", "column": 0, "op": "<", "value": 100}, "target": bandit} for name in bandits]
    return {"kind": "switch", "cases": cases, "default": single("rb", 1)}


@pytest.mark.parametrize("bandits", [("score",), ("score", "spare")])
def test_a_nested_bandit_reads_the_rewards_an_earlier_release_stored_under_bare_names(
    demo: Container, client: TestClient, keys: dict[str, str], fake: SleepyRuntime, bandits: tuple[str, ...]
) -> None:
    """Releases before paths kept a nested bandit's rewards, and a request's assignment, under
    its variants' own names (`b`, not `score/b`). Where the policy holds that one bandit, it
    goes on from them at the same revision, and feedback for a request those releases answered
    rewards `score/b`; where it holds several, whose rewards those releases mixed, it starts
    afresh (and the feedback keeps the name it was given)."""
    add_fake(demo.registry, "acme", "ra", value=1.0)
    add_fake(demo.registry, "acme", "rb", value=2.0)
    assert deploy(client, keys["acme"], "cased", _case_bandit(*bandits)).status_code == 201
    demo.registry.merge_stats("acme", "cased", 1, "variant:a", {"requests": 200, "reward_n": 200, "reward_sum": 10.0}, {})
    demo.registry.merge_stats("acme", "cased", 1, "variant:b", {"requests": 200, "reward_n": 200, "reward_sum": 190.0}, {})
    demo.registry.put_assignment("acme", "cased", "before", ("a",), revision=1)

    picks = [predict(client, keys["acme"], "cased").json()["variant"] for _ in range(100)]
    fb = client.post("/api/v1/deployments/cased/feedback", json={"request_id": "before", "reward": 1.0}, headers=auth(keys["acme"]))
    assert fb.status_code == 200
    variants = client.get("/api/v1/deployments/cased/stats", headers=auth(keys["acme"])).json()["variants"]
    if len(bandits) == 1:
        assert picks.count("b") >= 80
        assert fb.json()["variants"] == ["score/a"]
        assert variants["score/a"]["rewards"] == 201 and variants["score/b"]["rewards"] == 200
        assert "a" not in variants and "b" not in variants
    else:
        assert picks.count("a") >= 80  # epsilon-greedy with no reward yet takes its first variant
        assert fb.json()["variants"] == ["a"]
        assert variants["a"]["rewards"] == 201 and variants["b"]["rewards"] == 200


def test_statistics_an_earlier_release_stored_for_nested_nodes_count_with_their_paths(
    demo: Container, client: TestClient, keys: dict[str, str], fake: SleepyRuntime
) -> None:
    """Releases before paths counted a step of the sequence in case `eu` as `score` and a
    variant of the split in its step `embed` as `a`; at the same revision they add up with
    what is counted now (`eu/score`, `eu/embed/a`), listed once. A name the top holds too
    (case `eu`) or several nested nodes hold (steps `embed` of `eu` and of the default) stays
    as stored."""
    add_fake(demo.registry, "acme", "ra", value=1.0)
    add_fake(demo.registry, "acme", "rb", value=2.0)
    demo.registry.create_model(Model("acme", "rc"))  # takes `y`, answers `y`
    takes_y = Signature((TensorSpec("y", "FP32", (-1, 1)),), (TensorSpec("y", "FP32", (-1, 1), role="value"),))
    demo.registry.add_version(ModelVersion("acme", "rc", 0, "sagemaker", "fake://", "0" * 64, 0, takes_y, config={"value": 3.0}))
    seq = lambda first, then: {"kind": "sequence", "steps": [{"name": "embed", "target": first}, {"name": then, "target": single("rc", 1)}]}  # noqa: E731
    split = {"kind": "split", "variants": [{"name": "a", "weight": 1, "target": single("ra", 1)}]}
    policy = {
        "kind": "switch",
        "cases": [{"name": "eu", "when": {"field": "inputs.input", "column": 0, "op": "<", "value": 100}, "target": seq(split, "score")}],
        "default": seq(single("ra", 1), "last"),
    }
    assert deploy(client, keys["acme"], "geo", policy).status_code == 201
    old = {"requests": 5, "latency_ms_sum": 50.0}
    for subject in ("step:score", "variant:a", "step:embed", "case:eu"):
        demo.registry.merge_stats("acme", "geo", 1, subject, old, {})
    for _ in range(3):
        assert predict(client, keys["acme"], "geo").status_code == 200
    stats = client.get("/api/v1/deployments/geo/stats", headers=auth(keys["acme"])).json()
    steps = {k: v["requests"] for k, v in stats["steps"].items()}
    assert steps["eu/score"] == 8 and "score" not in steps
    assert {k: v["requests"] for k, v in stats["variants"].items()} == {"eu/embed/a": 8}
    assert steps["embed"] == 5 and steps["eu/embed"] == 3  # two nested steps `embed`: not told apart
    assert stats["cases"]["eu"]["requests"] == 8  # at the top: counted under its name as always
