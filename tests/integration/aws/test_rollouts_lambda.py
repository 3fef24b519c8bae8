"""The rollout controller in AWS form: the scheduled Lambda handler over a DynamoDB registry
(moto), finding running rollouts with its scan and rolling back on a CloudWatch alarm. Its
moves of endpoint weights are in test_rollouts_on_endpoints.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3
import pytest

from sluice.wiring import Container
from tests.conftest import MODELS
from tests.integration.aws.conftest import REGION
from tests.support import LambdaContext

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.domain import Principal


@pytest.fixture
def cloud(on_dynamodb: Container, acme: Principal, globex: Principal) -> Iterator[Container]:
    from sluice.handlers import rollouts

    container = on_dynamodb
    for who in (acme, globex):
        container.models.push(who, "iris", (MODELS / "iris.onnx").read_bytes())
        container.models.push(who, "iris", (MODELS / "iris_forest.onnx").read_bytes())
        container.deployments.create(who, "iris", {"kind": "single", "model": "iris", "version": 1})
    rollouts.service.cache_clear()
    yield container
    rollouts.service.cache_clear()


def _alarm(cw: Any, name: str) -> None:
    cw.put_metric_alarm(
        AlarmName=name, MetricName="Errors", Namespace="sluice", Statistic="Sum", Period=60,
        EvaluationPeriods=1, Threshold=1, ComparisonOperator="GreaterThanThreshold",
    )  # fmt: skip


def test_the_scheduled_controller_rolls_back_on_a_named_alarm(cloud: Container, acme: Principal, globex: Principal) -> None:
    from sluice.handlers.rollouts import handler

    cw = boto3.client("cloudwatch", region_name=REGION)
    _alarm(cw, "acme/iris-errors")
    for who in (acme, globex):
        cloud.rollouts.start(who, "iris", to="iris:2", steps="5,100", every="1m", gates="error_rate<=0.01", alarms=["acme/iris-errors"] if who is acme else [])
    assert cloud.registry.running_rollouts() == [("acme", "iris"), ("globex", "iris")]
    assert handler({}, LambdaContext(function_name="sluice-rollouts")) == {"rollouts": 2, "actions": {"hold": 2}}
    cw.set_alarm_state(AlarmName="acme/iris-errors", StateValue="ALARM", StateReason="test")
    assert handler({}, LambdaContext(function_name="sluice-rollouts")) == {"rollouts": 2, "actions": {"hold": 1, "rollback": 1}}
    rolled = cloud.deployments.get(acme, "iris")
    assert rolled.policy == {"kind": "single", "model": "iris", "version": 1}
    assert rolled.rollout is not None and rolled.rollout.state == "rolled_back"
    last = cloud.deployments.history(acme, "iris")[-1]
    assert last.by == "rollout-controller" and last.note is not None and last.note["alarms"] == ["acme/iris-errors"]
    # The other tenant's rollout is its own: untouched, still running.
    other = cloud.deployments.get(globex, "iris")
    assert other.rollout is not None and other.rollout.state == "running"
    assert cloud.registry.running_rollouts() == [("globex", "iris")]
    # Wired to move endpoint weights, but no deployment here is bound to an endpoint: the
    # endpoint control plane (and its SageMaker client) was never built.
    from sluice.handlers.rollouts import service

    assert service().endpoints is not None and "endpoints" not in vars(cloud)


def test_the_scheduled_controller_reads_model_quality_for_the_gates_that_name_it(cloud: Container, acme: Principal) -> None:
    """The controller on AWS reads the candidate's labelled outcomes from the registry: a gate on
    accuracy rolls back a candidate the labels find wrong (without model monitoring wired in,
    the gate had no value and held the rollout for ever)."""
    from sluice.domain.rollouts import CANDIDATE
    from sluice.handlers.rollouts import handler
    from sluice.monitor.quality import CLASS, Outcomes

    cloud.rollouts.start(acme, "iris", to="iris:2", steps="5,100", every="1m", gates="accuracy>=0.9", min_requests=4)
    revision = cloud.deployments.get(acme, "iris").revision
    cloud.registry.merge_stats("acme", "iris", revision, f"variant:{CANDIDATE}", {"requests": 10}, {})
    assert handler({}, LambdaContext(function_name="sluice-rollouts")) == {"rollouts": 1, "actions": {"hold": 1}}  # no labels yet
    wrong = Outcomes(CLASS)
    for i in range(120):  # more than the fewest labelled rows a quality gate needs (100)
        wrong.add_class("setosa", "setosa" if i % 2 else "virginica")  # half right
    cloud.registry.add_outcomes("acme", "iris", revision, 0, {CANDIDATE: wrong.to_dict()})
    assert handler({}, LambdaContext(function_name="sluice-rollouts")) == {"rollouts": 1, "actions": {"rollback": 1}}
    last = cloud.deployments.history(acme, "iris")[-1]
    assert last.note is not None and "accuracy>=0.9" in str(last.note)
