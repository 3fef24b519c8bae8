"""Progressive rollouts end to end: real SQLite, real ONNX models, real shadow comparisons,
the controller driven by a synthetic clock (each look is one `tick`; no test waits)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient

from sluice.api.app import create_app
from sluice.domain.errors import Conflict, InvalidRequest, Unprocessable
from sluice.services.rollouts import RolloutService
from sluice.stats.alarms import CloudWatchAlarms
from tests.conftest import MODELS
from tests.integration.conftest import auth
from tests.support import Clock

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container

ROW = [[5.9, 3.0, 5.1, 1.8]]
STEPS = "1,5,25,50,100"


class FiringAlarms:
    def __init__(self, firing: set[str]) -> None:
        self.names = firing

    def firing(self, names: Any) -> list[str]:
        return sorted(set(names) & self.names)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def rollouts(demo: Container, clock: Clock) -> RolloutService:
    service = RolloutService(demo.registry, demo.deployments, clock=clock)
    demo.rollouts = service  # type: ignore[misc]
    return service


@pytest.fixture
def twin(demo: Container, acme: Principal) -> Container:
    """iris:2 is the same model as iris:1: it agrees on every row."""
    demo.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())
    return demo


@pytest.fixture
def forest(demo: Container, acme: Principal) -> Container:
    """iris:2 is a random forest."""
    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    return demo


def send(client: TestClient, key: str, variant: str, n: int) -> None:
    for i in range(n):
        r = client.post(
            "/api/v1/predictions",
            json={
                "deployment": "iris",
                "inputs": ROW,
                "variant": variant,
                "request_id": f"{variant}-{i}",
            },
            headers=auth(key),
        )
        assert r.status_code == 200, r.text
        assert r.json()["variant"] == variant


def weights(policy: dict[str, Any]) -> dict[str, float]:
    return {v["name"]: v["weight"] for v in policy["variants"]}


def notes(container: Container, principal: Principal) -> list[dict[str, Any]]:
    return [c.note for c in container.deployments.history(principal, "iris") if c.note is not None]


def start(rollouts: RolloutService, principal: Principal, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "to": "iris:2",
        "steps": STEPS,
        "every": "10m",
        "gates": "agreement>=0.98,error_rate<=0.005",
        "min_requests": 10,
    }
    return rollouts.start(principal, "iris", **{**args, **kw})


def test_a_rollout_walks_every_step_to_the_candidate(
    twin: Container, acme: Principal, keys: dict[str, str], rollouts: RolloutService, clock: Clock
) -> None:
    client = TestClient(create_app(twin))
    stable = twin.deployments.get(acme, "iris").policy
    dep = start(rollouts, acme)
    assert weights(dep.policy) == {"stable": 99.0, "candidate": 1.0}
    assert dep.policy["variants"][0]["target"] == {
        "kind": "shadow", "primary": stable,
        "mirrors": [{"name": "candidate", "sample_percent": 100.0, "target": {"kind": "single", "model": "iris", "version": 2}}],
    }  # fmt: skip
    assert twin.registry.running_rollouts() == [("acme", "iris")]
    for weight, after in ((1, 5), (5, 25), (25, 50), (50, None)):
        dep = twin.deployments.get(acme, "iris")
        assert dep.rollout is not None and dep.rollout.weight == weight
        send(client, keys["acme"], "stable", 10)
        send(client, keys["acme"], "candidate", 10)
        held = rollouts.tick("acme", "iris")
        assert held is not None and held.action == "hold" and "gates pass" in held.reason
        clock.now += 600
        moved = rollouts.tick("acme", "iris")
        assert moved is not None
        if after is None:
            assert moved.action == "complete"
        else:
            assert moved.action == "advance"
            assert weights(twin.deployments.get(acme, "iris").policy)["candidate"] == after
        assert moved.numbers["metrics"]["agreement"] == 1.0
        assert moved.numbers["metrics"]["candidate_requests"] == 10  # this revision's traffic only
    dep = twin.deployments.get(acme, "iris")
    assert dep.policy == {"kind": "single", "model": "iris", "version": 2}
    assert dep.rollout is not None and dep.rollout.state == "completed"
    assert twin.registry.running_rollouts() == []
    recorded = notes(twin, acme)
    assert [n["rollout"] for n in recorded] == [
        "start",
        "advance",
        "advance",
        "advance",
        "completed",
    ]
    assert [n.get("to_weight") for n in recorded[1:4]] == [5, 25, 50]
    assert all(
        n["gates"]["agreement>=0.98"] == {"value": 1.0, "passes": True} for n in recorded[1:]
    )
    # The API shows the same history with its numbers.
    history = client.get("/api/v1/deployments/iris/history", headers=auth(keys["acme"])).json()
    assert history[-1]["note"]["rollout"] == "completed"
    assert history[-1]["note"]["metrics"]["error_rate"] == 0.0


def test_a_failing_gate_rolls_back_at_once(
    forest: Container, acme: Principal, rollouts: RolloutService, clock: Clock
) -> None:
    stable = forest.deployments.get(acme, "iris").policy
    dep = start(rollouts, acme, gates="error_rate<=0.005,p99_ratio<=1.2", min_requests=20)
    recorder = forest.predictions.stats
    for i in range(20):
        recorder.request(("acme", "iris", dep.revision, "variant:stable"), 2.0, ok=True)
        recorder.request(
            ("acme", "iris", dep.revision, "variant:candidate"), 2.0 if i < 15 else 9.0, ok=True
        )
    # No wait for the step's time: a gate that fails rolls back on the first look.
    decision = rollouts.tick("acme", "iris")
    assert decision is not None and decision.action == "rollback"
    assert "p99_ratio<=1.2" in decision.reason
    dep = forest.deployments.get(acme, "iris")
    assert dep.policy == stable
    assert dep.rollout is not None and dep.rollout.state == "rolled_back"
    last = notes(forest, acme)[-1]
    assert last["rollout"] == "rolled_back"
    assert last["metrics"]["p99_ratio"] > 1.2 and last["gates"]["p99_ratio<=1.2"]["passes"] is False
    assert rollouts.tick("acme", "iris") is None  # nothing left to look at


def test_errors_beyond_doubt_roll_back_before_the_count_is_reached(
    forest: Container, acme: Principal, rollouts: RolloutService
) -> None:
    dep = start(rollouts, acme, gates="error_rate<=0.01", min_requests=100)
    for _ in range(2):  # 2 errors: over 1% of the 100 requests the step needs, whatever comes next
        forest.predictions.stats.request(
            ("acme", "iris", dep.revision, "variant:candidate"), 0.0, ok=False
        )
    decision = rollouts.tick("acme", "iris")
    assert decision is not None and decision.action == "rollback"
    assert forest.deployments.get(acme, "iris").rollout.state == "rolled_back"  # type: ignore[union-attr]


def test_an_answer_that_is_not_a_number_is_left_out_of_the_comparison_not_the_rollout(
    forest: Container, acme: Principal, keys: dict[str, str], rollouts: RolloutService, clock: Clock
) -> None:
    """A stable answer of NaN probabilities (served, as a 200) is one row left out of the
    mirror's differences: the comparisons after it still count, and the step advances."""
    client = TestClient(create_app(forest))
    dep = start(rollouts, acme, gates="mean_abs_diff<=0.9", steps="50,100", min_requests=10)
    send(client, keys["acme"], "candidate", 12)
    send(client, keys["acme"], "stable", 5)
    odd = client.post(
        "/api/v1/predictions", json={"deployment": "iris", "inputs": [[3e38, 3e38, -3e38, 3e38]], "variant": "stable"}, headers=auth(keys["acme"])
    )
    assert odd.status_code == 200 and None in odd.json()["probabilities"].values(), odd.text
    send(client, keys["acme"], "stable", 20)
    clock.now += 600
    decision = rollouts.tick("acme", "iris")
    assert decision is not None and decision.action == "complete", decision
    metrics = decision.numbers["metrics"]
    assert (metrics["compared"], metrics["not_finite_rows"]) == (26, 1)
    assert metrics["mean_abs_diff"] is not None
    mirror = forest.registry.read_stats("acme", "iris", dep.revision)["mirror:stable/candidate"]
    assert mirror["compared"] == 26 and mirror["diff_not_finite"] == 1


