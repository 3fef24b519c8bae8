"""The functions that answer requests: the API function, its key authorizer, and the shadow
function the predicting functions hand shadow jobs to.

Each role gets exactly what its code calls (docs/deploy-aws.md, "What the API function may
do"). The API function reaches a tenant's registry items only through `TenantRegistryRole`,
assumed per request, and signs upload forms as `UploadSignerRole`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.capture import CaptureTarget
from infra.constructs.endpoint_lifecycle import EndpointLifecycle
from infra.constructs.functions import FunctionGroup, FunctionPlatform, SluiceFunction
from infra.constructs.grants import (
    Callee,
    FunctionSteps,
    executions_arn,
    grant_invoke_endpoints,
    grant_invoke_endpoints_async,
    grant_objects,
    role_arn,
    schedules_arn,
    state_machine_arn,
)
from infra.constructs.precomputed import READ_ANSWERS, PrecomputedAnswers
from infra.constructs.python_layer import PythonLayer
from infra.constructs.registry_access import (
    DELETE,
    KEY_ITEMS,
    READ,
    WRITE,
    TenantRegistryRole,
    grant_registry,
)
from infra.constructs.upload_signer import UploadSignerRole
from infra.nag import acknowledge, wildcard_resource
from infra.naming import (
    CAPTURE_PREFIX,
    IMPORTS_PREFIX,
    INBOX_PREFIX,
    MONITOR_PREFIX,
    OUTBOX_PREFIX,
    STORE_PREFIX,
    UPLOADS_PREFIX,
)
from sluice.inference.mirror import SHADOW_BODY_SUFFIX


class Mirror(Callee):
    """Where a predicting function hands its shadow jobs: the shadow function, as
    SLUICE_MIRROR names it, and the ARN it may invoke."""

    variable, scheme, action = "SLUICE_MIRROR", "lambda", "lambda:InvokeFunction"

    @classmethod
    def named(cls, scope: Construct, function_name: str) -> Mirror:
        """The shadow function of another stack, by name."""
        arn = Stack.of(scope).format_arn(
            service="lambda",
            resource="function",
            resource_name=function_name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        return cls(name=function_name, arn=arn)

    @classmethod
    def invoking(cls, shadow: SluiceFunction) -> Mirror:
        """The shadow function by name, or its `live` alias when it runs from a SnapStart
        snapshot."""
        target = shadow.function.function_name
        if shadow.alias is not None:
            target = f"{target}:{shadow.alias.alias_name}"
        return cls(name=target, arn=shadow.invocable.function_arn)


class Sizing(TypedDict):
    """What the config chooses for one predicting function: its name, memory, timeout and
    reserved concurrency."""

    function_name: str
    memory_mb: int
    timeout_s: int
    reserved_concurrency: int | None


@dataclass(frozen=True)
class Predicting:
    """What the functions that predict (the API function, the shadow function) share: how they
    run (the core and triton layers, SnapStart and what to load before its snapshot), the
    registry table and artifacts bucket they read, the SageMaker endpoints they may invoke, and
    the tenants' Lambda functions that graphs' function steps call."""

    functions: FunctionGroup
    table: dynamodb.ITableV2
    artifacts: s3.IBucket
    endpoint_names: Sequence[str]
    function_steps: FunctionSteps
    precomputed: PrecomputedAnswers


def shadow_function(
    scope: Construct, id: str, predicting: Predicting, **sizing: Unpack[Sizing]
) -> SluiceFunction:
    """Runs shadow mirrors off the request path (invoked asynchronously) and records agreement."""
    fn = predicting.functions.function(
        scope,
        id,
        handler="sluice.handlers.shadow.handler",
        description="Runs shadow mirrors off the request path and records agreement",
        invoked_async=True,
        **sizing,
    )
    grant_registry(fn.role, predicting.table, actions=[*READ, *WRITE])
    grant_objects(
        fn,
        predicting.artifacts,
        prefix=STORE_PREFIX,
        purpose="model artifacts and request bodies too large for an async invoke",
    )
    # A body too large for an async invoke is stored as `<tenant>/sha256/<digest>.shadow.json`
    # and deleted once compared (`sluice.handlers.shadow`): those alone, never a model's artifact.
    bodies = predicting.artifacts.arn_for_objects(f"{STORE_PREFIX}tenants/*/sha256/*{SHADOW_BODY_SUFFIX}")
    fn.role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:DeleteObject"], resources=[bodies]))
    acknowledge(fn, wildcard_resource(fn, bodies), "A shadow body's key is its tenant's and its digest, made at run time: only such bodies, never a model's artifact.")
    grant_invoke_endpoints(fn, predicting.endpoint_names)
    predicting.function_steps.grant_to(fn)
    predicting.precomputed.grant(fn, READ_ANSWERS)
    return fn


class AuthorizerFunction(SluiceFunction):
    """Checks API keys for API Gateway (REST and WebSocket) and names the caller's usage plan:
    `<usage_key_prefix><tenant>` for the tenants with a plan of their own."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        function_name: str,
        platform: FunctionPlatform,
        layers: Sequence[PythonLayer],
        memory_mb: int,
        reserved_concurrency: int | None,
        usage_key_prefix: str,
        tenants_with_plans: Sequence[str],
        table: dynamodb.ITableV2,
    ) -> None:
        super().__init__(
            scope,
            id,
            function_name=function_name,
            handler="sluice.handlers.authorizer.handler",
            description="Checks API keys for API Gateway and names the caller's usage plan",
            platform=platform,
            layers=layers,
            memory_mb=memory_mb,
            timeout=Duration.seconds(10),
            reserved_concurrency=reserved_concurrency,
            environment={
                "SLUICE_USAGE_KEY_PREFIX": usage_key_prefix,
                "SLUICE_USAGE_TENANTS": ",".join(tenants_with_plans),
            },
        )
        # Keys are looked up by id before the tenant is known: K# items only, GetItem only.
        grant_registry(self.role, table, actions=["dynamodb:GetItem"], partitions=[KEY_ITEMS])


