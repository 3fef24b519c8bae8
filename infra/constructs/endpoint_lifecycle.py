"""What the API needs to run the SageMaker endpoints it deploys at run time.

`PUT /api/v1/deployments/{name}/endpoint` and friends (`sluice.services.endpoints` over
`sluice.endpoints.sagemaker`) upload each version's Triton repository as `model.tar.gz` to
the artifact store, create one SageMaker model per variant, an endpoint config and the
endpoint; once it is InService they register Application Auto Scaling (a scalable target
and a target-tracking policy per variant); they change weights and capacities, and undeploy
removes all of it again. `POST …/rollout` adds a rollout candidate's variant to such an
endpoint (its model, a new endpoint config, `UpdateEndpoint`). An asynchronous endpoint
(`--mode async`) may come with two SNS topics sluice makes, and at a minimum of 0 instances
with a step policy and a CloudWatch alarm (`HasBacklogWithoutCapacity`); an endpoint of
inference components (`--mode components`) has one inference component per version, each with
its copy count registered, a step policy and an alarm (`NoCapacityInvocationFailures`). Every
name they make starts
with `sluice-` (see `RUNTIME_ENDPOINT_PREFIX`), which is what these grants are scoped to.

- `execution_role`: the role SageMaker runs those endpoints as. It may read model archives
  (`*.tar.gz`) in the artifact store, pull SageMaker's Triton image, write its endpoints'
  logs and their instance metrics, read asynchronous inputs and write asynchronous answers
  under the store's `results/tenants/` (sluice checks that each endpoint's output path is its
  tenant's own), publish to the `sluice-*-succeeded` and `sluice-*-failed` topics, and
  nothing else.
- `grant_manage(role)`: the control-plane calls above, and passing the execution role to
  SageMaker only.
- `grant_rollout_weights(role)`: what the rollout controller does to those endpoints: read
  their status and variant weights, and change the weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.grants import role_arn
from infra.constructs.sagemaker_role import (
    AUTOSCALING_ROLE,
    SAGEMAKER,
    allow_authorization_token,
    allow_endpoint_logs,
    allow_pulls,
    execution_role,
)
from infra.constructs.triton_image import repository_arn
from infra.nag import acknowledge, wildcard_resource
from infra.naming import RUNTIME_ENDPOINT_PREFIX
from sluice.endpoints.scaling import BACKLOG, COPIES, COPY_DIMENSION, INSTANCES, VARIANT_DIMENSION

if TYPE_CHECKING:
    from collections.abc import Sequence

AUTOSCALING_SERVICE = "sagemaker.application-autoscaling.amazonaws.com"
# Where SageMaker publishes an endpoint's instance metrics (CPU, GPU, memory, disk).
INSTANCE_METRICS_NAMESPACE = "/aws/sagemaker/Endpoints"

# Models, endpoint configs and endpoints, as `sluice.endpoints.sagemaker` calls them. Tags go
# on with the create calls (tag-on-create needs AddTags); DeleteTags drops the pending
# autoscaling tag once autoscaling is registered.
LIFECYCLE_ACTIONS = (
    "sagemaker:CreateModel",
    "sagemaker:DescribeModel",
    "sagemaker:DeleteModel",
    "sagemaker:CreateEndpointConfig",
    "sagemaker:DescribeEndpointConfig",
    "sagemaker:DeleteEndpointConfig",
    "sagemaker:CreateEndpoint",
    "sagemaker:DescribeEndpoint",
    "sagemaker:UpdateEndpoint",
    "sagemaker:UpdateEndpointWeightsAndCapacities",
    "sagemaker:DeleteEndpoint",
    "sagemaker:CreateInferenceComponent",
    "sagemaker:DescribeInferenceComponent",
    "sagemaker:DeleteInferenceComponent",
    "sagemaker:AddTags",
    "sagemaker:ListTags",
    "sagemaker:DeleteTags",
)
# What the API may never do to the operator's own endpoints that share the run-time prefix,
# and to their inference components.
RESERVED_DENIED = (
    "sagemaker:CreateEndpoint",
    "sagemaker:UpdateEndpoint",
    "sagemaker:DeleteEndpoint",
    "sagemaker:AddTags",
    "sagemaker:DeleteTags",
)
RESERVED_COMPONENT_DENIED = (
    "sagemaker:CreateInferenceComponent",
    "sagemaker:UpdateInferenceComponent",
    "sagemaker:UpdateInferenceComponentRuntimeConfig",
    "sagemaker:DeleteInferenceComponent",
    "sagemaker:AddTags",
    "sagemaker:DeleteTags",
)
# The rollout controller moves a rollout's variant weights (sluice.services.rollout_endpoints):
# one DescribeEndpoint a look, and UpdateEndpointWeightsAndCapacities while it is InService.
ROLLOUT_ACTIONS = ("sagemaker:DescribeEndpoint", "sagemaker:UpdateEndpointWeightsAndCapacities")
# Undeploy finds an endpoint's configs, models and components by name; SageMaker's List calls
# have no resource-level permissions.
LIST_ACTIONS = ("sagemaker:ListEndpointConfigs", "sagemaker:ListModels", "sagemaker:ListInferenceComponents")
# The SNS topics an asynchronous endpoint may ask sluice to make (tagged as they are made).
TOPIC_ACTIONS = ("sns:CreateTopic", "sns:SetTopicAttributes", "sns:TagResource", "sns:DeleteTopic")
SCALING_ACTIONS = (
    "application-autoscaling:RegisterScalableTarget",
    "application-autoscaling:DeregisterScalableTarget",
    "application-autoscaling:PutScalingPolicy",
    "application-autoscaling:DeleteScalingPolicy",
)
# Application Auto Scaling checks that its caller may manage the alarms of a target-tracking
# policy, which it names `TargetTracking-<resource id>-AlarmHigh|AlarmLow-<uuid>`; sluice's own
# scale-from-zero alarms are `<endpoint or component>-<metric>`.
ALARM_ACTIONS = ("cloudwatch:PutMetricAlarm", "cloudwatch:DeleteAlarms")
# Reads without resource-level permissions (DescribeAlarms may be asked without alarm names).
READ_ACTIONS = (
    "application-autoscaling:DescribeScalableTargets",
    "application-autoscaling:DescribeScalingPolicies",
    "cloudwatch:DescribeAlarms",
)


class EndpointLifecycle(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        model_bucket: s3.IBucket,
        store_prefix: str,
        results_prefix: str,
        uploads_prefix: str,
        reserved_endpoints: Sequence[str] = (),
        reserved_components: Sequence[str] = (),
    ) -> None:
        """`store_prefix`: the artifact store's root in `model_bucket` (`artifacts/`); the store
        keeps objects under `tenants/<tenant>/sha256/<digest><suffix>` below it, and
        asynchronous results under `results_prefix` + `tenants/<tenant>/`, and the bodies
        clients upload under `uploads_prefix` + `tenants/<tenant>/`.
        `reserved_endpoints` and `reserved_components`: the operator's endpoints (infra/sluice.yaml's)
        and their inference components, whose names share the run-time prefix: the API may invoke
        and re-weight them, never replace, retag, delete them or their scaling alarms (an explicit
        Deny, whatever the `sluice-*` grants allow)."""
        super().__init__(scope, id)
        stack = Stack.of(self)
        self._reserved = [n for n in reserved_endpoints if n.lower().startswith(RUNTIME_ENDPOINT_PREFIX)]
        self._reserved_components = [
            n for n in reserved_components if n.lower().startswith(RUNTIME_ENDPOINT_PREFIX)
        ]
        prefix = RUNTIME_ENDPOINT_PREFIX

        self.execution_role = role = execution_role(
            self,
            description="Runs the Triton containers of the SageMaker endpoints the sluice API deploys",
        )
        archives = model_bucket.arn_for_objects(f"{store_prefix}tenants/*/sha256/*.tar.gz")
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[archives]))
        allow_pulls(role, [repository_arn(self)])
        allow_authorization_token(role)
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": INSTANCE_METRICS_NAMESPACE}},
            )
        )
        log_groups = allow_endpoint_logs(role, f"{prefix}*")
        # Asynchronous inference: SageMaker reads each request's input and writes its answer
        # or error under the tenant's results, as this role.
        results = model_bucket.arn_for_objects(f"{results_prefix}tenants/*")
        role.add_to_policy(
            iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"], resources=[results])
        )
        # A body a client uploaded (`POST /api/v1/uploads`) is handed over as it lies, as the
        # request's InputLocation (`sluice.runtimes.sagemaker_async`): read, never written.
        uploaded = model_bucket.arn_for_objects(f"{uploads_prefix}tenants/*")
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[uploaded]))
        # The topics sluice makes for asynchronous endpoints (`<endpoint>-succeeded|failed`):
        # never `sluice-*` as a whole, which names the operator's alarm topic too.
        self._topics = topics = [
            stack.format_arn(service="sns", resource=f"{prefix}*-{outcome}", arn_format=ArnFormat.NO_RESOURCE_NAME)
            for outcome in ("succeeded", "failed")
        ]
        role.add_to_policy(iam.PolicyStatement(actions=["sns:Publish"], resources=topics))
        acknowledge(
            role,
            wildcard_resource(self, results),
            "Asynchronous requests' inputs, answers and errors: one object per request under a "
            "tenant's results prefix, named at run time; sluice only deploys an asynchronous "
            "endpoint whose output path lies under its own tenant's prefix.",
        )
        acknowledge(
            role,
            wildcard_resource(self, uploaded),
            "Request bodies tenants uploaded, one object per upload named at run time, read only: "
            "sluice hands an endpoint only an upload of the tenant whose request it is "
            "(`sluice.storage.uploads`, by the key's tenant).",
        )
        for topic in topics:
            acknowledge(
                role,
                wildcard_resource(self, topic),
                "The success and error topics sluice makes for the asynchronous endpoints the API "
                "deploys, all named sluice-<tenant>-<deployment>-<digest>-succeeded|failed.",
            )
        acknowledge(
            role,
            wildcard_resource(self, archives),
            "SageMaker reads the model.tar.gz the API built and stored per tenant under "
            "content-addressed keys; only GetObject, and only .tar.gz archives in the store.",
        )
        acknowledge(
            role,
            wildcard_resource(self, log_groups),
            "The log groups and streams SageMaker writes for the endpoints the API deploys, "
            "all named /aws/sagemaker/Endpoints/sluice-<tenant>-<deployment>-<digest>.",
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "ecr:GetAuthorizationToken and cloudwatch:PutMetricData have no resource-level "
            "permissions; image pulls are limited to the Triton repository and metrics to "
            "the /aws/sagemaker/Endpoints namespace by condition.",
        )

    def _reserved_denials(self) -> list[iam.PolicyStatement]:
        """The operator's endpoints and components out of the API's reach but for invoking and
        re-weighting."""
        stack = Stack.of(self)

        def arns(service: str, resource: str, names: list[str], arn_format: ArnFormat = ArnFormat.SLASH_RESOURCE_NAME) -> list[str]:
            return [stack.format_arn(service=service, resource=resource, resource_name=n, arn_format=arn_format) for n in names]

        # Target tracking names its alarms `TargetTracking-endpoint/<endpoint>/…` and
        # `TargetTracking-inference-component/<component>-AlarmHigh|AlarmLow-<uuid>`; the
        # capital A keeps the latter from matching a run-time component (sluice's are lower case).
        alarms = [f"TargetTracking-endpoint/{n}/*" for n in self._reserved]
        alarms += [f"TargetTracking-inference-component/{n}-Alarm*" for n in self._reserved_components]
        denials = [
            (RESERVED_DENIED, arns("sagemaker", "endpoint", [n.lower() for n in self._reserved])),
            (RESERVED_COMPONENT_DENIED, arns("sagemaker", "inference-component", [n.lower() for n in self._reserved_components])),
            (ALARM_ACTIONS, arns("cloudwatch", "alarm", alarms, ArnFormat.COLON_RESOURCE_NAME)),
        ]
        return [
            iam.PolicyStatement(effect=iam.Effect.DENY, actions=list(actions), resources=resources)
            for actions, resources in denials
            if resources
        ]

    def grant_manage(self, role: iam.IRole) -> iam.Policy:
        """The SageMaker, Application Auto Scaling and CloudWatch calls of the endpoint
        lifecycle, on `sluice-*` names, as a policy of its own on `role`."""
        stack = Stack.of(self)
        prefix = RUNTIME_ENDPOINT_PREFIX
        sagemaker = [
            stack.format_arn(service="sagemaker", resource=kind, resource_name=f"{prefix}*")
            for kind in ("model", "endpoint-config", "endpoint", "inference-component")
        ]
        scalable_targets = stack.format_arn(
            service="application-autoscaling", resource="scalable-target", resource_name="*"
        )
        alarms = [
            stack.format_arn(
                service="cloudwatch",
                resource="alarm",
                resource_name=name,
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            )
            for name in (
                f"TargetTracking-endpoint/{prefix}*",
                f"TargetTracking-inference-component/{prefix}*",
                # sluice's own scale-from-zero alarms, by their names alone: `sluice-*` also
                # matches the alarms CloudFormation names after the stacks (`sluice-observability-…`)
                *(f"{prefix}*-{scalable.from_zero.alarm}" for scalable in (INSTANCES, BACKLOG, COPIES) if scalable.from_zero is not None),
            )
        ]
        topics = self._topics
        linked_role = role_arn(self, AUTOSCALING_ROLE)
        policy = iam.Policy(
            self,
            "ManagePolicy",
            roles=[role],
            statements=[
                iam.PolicyStatement(actions=list(LIFECYCLE_ACTIONS), resources=sagemaker),
                iam.PolicyStatement(actions=list(LIST_ACTIONS), resources=["*"]),
                iam.PolicyStatement(
                    actions=["iam:PassRole"],
                    resources=[self.execution_role.role_arn],
                    conditions={"StringEquals": {"iam:PassedToService": SAGEMAKER}},
                ),
                iam.PolicyStatement(
                    actions=list(SCALING_ACTIONS),
                    resources=[scalable_targets],
                    conditions={
                        "StringEquals": {
                            "application-autoscaling:service-namespace": "sagemaker",
                            "application-autoscaling:scalable-dimension": [
                                VARIANT_DIMENSION,
                                COPY_DIMENSION,
                            ],
                        }
                    },
                ),
                iam.PolicyStatement(actions=list(READ_ACTIONS), resources=["*"]),
                iam.PolicyStatement(actions=list(ALARM_ACTIONS), resources=alarms),
                iam.PolicyStatement(actions=list(TOPIC_ACTIONS), resources=topics),
                # The first RegisterScalableTarget in an account creates Application Auto
                # Scaling's service-linked role for SageMaker endpoints.
                iam.PolicyStatement(
                    actions=["iam:CreateServiceLinkedRole"],
                    resources=[linked_role],
                    conditions={"StringEquals": {"iam:AWSServiceName": AUTOSCALING_SERVICE}},
                ),
                *self._reserved_denials(),
            ],
        )
        for arn in sagemaker:
            acknowledge(
                policy,
                wildcard_resource(self, arn),
                "The API creates, describes, re-weights and deletes SageMaker models, endpoint "
                "configs and endpoints at run time, all named sluice-<tenant>-<deployment>-…; "
                "no other name is reachable.",
            )
        acknowledge(
            policy,
            wildcard_resource(self, scalable_targets),
            "Scalable targets are identified by ids Application Auto Scaling generates; the "
            "statement is confined by condition to SageMaker variant instance counts and "
            "inference component copy counts, and registering one also needs the sluice-* "
            "endpoint permissions above.",
        )
        for alarm in alarms:
            acknowledge(
                policy,
                wildcard_resource(self, alarm),
                "Target tracking creates and deletes its own alarms, named TargetTracking-"
                "endpoint/<endpoint>/variant/<variant>-Alarm…-<uuid> (or inference-component/"
                "<component>-…), and sluice its scale-from-zero alarms, <endpoint or component>-"
                "<metric>; only those of sluice-* endpoints and components.",
            )
        for topic in topics:
            acknowledge(
                policy,
                wildcard_resource(self, topic),
                "The SNS topics the API makes for an asynchronous endpoint and deletes with it, all "
                "named sluice-<tenant>-<deployment>-<digest>-succeeded|failed.",
            )
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::*]",
            "sagemaker:ListModels, ListEndpointConfigs and ListInferenceComponents, Application Auto Scaling's "
            "DescribeScalableTargets and DescribeScalingPolicies, and cloudwatch:DescribeAlarms "
            "only read, and have no resource-level permissions to scope them by.",
        )
        return policy

    def grant_rollout_weights(self, role: iam.IRole) -> iam.Policy:
        """DescribeEndpoint and UpdateEndpointWeightsAndCapacities on the `sluice-*` endpoints
        the API deploys (the only endpoints a deployment is bound to), as a policy of its own."""
        endpoints = Stack.of(self).format_arn(
            service="sagemaker", resource="endpoint", resource_name=f"{RUNTIME_ENDPOINT_PREFIX}*"
        )
        policy = iam.Policy(
            self,
            "RolloutWeightsPolicy",
            roles=[role],
            statements=[iam.PolicyStatement(actions=list(ROLLOUT_ACTIONS), resources=[endpoints])],
        )
        acknowledge(
            policy,
            wildcard_resource(self, endpoints),
            "The API deploys endpoints at run time, named sluice-<tenant>-<deployment>-<digest>; "
            "the rollout controller only reads their status and moves their variant weights.",
        )
        return policy