def test_a_step_is_held_for_lack_of_traffic(
    twin: Container, acme: Principal, keys: dict[str, str], rollouts: RolloutService, clock: Clock
) -> None:
    client = TestClient(create_app(twin))
    start(rollouts, acme, min_requests=50)
    send(client, keys["acme"], "candidate", 5)
    send(client, keys["acme"], "stable", 5)
    clock.now += 24 * 3600  # the step's time is long over
    decision = rollouts.tick("acme", "iris")
    assert decision is not None and decision.action == "hold"
    assert decision.reason.startswith("waiting for traffic: 5 of 50 candidate requests")
    dep = twin.deployments.get(acme, "iris")
    assert dep.rollout is not None and dep.rollout.weight == 1 and dep.rollout.state == "running"
    assert [n["rollout"] for n in notes(twin, acme)] == ["start"]  # holding writes nothing
    status = client.get("/api/v1/deployments/iris/rollout", headers=auth(keys["acme"])).json()
    assert status["now"]["next"] == "hold" and status["now"]["metrics"]["candidate_requests"] == 5


def test_status_gives_each_gate_against_its_threshold_and_the_next_decision_time(
    twin: Container, acme: Principal, keys: dict[str, str], rollouts: RolloutService, clock: Clock
) -> None:
    from sluice.types.rollouts import RolloutStatus

    client = TestClient(create_app(twin))
    started = clock.now
    start(rollouts, acme, every="10m", gates="agreement>=0.98,error_rate<=0.005")
    send(client, keys["acme"], "candidate", 12)
    send(client, keys["acme"], "stable", 12)
    clock.now += 60
    r = client.get("/api/v1/deployments/iris/rollout", headers=auth(keys["acme"]))
    assert r.status_code == 200, r.text
    status = RolloutStatus.model_validate(r.json())  # what the OpenAPI document promises
    now = r.json()["now"]
    assert status.now is not None and status.rollout is not None and status.rollout.step == 0
    checks = {c["metric"]: c for c in now["checks"]}
    assert checks["error_rate"] == {"gate": "error_rate<=0.005", "metric": "error_rate", "op": "<=", "threshold": 0.005, "value": 0.0, "passes": True}
    assert checks["agreement"]["threshold"] == 0.98 and checks["agreement"]["op"] == ">="
    assert now["at"] == started + 60 and now["step_ends_at"] == started + 600
    assert now["next_decision_at"] == started + 600 and now["next"] == "hold"
    assert client.post("/api/v1/deployments/iris/rollout/pause", headers=auth(keys["acme"])).status_code == 200
    paused = client.get("/api/v1/deployments/iris/rollout", headers=auth(keys["acme"])).json()["now"]
    assert paused["next"] == "paused" and paused["next_decision_at"] is None
    # Another tenant does not see it; the OpenAPI document describes it.
    assert client.get("/api/v1/deployments/iris/rollout", headers=auth(keys["globex"])).status_code == 404
    schema = client.get("/openapi.json").json()
    route = schema["paths"]["/api/v1/deployments/{name}/rollout"]["get"]
    assert route["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/RolloutStatus")
    assert "next_decision_at" in schema["components"]["schemas"]["RolloutNow"]["properties"]
    assert "threshold" in schema["components"]["schemas"]["GateCheck"]["properties"]