@dataclass(frozen=True)
class BatchControl:
    """What the API starts, stops and schedules in the batch stack, by name."""

    state_machine: str
    schedule_group: str
    scheduler_role: str


class ApiFunction:
    """The API function ("Handler"), with the tenant registry role ("TenantRegistry") and the
    upload signer ("UploadSigner") it assumes, built into `scope` (the API stack)."""

    def __init__(
        self,
        scope: Construct,
        predicting: Predicting,
        *,
        prediction_cache_shared: bool,
        batch_bucket: s3.IBucket,
        mirror: Mirror,
        capture: CaptureTarget,
        endpoints: EndpointLifecycle,
        batch: BatchControl,
        **sizing: Unpack[Sizing],
    ) -> None:
        table, artifacts = predicting.table, predicting.artifacts
        self.function = fn = predicting.functions.function(
            scope,
            "Handler",
            handler="sluice.handlers.api.handler",
            description="The sluice API (FastAPI through Mangum)",
            environment={
                **mirror.environment,
                "SLUICE_ORCHESTRATOR": f"stepfunctions://{state_machine_arn(scope, batch.state_machine)}",
                "SLUICE_BATCH_BUCKET": batch_bucket.bucket_name,
                "SLUICE_IMPORT_PREFIXES": json.dumps(
                    [f"s3://{artifacts.bucket_name}/{IMPORTS_PREFIX}{{tenant}}/"]
                ),
                "SLUICE_SAGEMAKER_EXECUTION_ROLE_ARN": endpoints.execution_role.role_arn,
                "SLUICE_PREDICTION_CACHE_SHARED": str(prediction_cache_shared).lower(),
                **capture.environment,
            },
            **sizing,
        )
        role = fn.role
        # Data capture: records of deployments that turn it on, to this one delivery stream.
        capture.grant_to(role)
        # The API's own credentials reach API key items alone (looked up by id, before the
        # tenant is known; their key holds no tenant). Every tenant partition is reached per
        # request with credentials confined to the request's tenant, below.
        grant_registry(
            role, table, actions=[*READ, *WRITE, "dynamodb:DeleteItem"], partitions=[KEY_ITEMS]
        )
        # Credentials confined to one tenant's items, for the API to use per request.
        self.tenant_registry = TenantRegistryRole(
            scope, "TenantRegistry", table=table, caller=role, actions=[*READ, *WRITE, *DELETE]
        )
        fn.function.add_environment("SLUICE_TENANT_ROLE_ARN", self.tenant_registry.role.role_arn)
        # Precomputed answers: read per request through the same tenant role, never its own.
        predicting.precomputed.grant_tenant_reads(self.tenant_registry.role)
        predicting.precomputed.tell(fn)
        # Uploads' presigned POSTs are signed as this role, assumed per tenant: it may put
        # objects under that tenant's uploads prefix only (the function's own object grant
        # below covers reading them).
        self.upload_signer = UploadSignerRole(
            scope, "UploadSigner", bucket=artifacts, uploads_prefix=UPLOADS_PREFIX, caller=role
        )
        fn.function.add_environment(
            "SLUICE_UPLOAD_SIGNER_ROLE_ARN", self.upload_signer.role.role_arn
        )
        self._grant_objects(fn, artifacts, batch_bucket)
        grant_invoke_endpoints(fn, predicting.endpoint_names)
        grant_invoke_endpoints_async(fn, predicting.endpoint_names)
        predicting.function_steps.grant_to(fn)
        manage = endpoints.grant_manage(role)
        fn.function.node.add_dependency(manage)
        # The mirror calls the function by name, or its `live` alias under SnapStart.
        mirror.grant_to(role)
        self._grant_batch(scope, fn, batch)

    @staticmethod
    def _grant_objects(fn: SluiceFunction, artifacts: s3.IBucket, batch_bucket: s3.IBucket) -> None:
        grant_objects(
            fn,
            artifacts,
            prefix=STORE_PREFIX,
            write=True,
            delete=True,
            purpose="model uploads, oversized shadow bodies, asynchronous results and uploaded request bodies",
        )
        grant_objects(
            fn,
            artifacts,
            prefix=IMPORTS_PREFIX,
            purpose="push-by-URI reads model files tenants put under imports/<tenant>/",
        )
        grant_objects(
            fn,
            batch_bucket,
            prefix=OUTBOX_PREFIX,
            purpose="reading the results of batch jobs",
        )
        grant_objects(
            fn,
            batch_bucket,
            prefix=CAPTURE_PREFIX,
            purpose="replay reads the captured requests of the caller's tenant",
        )
        grant_objects(
            fn,
            batch_bucket,
            prefix=INBOX_PREFIX,
            versions=True,
            purpose="a monitoring baseline reads a batch job's input from the tenant's inbox",
        )
        grant_objects(
            fn,
            batch_bucket,
            prefix=MONITOR_PREFIX,
            purpose="the monitoring history route reads each window's kept result of the caller's tenant",
        )

    @staticmethod
    def _grant_batch(scope: Construct, fn: SluiceFunction, batch: BatchControl) -> None:
        """Batch jobs: starting and stopping executions of the batch state machine, and batch
        schedules (EventBridge Scheduler schedules in the batch stack's group, each assuming
        the batch stack's scheduler role, passed to Scheduler and nothing else)."""
        role = fn.role
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["states:StartExecution"],
                resources=[state_machine_arn(scope, batch.state_machine)],
            )
        )
        schedules = schedules_arn(scope, batch.schedule_group)
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "scheduler:CreateSchedule",
                    "scheduler:UpdateSchedule",
                    "scheduler:DeleteSchedule",
                    "scheduler:GetSchedule",
                ],
                resources=[schedules],
            )
        )
        scheduler_role = role_arn(scope, batch.scheduler_role)
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[scheduler_role],
                conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
            )
        )
        fn.function.add_environment("SLUICE_SCHEDULE_GROUP", batch.schedule_group)
        fn.function.add_environment("SLUICE_SCHEDULER_ROLE_ARN", scheduler_role)
        acknowledge(
            fn,
            wildcard_resource(scope, schedules),
            "Batch schedules are created at run time, one per tenant schedule, named "
            "after the tenant and schedule and a digest of the two; only schedules in sluice's own schedule group.",
        )
        # Cancelling a job stops its execution, which is named after the job id; reading a
        # job describes it, to find one that ended without MarkFailed (timed out, stopped).
        executions = executions_arn(scope, batch.state_machine)
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["states:StopExecution", "states:DescribeExecution"], resources=[executions]
            )
        )
        acknowledge(
            fn,
            wildcard_resource(scope, executions),
            "Cancelling a batch job stops its execution, and reading one describes it, named "
            "after the job id at run time; only executions of the sluice batch state machine, "
            "and only StopExecution and DescribeExecution.",
        )
