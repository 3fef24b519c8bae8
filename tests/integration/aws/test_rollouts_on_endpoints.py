"""Progressive rollouts of deployments bound to a SageMaker endpoint (moto): the endpoint's
production-variant weights move with every step, rollback, abort and completion; a move waits
while the endpoint is not InService and the controller records when it took the weights; a
candidate with no variant on the endpoint gets one (a new endpoint config and UpdateEndpoint)
before the first step. The controller is driven by a synthetic clock: no test waits.

moto has no UpdateEndpoint: that one call goes to botocore's Stubber (which checks it against
SageMaker's service model and the parameters expected), and its effect is applied to moto's
endpoint as SageMaker applies it (`UpdateEndpointOnMoto`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from sluice.domain import Principal
from sluice.domain.errors import Conflict, Unprocessable
from sluice.endpoints.names import endpoint_name
from sluice.services.rollouts import RolloutService
from sluice.wiring import Container
from tests.integration.aws.conftest import ENDPOINTS_ROLE as ROLE
from tests.integration.aws.conftest import REGION, EndpointsWorld, Recorded, on_sagemaker
from tests.integration.conftest import auth
from tests.support import Clock

if TYPE_CHECKING:
    from sluice.domain import Deployment

ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
ENDPOINT = endpoint_name("acme", "ranker")
GATES = "error_rate<=0.01,p99_ratio<=1.5"


def _backend() -> Any:
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends["123456789012"][REGION]


class UpdateEndpointOnMoto:
    """UpdateEndpoint, which moto lacks: the request goes to a Stubber, and moto's endpoint
    becomes Updating; `finish` puts it InService on the new config, the variants it had keeping
    their weights and instance counts (RetainAllVariantProperties) and the new ones taking the
    config's."""

    def __init__(self, client: Any) -> None:
        self.stubbed = boto3.client("sagemaker", region_name=REGION)
        self.stubber = Stubber(self.stubbed)
        self.stubber.activate()
        self.params: dict[str, Any] = {}
        self.pending: dict[str, Any] | None = None
        client.meta.events.register("before-parameter-build.sagemaker.UpdateEndpoint", self._keep)
        client.meta.events.register("before-call.sagemaker.UpdateEndpoint", self._call)

    def expect(self, endpoint: str) -> None:
        expected = {"EndpointName": endpoint, "EndpointConfigName": ANY, "RetainAllVariantProperties": True}
        self.stubber.add_response("update_endpoint", {"EndpointArn": _backend().endpoints[endpoint].arn}, expected)

    def _keep(self, params: dict[str, Any], **_: Any) -> None:
        self.params = dict(params)

    def _call(self, **_: Any) -> tuple[Any, dict[str, Any]]:
        parsed = self.stubbed.update_endpoint(**self.params)
        _backend().endpoints[self.params["EndpointName"]].endpoint_status = "Updating"
        self.pending = self.params
        return SimpleNamespace(status_code=200, headers={}), parsed

    def finish(self) -> None:
        assert self.pending is not None
        backend = _backend()
        endpoint = backend.endpoints[self.pending["EndpointName"]]
        config = backend.endpoint_configs[self.pending["EndpointConfigName"]]
        kept = {v["VariantName"]: v for v in endpoint.production_variants}
        fresh = endpoint._process_production_variants(config.production_variants)
        endpoint.production_variants = [kept.get(v["VariantName"], v) for v in fresh]
        endpoint.endpoint_config_name = config.endpoint_config_name
        endpoint.endpoint_status = "InService"
        self.pending = None


class World(EndpointsWorld):
    key: str
    sagemaker: Any
    sent: dict[str, list[dict[str, Any]]]
    rollouts: RolloutService
    clock: Clock
    update: UpdateEndpointOnMoto


@pytest.fixture
def world(mlp_service: Container) -> World:
    container = mlp_service
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    recorded = Recorded()
    recorded.watch(sagemaker)
    update = UpdateEndpointOnMoto(sagemaker)
    client = on_sagemaker(container, sagemaker=sagemaker, autoscaling=boto3.client("application-autoscaling", region_name=REGION))
    clock = Clock(2_000_000.0)
    rollouts = RolloutService(container.registry, container.deployments, clock=clock, endpoints=container.endpoint_plane)
    container.rollouts = rollouts  # type: ignore[misc]
    _, key = container.keys.create("acme", ["admin", "predict"])
    return World(
        container=container, client=client, key=key, sagemaker=sagemaker,
        sent=recorded.sent, rollouts=rollouts, clock=clock, update=update,
    )  # fmt: skip