def test_a_manual_policy_change_pauses_the_rollout(
    twin: Container, acme: Principal, rollouts: RolloutService, clock: Clock
) -> None:
    start(rollouts, acme)
    changed = twin.deployments.update(
        acme, "iris", {"kind": "single", "model": "iris", "version": 1}
    )
    assert changed.rollout is not None and changed.rollout.state == "paused"
    assert "changed by test-acme" in changed.rollout.reason
    assert notes(twin, acme)[-1]["rollout"] == "paused"
    assert twin.registry.running_rollouts() == []
    assert rollouts.tick("acme", "iris") is None
    with pytest.raises(Conflict):
        rollouts.pause(acme, "iris")
    resumed = rollouts.resume(acme, "iris")
    assert resumed.rollout is not None and resumed.rollout.state == "running"
    assert weights(resumed.policy) == {"stable": 99.0, "candidate": 1.0}
    paused = rollouts.pause(acme, "iris")
    assert paused.rollout.state == "paused" and paused.policy == resumed.policy  # type: ignore[union-attr]
    aborted = rollouts.abort(acme, "iris")
    assert aborted.policy == {"kind": "single", "model": "iris", "version": 1}
    assert aborted.rollout is not None and aborted.rollout.state == "aborted"
    assert [n["rollout"] for n in notes(twin, acme)] == [
        "start",
        "paused",
        "resumed",
        "paused",
        "aborted",
    ]


def test_a_settings_change_starts_the_step_again_on_the_new_revisions_traffic(
    twin: Container, acme: Principal, keys: dict[str, str], rollouts: RolloutService, clock: Clock
) -> None:
    """Statistics are counted per revision: a change of the settings alone (batching, capture,
    cache) keeps the rollout running, its step started again, so the step is judged on a whole
    `every` of the new revision's traffic, not on the seconds left of the old one's."""
    client = TestClient(create_app(twin))
    start(rollouts, acme, every="10m", min_requests=10)
    clock.now += 590  # most of the step gone by...
    changed = twin.deployments.update(acme, "iris", None, batching={"max_batch_size": 4, "max_delay_us": 100})
    assert changed.rollout is not None and changed.rollout.state == "running" and changed.rollout.step_started_at == clock.now
    assert notes(twin, acme)[-1]["rollout"] == "restarted" and "settings were changed by test-acme" in changed.rollout.reason
    clock.now += 10  # ...then ten seconds of the new revision's traffic
    send(client, keys["acme"], "stable", 10)
    send(client, keys["acme"], "candidate", 10)
    decision = rollouts.tick("acme", "iris")
    assert decision is not None and decision.action == "hold" and "the step lasts 590 s more" in decision.reason, decision
    clock.now += 600
    moved = rollouts.tick("acme", "iris")
    assert moved is not None and moved.action == "advance", moved


