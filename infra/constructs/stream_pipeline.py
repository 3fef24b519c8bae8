"""One stream: a source (an SQS queue, a Kinesis stream, an MSK or self-managed Kafka topic), a
function running `sluice.handlers.stream.handler` bound to one tenant's deployment, an event
source mapping with partial batch responses, a dead-letter queue, and the destination its
predictions go to.

Failed records reach the dead-letter queue: through the created queue's redrive policy for
SQS, through the mapping's on-failure destination for Kinesis and Kafka. The function's
registry access is confined to its tenant's partitions. What the observability stack watches
of it (`StreamWatch`): how far behind it is, its dead-letter queue, its error rate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import StreamConfig
from infra.constructs.capture import CaptureTarget
from infra.constructs.functions import FunctionPlatform, SluiceFunction
from infra.constructs.grants import FunctionSteps, grant_invoke_endpoints, grant_objects
from infra.constructs.precomputed import READ_ANSWERS, PrecomputedAnswers
from infra.constructs.python_layer import PythonLayer
from infra.constructs.queues import encrypted_queue
from infra.constructs.registry_access import READ, WRITE, grant_registry, tenant_partitions
from infra.nag import acknowledge
from infra.naming import OUTBOX_PREFIX, STORE_PREFIX

HANDLER = "sluice.handlers.stream.handler"
DLQ_REASON = (
    "This queue is the stream's dead-letter queue: records land here after their retries, for "
    "inspection and redrive; a dead-letter queue behind it would only move them."
)
OUTPUT_QUEUE_REASON = (
    "The predictions queue is read by the tenant's consumers, who own its failure handling; "
    "sluice only sends to it."
)
KINESIS_KEY_REASON = (
    "Encrypted with the AWS-managed key (aws/kinesis): no key policy to keep; producers and "
    "consumers use it through Kinesis."
)


def stream_s3_prefix(stream: StreamConfig) -> str:
    return stream.destination.prefix or f"{OUTBOX_PREFIX}{stream.tenant}/streams/{stream.name}/"


def has_dead_letter_queue(stream: StreamConfig) -> bool:
    """Every stream has one except an SQS queue the tenant brings: its own redrive policy says
    where its failed messages go (a mapping cannot redirect them)."""
    return not (stream.source.kind == "sqs" and stream.source.arn)


@dataclass(frozen=True)
class StreamWatch:
    """What the observability stack watches of one stream, by name."""

    name: str
    function_name: str
    source_kind: str
    source_queue: str  # the SQS source queue (sqs only)
    dead_letter_queue: str | None
    iterator_age_alarm_s: int
    offset_lag_alarm: int


def _acknowledge_all(scope: Construct, rule_ids: Sequence[str], reason: str) -> None:
    for rule_id in rule_ids:
        acknowledge(scope, rule_id, reason)


def _kinesis_stream(scope: Construct, id: str, **props: object) -> kinesis.Stream:
    created = kinesis.Stream(scope, id, encryption=kinesis.StreamEncryption.MANAGED, **props)  # type: ignore[arg-type]
    acknowledge(created, "AwsSolutions-KDS3", KINESIS_KEY_REASON)
    return created


class StreamPipeline(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        stream: StreamConfig,
        function_name: str,
        source_queue_name: str,
        dead_letter_queue_name: str,
        platform: FunctionPlatform,
        layers: Sequence[PythonLayer],
        table: dynamodb.ITableV2,
        artifacts: s3.IBucket,
        batch_bucket: s3.IBucket,
        endpoint_names: Sequence[str],
        function_steps: FunctionSteps,
        capture: CaptureTarget,
        precomputed: PrecomputedAnswers,
    ) -> None:
        """`source_queue_name`: the created SQS source queue's (or the tenant's queue's);
        `dead_letter_queue_name`: the dead-letter queue's, where the stream has one."""
        super().__init__(scope, id)
        self._stream = stream
        self._source_name = source_queue_name
        self._batch_bucket = batch_bucket
        dlq = None
        if has_dead_letter_queue(stream):
            dlq = encrypted_queue(
                self,
                "DeadLetters",
                fifo=stream.source.is_fifo,
                queue_name=dead_letter_queue_name,
                retention_period=Duration.days(14),
            )
            _acknowledge_all(dlq, ("AwsSolutions-SQS3", "Serverless-SQSRedrivePolicy"), DLQ_REASON)
        grant_destination, target = self._destination()
        # One binding per function: whatever source invokes it, this tenant and deployment.
        binding = {
            "tenant": stream.tenant,
            "deployment": stream.deployment,
            "destination": {"kind": stream.destination.kind, "target": target},
        }
        self.function = fn = SluiceFunction(
            self,
            "Handler",
            function_name=function_name,
            handler=HANDLER,
            description=f"Scores {stream.source.kind} records for {stream.tenant}/{stream.deployment}",
            platform=platform,
            layers=layers,
            memory_mb=stream.memory_mb,
            timeout=Duration.seconds(stream.timeout_s),
            environment={
                "SLUICE_STREAMS": json.dumps({"*": binding}),
                # Shadow mirrors run in this function, under its own tenant-bound grants: the
                # shared shadow function trusts the tenant its job names, which a function
                # IAM confines to one tenant must not be able to name.
                "SLUICE_MIRROR": "local",
                **capture.environment,
            },
            reserved_concurrency=stream.reserved_concurrency,
        )
        acknowledge(
            fn.function,
            "Serverless-LambdaDLQ",
            "Invoked by an event source mapping: failed records go to the mapping's on-failure "
            "destination (Kinesis, Kafka) or the source queue's redrive policy (SQS), not to a "
            "function dead-letter queue, which applies to asynchronous invocations only.",
        )
        # What scoring needs, for this tenant alone: its registry partitions (deployments,
        # versions; statistics are written), model artifacts, endpoints, the
        # capture stream.
        grant_registry(
            fn.role, table, actions=[*READ, *WRITE], partitions=tenant_partitions(stream.tenant)
        )
        precomputed.grant(fn, READ_ANSWERS, tenant_partitions(stream.tenant))
        grant_objects(
            fn,
            artifacts,
            prefix=f"{STORE_PREFIX}tenants/{stream.tenant}/",  # the store's keys: `storage.base.artifact_key`
            write=False,  # read alone: its mirrors run in it, so it writes no shadow body there
            purpose="the tenant's model artifacts",
        )
        grant_invoke_endpoints(fn, endpoint_names, tenant=stream.tenant)
        function_steps.for_tenant(stream.tenant).grant_to(fn)
        # Data capture of the deployment, where it is on: the API stack's delivery stream.
        capture.grant_to(fn.role)
        grant_destination(fn)
        fn.function.add_event_source(self._source(dlq))
        if stream.source.kind == "sqs":
            acknowledge(
                fn.function,
                "Serverless-LambdaEventSourceMappingDestination",
                "SQS mappings take no on-failure destination: a record that keeps failing moves "
                "to the dead-letter queue through the source queue's redrive policy.",
            )
        if stream.source.kind == "msk":
            _msk_grants(fn, stream.source.arn or "")
        self.watch = StreamWatch(
            name=stream.name,
            function_name=function_name,
            source_kind=stream.source.kind,
            source_queue=source_queue_name,
            dead_letter_queue=dead_letter_queue_name if dlq is not None else None,
            iterator_age_alarm_s=stream.iterator_age_alarm_s,
            offset_lag_alarm=stream.offset_lag_alarm,
        )

    def _destination(self) -> tuple[Callable[[SluiceFunction], None], str]:
        """(a grant on the function, the target the handler is told)."""
        out = self._stream.destination
        if out.kind == "s3":
            prefix = stream_s3_prefix(self._stream)
            bucket = self._batch_bucket

            def grant_s3(fn: SluiceFunction) -> None:
                grant_objects(
                    fn,
                    bucket,
                    prefix=prefix,
                    write=True,
                    purpose="stream outputs, one object per invocation",
                )

            return grant_s3, f"s3://{bucket.bucket_name}/{prefix}"
        if out.kind == "sqs":
            if out.create:
                queue: sqs.IQueue = encrypted_queue(
                    self, "Output", fifo=out.fifo, retention_period=Duration.days(4)
                )
                _acknowledge_all(
                    queue, ("AwsSolutions-SQS3", "Serverless-SQSRedrivePolicy"), OUTPUT_QUEUE_REASON
                )
            else:
                queue = sqs.Queue.from_queue_arn(self, "Output", out.arn or "")
            return self._granting("sqs:SendMessage", queue.queue_arn), queue.queue_url
        if out.kind == "kinesis":
            stream = (
                _kinesis_stream(self, "Output", stream_mode=kinesis.StreamMode.ON_DEMAND)
                if out.create
                else kinesis.Stream.from_stream_arn(self, "Output", out.arn or "")
            )
            return self._granting("kinesis:PutRecords", stream.stream_arn), stream.stream_arn
        arn = out.arn or ""
        return self._granting("firehose:PutRecordBatch", arn), arn.rsplit("/", 1)[-1]

    @staticmethod
    def _granting(action: str, resource: str) -> Callable[[SluiceFunction], None]:
        def grant(fn: SluiceFunction) -> None:
            fn.role.add_to_principal_policy(
                iam.PolicyStatement(actions=[action], resources=[resource])
            )

        return grant

    def _source(self, dlq: sqs.Queue | None) -> lambda_.IEventSource:
        stream, src = self._stream, self._stream.source
        window = Duration.seconds(stream.batching_window_s) if stream.batching_window_s else None
        position = lambda_.StartingPosition[src.starting_position]
        if src.kind == "sqs":
            if src.create:
                visibility = Duration.seconds(6 * stream.timeout_s)  # AWS: six times the timeout
                redrive = (
                    sqs.DeadLetterQueue(queue=dlq, max_receive_count=stream.retry_attempts + 1)
                    if dlq
                    else None
                )
                queue: sqs.IQueue = encrypted_queue(
                    self, "Source", fifo=src.fifo, visibility_timeout=visibility, queue_name=self._source_name,
                    dead_letter_queue=redrive,
                )  # fmt: skip
            else:  # a queue of the tenant's: its own redrive policy decides where failures go
                queue = sqs.Queue.from_queue_arn(self, "Source", src.arn or "")
            return sources.SqsEventSource(
                queue, batch_size=stream.batch_size, max_batching_window=window,
                max_concurrency=stream.mapping_concurrency, report_batch_item_failures=True,
            )  # fmt: skip
        common = {
            "batch_size": stream.batch_size,
            "max_batching_window": window,
            "starting_position": position,
            "bisect_batch_on_error": stream.bisect_on_error,
            "retry_attempts": stream.retry_attempts,
            "max_record_age": Duration.seconds(stream.max_record_age_s),
            "on_failure": sources.SqsDlq(dlq) if dlq is not None else None,
            "report_batch_item_failures": True,
        }
        if src.kind == "kinesis":
            data = (
                _kinesis_stream(self, "Source", shard_count=src.shards,
                                stream_mode=kinesis.StreamMode.PROVISIONED if src.shards else kinesis.StreamMode.ON_DEMAND)
                if src.create
                else kinesis.Stream.from_stream_arn(self, "Source", src.arn or "")
            )  # fmt: skip
            return sources.KinesisEventSource(
                data, parallelization_factor=stream.parallelization_factor, **common
            )
        secret = (
            secretsmanager.Secret.from_secret_complete_arn(self, "KafkaSecret", src.secret_arn)
            if src.secret_arn
            else None
        )
        if src.kind == "msk":
            return sources.ManagedKafkaEventSource(
                cluster_arn=src.arn or "", topic=src.topic or "", secret=secret, **common
            )
        return sources.SelfManagedKafkaEventSource(
            bootstrap_servers=list(src.bootstrap_servers), topic=src.topic or "", secret=secret,
            authentication_method=sources.AuthenticationMethod.SASL_SCRAM_512_AUTH, **common,
        )  # fmt: skip


