"""Batch inference: a file under inbox/ starts a job; Step Functions scores it chunk by chunk.

S3 (object created under inbox/) -> on_upload -> the state machine (see BatchWorkflow):
Plan -> distributed Map of Score -> Finalize, with MarkFailed on any error.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3n
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.config import SluiceConfig
from infra.constructs.batch_workflow import BatchWorkflow
from infra.constructs.functions import FunctionPlatform, SluiceFunction
from infra.constructs.grants import grant_invoke_endpoints, grant_objects
from infra.constructs.logs import retention
from infra.constructs.registry_access import READ, WRITE, grant_registry
from infra.nag import acknowledge, wildcard_resource
from infra.naming import ResourceNames
from infra.stacks.storage import ARTIFACTS_PREFIX, INBOX_PREFIX, OUTBOX_PREFIX, WORK_PREFIX

MAP_RESULTS_PREFIX = f"{WORK_PREFIX}map-results"
# The custom resource CDK adds to manage a bucket's event notifications (one per stack).
_NOTIFICATIONS_HANDLER_ID = "BucketNotificationsHandler050a0587b7544547bf325f094a3db834"


class BatchStack(Stack):
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
        batch = config.batch
        # Sources only: bytecode would add 17 MB to the core layer, and the batch functions'
        # code and layers (243 MB) would pass Lambda's 262 MB. A batch cold start is paid
        # once per chunk of thousands of rows; the request functions (api.py) get bytecode.
        core = platform.layer(
            self,
            "CoreLayer",
            name="core",
            description="sluice core dependencies",
            bytecode=False,
        )
        arrow = platform.layer(
            self,
            "BatchLayer",
            name="batch",
            description="sluice batch dependencies",
            bytecode=False,
        )
        layers = [core, arrow]
        bucket = s3.Bucket.from_bucket_name(self, "BatchBucket", names.batch_bucket)
        artifacts = s3.Bucket.from_bucket_name(self, "ArtifactsBucket", names.artifacts_bucket)
        table = dynamodb.TableV2.from_table_name(self, "RegistryTable", names.table)
        endpoint_names = [names.endpoint(e.name) for e in config.endpoints]
        environment = {"SLUICE_BATCH_BUCKET": bucket.bucket_name}

        def task(
            id: str, purpose: str, *, memory_mb: int, timeout_s: int, description: str
        ) -> SluiceFunction:
            fn = SluiceFunction(
                self,
                id,
                function_name=names.function(f"batch-{purpose}"),
                handler=f"sluice.handlers.batch.{purpose.replace('-', '_')}",
                description=description,
                platform=platform,
                layers=layers,
                memory_mb=memory_mb,
                timeout=Duration.seconds(timeout_s),
                environment=environment,
                reserved_concurrency=config.concurrency.reserved(f"batch-{purpose}"),
            )
            grant_registry(fn.role, table, actions=[*READ, *WRITE])
            return fn

        plan = task(
            "Plan",
            "plan",
            memory_mb=batch.plan_memory_mb,
            timeout_s=batch.plan_timeout_s,
            description="Splits a batch input into chunks and writes the chunk list",
        )
        grant_objects(plan, plan.role, bucket, prefix=INBOX_PREFIX, purpose="batch inputs")
        grant_objects(
            plan, plan.role, bucket, prefix=WORK_PREFIX, write=True, purpose="chunk lists"
        )
        # Plan clears what an earlier job left in the output folder (a job's folder holds
        # one job's results).
        grant_objects(
            plan, plan.role, bucket, prefix=OUTBOX_PREFIX, delete=True, purpose="earlier results"
        )

        score = task(
            "Score",
            "score",
            memory_mb=batch.score_memory_mb,
            timeout_s=batch.score_timeout_s,
            description="Scores one chunk: read, infer, write a part file",
        )
        grant_objects(score, score.role, bucket, prefix=INBOX_PREFIX, purpose="batch inputs")
        grant_objects(
            score,
            score.role,
            bucket,
            prefix=OUTBOX_PREFIX,
            write=True,
            delete=True,  # a chunk that finished after its job was cancelled takes its files back
            purpose="part and error files",
        )
        grant_objects(
            score, score.role, artifacts, prefix=f"{ARTIFACTS_PREFIX}/", purpose="model artifacts"
        )
        grant_invoke_endpoints(score, score.role, endpoint_names)

        finalize = task(
            "Finalize",
            "finalize",
            memory_mb=1024,
            timeout_s=300,
            description="Counts the parts, writes the manifest, marks the job done",
        )
        grant_objects(finalize, finalize.role, bucket, prefix=WORK_PREFIX, purpose="map results")
        grant_objects(
            finalize, finalize.role, bucket, prefix=OUTBOX_PREFIX, write=True, purpose="manifests"
        )

        # Queryable results: the one Glue database Finalize publishes job outputs to, as
        # partitions of tables it creates on first use. Finalize may touch that database's
        # tables and nothing else in the catalog.
        self.catalog_database = glue.CfnDatabase(
            self,
            "CatalogDatabase",
            catalog_id=self.account,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=batch.catalog_database,
                description="sluice batch outputs: one partition (job=<id>) per successful job",
            ),
        )
        finalize.function.add_environment("SLUICE_CATALOG_DATABASE", batch.catalog_database)
        catalog_tables = self.format_arn(
            service="glue", resource="table", resource_name=f"{batch.catalog_database}/*"
        )
        finalize.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "glue:GetTable",
                    "glue:CreateTable",
                    "glue:GetPartition",
                    "glue:CreatePartition",
                    "glue:BatchCreatePartition",
                ],
                resources=[
                    self.format_arn(service="glue", resource="catalog"),
                    self.format_arn(
                        service="glue", resource="database", resource_name=batch.catalog_database
                    ),
                    catalog_tables,
                ],
            )
        )
        acknowledge(
            finalize.role,
            wildcard_resource(self, catalog_tables),
            "Finalize creates tables on first use, named after each tenant's table, and adds "
            "partitions to them: only tables of sluice's own batch database.",
        )

        mark_failed = task(
            "MarkFailed",
            "mark-failed",
            memory_mb=512,
            timeout_s=60,
            description="Records why a batch job failed",
        )
        grant_objects(
            mark_failed,
            mark_failed.role,
            bucket,
            prefix=OUTBOX_PREFIX,
            write=True,
            delete=True,  # a failed job leaves no _SUCCESS
            purpose="failure reports",
        )

        # Executions started with a job specification (from the console, the AWS CLI, an
        # EventBridge rule or schedule, a parent state machine): the job is created here.
        # Registry access only: what it checks is names and prefixes, no object is read.
        create_job = SluiceFunction(
            self,
            "CreateJob",
            function_name=names.function("batch-create-job"),
            handler="sluice.handlers.batch.create_job",
            description="Creates the job an execution started with a job specification runs",
            platform=platform,
            layers=layers,
            memory_mb=512,
            timeout=Duration.seconds(60),
            environment=environment,
            reserved_concurrency=config.concurrency.batch_create_job,
        )
        grant_registry(create_job.role, table, actions=[*READ, *WRITE])

        self.workflow = BatchWorkflow(
            self,
            "Workflow",
            state_machine_name=names.state_machine,
            create_job=create_job.function,
            plan=plan.function,
            score=score.function,
            finalize=finalize.function,
            mark_failed=mark_failed.function,
            work_bucket=bucket,
            map_results_prefix=MAP_RESULTS_PREFIX,
            max_concurrency=batch.max_concurrency,
            tolerated_failure_percentage=batch.tolerated_failure_percentage,
            child_execution_type=sfn.StateMachineType[batch.child_execution_type],
            timeout=Duration.hours(batch.execution_timeout_hours),
            log_retention=retention(config.log_retention_days),
            retain_logs=config.storage.retain_data,
        )
        self.state_machine = self.workflow.state_machine

        # Batch schedules: the API creates and removes EventBridge Scheduler schedules in this
        # group at run time; each one assumes this role, which may start this state machine
        # and do nothing else, and only on behalf of schedules of this account.
        self.schedule_group = scheduler.CfnScheduleGroup(
            self, "ScheduleGroup", name=names.schedule_group
        )
        self.scheduler_role = iam.Role(
            self,
            "SchedulerRole",
            role_name=names.scheduler_role,
            description="EventBridge Scheduler starts the sluice batch state machine",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": self.account}},
            ),
        )
        self.state_machine.grant_start_execution(self.scheduler_role)

        self.on_upload = SluiceFunction(
            self,
            "OnUpload",
            function_name=names.function("batch-on-upload"),
            handler="sluice.handlers.batch.on_upload",
            description="Starts a batch job for a file put under inbox/",
            platform=platform,
            layers=layers,
            memory_mb=512,
            timeout=Duration.seconds(60),
            environment={
                **environment,
                "SLUICE_ORCHESTRATOR": f"stepfunctions://{self.state_machine.state_machine_arn}",
            },
            invoked_async=True,
            reserved_concurrency=config.concurrency.batch_on_upload,
        )
        grant_registry(self.on_upload.role, table, actions=[*READ, *WRITE])
        grant_objects(
            self.on_upload, self.on_upload.role, bucket, prefix=INBOX_PREFIX, purpose="batch inputs"
        )
        self.state_machine.grant_start_execution(self.on_upload.function)

        # The bucket lives in the storage stack; importing it by name puts the notification
        # (a CDK custom resource) here, next to the function, with no cross-stack cycle.
        bucket.add_event_notification(
            s3.EventType.OBJECT_CREATED,
            s3n.LambdaDestination(self.on_upload.function),
            s3.NotificationKeyFilter(prefix=INBOX_PREFIX),
        )
        self._acknowledge_notifications_handler()

    def _acknowledge_notifications_handler(self) -> None:
        handler = self.node.try_find_child(_NOTIFICATIONS_HANDLER_ID)
        if handler is None:
            return
        acknowledge(
            handler,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AWSLambdaBasicExecutionRole]",
            "CDK's own custom resource that sets the bucket notification at deploy time; "
            "its role and managed logging policy are fixed by CDK and it never runs on requests.",
        )
        acknowledge(
            handler,
            "AwsSolutions-IAM5[Resource::*]",
            "CDK's bucket-notification custom resource needs s3:PutBucketNotification; CDK "
            "scopes it to '*' and it runs only during deployment.",
        )