@pytest.mark.parametrize("where", ["variant", "mirror"])
def test_a_candidate_that_answers_nothing_is_rolled_back_whatever_the_gates(where: str) -> None:
    """Gates that read only answers (agreement, p99_ratio) get no value from a candidate that
    fails every request: it is rolled back once a step's worth of requests have failed, as a
    variant or as the stable's mirror, not held with its share of users failing."""
    from sluice.domain.rollouts import Rollout, evaluate
    from sluice.stats.histogram import bucket_name
    from sluice.stats.verdicts import gate_metrics

    rollout = Rollout(
        model="iris", version=2, stable={"kind": "single", "model": "iris", "version": 1},
        steps=(5.0, 100.0), every_s=60.0, gates="agreement>=0.98,p99_ratio<=1.2", min_requests=100,
    )  # fmt: skip
    answered = {"requests": 5000, bucket_name(2.0): 5000}
    counters = {
        "variant:candidate": {"requests": 5000, "errors": 5000} if where == "variant" else answered,
        "variant:stable": {"requests": 95000, bucket_name(2.0): 95000},
        "mirror:stable/candidate": {"requests": 95000, "errors": 95000},
    }
    decision = evaluate(rollout, gate_metrics(counters), now=1e9)
    assert decision.action == "rollback" and "answered none of its" in decision.reason, decision
    counters["mirror:stable/candidate"] = {"requests": 99, "errors": 99}  # not yet a step's worth
    if where == "mirror":
        assert evaluate(rollout, gate_metrics(counters), now=1e9).action == "hold"


def test_a_failing_rate_gate_rolls_back_while_comparisons_lag() -> None:
    """Once the candidate has its minimum, an error_rate gate that fails is failing beyond the
    comparisons an agreement gate still waits for (a low mirror_percent): it held, its share of
    users failing, until enough comparisons came."""
    from sluice.domain.rollouts import Rollout, evaluate
    from sluice.stats.histogram import bucket_name
    from sluice.stats.verdicts import gate_metrics

    rollout = Rollout(
        model="iris", version=2, stable={"kind": "single", "model": "iris", "version": 1},
        steps=(5.0, 100.0), every_s=60.0, gates="agreement>=0.9,error_rate<=0.05", min_requests=10,
    )  # fmt: skip
    counters = {
        "variant:candidate": {"requests": 40, "errors": 20, bucket_name(2.0): 20},
        "variant:stable": {"requests": 760, bucket_name(2.0): 760},
        "mirror:stable/candidate": {"requests": 3, "compared": 3, "labelled": 3, "agree": 3},
    }
    decision = evaluate(rollout, gate_metrics(counters), now=1e9)
    assert decision.action == "rollback" and "error_rate<=0.05 fails" in decision.reason, decision
    counters["variant:candidate"] = {"requests": 40, "errors": 1, bucket_name(2.0): 39}  # passing: it waits for them
    assert evaluate(rollout, gate_metrics(counters), now=1e9).action == "hold"


@pytest.mark.parametrize(("stable_refuses", "action"), [(False, "rollback"), (True, "hold")])
def test_a_candidate_whose_model_refuses_every_input_is_rolled_back_unless_the_stable_does_too(stable_refuses: bool, action: str) -> None:
    """A caller's bad request is refused before a variant is chosen: a variant's refusals are its
    model's. One refusing all of its requests while the stable answered was held for ever, its
    share of users refused, by a gate that could never get a value."""
    from sluice.domain.rollouts import Rollout, evaluate
    from sluice.stats.histogram import bucket_name
    from sluice.stats.verdicts import gate_metrics

    rollout = Rollout(
        model="iris", version=2, stable={"kind": "single", "model": "iris", "version": 1},
        steps=(50.0, 100.0), every_s=60.0, gates="p99_ratio<=1.5", min_requests=30,
    )  # fmt: skip
    stable = {"requests": 30, "errors": 30, "invalid_inputs": 30} if stable_refuses else {"requests": 30, bucket_name(2.0): 30}
    counters = {"variant:candidate": {"requests": 30, "errors": 30, "invalid_inputs": 30}, "variant:stable": stable}
    decision = evaluate(rollout, gate_metrics(counters), now=1e9)
    assert decision.action == action, decision
    if action == "rollback":
        assert "answered none of its 30 requests" in decision.reason


