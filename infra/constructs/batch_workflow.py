"""The batch state machine: Plan -> Map (distributed, over S3) -> Finalize, or MarkFailed.

The data each state sees (JSONPath; `result_path`s keep the execution input throughout):

- execution input: `{"job_id", "tenant"}` of a job that exists (what `on_upload` and the API
  start it with), or a job specification (`{"tenant", "deployment", "input_uri", …}`, see
  docs/batch.md): the Choice `JobOrSpec` sends a specification to CreateJob, which creates the
  job (once per execution) and replaces the state with its `{"job_id", "tenant"}`; a
  specification it refuses fails the execution (`SpecRejected`) with the reason. For a
  schedule's run it may answer `{"skipped": …}` (the output, and the execution succeeds) or the
  spec with `queued_behind` (WaitForRun, a minute, then CreateJob again).
- Plan returns `{"job": {…}, "chunks": {"bucket": …, "key": …}}` -> `$.plan`; the key names a
  JSON array of chunk descriptions that Plan wrote (Step Functions caps state at 256 KiB,
  so the list itself never travels through the state).
- Map reads that array with an S3 ItemReader and calls Score once per chunk with
  `{"job": $.plan.job, "chunk": <one item>}` (retried on throttling and on the handler's
  transient errors); child results go to S3 (ResultWriter), and
  `$.map` holds where (`ResultWriterDetails.Bucket/Key`, the manifest).
- Finalize gets the whole state and returns the job's summary -> `$.result`, which is the
  execution's output (status, counts, output and manifest URIs).
- Any error in Plan, Map or Finalize lands in `$.error` (`Error`, `Cause`); MarkFailed gets
  the whole state, then the execution fails with that error and cause.

What no state records (the whole execution timed out, was stopped from outside sluice, or
MarkFailed itself failed) its end does: an EventBridge rule sends each end of an execution of
this state machine to `execution_ended`, which marks FAILED a job left unfinished.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from infra.constructs.logs import LogRetention
from infra.nag import acknowledge, policy_wildcards

# Worth retrying: Lambda throttled the invoke, or the Lambda service itself failed.
TRANSIENT_LAMBDA_ERRORS = [
    "Lambda.TooManyRequestsException",
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.ClientExecutionTimeoutException",
]


# Worth retrying when Score raises them: the `errorType`s Lambda reports for the exceptions
# `sluice.batch.orchestrators.TRANSIENT_ERRORS` names (unreadable bytes, an unavailable backend
# or store, a backend error, a timeout); Step Functions matches on the class name. Anything
# else Score raises (the input gone or replaced, access denied) fails the chunk at once.
SCORE_TRANSIENT_ERRORS = ["ChunkUnreadable", "Unavailable", "BackendError", "DeadlineExceeded"]


def _with_retries(task: tasks.LambdaInvoke, *, attempts: int) -> tasks.LambdaInvoke:
    task.add_retry(
        errors=TRANSIENT_LAMBDA_ERRORS,
        interval=Duration.seconds(2),
        max_attempts=attempts,
        backoff_rate=2.0,
        max_delay=Duration.seconds(60),
        jitter_strategy=sfn.JitterType.FULL,
    )
    return task


class _ChunkListReader(sfn.S3JsonItemReader):
    """Reads the chunk list Plan wrote, by the bucket and key in the state. CDK grants such a
    reader nothing (its bucket is known at run time); it may read under `objects` alone."""

    def __init__(self, *, objects: str, bucket_name_path: str, key: str) -> None:
        super().__init__(bucket_name_path=bucket_name_path, key=key)
        self._objects = objects

    def provide_policy_statements(self) -> list[iam.PolicyStatement]:
        return [iam.PolicyStatement(actions=["s3:GetObject"], resources=[self._objects])]


class _PrefixResultWriter(sfn.ResultWriterV2):
    """Writes child results under `prefix`. CDK grants a result writer every key of its
    bucket (the inbox, outbox, capture and monitor of every tenant); this one, the prefix's."""

    def __init__(self, *, bucket: s3.IBucket, prefix: str) -> None:
        super().__init__(bucket=bucket, prefix=prefix)
        self._objects = bucket.arn_for_objects(f"{prefix}/*")

    def provide_policy_statements(self) -> list[iam.PolicyStatement]:
        # What Step Functions asks of a ResultWriter's role (a multipart upload of the results).
        actions = ["s3:PutObject", "s3:GetObject", "s3:ListMultipartUploadParts", "s3:AbortMultipartUpload"]
        return [iam.PolicyStatement(actions=actions, resources=[self._objects])]


