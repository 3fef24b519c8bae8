"""Batch inference: a file under inbox/ starts a job; Step Functions scores it chunk by chunk.

S3 (object created under inbox/) -> on_upload -> the state machine (see BatchWorkflow):
Plan -> distributed Map of Score -> Finalize, with MarkFailed on any error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict, Unpack

from aws_cdk import Duration
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3n
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.config import BatchConfig, ConcurrencyConfig
from infra.constructs.batch_workflow import BatchWorkflow
from infra.constructs.functions import FunctionGroup, SluiceFunction
from infra.constructs.grants import (
    executions_arn,
    grant_invoke_endpoints,
    grant_objects,
    scheduler_principal,
    state_machine_arn,
)
from infra.constructs.precomputed import PUBLISH, READ_ANSWERS, WRITE_ANSWERS, PrecomputedAnswers
from infra.constructs.registry_access import READ, WRITE, grant_registry
from infra.nag import acknowledge, wildcard_resource
from infra.naming import INBOX_PREFIX, OUTBOX_PREFIX, STORE_PREFIX, WORK_PREFIX
from infra.stacks.base import FunctionStack

MAP_RESULTS_PREFIX = f"{WORK_PREFIX}map-results"
# The custom resource CDK adds to manage a bucket's event notifications (one per stack).
_NOTIFICATIONS_HANDLER_ID = "BucketNotificationsHandler050a0587b7544547bf325f094a3db834"


class TaskOptions(TypedDict):
    """What each batch task chooses for itself."""

    memory_mb: int
    timeout_s: int
    description: str
    environment: NotRequired[Mapping[str, str]]
    invoked_async: NotRequired[bool]


class BatchStack(FunctionStack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        batch: BatchConfig,
        concurrency: ConcurrencyConfig,
        **kwargs: Any,
    ) -> None:
        """`kwargs`: FunctionStack's (names, platform, endpoint_names) and Stack's."""
        super().__init__(scope, id, **kwargs)
        names, platform, storage = self.names, self.platform, self.storage
        self._concurrency = concurrency
        # Sources only: bytecode would add 17 MB to the core layer, and the batch functions'
        # code and layers (249 MB on Python 3.13, x86_64) would pass Lambda's 262 MB. A batch cold start is paid
        # once per chunk of thousands of rows; the request functions (api.py) get bytecode.
        layers = [platform.core_layer(self, bytecode=False), platform.batch_layer(self)]
        bucket, self._table = storage.batch, storage.table
        self._functions = FunctionGroup(
            platform, layers, environment={"SLUICE_BATCH_BUCKET": bucket.bucket_name}
        )

        plan = self._task(
            "Plan",
            "plan",
            memory_mb=batch.plan_memory_mb,
            timeout_s=batch.plan_timeout_s,
            description="Splits a batch input into chunks and writes the chunk list",
        )
        grant_objects(plan, bucket, prefix=INBOX_PREFIX, versions=True, purpose="batch inputs")
        grant_objects(
            plan, bucket, prefix=WORK_PREFIX, write=True, purpose="chunk lists"
        )
        # Plan clears what an earlier job left in the output folder (a job's folder holds
        # one job's results).
        grant_objects(
            plan, bucket, prefix=OUTBOX_PREFIX, delete=True, purpose="earlier results"
        )

        score = self._task(
            "Score",
            "score",
            memory_mb=batch.score_memory_mb,
            timeout_s=batch.score_timeout_s,
            description="Scores one chunk: read, infer, write a part file",
        )
        grant_objects(score, bucket, prefix=INBOX_PREFIX, versions=True, purpose="batch inputs")
        grant_objects(
            score,
            bucket,
            prefix=OUTBOX_PREFIX,
            write=True,
            delete=True,  # a chunk that finished after its job was cancelled takes its files back
            purpose="part and error files",
        )
        grant_objects(
            score, storage.artifacts, prefix=STORE_PREFIX, purpose="model artifacts"
        )
        grant_invoke_endpoints(score, self.endpoint_names)
        self.function_steps.grant_to(score)
        # Precomputed answers: Plan checks a job's `publish` can be served, Score reads (for
        # precomputed nodes) and writes a job's answers, Finalize points the table at them.
        precomputed = PrecomputedAnswers(storage.precomputed)
        precomputed.tell(plan)
        precomputed.grant(score, [*READ_ANSWERS, *WRITE_ANSWERS])

        finalize = self._task(
            "Finalize",
            "finalize",
            memory_mb=1024,
            timeout_s=300,
            description="Counts the parts, writes the manifest, marks the job done",
        )
        grant_objects(finalize, bucket, prefix=WORK_PREFIX, purpose="map results")
        grant_objects(
            finalize,
            bucket,
            prefix=OUTBOX_PREFIX,
            write=True,
            delete=True,  # a job cancelled while Finalize wrote its _SUCCESS gets it taken back
            purpose="manifests",
        )
        precomputed.grant(finalize, PUBLISH)
        self.catalog_database = self._catalog(batch.catalog_database, finalize)

        mark_failed = self._failure_task(
            "MarkFailed", "mark-failed", description="Records why a batch job failed"
        )

        # The job record follows its execution's end (an EventBridge rule of BatchWorkflow):
        # a job left unfinished by an execution that timed out, was stopped from outside, or
        # failed where MarkFailed could not record it is FAILED, saying why.
        execution_ended = self._failure_task(
            "ExecutionEnded",
            "execution-ended",
            description="Marks FAILED a batch job its ended execution left unfinished",
            invoked_async=True,
        )
        # A job that ends without success after Finalize published is withdrawn from its table.
        for ends in (mark_failed, execution_ended):
            precomputed.grant(ends, PUBLISH)

        # Executions started with a job specification (from the console, the AWS CLI, an
        # EventBridge rule or schedule, a parent state machine): the job is created here.
        # Registry access only: what it checks is names and prefixes, no object is read.
        # A schedule's run asks Step Functions whether the run going is still alive (its
        # execution may have timed out or been stopped, which skips MarkFailed): the state
        # machine by name, as the API names it, since it refers to this function.
        create_job = self._task(
            "CreateJob",
            "create-job",
            memory_mb=512,
            timeout_s=60,
            description="Creates the job an execution started with a job specification runs",
            environment={
                "SLUICE_ORCHESTRATOR": f"stepfunctions://{state_machine_arn(self, names.state_machine)}",
            },
        )
        executions = executions_arn(self, names.state_machine)
        create_job.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["states:DescribeExecution"], resources=[executions])
        )
        acknowledge(
            create_job,
            wildcard_resource(self, executions),
            "A scheduled run describes the execution of the run still going, named after its "
            "job at run time; only executions of the sluice batch state machine, only DescribeExecution.",
        )

        self.workflow = BatchWorkflow(
            self,
            "Workflow",
            state_machine_name=names.state_machine,
            create_job=create_job.function,
            plan=plan.function,
            score=score.function,
            finalize=finalize.function,
            mark_failed=mark_failed.function,
            execution_ended=execution_ended.function,
            work_bucket=bucket,
            work_prefix=WORK_PREFIX,
            map_results_prefix=MAP_RESULTS_PREFIX,
            max_concurrency=batch.max_concurrency,
            tolerated_failure_percentage=batch.tolerated_failure_percentage,
            child_execution_type=sfn.StateMachineType[batch.child_execution_type],
            timeout=Duration.hours(batch.execution_timeout_hours),
            logs=platform.logs,
        )
        self.state_machine = self.workflow.state_machine
        self._schedules()

        self.on_upload = self._task(
            "OnUpload",
            "on-upload",
            memory_mb=512,
            timeout_s=60,
            description="Starts a batch job for a file put under inbox/",
            environment={
                "SLUICE_ORCHESTRATOR": f"stepfunctions://{self.state_machine.state_machine_arn}",
            },
            invoked_async=True,
        )
        grant_objects(
            self.on_upload, bucket, prefix=INBOX_PREFIX, versions=True, purpose="batch inputs"
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

    def _task(self, id: str, purpose: str, **options: Unpack[TaskOptions]) -> SluiceFunction:
        """`sluice.handlers.batch.<purpose>` as `<name>-batch-<purpose>`, with its reserved
        concurrency, reading and writing tenants' registry items."""
        fn = self._functions.function(
            self,
            id,
            function_name=self.names.function(f"batch-{purpose}"),
            handler=f"sluice.handlers.batch.{purpose.replace('-', '_')}",
            reserved_concurrency=self._concurrency.reserved(f"batch-{purpose}"),
            **options,
        )
        grant_registry(fn.role, self._table, actions=[*READ, *WRITE])
        return fn

    def _failure_task(
        self, id: str, purpose: str, *, description: str, invoked_async: bool = False
    ) -> SluiceFunction:
        """A task that records a job FAILED: small and quick, it writes the job's failure
        report under outbox/ and may take back what the job wrote there."""
        fn = self._task(
            id,
            purpose,
            memory_mb=512,
            timeout_s=60,
            description=description,
            invoked_async=invoked_async,
        )
        grant_objects(
            fn,
            self.storage.batch,
            prefix=OUTBOX_PREFIX,
            write=True,
            delete=True,  # a failed job leaves no _SUCCESS
            purpose="failure reports",
        )
        # The report lists the objects a prefix or manifest job read: the plan's chunk list,
        # kept under work/ (read only).
        grant_objects(fn, self.storage.batch, prefix=WORK_PREFIX, purpose="the chunk list a failure report names")
        return fn

    def _catalog(self, database: str, finalize: SluiceFunction) -> glue.CfnDatabase:
        """Queryable results: the one Glue database Finalize publishes job outputs to, as
        partitions of tables it creates on first use. Finalize may touch that database's
        tables and nothing else in the catalog."""
        created = glue.CfnDatabase(
            self,
            "CatalogDatabase",
            catalog_id=self.account,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=database,
                description="sluice batch outputs: one partition (job=<id>) per successful job",
            ),
        )
        finalize.function.add_environment("SLUICE_CATALOG_DATABASE", database)
        tables = self.format_arn(service="glue", resource="table", resource_name=f"{database}/*")
        finalize.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "glue:GetTable",
                    "glue:CreateTable",
                    "glue:UpdateTable",  # a table a job of no rows made gets its columns later
                    "glue:GetPartition",
                    "glue:CreatePartition",
                    "glue:BatchCreatePartition",
                ],
                resources=[
                    self.format_arn(service="glue", resource="catalog"),
                    self.format_arn(service="glue", resource="database", resource_name=database),
                    tables,
                ],
            )
        )
        acknowledge(
            finalize.role,
            wildcard_resource(self, tables),
            "Finalize creates tables on first use, named after each tenant's table, and adds "
            "partitions to them: only tables of sluice's own batch database.",
        )
        return created

    def _schedules(self) -> None:
        """Batch schedules: the API creates and removes EventBridge Scheduler schedules in this
        group at run time; each one assumes this role, which may start this state machine and
        do nothing else, and only on behalf of schedules of this account."""
        self.schedule_group = scheduler.CfnScheduleGroup(
            self, "ScheduleGroup", name=self.names.schedule_group
        )
        self.scheduler_role = iam.Role(
            self,
            "SchedulerRole",
            role_name=self.names.scheduler_role,
            description="EventBridge Scheduler starts the sluice batch state machine",
            assumed_by=scheduler_principal(self),
        )
        self.state_machine.grant_start_execution(self.scheduler_role)

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