def test_a_named_alarm_rolls_back(twin: Container, acme: Principal, clock: Clock) -> None:
    alarms = FiringAlarms(set())
    service = RolloutService(twin.registry, twin.deployments, clock=clock, alarms=alarms)
    start(service, acme, alarms=["acme/iris-5xx"])
    assert service.tick("acme", "iris").action == "hold"  # type: ignore[union-attr]
    alarms.names.add("acme/iris-5xx")
    decision = service.tick("acme", "iris")
    assert (
        decision is not None
        and decision.action == "rollback"
        and decision.numbers["alarms"] == ["acme/iris-5xx"]
    )
    assert notes(twin, acme)[-1]["alarms"] == ["acme/iris-5xx"]


def test_a_rollout_watches_only_its_tenants_alarms(twin: Container, acme: Principal, clock: Clock) -> None:
    """The controller reads alarms with its own role, across the account: a rollout may name
    only its tenant's (`acme/…`, or the one sluice made for one of acme's deployments'
    endpoints), whatever the spelling; one saved before the rule held is never read."""
    from dataclasses import replace

    from sluice.domain.errors import Unprocessable
    from sluice.endpoints.names import endpoint_name
    from sluice.endpoints.scaling import BACKLOG

    alarms = FiringAlarms(set())
    service = RolloutService(twin.registry, twin.deployments, clock=clock, alarms=alarms)
    assert BACKLOG.from_zero is not None
    others = BACKLOG.from_zero.alarm_name(endpoint_name("globex", "iris"))
    for name in ["globex/iris-5xx", "Acme/iris-5xx", "acme", "acme-iris-5xx", others, BACKLOG.from_zero.alarm_name(endpoint_name("acme", "nothing-here"))]:
        with pytest.raises(Unprocessable, match="is not one of tenant 'acme'") as refused:
            start(service, acme, alarms=["acme/mine", name])
        assert refused.value.field == "alarms" and repr(name) in refused.value.message
    mine = BACKLOG.from_zero.alarm_name(endpoint_name("acme", "iris"))
    start(service, acme, alarms=["acme/iris-5xx", mine])
    dep = twin.registry.get_deployment("acme", "iris")  # as a rollout saved before the rule held would be
    twin.registry.update_deployment(replace(dep, rollout=replace(dep.rollout, alarms=(*dep.rollout.alarms, others))), expected_revision=dep.revision)  # type: ignore[arg-type]
    asked: list[list[str]] = []
    firing = alarms.firing
    alarms.firing = lambda names: asked.append(list(names)) or firing(names)  # type: ignore[method-assign]
    alarms.names.add(others)
    assert service.tick("acme", "iris").action == "hold"  # type: ignore[union-attr]
    assert asked == [["acme/iris-5xx", mine]]
    alarms.names.add(mine)
    assert service.tick("acme", "iris").action == "rollback"  # type: ignore[union-attr]


