"""The API: API Gateway (REST) -> the API function, behind an API-key authorizer.

Why a REST API and not an HTTP API: per-tenant throttling and quotas need usage plans, and
X-Ray tracing of the gateway, both of which only REST APIs have.

Request size: REST APIs take bodies up to 10 MB, but a synchronous Lambda invoke carries at
most 6 MB with its envelope, and every body arrives base64-encoded (`BINARY_MEDIA_TYPES`), a
third larger: about 4.4 MB of body is the real limit, and between that and 10 MB the invoke
itself fails. The app's own 413 above `SLUICE_MAX_REQUEST_BYTES` (just under 6 MB) holds for
the local service and direct invokes. Larger inputs go through S3 as batch jobs.
"""

from __future__ import annotations

import json

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesisfirehose as firehose
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from infra.config import PlanLimits, SluiceConfig
from infra.constructs.endpoint_lifecycle import EndpointLifecycle
from infra.constructs.functions import FunctionPlatform, SluiceFunction
from infra.constructs.grants import (
    executions_arn,
    grant_invoke_endpoints,
    grant_invoke_endpoints_async,
    grant_objects,
    role_arn,
    schedules_arn,
    state_machine_arn,
)
from infra.constructs.logs import retention
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
from infra.constructs.websocket_api import WebSocketApi
from infra.nag import acknowledge, wildcard_resource
from infra.naming import (
    ARTIFACTS_PREFIX,
    CAPTURE_ERRORS_PREFIX,
    CAPTURE_PREFIX,
    IMPORTS_PREFIX,
    OUTBOX_PREFIX,
    RESULTS_PREFIX,
    UPLOADS_PREFIX,
    ResourceNames,
)

# One JSON object per request; tenant and key id come from the authorizer, never the key.
ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "requestTime": "$context.requestTime",
    "ip": "$context.identity.sourceIp",
    "httpMethod": "$context.httpMethod",
    "path": "$context.path",
    "status": "$context.status",
    "protocol": "$context.protocol",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "integrationLatency": "$context.integration.latency",
    "tenant": "$context.authorizer.tenant",
    "subject": "$context.authorizer.principalId",
    "error": "$context.error.message",
    "xrayTraceId": "$context.xrayTraceId",
}
DEFAULT_PLAN = "_default"  # the authorizer's name for tenants without a plan of their own
# Request bodies API Gateway passes to the function base64-encoded, byte for byte (the function
# decodes them): ONNX files for POST /api/v1/models/{name}/versions, and v2 bodies with binary
# tensors. `*/*` because tritonclient's synchronous client sends binary tensors with no
# Content-Type at all, which API Gateway would read as JSON text and mangle. The price: JSON
# bodies arrive base64-encoded too, a third larger, so through API Gateway a body over about
# 4.4 MB fails at the invoke (module docstring) instead of reaching the function. It also lets
# binary responses (the function returns them base64-encoded) go back as bytes whatever the
# client's Accept header says.
# What the rollout controller's scan may read: the keys of each item and its rollout.
ROLLOUT_SCAN_ATTRIBUTES = ("pk", "sk", "rollout")
BINARY_MEDIA_TYPES = ["application/octet-stream", "application/onnx", "*/*"]
API_GATEWAY_TIMEOUT = Duration.seconds(29)


class ApiStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: SluiceConfig,
        names: ResourceNames,
        platform: FunctionPlatform,
        **kwargs,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        api_config = config.api
        functions = config.functions
        # What the SnapStart functions load before their snapshot (sluice.handlers.snapstart).
        preload = (
            {
                "SLUICE_PRELOAD": json.dumps(functions.preload),
                "SLUICE_PRELOAD_MAX_BYTES": str(functions.preload_max_mb * 1024 * 1024),
            }
            if functions.snap_start and functions.preload
            else {}
        )
        core = platform.layer(
            self, "CoreLayer", name="core", description="sluice core dependencies"
        )
        # aiohttp, for the `triton` runtime: on the functions that predict (the API, the
        # shadow and the WebSocket function), not in the core layer the batch functions get.
        triton = platform.layer(
            self, "TritonLayer", name="triton", description="sluice triton runtime dependencies"
        )
        artifacts = s3.Bucket.from_bucket_name(self, "ArtifactsBucket", names.artifacts_bucket)
        batch_bucket = s3.Bucket.from_bucket_name(self, "BatchBucket", names.batch_bucket)
        table = dynamodb.TableV2.from_table_name(self, "RegistryTable", names.table)
        endpoint_names = [names.endpoint(e.name) for e in config.endpoints]

        self.shadow = SluiceFunction(
            self,
            "Shadow",
            function_name=names.function("shadow"),
            handler="sluice.handlers.shadow.handler",
            description="Runs shadow mirrors off the request path and records agreement",
            platform=platform,
            layers=[core, triton],
            memory_mb=api_config.shadow_memory_mb,
            timeout=Duration.seconds(api_config.shadow_timeout_s),
            invoked_async=True,
            reserved_concurrency=config.concurrency.shadow,
            snap_start=functions.snap_start,
            environment=preload,
        )
        grant_registry(self.shadow.role, table, actions=[*READ, *WRITE])
        grant_objects(
            self.shadow,
            self.shadow.role,
            artifacts,
            prefix=f"{ARTIFACTS_PREFIX}/",
            purpose="model artifacts and request bodies too large for an async invoke",
        )
        grant_invoke_endpoints(self.shadow, self.shadow.role, endpoint_names)

        shadow_target = self.shadow.function.function_name
        if self.shadow.alias is not None:
            shadow_target = f"{shadow_target}:{self.shadow.alias.alias_name}"

        # SageMaker endpoints deployed through the API: their execution role, and the calls.
        self.endpoint_lifecycle = EndpointLifecycle(
            self,
            "Endpoints",
            model_bucket=artifacts,
            store_prefix=f"{ARTIFACTS_PREFIX}/",
            results_prefix=RESULTS_PREFIX,
        )

        self.capture_stream = self._capture_stream(config, names, batch_bucket)

        self.api_function = SluiceFunction(
            self,
            "Handler",
            function_name=names.function("api"),
            handler="sluice.handlers.api.handler",
            description="The sluice API (FastAPI through Mangum)",
            platform=platform,
            layers=[core, triton],
            memory_mb=api_config.memory_mb,
            timeout=Duration.seconds(api_config.timeout_s),
            reserved_concurrency=config.concurrency.api,
            snap_start=functions.snap_start,
            environment={
                **preload,
                # The alias when the shadow function runs from a SnapStart snapshot.
                "SLUICE_MIRROR": f"lambda://{shadow_target}",
                "SLUICE_ORCHESTRATOR": f"stepfunctions://{state_machine_arn(self, names.state_machine)}",
                "SLUICE_BATCH_BUCKET": batch_bucket.bucket_name,
                "SLUICE_IMPORT_PREFIXES": json.dumps(
                    [f"s3://{artifacts.bucket_name}/{IMPORTS_PREFIX}{{tenant}}/"]
                ),
                "SLUICE_SAGEMAKER_EXECUTION_ROLE_ARN": (
                    self.endpoint_lifecycle.execution_role.role_arn
                ),
                "SLUICE_PREDICTION_CACHE_SHARED": str(api_config.prediction_cache_shared).lower(),
                "SLUICE_CAPTURE": f"firehose://{names.capture_stream}",
            },
        )
        api_role = self.api_function.role
        # Data capture: records of deployments that turn it on, to this one delivery stream.
        api_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["firehose:PutRecordBatch"],
                resources=[self.capture_stream.attr_arn],
            )
        )
        # The API's own credentials reach API key items alone (looked up by id, before the
        # tenant is known; their key holds no tenant). Every tenant partition is reached per
        # request with credentials confined to the request's tenant, below.
        grant_registry(api_role, table, actions=[*READ, *WRITE, "dynamodb:DeleteItem"], partitions=[KEY_ITEMS])
        # Credentials confined to one tenant's items, for the API to use per request.
        self.tenant_registry = TenantRegistryRole(
            self, "TenantRegistry", table=table, caller=api_role, actions=[*READ, *WRITE, *DELETE]
        )
        self.api_function.function.add_environment(
            "SLUICE_TENANT_ROLE_ARN", self.tenant_registry.role.role_arn
        )
        # Uploads' presigned POSTs are signed as this role, assumed per tenant: it may put
        # objects under that tenant's uploads prefix only (the function's own object grant
        # below covers reading them).
        self.upload_signer = UploadSignerRole(
            self,
            "UploadSigner",
            bucket=artifacts,
            uploads_prefix=UPLOADS_PREFIX,
            caller=api_role,
        )
        self.api_function.function.add_environment(
            "SLUICE_UPLOAD_SIGNER_ROLE_ARN", self.upload_signer.role.role_arn
        )
        grant_objects(
            self.api_function,
            api_role,
            artifacts,
            prefix=f"{ARTIFACTS_PREFIX}/",
            write=True,
            delete=True,
            purpose="model uploads, oversized shadow bodies, asynchronous results and uploaded request bodies",
        )
        grant_objects(
            self.api_function,
            api_role,
            artifacts,
            prefix=IMPORTS_PREFIX,
            purpose="push-by-URI reads model files tenants put under imports/<tenant>/",
        )
        grant_objects(
            self.api_function,
            api_role,
            batch_bucket,
            prefix=OUTBOX_PREFIX,
            purpose="reading the results of batch jobs",
        )
        grant_objects(
            self.api_function,
            api_role,
            batch_bucket,
            prefix=CAPTURE_PREFIX,
            purpose="replay reads the captured requests of the caller's tenant",
        )
        grant_invoke_endpoints(self.api_function, api_role, endpoint_names)
        grant_invoke_endpoints_async(self.api_function, api_role, endpoint_names)
        manage = self.endpoint_lifecycle.grant_manage(api_role)
        self.api_function.function.node.add_dependency(manage)
        # The mirror calls the function by name, or its `live` alias under SnapStart.
        api_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["lambda:InvokeFunction"],
                resources=[self.shadow.invocable.function_arn],
            )
        )
        api_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["states:StartExecution"],
                resources=[state_machine_arn(self, names.state_machine)],
            )
        )
        # Batch schedules: EventBridge Scheduler schedules in the batch stack's group, each
        # assuming the batch stack's scheduler role (passed to Scheduler and nothing else).
        schedules = schedules_arn(self, names.schedule_group)
        api_role.add_to_principal_policy(
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
        api_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[role_arn(self, names.scheduler_role)],
                conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
            )
        )
        self.api_function.function.add_environment("SLUICE_SCHEDULE_GROUP", names.schedule_group)
        self.api_function.function.add_environment(
            "SLUICE_SCHEDULER_ROLE_ARN", role_arn(self, names.scheduler_role)
        )
        acknowledge(
            self.api_function,
            wildcard_resource(self, schedules),
            "Batch schedules are created at run time, one per tenant schedule, named "
            "<tenant>.<name>; only schedules in sluice's own schedule group.",
        )
        # Cancelling a job stops its execution, which is named after the job id.
        executions = executions_arn(self, names.state_machine)
        api_role.add_to_principal_policy(
            iam.PolicyStatement(actions=["states:StopExecution"], resources=[executions])
        )
        acknowledge(
            self.api_function,
            wildcard_resource(self, executions),
            "Cancelling a batch job stops its execution, named after the job id at run time; "
            "only executions of the sluice batch state machine, and only StopExecution.",
        )

        usage_key_prefix = f"{config.name}-api-usage-plan-key-"
        self.authorizer_function = SluiceFunction(
            self,
            "Authorizer",
            function_name=names.function("authorizer"),
            handler="sluice.handlers.authorizer.handler",
            description="Checks API keys for API Gateway and names the caller's usage plan",
            platform=platform,
            layers=[core],
            memory_mb=api_config.authorizer_memory_mb,
            timeout=Duration.seconds(10),
            reserved_concurrency=config.concurrency.authorizer,
            environment={
                "SLUICE_USAGE_KEY_PREFIX": usage_key_prefix,
                "SLUICE_USAGE_TENANTS": ",".join(t.tenant for t in api_config.tenants),
            },
        )
        # Keys are looked up by id before the tenant is known: K# items only, GetItem only.
        grant_registry(
            self.authorizer_function.role,
            table,
            actions=["dynamodb:GetItem"],
            partitions=[KEY_ITEMS],
        )

        self.rollouts = self._rollout_controller(config, names, platform, core, table)
        self.rest_api = self._rest_api(config, names)
        self._usage_plans(config, usage_key_prefix)
        self.websocket = (
            self._websocket(config, names, platform, [core, triton], table, artifacts, endpoint_names)
            if config.websocket.enabled
            else None
        )

    def _capture_stream(
        self, config: SluiceConfig, names: ResourceNames, bucket: s3.IBucket
    ) -> firehose.CfnDeliveryStream:
        """Data capture on AWS: a Firehose delivery stream (encrypted) that writes JSON Lines
        to the batch bucket under `capture/tenant=…/deployment=…/dt=…/hour=…/`, the tenant
        and deployment read from each record (dynamic partitioning); the bucket's lifecycle
        expires them (`storage.capture_expiry_days`)."""
        role = iam.Role(
            self,
            "CaptureDeliveryRole",
            assumed_by=iam.ServicePrincipal("firehose.amazonaws.com"),
            description="Firehose writes captured requests under capture/ in the batch bucket",
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject", "s3:AbortMultipartUpload"],
                resources=[
                    bucket.arn_for_objects(f"{CAPTURE_PREFIX}*"),
                    bucket.arn_for_objects(f"{CAPTURE_ERRORS_PREFIX}*"),
                ],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"],
                resources=[bucket.bucket_arn],
            )
        )
        for prefix in (CAPTURE_PREFIX, CAPTURE_ERRORS_PREFIX):
            acknowledge(
                role,
                wildcard_resource(self, bucket.arn_for_objects(f"{prefix}*")),
                "Firehose names each object at delivery time; writes are confined to the capture "
                "prefixes of the batch bucket.",
            )
        logs_group = logs.LogGroup(
            self,
            "CaptureDeliveryLogs",
            retention=retention(config.log_retention_days),
            removal_policy=RemovalPolicy.RETAIN if config.storage.retain_data else RemovalPolicy.DESTROY,
        )
        logs_stream = logs.LogStream(self, "CaptureDeliveryErrors", log_group=logs_group)
        logs_group.grant_write(role)
        return firehose.CfnDeliveryStream(
            self,
            "CaptureStream",
            delivery_stream_name=names.capture_stream,
            delivery_stream_type="DirectPut",
            delivery_stream_encryption_configuration_input=firehose.CfnDeliveryStream.DeliveryStreamEncryptionConfigurationInputProperty(
                key_type="AWS_OWNED_CMK"
            ),
            extended_s3_destination_configuration=firehose.CfnDeliveryStream.ExtendedS3DestinationConfigurationProperty(
                bucket_arn=bucket.bucket_arn,
                role_arn=role.role_arn,
                prefix=(
                    f"{CAPTURE_PREFIX}tenant=!{{partitionKeyFromQuery:tenant}}/"
                    "deployment=!{partitionKeyFromQuery:deployment}/dt=!{timestamp:yyyy-MM-dd}/hour=!{timestamp:HH}/"
                ),
                error_output_prefix=f"{CAPTURE_ERRORS_PREFIX}!{{firehose:error-output-type}}/dt=!{{timestamp:yyyy-MM-dd}}/",
                # Dynamic partitioning needs buffers of at least 64 MB.
                buffering_hints=firehose.CfnDeliveryStream.BufferingHintsProperty(interval_in_seconds=60, size_in_m_bs=64),
                compression_format="UNCOMPRESSED",
                encryption_configuration=firehose.CfnDeliveryStream.EncryptionConfigurationProperty(no_encryption_config="NoEncryption"),
                dynamic_partitioning_configuration=firehose.CfnDeliveryStream.DynamicPartitioningConfigurationProperty(enabled=True),
                processing_configuration=firehose.CfnDeliveryStream.ProcessingConfigurationProperty(
                    enabled=True,
                    processors=[
                        firehose.CfnDeliveryStream.ProcessorProperty(
                            type="MetadataExtraction",
                            parameters=[
                                firehose.CfnDeliveryStream.ProcessorParameterProperty(
                                    parameter_name="MetadataExtractionQuery",
                                    parameter_value="{tenant:.tenant,deployment:.deployment}",
                                ),
                                firehose.CfnDeliveryStream.ProcessorParameterProperty(
                                    parameter_name="JsonParsingEngine", parameter_value="JQ-1.6"
                                ),
                            ],
                        )
                    ],
                ),
                cloud_watch_logging_options=firehose.CfnDeliveryStream.CloudWatchLoggingOptionsProperty(
                    enabled=True, log_group_name=logs_group.log_group_name, log_stream_name=logs_stream.log_stream_name
                ),
            ),
        )

    def _rollout_controller(
        self,
        config: SluiceConfig,
        names: ResourceNames,
        platform: FunctionPlatform,
        core: PythonLayer,
        table: dynamodb.ITableV2,
    ) -> SluiceFunction:
        """Progressive rollouts move on here: an EventBridge Scheduler schedule invokes the
        controller every minute; it looks at every running rollout and advances, completes
        or rolls back (sluice.handlers.rollouts), moving the variant weights of the endpoint
        a deployment is bound to with it."""
        controller = SluiceFunction(
            self,
            "Rollouts",
            function_name=names.function("rollouts"),
            handler="sluice.handlers.rollouts.handler",
            description="Advances, completes or rolls back progressive rollouts by their gates",
            platform=platform,
            layers=[core],
            memory_mb=512,
            timeout=Duration.seconds(60),
            invoked_async=True,
            reserved_concurrency=config.concurrency.rollouts,
        )
        role = controller.role
        # Deployments and their statistics in every tenant: read, and changes written.
        grant_registry(role, table, actions=[*READ, *WRITE])
        # Which deployments have a running rollout: a scan that may read the keys and the
        # rollout of each item alone (no statistics, no API key hashes).
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["dynamodb:Scan"],
                resources=[table.table_arn],
                conditions={
                    "StringEquals": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
                    "ForAllValues:StringEquals": {"dynamodb:Attributes": list(ROLLOUT_SCAN_ATTRIBUTES)},
                },
            )
        )
        alarms = self.format_arn(
            service="cloudwatch", resource="alarm", resource_name="*", arn_format=ArnFormat.COLON_RESOURCE_NAME
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["cloudwatch:DescribeAlarms"], resources=[alarms])
        )
        acknowledge(
            controller,
            wildcard_resource(self, alarms),
            "A rollout names the CloudWatch alarms that roll it back at run time; the controller "
            "only reads their state (DescribeAlarms) in this account and region.",
        )
        # The variant weights of the endpoints the API deploys, for deployments bound to one.
        self.endpoint_lifecycle.grant_rollout_weights(role)
        self._rollout_schedule(names, controller)
        return controller

    def _rollout_schedule(self, names: ResourceNames, controller: SluiceFunction) -> scheduler.CfnSchedule:
        """EventBridge Scheduler invokes the controller once a minute (asynchronously, so a
        failed look lands in the function's own dead-letter queue after Lambda's retries),
        assuming a role that may invoke that function and nothing else. No retry of a
        delivery and no dead-letter queue of the schedule's own, as for the batch schedules:
        the next look comes a minute later anyway."""
        role = iam.Role(
            self,
            "RolloutSchedulerRole",
            description="EventBridge Scheduler invokes the sluice rollout controller",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": self.account}},
            ),
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["lambda:InvokeFunction"], resources=[controller.invocable.function_arn]
            )
        )
        return scheduler.CfnSchedule(
            self,
            "RolloutSchedule",
            name=names.function("rollouts"),
            description="Looks at every running rollout once a minute",
            schedule_expression="rate(1 minute)",
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            state="ENABLED",
            target=scheduler.CfnSchedule.TargetProperty(
                arn=controller.invocable.function_arn,
                role_arn=role.role_arn,
                input="{}",
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_retry_attempts=0, maximum_event_age_in_seconds=60
                ),
            ),
        )

    def _websocket(
        self,
        config: SluiceConfig,
        names: ResourceNames,
        platform: FunctionPlatform,
        layers: list[PythonLayer],
        table: dynamodb.ITableV2,
        artifacts: s3.IBucket,
        endpoint_names: list[str],
    ) -> WebSocketApi:
        """The WebSocket API and its function, which predicts as the API function does: keys
        by id with its own credentials, a tenant's items only through a tenant role."""
        ws = WebSocketApi(
            self,
            "WebSocket",
            config=config,
            names=names,
            platform=platform,
            layers=layers,
            authorizer=self.authorizer_function.function,
            environment={
                "SLUICE_MIRROR": f"lambda://{self.shadow.function.function_name}",
                "SLUICE_WEBSOCKET_RATE_LIMIT": config.websocket.connection_rate_limit,
                "SLUICE_CAPTURE": f"firehose://{names.capture_stream}",
            },
        )
        role = ws.function.role
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["firehose:PutRecordBatch"], resources=[self.capture_stream.attr_arn]
            )
        )
        grant_registry(role, table, actions=["dynamodb:GetItem"], partitions=[KEY_ITEMS])
        tenant_registry = TenantRegistryRole(
            self, "WebSocketTenantRegistry", table=table, caller=role, actions=[*READ, *WRITE]
        )
        ws.function.function.add_environment("SLUICE_TENANT_ROLE_ARN", tenant_registry.role.role_arn)
        grant_objects(
            ws.function, role, artifacts, prefix=f"{ARTIFACTS_PREFIX}/", purpose="model artifacts"
        )
        grant_invoke_endpoints(ws.function, role, endpoint_names)
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["lambda:InvokeFunction"], resources=[self.shadow.function.function_arn]
            )
        )
        return ws

    def _rest_api(self, config: SluiceConfig, names: ResourceNames) -> apigw.RestApi:
        api_config = config.api
        access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=retention(config.log_retention_days),
            removal_policy=RemovalPolicy.RETAIN
            if config.storage.retain_data
            else RemovalPolicy.DESTROY,
        )
        execution_logs = api_config.execution_log_level != "OFF"
        api = apigw.RestApi(
            self,
            "Api",
            rest_api_name=names.rest_api,
            description="sluice: predictions, models, deployments and batch jobs",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            # Usage plans are chosen by the authorizer, never by a client-sent x-api-key.
            api_key_source_type=apigw.ApiKeySourceType.AUTHORIZER,
            binary_media_types=BINARY_MEDIA_TYPES,
            cloud_watch_role=False,
            deploy_options=apigw.StageOptions(
                stage_name=api_config.stage_name,
                tracing_enabled=True,
                metrics_enabled=True,
                throttling_rate_limit=api_config.rate_limit,
                throttling_burst_limit=api_config.burst_limit,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FIELDS)),
                logging_level=(
                    apigw.MethodLoggingLevel[api_config.execution_log_level]
                    if execution_logs
                    else apigw.MethodLoggingLevel.OFF
                ),
                data_trace_enabled=False,
            ),
        )
        authorizer = apigw.RequestAuthorizer(
            self,
            "KeyAuthorizer",
            handler=self.authorizer_function.function,
            # A key may come in either of two headers, and API Gateway only caches on
            # sources that are all present: no gateway cache, the function caches instead.
            identity_sources=[],
            results_cache_ttl=Duration.seconds(0),
        )
        integration = apigw.LambdaIntegration(
            self.api_function.invocable, proxy=True, timeout=API_GATEWAY_TIMEOUT
        )
        method_options = apigw.MethodOptions(authorizer=authorizer, api_key_required=True)
        api.root.add_method("ANY", integration, authorizer=authorizer, api_key_required=True)
        api.root.add_proxy(
            default_integration=integration, any_method=True, default_method_options=method_options
        )
        self._console(api, integration)
        self._gateway_responses(api)

        acknowledge(
            api,
            "AwsSolutions-APIG2",
            "Requests are validated by the API function against each model version's "
            "signature (names, dtypes, shapes, sizes) with a precise 4xx body; a gateway "
            "model would duplicate that check less precisely.",
        )
        acknowledge(
            api,
            "AwsSolutions-APIG3",
            "No WAF by default: prediction bodies (up to 6 MB) exceed what WAF's managed rule "
            "sets inspect (their body-size rule blocks over 8 KB), and callers are already "
            "authenticated and throttled per tenant. Associate a web ACL where policy asks.",
        )
        acknowledge(
            api,
            "AwsSolutions-COG4",
            "Callers are machines holding sluice API keys, checked by the REQUEST authorizer; "
            "there is no Cognito user pool.",
        )
        if not execution_logs:
            acknowledge(
                api,
                "AwsSolutions-APIG6",
                "Execution logs need the account's API Gateway CloudWatch role, a per-region "
                "setting this app should not own; structured access logs, X-Ray and the "
                "function logs cover requests. Set api.execution_log_level once the role exists.",
            )
        return api

    def _console(self, api: apigw.RestApi, integration: apigw.Integration) -> None:
        """The web console's static files (docs/console.md): `GET /console[/…]` reaches the
        API function without the key authorizer, as the page must load before its user signs
        in; the pages then call the routes above with the user's key. The function answers
        only GET and HEAD there, reads no body and serves only the built files."""
        console = api.root.add_resource("console")
        public = {"authorization_type": apigw.AuthorizationType.NONE, "api_key_required": False}
        methods = [
            console.add_method("GET", integration, **public),
            console.add_resource("{proxy+}").add_method("GET", integration, **public),
        ]
        for method in methods:
            acknowledge(
                method,
                "AwsSolutions-APIG4",
                "The console's static files are public by design (the page loads before its "
                "user signs in with an API key); they hold no data, and every API call the "
                "page makes goes through the key authorizer.",
            )

    def _gateway_responses(self, api: apigw.RestApi) -> None:
        """Gateway errors in the API's own error shape, so clients parse one format."""
        body = '{"error":"%s","message":$context.error.messageString}'
        for id, kind, status, code in (
            ("MissingKey", apigw.ResponseType.UNAUTHORIZED, "401", "unauthenticated"),
            ("BadKey", apigw.ResponseType.ACCESS_DENIED, "401", "unauthenticated"),
            ("Throttled", apigw.ResponseType.THROTTLED, "429", "throttled"),
            ("OverQuota", apigw.ResponseType.QUOTA_EXCEEDED, "429", "quota_exceeded"),
            ("TooLarge", apigw.ResponseType.REQUEST_TOO_LARGE, "413", "payload_too_large"),
            ("Timeout", apigw.ResponseType.INTEGRATION_TIMEOUT, "504", "deadline_exceeded"),
            ("Other5xx", apigw.ResponseType.DEFAULT_5_XX, None, "unavailable"),
        ):
            api.add_gateway_response(
                id,
                type=kind,
                status_code=status,
                templates={"application/json": body % code},
            )

    def _usage_plans(self, config: SluiceConfig, key_prefix: str) -> None:
        """One usage plan per configured tenant, one shared by everyone else.

        The authorizer returns `<key_prefix><tenant>` (or `<key_prefix>_default`) as the
        usage identifier; these keys only name a plan and are never accepted from clients.
        """
        plans: list[tuple[str, PlanLimits]] = [(DEFAULT_PLAN, config.api.default_plan)]
        plans += [(t.tenant, t) for t in config.api.tenants]
        for tenant, limits in plans:
            plan = self.rest_api.add_usage_plan(
                f"Plan-{tenant}",
                name=f"{config.name}-{tenant}",
                description=f"Throttling and quota for tenant {tenant}"
                if tenant != DEFAULT_PLAN
                else "Throttling and quota for tenants without a plan of their own",
                throttle=apigw.ThrottleSettings(
                    rate_limit=limits.rate_limit, burst_limit=limits.burst_limit
                ),
                quota=apigw.QuotaSettings(
                    limit=limits.quota, period=apigw.Period[limits.quota_period]
                )
                if limits.quota
                else None,
            )
            plan.add_api_stage(stage=self.rest_api.deployment_stage)
            key = self.rest_api.add_api_key(
                f"PlanKey-{tenant}",
                api_key_name=f"{config.name}-{tenant}",
                value=f"{key_prefix}{tenant}",
            )
            plan.add_api_key(key)
