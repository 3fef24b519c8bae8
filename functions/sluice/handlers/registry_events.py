"""SageMaker Model Registry's approvals on AWS: an EventBridge rule sends each "SageMaker Model
Package State Change" event of this account here. Every follow binding of the package's group,
in every tenant, is told of it (`Follower.on_package_event`): an Approved package is pushed (its
ONNX model as it is: this function has no converters, so a package that needs converting is
recorded as such on the binding) and its rollout started; a Rejected one is recorded, and the
rollout of it aborted if one runs; one taken before and set back to pending is noted. EventBridge
may deliver an event more than once, and in any order: a binding takes a version once (its claim
is a conditional write), and weighs each change against the last of its version it acted on
(`PackageStateChange.meaning`), so a second or late delivery does nothing. A binding that other
writes kept from claiming the version at each try (`DeliverAgain`) fails the invocation, once
every binding was told: Lambda invokes it again with the same event (its asynchronous retries,
twice; then the function's dead-letter queue keeps it, to be redriven).

A schedule invokes the same function with `{"poll": "follows"}`: every binding is looked at
(`Follower.poll_once`), each rollout a binding started that ended is recorded, and each MLflow
alias (or `latest`) that moved is pushed and rolled out: MLflow read over its REST API
(`sluice.convert.mlflow_rest`), an `onnx` flavor taken as it is, any other recorded as
`conversion_failed` (there are no converters here).

The function reads the package (DescribeModelPackage, on the account's package groups) and its
model data (S3 GetObject), and writes the bound tenants' models, versions and deployments."""

from __future__ import annotations

from sluice.startup import pause_in_lambda, started

pause_in_lambda()  # in Lambda, the collector off until this module has loaded (`sluice.startup`)

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sluice.observability import get_logger

if TYPE_CHECKING:
    from sluice.convert.follow import Follower

logger = get_logger()
POLL = "follows"  # the schedule's input: {"poll": "follows"}


@lru_cache(maxsize=1)
def follower() -> Follower:
    from sluice.handlers.adapters import follower as build
    from sluice.wiring import get_container

    return build(get_container())


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    if event.get("poll") == POLL:
        done = follower().poll_once()
        logger.info("follow bindings polled", extra={"bindings": done})
        return {"bindings": done}
    from sluice.convert.follow import DeliverAgain

    try:
        done = follower().on_package_event(event)
    except DeliverAgain as again:  # failed, to be delivered again: a success never is
        logger.error("package state change: to be delivered again", extra={"bindings": again.done})
        raise
    logger.info("package state change", extra={"bindings": done})
    return {"bindings": done}


started()  # the function's start-up is over: the collector back on (`sluice.startup`)
