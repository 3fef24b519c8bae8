"""Streaming inference: per configured stream, a source (an SQS queue, a Kinesis stream, an MSK
or self-managed Kafka topic), a function running `sluice.handlers.stream.handler` bound to one
tenant's deployment, an event source mapping with partial batch responses, a dead-letter
queue, and the destination its predictions go to.

Failed records reach the dead-letter queue: through the created queue's redrive policy for
SQS, through the mapping's on-failure destination for Kinesis and Kafka. The function's
registry access is confined to its tenant's partitions. Alarms live in the observability
stack (iterator age or oldest message, dead-letter depth, error rate).
"""

from __future__ import annotations

import json

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import SluiceConfig, StreamConfig
from infra.constructs.functions import FunctionPlatform, SluiceFunction
from infra.constructs.grants import grant_invoke_endpoints, grant_objects
from infra.constructs.registry_access import READ, WRITE, grant_registry
from infra.nag import acknowledge
from infra.naming import ARTIFACTS_PREFIX, OUTBOX_PREFIX, ResourceNames

HANDLER = "sluice.handlers.stream.handler"
DLQ_REASON = (
    "This queue is the stream's dead-letter queue: records land here after their retries, for "
    "inspection and redrive; a dead-letter queue behind it would only move them."
)


def stream_s3_prefix(stream: StreamConfig) -> str:
    return stream.destination.prefix or f"{OUTBOX_PREFIX}{stream.tenant}/streams/{stream.name}/"


def has_dead_letter_queue(stream: StreamConfig) -> bool:
    """Every stream has one except an SQS queue the tenant brings: its own redrive policy says
    where its failed messages go (a mapping cannot redirect them)."""
    return not (stream.source.kind == "sqs" and stream.source.arn)


def dead_letter_queue_name(names: ResourceNames, stream: StreamConfig) -> str:
    return names.function(f"stream-{stream.name}-dlq") + (".fifo" if stream.source.is_fifo else "")


def source_queue_name(names: ResourceNames, stream: StreamConfig) -> str:
    """The SQS source queue's name: the created one's, or the one its ARN names."""
    if stream.source.arn:
        return stream.source.arn.rsplit(":", 1)[-1]
    return names.function(f"stream-{stream.name}-in") + (".fifo" if stream.source.is_fifo else "")


def _queue(scope: Construct, id: str, *, fifo: bool, **kwargs: object) -> sqs.Queue:
    # SSE-KMS with the AWS-managed key (aws/sqs): senders and Lambda use it through SQS.
    return sqs.Queue(
        scope,
        id,
        encryption=sqs.QueueEncryption.KMS_MANAGED,
        enforce_ssl=True,
        fifo=fifo or None,
        content_based_deduplication=None,
        **kwargs,  # type: ignore[arg-type]
    )