class BatchWorkflow(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        state_machine_name: str,
        create_job: lambda_.IFunction,
        plan: lambda_.IFunction,
        score: lambda_.IFunction,
        finalize: lambda_.IFunction,
        mark_failed: lambda_.IFunction,
        execution_ended: lambda_.IFunction,
        work_bucket: s3.IBucket,
        work_prefix: str,
        map_results_prefix: str,
        max_concurrency: int,
        tolerated_failure_percentage: float,
        child_execution_type: sfn.StateMachineType,
        timeout: Duration,
        logs: LogRetention,
    ) -> None:
        super().__init__(scope, id)

        create_task = _with_retries(
            tasks.LambdaInvoke(
                self,
                "CreateJob",
                lambda_function=create_job,
                payload=sfn.TaskInput.from_object(
                    {
                        "spec": sfn.JsonPath.object_at("$"),
                        "execution": sfn.JsonPath.execution_id,
                    }
                ),
                payload_response_only=True,
                retry_on_service_exceptions=False,
                result_path="$",
            ),
            attempts=6,
        )
        create_task.add_catch(
            sfn.Fail(self, "SpecRejected", error_path="$.error.Error", cause_path="$.error.Cause"),
            errors=[sfn.Errors.ALL],
            result_path="$.error",
        )
        plan_task = _with_retries(
            tasks.LambdaInvoke(
                self,
                "Plan",
                lambda_function=plan,
                payload_response_only=True,
                retry_on_service_exceptions=False,
                result_path="$.plan",
            ),
            attempts=6,
        )
        score_task = _with_retries(
            tasks.LambdaInvoke(
                self,
                "Score",
                lambda_function=score,
                payload_response_only=True,
                retry_on_service_exceptions=False,
            ),
            attempts=8,
        )
        # After the Lambda service's own errors (above, matched first): the chunk's own
        # transient failures, fewer times and further apart, since each try rescores a chunk.
        score_task.add_retry(
            errors=SCORE_TRANSIENT_ERRORS,
            interval=Duration.seconds(5),
            max_attempts=3,
            backoff_rate=2.0,
            max_delay=Duration.seconds(60),
            jitter_strategy=sfn.JitterType.FULL,
        )
        chunks = sfn.DistributedMap(
            self,
            "ScoreChunks",
            item_reader=_ChunkListReader(
                objects=work_bucket.arn_for_objects(f"{work_prefix}*"),
                bucket_name_path=sfn.JsonPath.string_at("$.plan.chunks.bucket"),
                key=sfn.JsonPath.string_at("$.plan.chunks.key"),
            ),
            item_selector={
                "job": sfn.JsonPath.object_at("$.plan.job"),
                "chunk": sfn.JsonPath.object_at("$$.Map.Item.Value"),
            },
            max_concurrency=max_concurrency,
            tolerated_failure_percentage=tolerated_failure_percentage,
            map_execution_type=child_execution_type,
            result_writer_v2=_PrefixResultWriter(bucket=work_bucket, prefix=map_results_prefix),
            result_path="$.map",
        )
        chunks.item_processor(score_task)
        finalize_task = _with_retries(
            tasks.LambdaInvoke(
                self,
                "Finalize",
                lambda_function=finalize,
                payload_response_only=True,
                retry_on_service_exceptions=False,
                result_path="$.result",
                output_path="$.result",
            ),
            attempts=6,
        )

        mark_failed_task = _with_retries(
            tasks.LambdaInvoke(
                self,
                "MarkFailed",
                lambda_function=mark_failed,
                payload_response_only=True,
                retry_on_service_exceptions=False,
                result_path=sfn.JsonPath.DISCARD,
            ),
            attempts=6,
        )
        failed = mark_failed_task.next(
            sfn.Fail(self, "JobFailed", error_path="$.error.Error", cause_path="$.error.Cause")
        )
        plan_task.next(chunks).next(finalize_task)
        # CreateJob answers with the job (-> Plan), a scheduled run skipped (-> its reason as
        # the output), or a run queued behind one still going (-> wait, then ask again).
        start = sfn.Choice(self, "JobOrSpec")
        start.when(sfn.Condition.is_present("$.job_id"), plan_task)
        start.when(
            sfn.Condition.is_present("$.skipped"),
            sfn.Pass(self, "RunSkipped", output_path="$.skipped"),
        )
        start.when(
            sfn.Condition.is_present("$.queued_behind"),
            sfn.Wait(self, "WaitForRun", time=sfn.WaitTime.duration(Duration.minutes(1))).next(
                create_task
            ),
        )
        start.otherwise(create_task)
        create_task.next(start)
        for step in (plan_task, chunks, finalize_task):
            step.add_catch(failed, errors=[sfn.Errors.ALL], result_path="$.error")

        self.log_group = logs.group(self, "Logs")
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=state_machine_name,
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_chainable(start),
            timeout=timeout,
            tracing_enabled=True,
            logs=sfn.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True
            ),
        )
        self._acknowledge_wildcards()
        self.ended_rule = events.Rule(
            self,
            "ExecutionEnded",
            description="Each end of a batch execution, for its job's record to follow",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={
                    "stateMachineArn": [self.state_machine.state_machine_arn],
                    "status": ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"],
                },
            ),
            targets=[targets.LambdaFunction(execution_ended)],
        )
        acknowledge(
            self.ended_rule,
            "Serverless-EventBusDLQ",
            "Step Functions sends these events best effort, so a job's record never depends on "
            "them alone: a read that decides on a job asks Step Functions about its execution. "
            "The target function keeps failed invocations in its own dead-letter queue, and "
            "EventBridge retries a delivery for 24 hours.",
        )

    def _acknowledge_wildcards(self) -> None:
        """Each wildcard CDK writes into the state machine's policies, with its reason.

        Read from the policies themselves (their ARNs depend on how the stack's environment
        resolves); a wildcard of a kind not listed here fails synthesis instead of being
        waved through.
        """
        machine = self.state_machine
        for finding in policy_wildcards(machine.node.find_child("DistributedMapPolicy")):
            acknowledge(
                machine,
                finding,
                "The distributed Map starts, describes and stops child executions of this "
                "same state machine, whose execution ids Step Functions generates.",
            )
        for finding in policy_wildcards(machine.role.node.find_child("DefaultPolicy")):
            if finding.endswith("[Resource::*]"):
                reason = (
                    "CloudWatch Logs delivery (logs:CreateLogDelivery and the like) and X-Ray "
                    "(PutTraceSegments, GetSamplingRules, …) have no resource-level "
                    "permissions; CDK grants exactly those for ALL-level logging and tracing."
                )
            elif ":s3:::" in finding and finding.endswith("/work/*]"):
                reason = (
                    "The distributed Map reads the chunk list Plan wrote, "
                    "work/<tenant>/<job>/chunks.json in the batch bucket; its key is per job and "
                    "comes from Plan's output, and the role may only read (GetObject) under work/."
                )
            elif ":s3:::" in finding and finding.endswith("/work/map-results/*]"):
                reason = (
                    "The distributed Map writes child results under work/map-results/ in the "
                    "batch bucket, one folder per execution that Step Functions names; nowhere else."
                )
            elif finding.endswith(".Arn>:*]"):
                reason = (
                    "A Lambda task may invoke its function by version or alias (`:*`) next "
                    "to the unqualified ARN, as CDK grants it; it is the same function."
                )
            else:
                raise ValueError(f"{machine.node.path}: unexpected wildcard {finding}")
            acknowledge(machine.role, finding, reason)