def _deploy(world: World, policy: dict[str, Any]) -> None:
    world.container.deployments.create(ACME, "ranker", policy)
    r = world.client.post("/api/v1/deployments/ranker/endpoint", json={"instance_type": "ml.c5.xlarge"}, headers=auth(world.key))
    assert r.status_code == 202 and r.json()["bound"] is True, r.text


def _split(blue: float, green: float) -> dict[str, Any]:
    return {
        "kind": "split",
        "variants": [
            {"name": "blue", "weight": blue, "target": {"model": "mlp", "version": 1}},
            {"name": "green", "weight": green, "target": {"model": "mlp", "version": 2}},
        ],
    }


def live(world: World) -> dict[str, float]:
    """The endpoint's variant weights as SageMaker reports them (moto leaves out a weight of
    0 given at create: it reads 0 here)."""
    variants = world.sagemaker.describe_endpoint(EndpointName=ENDPOINT)["ProductionVariants"]
    return {v["VariantName"]: v.get("DesiredWeight", 0.0) for v in variants}


def traffic(world: World, dep: Deployment, n: int = 10, *, candidate_ms: float = 2.0, ok: bool = True) -> None:
    """What sluice's own requests record, on the deployment's current revision."""
    recorder = world.container.predictions.stats
    for _ in range(n):
        recorder.request(("acme", "ranker", dep.revision, "variant:stable"), 2.0, ok=True)
        recorder.request(("acme", "ranker", dep.revision, "variant:candidate"), candidate_ms, ok=ok)


def current(world: World) -> Deployment:
    return world.container.deployments.get(ACME, "ranker")


def notes(world: World) -> list[dict[str, Any]]:
    return [c.note for c in world.container.deployments.history(ACME, "ranker") if c.note is not None]


def start(world: World, **kw: Any) -> Deployment:
    args: dict[str, Any] = {"to": "mlp:2", "steps": "1,5,25,50,100", "every": "10m", "gates": GATES, "min_requests": 10}
    return world.rollouts.start(ACME, "ranker", **{**args, **kw})


def step(world: World) -> Any:
    """A step's traffic, its time, and the look that decides."""
    traffic(world, current(world))
    world.clock.now += 600
    return world.rollouts.tick("acme", "ranker")


def test_the_endpoints_weights_follow_every_step_to_the_candidate(world: World) -> None:
    _deploy(world, _split(1.0, 0.0))  # blue serves everything, green (the candidate) is ready at 0
    bound = current(world).policy
    assert live(world) == {"blue": 1.0, "green": 0.0}
    dep = start(world)
    green = world.container.registry.get_version("acme", "mlp", bound["variants"][1]["target"]["version"])
    assert dep.rollout is not None and dep.rollout.endpoint is not None
    assert (dep.rollout.endpoint.candidate, dep.rollout.endpoint.candidate_version) == ("green", green.version)
    assert dep.policy["variants"][1]["target"] == {"kind": "single", "model": "mlp", "version": green.version}  # through the endpoint
    assert live(world) == {"blue": 99.0, "green": 1.0}
    for after, weights in ((5, {"blue": 95.0, "green": 5.0}), (25, {"blue": 75.0, "green": 25.0}), (50, {"blue": 50.0, "green": 50.0})):
        decision = step(world)
        assert decision is not None and decision.action == "advance", decision
        assert current(world).rollout.weight == after  # type: ignore[union-attr]
        assert live(world) == weights
    decision = step(world)
    assert decision is not None and decision.action == "complete"
    assert live(world) == {"blue": 0.0, "green": 100.0}  # the stable variant stays, at 0
    dep = current(world)
    assert dep.policy == {"kind": "single", "model": "mlp", "version": green.version} and dep.rollout.state == "completed"  # type: ignore[union-attr]
    moves = [(n["rollout"], n["endpoint"]["moved"], n["endpoint"]["weights"]["green"]) for n in notes(world)]
    assert moves == [("start", True, 1.0), ("advance", True, 5.0), ("advance", True, 25.0), ("advance", True, 50.0), ("completed", True, 100.0)]
    updates = world.sent["UpdateEndpointWeightsAndCapacities"]
    assert updates[-1] == {
        "EndpointName": ENDPOINT,
        "DesiredWeightsAndCapacities": [{"VariantName": "blue", "DesiredWeight": 0.0}, {"VariantName": "green", "DesiredWeight": 100.0}],
    }
    assert world.container.registry.running_rollouts() == []
    # The endpoint's own report agrees, and the deployment is still bound to it.
    report = world.client.get("/api/v1/deployments/ranker/endpoint", headers=auth(world.key)).json()
    assert {v["name"]: v["weight"] for v in report["variants"]} == {"blue": 0.0, "green": 100.0} and report["bound"] is True