def test_cloudwatch_alarms_reads_alarm_states(monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        cw = boto3.client("cloudwatch", region_name="us-east-1")
        for name in ("calm", "loud"):
            cw.put_metric_alarm(
                AlarmName=name, MetricName="Errors", Namespace="sluice", Statistic="Sum", Period=60,
                EvaluationPeriods=1, Threshold=1, ComparisonOperator="GreaterThanThreshold",
            )  # fmt: skip
        cw.set_alarm_state(AlarmName="loud", StateValue="ALARM", StateReason="test")
        assert CloudWatchAlarms(cw).firing(["calm", "loud", "absent"]) == ["loud"]


class BrokenAlarms:
    def firing(self, names: Any) -> list[str]:
        raise RuntimeError("a fault of the alarms' own")


@pytest.mark.parametrize("broken", ["throttled", "fault"])
def test_a_look_that_fails_never_stops_the_controllers_look_at_another_rollout(
    twin: Container, acme: Principal, globex: Principal, clock: Clock, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    """acme's rollout names an alarm that cannot be read (CloudWatch throttles the call, or the
    port fails its own way); globex's is due to advance: it does, and acme's look is a failure
    of its own (a refused DescribeAlarms is Unavailable, naming its code)."""
    import boto3
    from botocore.stub import Stubber

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    stubber = Stubber(cloudwatch)
    stubber.add_client_error("describe_alarms", service_error_code="Throttling", http_status_code=400)
    stubber.activate()
    alarms = CloudWatchAlarms(cloudwatch) if broken == "throttled" else BrokenAlarms()
    service = RolloutService(twin.registry, twin.deployments, clock=clock, alarms=alarms)
    start(service, acme, alarms=["acme/iris-5xx"], gates="error_rate<=0.005")
    for _ in range(2):
        twin.models.push(globex, "gx", (MODELS / "iris.onnx").read_bytes())
    twin.deployments.create(globex, "gx", {"kind": "single", "model": "gx", "version": 1})
    dep = service.start(globex, "gx", to="gx:2", steps=STEPS, every="10m", gates="error_rate<=0.005", min_requests=5)
    for _ in range(5):
        twin.predictions.stats.request(("globex", "gx", dep.revision, "variant:candidate"), 2.0, ok=True)
    clock.now += 600
    done = service.run_once()
    assert done[("globex", "gx")] == "advance"
    assert done[("acme", "iris")] == ("failed: cannot read the rollout's alarms: Throttling" if broken == "throttled" else "failed")
    assert twin.deployments.get(globex, "gx").rollout.weight == 5  # type: ignore[union-attr]
    assert twin.deployments.get(acme, "iris").rollout.state == "running"  # type: ignore[union-attr]


def test_a_deployment_an_active_rollouts_stable_policy_refers_to_cannot_be_deleted(
    forest: Container, acme: Principal, keys: dict[str, str], rollouts: RolloutService
) -> None:
    """`front` rolls out from a reference to `base`, then is set by hand (the rollout pauses):
    `base` is still what its abort restores, so deleting it is refused, naming the rollout;
    once the rollout is aborted, `front` answers through `base` again."""
    client = TestClient(create_app(forest))
    forest.deployments.create(acme, "base", {"kind": "single", "model": "iris", "version": 1})
    forest.deployments.create(acme, "front", {"kind": "ref", "deployment": "base"})
    rollouts.start(acme, "front", to="iris:2", steps=STEPS, every="10m", gates="error_rate<=0.01")
    forest.deployments.update(acme, "front", {"kind": "single", "model": "iris", "version": 1})
    r = client.delete("/api/v1/deployments/base", headers=auth(keys["acme"]))
    assert r.status_code == 409 and r.json()["field"] == "deployment", r.text
    assert "paused rollout of deployment 'front'" in r.json()["error"]
    r = client.post("/api/v1/deployments/front/rollout/abort", headers=auth(keys["acme"]))
    assert r.status_code == 200 and r.json()["policy"] == {"kind": "ref", "deployment": "base"}, r.text
    r = client.post("/api/v1/predictions", json={"deployment": "front", "inputs": ROW}, headers=auth(keys["acme"]))
    assert r.status_code == 200 and r.json()["version"] == 1, r.text


def test_one_rollout_at_a_time_and_bad_input_names_the_field(
    forest: Container, acme: Principal, rollouts: RolloutService
) -> None:
    with pytest.raises(InvalidRequest) as bad:
        start(rollouts, acme, gates="agreement>=0.98,latency<=3")
    assert bad.value.field == "gate"
    with pytest.raises(InvalidRequest) as bad:
        start(rollouts, acme, steps="1,25,5,100")
    assert bad.value.field == "steps"
    with pytest.raises(Unprocessable) as missing:
        start(rollouts, acme, to="iris:9")
    assert missing.value.field == "to"
    forest.deployments.update(acme, "iris", None, cache={"ttl_s": 60, "max_entries": 100})
    with pytest.raises(Unprocessable) as random_split:  # a cached deployment's split must be sticky
        start(rollouts, acme)
    assert random_split.value.field == "routing_key"
    start(rollouts, acme, routing_key="x-user-id")
    with pytest.raises(Conflict) as twice:
        start(rollouts, acme)
    assert twice.value.field == "deployment"


def test_the_api_is_tenant_scoped_and_admin_only(
    forest: Container, keys: dict[str, str], rollouts: RolloutService
) -> None:
    client = TestClient(create_app(forest))
    body = {
        "to": "iris:2",
        "steps": [1, 50, 100],
        "every": "5m",
        "gate": "error_rate<=0.01",
        "min_requests": 10,
    }
    for bad, field in (
        ({**body, "gate": "agreement=>0.9"}, "gate"),
        ({**body, "steps": [5, 5, 100]}, "steps"),
        ({**body, "to": "iris:7"}, "to"),
        ({**body, "every": "soon"}, "every"),
    ):
        r = client.post("/api/v1/deployments/iris/rollout", json=bad, headers=auth(keys["acme"]))
        assert 400 <= r.status_code < 500 and r.json()["field"] == field, r.text
    r = client.post(
        "/api/v1/deployments/iris/rollout", json=body, headers=auth(keys["acme_predict"])
    )
    assert r.status_code == 403
    r = client.post("/api/v1/deployments/iris/rollout", json=body, headers=auth(keys["globex"]))
    assert r.status_code == 404  # globex has no deployment 'iris'; acme's is not reachable
    r = client.post("/api/v1/deployments/iris/rollout", json=body, headers=auth(keys["acme"]))
    assert r.status_code == 201, r.text
    assert r.json()["policy"]["kind"] == "split"
    assert (
        client.post(
            "/api/v1/deployments/iris/rollout", json=body, headers=auth(keys["acme"])
        ).status_code
        == 409
    )
    for method, path in (("get", ""), ("post", "/pause"), ("post", "/resume"), ("post", "/abort")):
        r = getattr(client, method)(
            f"/api/v1/deployments/iris/rollout{path}", headers=auth(keys["globex"])
        )
        assert r.status_code == 404, (path, r.text)
    status = client.get("/api/v1/deployments/iris/rollout", headers=auth(keys["acme"])).json()
    assert status["rollout"]["state"] == "running" and status["rollout"]["to"] == "iris:2"
    assert (
        client.post(
            "/api/v1/deployments/iris/rollout/pause", headers=auth(keys["acme"])
        ).status_code
        == 200
    )
    assert (
        client.post(
            "/api/v1/deployments/iris/rollout/resume", headers=auth(keys["acme"])
        ).status_code
        == 200
    )
    r = client.post("/api/v1/deployments/iris/rollout/abort", headers=auth(keys["acme"]))
    assert r.status_code == 200 and r.json()["policy"] == {
        "kind": "single",
        "model": "iris",
        "version": 1,
    }
    assert (
        client.post(
            "/api/v1/deployments/iris/rollout/abort", headers=auth(keys["acme"])
        ).status_code
        == 409
    )


def test_the_serve_thread_looks_at_running_rollouts() -> None:
    import threading

    from sluice.services.rollout_watcher import RolloutWatcher

    looked = threading.Event()

    class Service:
        def run_once(self) -> dict[Any, str]:
            looked.set()
            raise RuntimeError("a bad look must not end the thread")

    watcher = RolloutWatcher(Service(), interval_s=0.01)  # type: ignore[arg-type]
    watcher.start()
    try:
        assert looked.wait(30)
        looked.clear()
        assert looked.wait(30)  # it went on after the failure
    finally:
        watcher.stop()


def test_a_rollout_from_a_graph_advances_like_any_other(
    twin: Container, acme: Principal, keys: dict[str, str], rollouts: RolloutService, clock: Clock
) -> None:
    """The stable policy is a switch (a header picks its case): the rollout's revisions hold it
    as the stable variant's primary, it answers naming its case, and the step advances."""
    client = TestClient(create_app(twin))
    region = {"kind": "switch", "cases": [{"name": "eu", "when": {"field": "headers.x-region", "op": "==", "value": "eu"}, "target": {"kind": "single", "model": "iris", "version": 1}}],
              "default": {"kind": "single", "model": "iris", "version": 1}}  # fmt: skip
    twin.deployments.update(acme, "iris", region)
    dep = start(rollouts, acme)
    assert dep.policy["variants"][0]["target"]["primary"] == region
    eu = client.post("/api/v1/predictions", json={"deployment": "iris", "inputs": ROW, "variant": "stable"}, headers={**auth(keys["acme"]), "x-region": "eu"}).json()
    assert (eu["variant"], eu["case"], eu["version"]) == ("stable", "eu", 1)
    send(client, keys["acme"], "stable", 10)
    send(client, keys["acme"], "candidate", 10)
    clock.now += 600
    moved = rollouts.tick("acme", "iris")
    assert moved is not None and moved.action == "advance" and moved.numbers["metrics"]["agreement"] == 1.0
    assert weights(twin.deployments.get(acme, "iris").policy)["candidate"] == 5


def test_a_rollout_judges_its_own_candidate_only_not_one_reached_through_a_reference(
    twin: Container, acme: Principal, keys: dict[str, str], rollouts: RolloutService, clock: Clock
) -> None:
    """`front` refers to `base`, whose variant and mirror are also named `candidate` (allowed
    outside a rollout, and `base` may change at any time): the rollout of `front` counts only
    what its own candidate answered and compared, and holds while that is nothing."""
    client = TestClient(create_app(twin))
    v1, v2 = ({"kind": "single", "model": "iris", "version": n} for n in (1, 2))
    shadowed = {"kind": "shadow", "primary": v1, "mirrors": [{"name": "candidate", "target": v2}]}
    twin.deployments.create(acme, "base", {"kind": "split", "variants": [{"name": "candidate", "weight": 100, "target": shadowed}]})
    twin.deployments.create(acme, "front", {"kind": "ref", "deployment": "base"})
    rollouts.start(acme, "front", to="iris:2", steps=STEPS, every="10m", gates="agreement>=0.98,error_rate<=0.005", min_requests=10)
    for _ in range(12):
        r = client.post("/api/v1/predictions", json={"deployment": "front", "inputs": ROW, "variant": "stable"}, headers=auth(keys["acme"]))
        assert r.status_code == 200 and r.json()["version"] == 1, r.text
    clock.now += 600
    decision = rollouts.tick("acme", "front")
    assert decision is not None and decision.action == "hold", decision
    assert decision.reason.startswith("waiting for traffic: 0 of 10 candidate requests")
    metrics = decision.numbers["metrics"]
    assert (metrics["candidate_requests"], metrics["stable_requests"], metrics["compared"]) == (0, 12, 12)
    stats = client.get("/api/v1/deployments/front/stats", headers=auth(keys["acme"])).json()
    assert stats["variants"]["stable/@base/candidate"]["requests"] == 12  # counted by its path
    assert stats["mirrors"]["stable/@base/candidate/candidate"]["compared"] == 12
    assert stats["mirrors"]["stable/candidate"]["compared"] == 12  # the rollout's own


def test_a_candidate_whose_inputs_are_refused_is_rolled_back_by_invalid_input_rate(
    demo: Container, acme: Principal, keys: dict[str, str], rollouts: RolloutService
) -> None:
    """iris:2 declares iris's signature but its graph refuses any feature of 4 or more (ONNX
    Runtime's INVALID_ARGUMENT: a 400): every request routed to it is refused for its inputs.
    The gate on refused inputs sees them, and rolls the candidate back."""
    demo.models.push(acme, "iris", strict_iris())
    stable = demo.deployments.get(acme, "iris").policy
    start(rollouts, acme, gates="invalid_input_rate<=0.01", min_requests=100)
    client = TestClient(create_app(demo))
    for i in range(2):  # 2 refused: over 1% of the 100 requests the step needs, whatever comes next
        r = client.post(
            "/api/v1/predictions",
            json={"deployment": "iris", "inputs": ROW, "variant": "candidate", "request_id": f"c-{i}"},
            headers=auth(keys["acme"]),
        )
        assert r.status_code == 400 and r.json()["code"] == "invalid_input", r.text
    status = client.get("/api/v1/deployments/iris/stats", headers=auth(keys["acme"])).json()
    assert status["variants"]["candidate"]["invalid_inputs"] == 2
    assert status["variants"]["candidate"]["invalid_input_rate"] == 1.0
    decision = rollouts.tick("acme", "iris")
    assert decision is not None and decision.action == "rollback"
    assert "invalid_input_rate<=0.01" in decision.reason and "refused inputs" in decision.reason
    dep = demo.deployments.get(acme, "iris")
    assert dep.policy == stable
    assert dep.rollout is not None and dep.rollout.state == "rolled_back"


def test_invalid_input_rate_is_a_gate_of_its_own() -> None:
    from sluice.domain.rollout_specs import parse_gates

    (gate,) = parse_gates("invalid_input_rate<=0.02")
    assert gate.metric == "invalid_input_rate" and not gate.passes(0.05) and gate.passes(0.0)
    with pytest.raises(InvalidRequest, match="given twice"):
        parse_gates("invalid_input_rate<=0.02,invalid_input_rate<0.5")


def strict_iris() -> bytes:
    """iris.onnx with a lookup in front of it that fails for any input value of 4 or more
    (a Gather out of bounds), the answer otherwise unchanged."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load_from_string((MODELS / "iris.onnx").read_bytes())
    graph = model.graph
    given = graph.input[0].name
    for node in graph.node:
        node.input[:] = ["checked" if name == given else name for name in node.input]
    graph.initializer.extend([numpy_helper.from_array(np.zeros(4, np.float32), "table"), numpy_helper.from_array(np.zeros((), np.float32), "zero")])
    ahead = [
        helper.make_node("Cast", [given], ["as_index"], to=TensorProto.INT64),
        helper.make_node("Gather", ["table", "as_index"], ["looked_up"], axis=0),
        helper.make_node("Mul", ["looked_up", "zero"], ["nothing"]),
        helper.make_node("Add", [given, "nothing"], ["checked"]),
    ]
    nodes = [*ahead, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    return model.SerializeToString()