class StreamsStack(Stack):
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
        self.core = platform.layer(
            self, "CoreLayer", name="core", description="sluice core dependencies"
        )
        # aiohttp, for deployments on the `triton` runtime (scored as the API scores them).
        self.triton = platform.layer(
            self, "TritonLayer", name="triton", description="sluice triton runtime dependencies"
        )
        self.artifacts = s3.Bucket.from_bucket_name(self, "ArtifactsBucket", names.artifacts_bucket)
        self.batch_bucket = s3.Bucket.from_bucket_name(self, "BatchBucket", names.batch_bucket)
        self.table = dynamodb.TableV2.from_table_name(self, "RegistryTable", names.table)
        self.endpoint_names = [names.endpoint(e.name) for e in config.endpoints]
        self.functions: dict[str, SluiceFunction] = {}
        for stream in config.streams:
            self.functions[stream.name] = self._stream(stream, config, names, platform)

    def _stream(
        self, stream: StreamConfig, config: SluiceConfig, names: ResourceNames, platform: FunctionPlatform
    ) -> SluiceFunction:
        scope = Construct(self, f"Stream-{stream.name}")
        self._source_name = source_queue_name(names, stream)
        dlq = None
        if has_dead_letter_queue(stream):
            dlq = _queue(
                scope,
                "DeadLetters",
                fifo=stream.source.is_fifo,
                queue_name=dead_letter_queue_name(names, stream),
                retention_period=Duration.days(14),
            )
            acknowledge(dlq, "AwsSolutions-SQS3", DLQ_REASON)
            acknowledge(dlq, "Serverless-SQSRedrivePolicy", DLQ_REASON)
        destination, target = self._destination(scope, stream)
        # One binding per function: whatever source invokes it, this tenant and deployment.
        binding = {
            "tenant": stream.tenant,
            "deployment": stream.deployment,
            "destination": {"kind": stream.destination.kind, "target": target},
        }
        fn = SluiceFunction(
            scope,
            "Handler",
            function_name=names.function(f"stream-{stream.name}"),
            handler=HANDLER,
            description=f"Scores {stream.source.kind} records for {stream.tenant}/{stream.deployment}",
            platform=platform,
            layers=[self.core, self.triton],
            memory_mb=stream.memory_mb,
            timeout=Duration.seconds(stream.timeout_s),
            environment={
                "SLUICE_STREAMS": json.dumps({"*": binding}),
                "SLUICE_MIRROR": f"lambda://{names.function('shadow')}",
                "SLUICE_CAPTURE": f"firehose://{names.capture_stream}",
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
        self._grant_core(fn, stream, config, names)
        destination(fn)
        fn.function.add_event_source(self._source(scope, stream, dlq))
        if stream.source.kind == "sqs":
            acknowledge(
                fn.function,
                "Serverless-LambdaEventSourceMappingDestination",
                "SQS mappings take no on-failure destination: a record that keeps failing moves "
                "to the dead-letter queue through the source queue's redrive policy.",
            )
        if stream.source.kind == "msk":
            acknowledge(
                fn.role,
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaMSKExecutionRole]",
                "CDK attaches the MSK execution policy for the mapping: Lambda polls the cluster "
                "from its VPC (network interfaces) and reads its brokers; AWS keeps the list current.",
            )
        return fn

    def _grant_core(self, fn: SluiceFunction, stream: StreamConfig, config: SluiceConfig, names: ResourceNames) -> None:
        """What scoring needs, for this tenant alone: its registry partitions (deployments,
        versions; statistics are written), model artifacts, endpoints, the shadow mirror, the
        capture stream."""
        tenant = f"T#{stream.tenant}"
        grant_registry(fn.role, self.table, actions=[*READ, *WRITE], partitions=[tenant, f"{tenant}#*"])
        grant_objects(fn, fn.role, self.artifacts, prefix=f"{ARTIFACTS_PREFIX}/", write=True, purpose="model artifacts and oversized shadow bodies")
        grant_invoke_endpoints(fn, fn.role, self.endpoint_names)
        shadow = Stack.of(self).format_arn(service="lambda", resource="function", resource_name=names.function("shadow"), arn_format=ArnFormat.COLON_RESOURCE_NAME)
        fn.role.add_to_principal_policy(iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[shadow]))
        # Data capture of the deployment, where it is on: the API stack's delivery stream.
        capture = Stack.of(self).format_arn(service="firehose", resource="deliverystream", resource_name=names.capture_stream)
        fn.role.add_to_principal_policy(iam.PolicyStatement(actions=["firehose:PutRecordBatch"], resources=[capture]))

    def _destination(self, scope: Construct, stream: StreamConfig) -> tuple[object, str]:
        """(a grant on the function, the target the handler is told)."""
        out = stream.destination
        if out.kind == "s3":
            prefix = stream_s3_prefix(stream)

            def grant_s3(fn: SluiceFunction) -> None:
                grant_objects(fn, fn.role, self.batch_bucket, prefix=prefix, write=True, purpose="stream outputs, one object per invocation")

            return grant_s3, f"s3://{self.batch_bucket.bucket_name}/{prefix}"
        if out.kind == "sqs":
            queue = (
                _queue(scope, "Output", fifo=out.fifo, retention_period=Duration.days(4))
                if out.create
                else sqs.Queue.from_queue_arn(scope, "Output", out.arn or "")
            )
            if out.create:
                acknowledge(queue, "AwsSolutions-SQS3", "The predictions queue is read by the tenant's consumers, who own its failure handling; sluice only sends to it.")
                acknowledge(queue, "Serverless-SQSRedrivePolicy", "The predictions queue is read by the tenant's consumers, who own its failure handling; sluice only sends to it.")

            def grant_sqs(fn: SluiceFunction) -> None:
                fn.role.add_to_principal_policy(iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[queue.queue_arn]))

            return grant_sqs, queue.queue_url
        if out.kind == "kinesis":
            stream_ = (
                kinesis.Stream(scope, "Output", encryption=kinesis.StreamEncryption.MANAGED, stream_mode=kinesis.StreamMode.ON_DEMAND)
                if out.create
                else kinesis.Stream.from_stream_arn(scope, "Output", out.arn or "")
            )
            if out.create:
                acknowledge(stream_, "AwsSolutions-KDS3", "Encrypted with the AWS-managed key (aws/kinesis): no key policy to keep; producers and consumers use it through Kinesis.")

            def grant_kinesis(fn: SluiceFunction) -> None:
                fn.role.add_to_principal_policy(iam.PolicyStatement(actions=["kinesis:PutRecords"], resources=[stream_.stream_arn]))

            return grant_kinesis, stream_.stream_arn
        arn = out.arn or ""

        def grant_firehose(fn: SluiceFunction) -> None:
            fn.role.add_to_principal_policy(iam.PolicyStatement(actions=["firehose:PutRecordBatch"], resources=[arn]))

        return grant_firehose, arn.rsplit("/", 1)[-1]

    def _source(self, scope: Construct, stream: StreamConfig, dlq: sqs.Queue | None) -> lambda_.IEventSource:
        src = stream.source
        window = Duration.seconds(stream.batching_window_s) if stream.batching_window_s else None
        position = lambda_.StartingPosition[src.starting_position]
        if src.kind == "sqs":
            if src.create:
                visibility = Duration.seconds(6 * stream.timeout_s)  # AWS: six times the timeout
                redrive = sqs.DeadLetterQueue(queue=dlq, max_receive_count=stream.retry_attempts + 1) if dlq else None
                queue: sqs.IQueue = _queue(
                    scope, "Source", fifo=src.fifo, visibility_timeout=visibility, queue_name=self._source_name,
                    dead_letter_queue=redrive,
                )  # fmt: skip
            else:  # a queue of the tenant's: its own redrive policy decides where failures go
                queue = sqs.Queue.from_queue_arn(scope, "Source", src.arn or "")
            return sources.SqsEventSource(
                queue, batch_size=stream.batch_size, max_batching_window=window,
                max_concurrency=stream.max_concurrency, report_batch_item_failures=True,
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
                kinesis.Stream(scope, "Source", encryption=kinesis.StreamEncryption.MANAGED, shard_count=src.shards,
                               stream_mode=kinesis.StreamMode.PROVISIONED if src.shards else kinesis.StreamMode.ON_DEMAND)
                if src.create
                else kinesis.Stream.from_stream_arn(scope, "Source", src.arn or "")
            )  # fmt: skip
            if src.create:
                acknowledge(data, "AwsSolutions-KDS3", "Encrypted with the AWS-managed key (aws/kinesis): no key policy to keep; producers and consumers use it through Kinesis.")
            return sources.KinesisEventSource(data, parallelization_factor=stream.parallelization_factor, **common)
        secret = (
            secretsmanager.Secret.from_secret_complete_arn(scope, "KafkaSecret", src.secret_arn) if src.secret_arn else None
        )
        if src.kind == "msk":
            return sources.ManagedKafkaEventSource(cluster_arn=src.arn or "", topic=src.topic or "", secret=secret, **common)
        return sources.SelfManagedKafkaEventSource(
            bootstrap_servers=list(src.bootstrap_servers), topic=src.topic or "", secret=secret,
            authentication_method=sources.AuthenticationMethod.SASL_SCRAM_512_AUTH, **common,
        )  # fmt: skip

