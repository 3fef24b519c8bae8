"""The rollout controller on AWS: an EventBridge Scheduler schedule invokes this function
every minute, and each invocation takes one look at every running rollout
(`RolloutService.run_once`): advance, complete, roll back, or hold. CloudWatch alarms a
rollout names are checked with one `DescribeAlarms` call per rollout per look. The function
acts for every tenant with its own role: it reads deployments and their statistics and writes
deployment changes.

For a deployment bound to its SageMaker endpoint it also moves the endpoint's production
variant weights (`DescribeEndpoint`, then `UpdateEndpointWeightsAndCapacities` when the
endpoint is InService; the SageMaker client is built only for such a rollout). It never
creates or changes endpoint configs: a candidate's variant is added by `rollout start`, in
the API."""

from __future__ import annotations

from sluice.startup import pause_in_lambda, started

pause_in_lambda()  # in Lambda, the collector off until this module has loaded (`sluice.startup`)

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sluice.observability import get_logger

if TYPE_CHECKING:
    from sluice.services.rollouts import RolloutService

logger = get_logger()


@lru_cache(maxsize=1)
def service() -> RolloutService:
    from sluice.handlers.adapters import rollout_controller
    from sluice.wiring import get_container

    return rollout_controller(get_container())


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    done = service().run_once()
    counts: dict[str, int] = {}
    for action in done.values():
        counts[action] = counts.get(action, 0) + 1
    return {"rollouts": len(done), "actions": counts}


started()  # the function's start-up is over: the collector back on (`sluice.startup`)
