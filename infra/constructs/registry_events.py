"""SageMaker Model Registry's approvals start rollouts: an EventBridge rule sends each "SageMaker
Model Package State Change" event that approves, rejects or sets back to pending a package of
this account to one function (sluice.handlers.registry_events), which pushes an Approved package
of a group a deployment follows and starts its rollout, or records a Rejected one (and one taken
before, back to pending: approved again, it is taken again).

The function may describe the packages of the groups some tenant may follow
(`api.follow_package_groups`; no other SageMaker call), read objects under the prefixes named
as some tenant's model data locations (`api.model_data_locations`; none by default), write
models and versions into the store, and read and write the registry's tenant partitions; its
scan of who follows what reads the keys and `watch` of each item alone. Which tenant may
follow which group and read which prefix, the function checks itself (`BindingReads`).

EventBridge Scheduler invokes the same function every `api.follow_poll_minutes` with
`{"poll": "follows"}`: it polls the MLflow registries deployments follow over MLflow's REST API
(the servers `api.mlflow_tracking_servers` names alone) with each tenant's credentials from its
Secrets Manager secret (`api.mlflow_credentials`: GetSecretValue on those secrets, no other);
a secret under a customer-managed KMS key (`api.mlflow_credentials_kms_keys`) needs kms:Decrypt
on that key, granted through Secrets Manager alone and for those secrets alone.
One function for both, since both need the same grants (registry, store, model data locations);
the schedule's role may invoke it and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import ArnFormat, Aws, Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.grants import grant_objects, invoke_on_schedule
from infra.constructs.registry_access import READ, WRITE, RegistryWorker
from infra.nag import acknowledge, wildcard_resource
from infra.naming import STORE_PREFIX
from sluice.domain.locations import Root

# What the scan of `followers` may read: the keys of each item and what a binding watches.
FOLLOW_SCAN_ATTRIBUTES = ("pk", "sk", "watch")
DETAIL_TYPE = "SageMaker Model Package State Change"


class RegistryEvents:
    """The function ("RegistryEvents") and the rule that invokes it, built into `scope`."""

    def __init__(
        self,
        scope: Construct,
        worker: RegistryWorker,
        *,
        artifacts: s3.IBucket,
        package_groups: Mapping[str, Sequence[str]] | None = None,
        model_data: Mapping[str, Sequence[str]] | None = None,
        poll_every_minutes: int = 0,
        mlflow_servers: Sequence[str] = (),
        mlflow_credentials: Mapping[str, str] | None = None,
        mlflow_kms_keys: Sequence[str] = (),
    ) -> None:
        self.function = fn = worker.function(
            scope, "RegistryEvents", handler="sluice.handlers.registry_events.handler",
            description="Pushes and rolls out approved SageMaker model packages that deployments follow",
            memory_mb=1024, timeout_s=300, actions=[*READ, *WRITE], scan=FOLLOW_SCAN_ATTRIBUTES,
        )  # fmt: skip
        role = fn.role
        grant_objects(fn, artifacts, prefix=STORE_PREFIX, write=True, purpose="the ONNX model of each package pushed")
        # The packages of the groups some tenant may follow (a group's name is spelled in ARNs as
        # given or in lower case: both are granted), and the model data prefixes some tenant's
        # versions may lie under; which tenant may use which is checked by the function itself.
        stack = Stack.of(scope)
        groups = sorted({spelled for names in (package_groups or {}).values() for g in names for spelled in (g, g.lower())})
        for group in groups:
            packages = stack.format_arn(service="sagemaker", resource="model-package", resource_name=f"{group}/*")
            role.add_to_principal_policy(iam.PolicyStatement(actions=["sagemaker:DescribeModelPackage"], resources=[packages]))
            acknowledge(
                fn,
                wildcard_resource(scope, packages),
                f"The versions of model package group {group}, which the config lets a tenant follow, are made as "
                "they are registered: the function describes that group's packages alone.",
            )
        # Each location as the function reads it (`s3://bucket/prefix/`, the `/` added where
        # the config left it out), so that `…/acme` grants no key of `…/acme-two/`.
        for location in sorted({Root.of("model-data", uri).uri for uris in (model_data or {}).values() for uri in uris}):
            bucket, _, prefix = location.removeprefix("s3://").partition("/")
            objects = stack.format_arn(service="s3", region="", account="", resource=bucket, resource_name=f"{prefix}*")
            role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[objects]))
            acknowledge(
                fn,
                wildcard_resource(scope, objects),
                f"A followed version's model data is wherever its training put it: the function reads objects under "
                f"{location}, named in the config as a tenant's model data location, and writes nothing there.",
            )
        # What EventBridge could not deliver lands in a queue of its own, under a key of its own:
        # EventBridge cannot send to a queue under the AWS-managed KMS key the functions'
        # dead-letter queues have (its key policy names no service), so this key lets EventBridge
        # use it and nothing else (the queue's policy, which the target adds, admits this rule alone).
        key = kms.Key(
            scope, "ModelPackageApprovalsKey", enable_key_rotation=True,
            description="Encrypts the SageMaker model package approvals EventBridge could not deliver to sluice",
        )  # fmt: skip
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["kms:GenerateDataKey", "kms:Decrypt"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(scope).account}},
            )
        )
        self.undelivered = sqs.Queue(
            scope, "ModelPackageApprovalsUndelivered", encryption=sqs.QueueEncryption.KMS, encryption_master_key=key,
            enforce_ssl=True, retention_period=Duration.days(14),
        )  # fmt: skip
        for rule in ("Serverless-SQSRedrivePolicy", "AwsSolutions-SQS3"):
            acknowledge(
                self.undelivered,
                rule,
                "This queue is the EventBridge target's dead-letter queue (cdk-nag sees only SQS redrive policies): "
                "approvals it could not deliver land here for inspection and redrive; a DLQ behind it would only move them.",
            )
        self.rule = events.Rule(
            scope,
            "ModelPackageApprovals",
            description="SageMaker Model Registry approvals, rejections and returns to pending, to the sluice follow bindings",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=[DETAIL_TYPE],
                detail={"ModelApprovalStatus": ["Approved", "Rejected", "PendingManualApproval"]},
            ),
            targets=[
                targets.LambdaFunction(
                    fn.invocable, retry_attempts=2, max_event_age=Duration.hours(1), dead_letter_queue=self.undelivered
                )
            ],
        )
        # An event some binding could not act on for other writes landing at each try fails its
        # invocation (`sluice.convert.follow.DeliverAgain`): Lambda's asynchronous retries (its
        # defaults, which no EventInvokeConfig lowers: twice, a minute or more apart) invoke it
        # again; then the function's dead-letter queue keeps it.
        self.environment = follow_environment(mlflow_servers, package_groups or {}, mlflow_credentials or {}, model_data or {})
        for variable, value in self.environment.items():
            fn.function.add_environment(variable, value)
        secrets = secret_arns(scope, mlflow_credentials or {})
        for secret in secrets:
            # A secret's ARN ends in six random characters after its name: `-??????` matches them alone.
            role.add_to_principal_policy(iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[secret]))
        if mlflow_kms_keys and secrets:
            role.add_to_principal_policy(decrypt_secrets(scope, mlflow_kms_keys, secrets))
        # Every `poll_every_minutes` (none at 0); no retry of a delivery, as for the rollout
        # controller: the next poll comes anyway.
        minutes = poll_every_minutes
        self.schedule = invoke_on_schedule(
            scope, "FollowPoll", fn.invocable, name=f"{worker.function_name}-poll", who="the sluice follow poll",
            description="Polls the MLflow registries deployments follow, and records ended rollouts",
            expression=f"rate({minutes} minute{'s' if minutes > 1 else ''})", input=json.dumps({"poll": "follows"}),
            retries=0, max_age_s=min(60 * minutes, 86400),
        ) if minutes else None  # fmt: skip


def follow_environment(
    servers: Sequence[str], package_groups: Mapping[str, Sequence[str]], credentials: Mapping[str, str] | None = None,
    model_data: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, str]:  # fmt: skip
    """What the functions that read or check follow bindings are told on AWS: the MLflow servers
    and each tenant's package groups (both check a new binding), and, for the function that
    reads, each tenant's MLflow secret and model data locations."""
    compact: dict[str, Any] = {"separators": (",", ":")}
    out = {}
    if servers:
        out["SLUICE_MLFLOW_TRACKING_SERVERS"] = json.dumps(list(servers), **compact)
    if package_groups:
        out["SLUICE_FOLLOW_PACKAGE_GROUPS"] = json.dumps({t: list(g) for t, g in sorted(package_groups.items())}, **compact)
        # The stack's own account and region: the only groups whose approvals its EventBridge rule sees.
        out["SLUICE_FOLLOW_GROUP_ARN_PREFIX"] = f"arn:{Aws.PARTITION}:sagemaker:{Aws.REGION}:{Aws.ACCOUNT_ID}:model-package-group/"
    if credentials:
        out["SLUICE_MLFLOW_CREDENTIALS_SECRETS"] = json.dumps(dict(sorted(credentials.items())), **compact)
    if model_data:
        out["SLUICE_MODEL_DATA_LOCATIONS"] = json.dumps({t: list(u) for t, u in sorted(model_data.items())}, **compact)
    return out


def decrypt_secrets(scope: Construct, keys: Sequence[str], secrets: Sequence[str]) -> iam.PolicyStatement:
    """kms:Decrypt on the customer-managed keys the secrets are under: asked by Secrets Manager
    in this region on the function's behalf (`kms:ViaService`), for these secrets alone (Secrets
    Manager names the secret's ARN in the encryption context of each call)."""
    return iam.PolicyStatement(
        actions=["kms:Decrypt"],
        resources=sorted(set(keys)),
        conditions={
            "StringEquals": {"kms:ViaService": f"secretsmanager.{Stack.of(scope).region}.amazonaws.com"},
            "StringLike": {"kms:EncryptionContext:SecretARN": list(secrets)},
        },
    )


def secret_arns(scope: Construct, credentials: Mapping[str, str]) -> list[str]:
    """The ARN of each secret named, as GetSecretValue's resource: a full ARN as it is, a name
    as this account's and region's secret of that name (with any suffix of six characters)."""
    stack = Stack.of(scope)
    return sorted({
        secret if secret.startswith("arn:") else stack.format_arn(
            service="secretsmanager", resource="secret", resource_name=f"{secret}-??????", arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        for secret in credentials.values()
    })  # fmt: skip