def test_a_rollback_restores_the_weights_the_endpoint_had(world: World) -> None:
    _deploy(world, _split(0.9, 0.1))
    start(world, steps="5,50,100")
    # 95% for the stable split, shared 0.9 : 0.1, and the candidate's 5% on green as well
    assert live(world) == {"blue": 85.5, "green": 14.5}
    traffic(world, current(world), candidate_ms=9.0)  # p99 of the candidate over 1.5x the stable's
    decision = world.rollouts.tick("acme", "ranker")
    assert decision is not None and decision.action == "rollback"
    assert live(world) == {"blue": 0.9, "green": 0.1}
    dep = current(world)
    assert [v["weight"] for v in dep.policy["variants"]] == [0.9, 0.1] and dep.rollout.state == "rolled_back"  # type: ignore[union-attr]
    assert notes(world)[-1]["endpoint"] == {"name": ENDPOINT, "weights": {"blue": 0.9, "green": 0.1}, "moved": True, "status": "InService"}


def test_an_abort_restores_the_weights_too(world: World) -> None:
    _deploy(world, _split(1.0, 0.0))
    start(world)
    assert live(world) == {"blue": 99.0, "green": 1.0}
    r = world.client.post("/api/v1/deployments/ranker/rollout/abort", headers=auth(world.key))
    assert r.status_code == 200, r.text
    assert live(world) == {"blue": 1.0, "green": 0.0}


def test_weights_wait_while_the_endpoint_is_updating_and_the_wait_is_recorded(world: World) -> None:
    _deploy(world, _split(1.0, 0.0))
    start(world)
    traffic(world, current(world))
    world.clock.now += 600
    _backend().endpoints[ENDPOINT].endpoint_status = "Updating"  # an autoscaling activity, say
    decision = world.rollouts.tick("acme", "ranker")
    assert decision is not None and decision.action == "advance"  # sluice's own split moves on
    dep = current(world)
    assert dep.rollout is not None and dep.rollout.weight == 5 and dep.rollout.endpoint.pending  # type: ignore[union-attr]
    assert live(world) == {"blue": 99.0, "green": 1.0}  # not touched while Updating
    assert notes(world)[-1]["endpoint"] == {"name": ENDPOINT, "weights": {"blue": 95.0, "green": 5.0}, "moved": False, "status": "Updating"}
    waited_from = world.clock.now
    # Still Updating: the next look holds, writes nothing, and does not advance whatever the traffic.
    traffic(world, dep, 50)
    world.clock.now += 600
    held = world.rollouts.tick("acme", "ranker")
    assert held is not None and held.action == "hold" and held.reason == f"waiting for endpoint {ENDPOINT} (Updating) to take the weights"
    assert current(world).revision == dep.revision
    status = world.client.get("/api/v1/deployments/ranker/rollout", headers=auth(world.key)).json()
    assert status["now"]["next"] == "hold" and status["now"]["reason"].startswith(f"waiting for endpoint {ENDPOINT}")
    assert status["rollout"]["endpoint"]["pending"] is True and status["rollout"]["endpoint"]["waiting_since"] == waited_from
    # InService again: the next look moves them, records it, and the step starts afresh from there.
    _backend().endpoints[ENDPOINT].endpoint_status = "InService"
    caught = world.rollouts.tick("acme", "ranker")
    assert caught is not None and caught.action == "endpoint"
    assert live(world) == {"blue": 95.0, "green": 5.0}
    last = notes(world)[-1]
    assert last["rollout"] == "endpoint" and last["waited_s"] == 600 and last["endpoint"]["moved"] is True
    caught_up = current(world)
    assert caught_up.rollout.step_started_at == world.clock.now and not caught_up.rollout.endpoint.pending  # type: ignore[union-attr]
    assert caught_up.policy == dep.policy and caught_up.revision == dep.revision + 1  # the 5% split still
    assert world.rollouts.tick("acme", "ranker").reason.startswith("waiting for traffic: 0 of 10")  # type: ignore[union-attr]


