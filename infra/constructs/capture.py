"""Data capture on AWS: a Firehose delivery stream (encrypted) that writes JSON Lines to the
batch bucket under `capture/tenant=…/deployment=…/dt=…/hour=…/`, the tenant and deployment
read from each record (dynamic partitioning); the bucket's lifecycle expires them
(`storage.capture_expiry_days`). The functions that predict put records on it
(`CaptureTarget`): the API's, the WebSocket's and the streams'.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesisfirehose as firehose
from aws_cdk import aws_s3 as s3
from aws_cdk.aws_logs import LogStream
from constructs import Construct

from infra.constructs.grants import Callee
from infra.constructs.logs import LogRetention
from infra.nag import acknowledge, wildcard_resource
from infra.naming import CAPTURE_ERRORS_PREFIX, CAPTURE_PREFIX

Stream = firehose.CfnDeliveryStream


class CaptureTarget(Callee):
    """The delivery stream as a function that captures sees it: its name (SLUICE_CAPTURE)
    and its ARN (to put records on)."""

    variable, scheme, action = "SLUICE_CAPTURE", "firehose", "firehose:PutRecordBatch"

    @classmethod
    def named(cls, scope: Construct, name: str) -> CaptureTarget:
        """The delivery stream of another stack, by name."""
        arn = Stack.of(scope).format_arn(
            service="firehose", resource="deliverystream", resource_name=name
        )
        return cls(name=name, arn=arn)


class CaptureStream:
    """The delivery stream, its role and its error log, built into `scope` (the API stack)."""

    def __init__(
        self, scope: Construct, *, stream_name: str, bucket: s3.IBucket, logs: LogRetention
    ) -> None:
        role = iam.Role(
            scope,
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
                wildcard_resource(scope, bucket.arn_for_objects(f"{prefix}*")),
                "Firehose names each object at delivery time; writes are confined to the capture "
                "prefixes of the batch bucket.",
            )
        log_group = logs.group(scope, "CaptureDeliveryLogs")
        log_stream = LogStream(scope, "CaptureDeliveryErrors", log_group=log_group)
        log_group.grant_write(role)
        self.stream = Stream(
            scope,
            "CaptureStream",
            delivery_stream_name=stream_name,
            delivery_stream_type="DirectPut",
            delivery_stream_encryption_configuration_input=Stream.DeliveryStreamEncryptionConfigurationInputProperty(
                key_type="AWS_OWNED_CMK"
            ),
            extended_s3_destination_configuration=Stream.ExtendedS3DestinationConfigurationProperty(
                bucket_arn=bucket.bucket_arn,
                role_arn=role.role_arn,
                prefix=(
                    f"{CAPTURE_PREFIX}tenant=!{{partitionKeyFromQuery:tenant}}/"
                    "deployment=!{partitionKeyFromQuery:deployment}/"
                    "dt=!{timestamp:yyyy-MM-dd}/hour=!{timestamp:HH}/"
                ),
                error_output_prefix=(
                    f"{CAPTURE_ERRORS_PREFIX}!{{firehose:error-output-type}}/"
                    "dt=!{timestamp:yyyy-MM-dd}/"
                ),
                # Dynamic partitioning needs buffers of at least 64 MB.
                buffering_hints=Stream.BufferingHintsProperty(
                    interval_in_seconds=60, size_in_m_bs=64
                ),
                compression_format="UNCOMPRESSED",
                encryption_configuration=Stream.EncryptionConfigurationProperty(
                    no_encryption_config="NoEncryption"
                ),
                dynamic_partitioning_configuration=Stream.DynamicPartitioningConfigurationProperty(
                    enabled=True
                ),
                processing_configuration=Stream.ProcessingConfigurationProperty(
                    enabled=True,
                    processors=[
                        Stream.ProcessorProperty(
                            type="MetadataExtraction",
                            parameters=[
                                Stream.ProcessorParameterProperty(
                                    parameter_name="MetadataExtractionQuery",
                                    parameter_value="{tenant:.tenant,deployment:.deployment}",
                                ),
                                Stream.ProcessorParameterProperty(
                                    parameter_name="JsonParsingEngine", parameter_value="JQ-1.6"
                                ),
                            ],
                        )
                    ],
                ),
                cloud_watch_logging_options=Stream.CloudWatchLoggingOptionsProperty(
                    enabled=True,
                    log_group_name=log_group.log_group_name,
                    log_stream_name=log_stream.log_stream_name,
                ),
            ),
        )
        self.target = CaptureTarget(name=stream_name, arn=self.stream.attr_arn)
