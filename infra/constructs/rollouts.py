"""The rollout controller: progressive rollouts move on here.

An EventBridge Scheduler schedule invokes the controller every minute; it looks at every
running rollout and advances, completes or rolls back (sluice.handlers.rollouts), moving the
variant weights of the endpoint a deployment is bound to with it.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.constructs.endpoint_lifecycle import EndpointLifecycle
from infra.constructs.grants import invoke_on_schedule
from infra.constructs.registry_access import READ, WRITE, RegistryWorker
from infra.nag import acknowledge, wildcard_resource

# What the controller's scan may read: the keys of each item and its rollout.
ROLLOUT_SCAN_ATTRIBUTES = ("pk", "sk", "rollout")


class RolloutController:
    """The function ("Rollouts"), and the schedule and its role, built into `scope`."""

    def __init__(self, scope: Construct, worker: RegistryWorker, *, endpoints: EndpointLifecycle) -> None:
        # Deployments and their statistics in every tenant: read, and changes written. Which
        # deployments have a running rollout: a scan that may read the keys and the rollout of
        # each item alone (no statistics, no API key hashes).
        self.function = controller = worker.function(
            scope, "Rollouts", handler="sluice.handlers.rollouts.handler",
            description="Advances, completes or rolls back progressive rollouts by their gates",
            memory_mb=512, timeout_s=60, actions=[*READ, *WRITE], scan=ROLLOUT_SCAN_ATTRIBUTES,
        )  # fmt: skip
        role = controller.role
        alarms = Stack.of(scope).format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name="*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["cloudwatch:DescribeAlarms"], resources=[alarms])
        )
        acknowledge(
            controller,
            wildcard_resource(scope, alarms),
            "A rollout names the CloudWatch alarms that roll it back at run time; the controller "
            "only reads their state (DescribeAlarms) in this account and region, and only those "
            "of the rollout's tenant (named '<tenant>/...', or made by sluice for its endpoints).",
        )
        # The variant weights of the endpoints the API deploys, for deployments bound to one.
        endpoints.grant_rollout_weights(role)
        # Once a minute; no retry of a delivery and no dead-letter queue of the schedule's own, as
        # for the batch schedules: the next look comes a minute later anyway.
        self.schedule = invoke_on_schedule(
            scope, "Rollout", controller.invocable, name=worker.function_name, who="the sluice rollout controller",
            description="Looks at every running rollout once a minute", expression="rate(1 minute)",
            input="{}", retries=0, max_age_s=60,
        )  # fmt: skip