def test_a_rollback_while_updating_restores_the_weights_on_a_later_look(world: World) -> None:
    _deploy(world, _split(1.0, 0.0))
    start(world)
    _backend().endpoints[ENDPOINT].endpoint_status = "Updating"
    traffic(world, current(world), ok=False)
    assert world.rollouts.run_once() == {("acme", "ranker"): "rollback"}  # at once, for sluice's own traffic
    dep = current(world)
    assert dep.rollout is not None and dep.rollout.state == "rolled_back" and dep.rollout.endpoint.pending  # type: ignore[union-attr]
    assert live(world) == {"blue": 99.0, "green": 1.0}
    assert world.container.registry.running_rollouts() == [("acme", "ranker")]  # still looked at
    assert world.rollouts.run_once() == {("acme", "ranker"): "hold"}
    _backend().endpoints[ENDPOINT].endpoint_status = "InService"
    assert world.rollouts.run_once() == {("acme", "ranker"): "endpoint"}
    assert live(world) == {"blue": 1.0, "green": 0.0}
    assert world.container.registry.running_rollouts() == []
    assert current(world).rollout.state == "rolled_back"  # type: ignore[union-attr]


def test_a_candidate_without_a_variant_gets_one_before_the_first_step(world: World) -> None:
    _deploy(world, {"model": "mlp", "version": 1})
    stable = current(world).policy  # the bound version of variant `primary`
    world.update.expect(ENDPOINT)
    dep = start(world, steps="10,100")
    # The first step waits for the variant: the stable policy routes everything meanwhile.
    assert dep.policy == stable and dep.rollout is not None and dep.rollout.state == "running"
    ep = dep.rollout.endpoint
    assert ep is not None and (ep.candidate, ep.added, ep.ready) == ("mlp-v2", True, False)
    assert notes(world)[-1]["added_variant"] == "mlp-v2" and "waiting for endpoint" in notes(world)[-1]["reason"]
    world.update.stubber.assert_no_pending_responses()
    [config] = world.sent["CreateEndpointConfig"][1:]  # after the deploy's own
    assert [(v["VariantName"], v["InitialVariantWeight"], v["InitialInstanceCount"], v["InstanceType"]) for v in config["ProductionVariants"]] == [
        ("primary", 1.0, 1, "ml.c5.xlarge"),
        ("mlp-v2", 0.0, 1, "ml.c5.xlarge"),
    ]
    [update] = world.sent["UpdateEndpoint"]
    assert update == {"EndpointName": ENDPOINT, "EndpointConfigName": config["EndpointConfigName"], "RetainAllVariantProperties": True}
    [model] = [m for m in world.sent["CreateModel"] if m["ModelName"] == config["ProductionVariants"][1]["ModelName"]]
    assert model["EnableNetworkIsolation"] is True and model["ExecutionRoleArn"] == ROLE
    candidate = world.container.registry.get_version("acme", "mlp", ep.candidate_version)
    assert candidate.runtime == "sagemaker" and candidate.config["variant"] == "mlp-v2" and candidate.config["source_version"] == 2

    held = world.rollouts.tick("acme", "ranker")
    assert held is not None and held.action == "hold" and held.reason == f"waiting for endpoint {ENDPOINT} (Updating) to add variant mlp-v2"
    world.update.finish()
    begun = world.rollouts.tick("acme", "ranker")
    assert begun is not None and begun.action == "endpoint"
    dep = current(world)
    assert dep.rollout.endpoint.ready and dep.policy["kind"] == "split"  # type: ignore[union-attr]
    assert dep.policy["variants"][1]["target"] == {"kind": "single", "model": "mlp", "version": candidate.version}
    assert live(world) == {"primary": 90.0, "mlp-v2": 10.0}
    assert notes(world)[-1]["rollout"] == "endpoint" and notes(world)[-1]["endpoint"]["moved"] is True
    report = world.client.get("/api/v1/deployments/ranker/endpoint", headers=auth(world.key)).json()
    assert [(v["name"], v["model"], v["version"]) for v in report["variants"]] == [("primary", "mlp", 1), ("mlp-v2", "mlp", 2)]

    decision = step(world)
    assert decision is not None and decision.action == "complete"
    assert live(world) == {"primary": 0.0, "mlp-v2": 100.0}
    assert current(world).policy == {"kind": "single", "model": "mlp", "version": candidate.version}
    # Rolling back to version 1 later finds its variant on the endpoint: nothing is added.
    again = start(world, to="mlp:1", steps="50,100")
    assert again.rollout.endpoint.candidate == "primary" and not again.rollout.endpoint.added  # type: ignore[union-attr]
    assert live(world) == {"primary": 50.0, "mlp-v2": 50.0}
    assert len(world.sent["UpdateEndpoint"]) == 1