def _msk_grants(fn: SluiceFunction, cluster_arn: str) -> None:
    """What Lambda's MSK poller needs, in place of the managed policy CDK attaches for the
    mapping (AWSLambdaMSKExecutionRole), whose `logs:*` on every log group of the account would
    let a function bound to one tenant write into any of them (it has its own log group's
    grant): the cluster's brokers read on its ARN alone, and the network interfaces the poller
    makes in the cluster's VPC (EC2 names no resource for most of these)."""
    role = fn.function.role
    assert role is not None
    cfn_role = role.node.default_child
    assert isinstance(cfn_role, iam.CfnRole)
    cfn_role.add_property_deletion_override("ManagedPolicyArns")
    acknowledge(
        role,
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaMSKExecutionRole]",
        "CDK attaches the MSK execution policy for the mapping; the synthesised role does not carry it "
        "(deleted by an override): the statements below grant what the poller needs, scoped.",
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="MskCluster",
            actions=["kafka:DescribeCluster", "kafka:DescribeClusterV2", "kafka:GetBootstrapBrokers"],
            resources=[cluster_arn],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="MskNetwork",
            actions=[
                "ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface", "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs",
            ],
            resources=["*"],
        )
    )  # fmt: skip
    acknowledge(
        role,
        "AwsSolutions-IAM5[Resource::*]",
        "Lambda's MSK poller makes and reads network interfaces in the cluster's VPC: EC2 "
        "takes no resource for the Describe calls, and the interfaces it makes have no ARN before.",
    )