def test_refusals_name_the_field(world: World) -> None:
    _deploy(world, {"model": "mlp", "version": 1})
    _backend().endpoints[ENDPOINT].endpoint_status = "Updating"
    body = {"to": "mlp:2", "steps": [10, 100], "every": "1m", "gate": "error_rate<=0.01"}
    r = world.client.post("/api/v1/deployments/ranker/rollout", json=body, headers=auth(world.key))
    assert (r.status_code, r.json()["field"]) == (409, "endpoint") and "once it is InService" in r.json()["error"]
    assert "UpdateEndpoint" not in world.sent and current(world).rollout is None
    _backend().endpoints[ENDPOINT].endpoint_status = "InService"
    bound = current(world).policy
    world.container.deployments.update(ACME, "ranker", {"kind": "shadow", "primary": bound, "mirrors": [{"name": "m", "target": bound}]})
    with pytest.raises(Unprocessable) as shaped:
        start(world)
    assert shaped.value.field == "deployment"
    world.container.deployments.update(ACME, "ranker", bound)
    world.sagemaker.delete_endpoint(EndpointName=ENDPOINT)
    with pytest.raises(Conflict) as gone:
        start(world)
    assert gone.value.field == "endpoint" and "undeploy" in gone.value.message


def test_a_deployment_without_an_endpoint_never_builds_the_control_plane(world: World) -> None:
    built: list[str] = []
    service = RolloutService(
        world.container.registry, world.container.deployments, clock=world.clock,
        endpoints=lambda: built.append("control") or world.container.endpoint_plane(),
    )  # fmt: skip
    world.container.deployments.create(ACME, "plain", {"model": "mlp", "version": 1})
    dep = service.start(ACME, "plain", to="mlp:2", steps="50,100", every="1m", gates="error_rate<=0.01", min_requests=1)
    assert dep.rollout is not None and dep.rollout.endpoint is None
    assert service.run_once() == {("acme", "plain"): "hold"} and built == []


def test_a_pause_between_the_controllers_read_and_its_write_leaves_the_endpoint_at_the_paused_step(world: World) -> None:
    """A person pauses while the controller's look is deciding to advance: the look's write is
    refused, and the endpoint keeps (gets back) the weights of the paused step, not the next."""
    _deploy(world, _split(1.0, 0.0))
    start(world, steps="1,50,100")
    traffic(world, current(world))
    world.clock.now += 600
    paused: list[int] = []

    def pause_first(**_: Any) -> None:  # as the controller's weights go out, a person pauses
        if not paused:
            paused.append(world.client.post("/api/v1/deployments/ranker/rollout/pause", headers=auth(world.key)).status_code)

    world.sagemaker.meta.events.register("before-call.sagemaker.UpdateEndpointWeightsAndCapacities", pause_first)
    assert world.rollouts.run_once() == {("acme", "ranker"): "changed meanwhile"} and paused == [200]
    dep = current(world)
    assert dep.rollout is not None and dep.rollout.state == "paused" and dep.rollout.weight == 1
    assert live(world) == {"blue": 99.0, "green": 1.0} == dep.rollout.endpoint.weights  # type: ignore[union-attr]


def test_an_abort_between_the_catch_ups_read_and_its_write_leaves_the_endpoint_on_the_stable_weights(world: World) -> None:
    """Weights that waited for the endpoint go on as a person aborts: the catch-up's record is
    refused, and the endpoint gets the aborted rollout's weights back, not the step's. Before,
    it kept serving the candidate at 5% after the abort, and no later look put it back."""
    _deploy(world, _split(1.0, 0.0))
    start(world)
    traffic(world, current(world))
    world.clock.now += 600
    _backend().endpoints[ENDPOINT].endpoint_status = "Updating"
    assert world.rollouts.run_once() == {("acme", "ranker"): "advance"}  # to 5%, the weights waiting
    _backend().endpoints[ENDPOINT].endpoint_status = "InService"
    aborted: list[int] = []

    def abort_first(**_: Any) -> None:  # as the catch-up's weights go out, a person aborts (whose own weights go out first)
        if not aborted:
            aborted.append(0)
            aborted[0] = world.client.post("/api/v1/deployments/ranker/rollout/abort", headers=auth(world.key)).status_code

    world.sagemaker.meta.events.register("before-call.sagemaker.UpdateEndpointWeightsAndCapacities", abort_first)
    assert world.rollouts.run_once() == {("acme", "ranker"): "changed meanwhile"} and aborted == [200]
    dep = current(world)
    assert dep.rollout is not None and dep.rollout.state == "aborted" and not dep.rollout.endpoint.pending  # type: ignore[union-attr]
    assert live(world) == {"blue": 1.0, "green": 0.0} == dep.rollout.endpoint.weights  # type: ignore[union-attr]
    assert world.rollouts.run_once() == {}
