"""Storage: the artifacts bucket, the batch bucket, the registry table, the table of
precomputed answers, and the access logs.

Everything is private, TLS-only and encrypted at rest; the buckets and the table are kept
when the stack is deleted unless the config says otherwise.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.config import StorageConfig
from infra.constructs.buckets import SecureBucket, expire, expire_noncurrent
from infra.constructs.logs import removal_policy
from infra.nag import acknowledge
from infra.naming import (
    CAPTURE_ERRORS_PREFIX,
    CAPTURE_PREFIX,
    INBOX_PREFIX,
    OUTBOX_PREFIX,
    RESULTS_PREFIX,
    UPLOADS_PREFIX,
    WORK_PREFIX,
    ResourceNames,
)

TTL_ATTRIBUTE = "expires_at"


class StorageStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        names: ResourceNames,
        storage: StorageConfig,
        **kwargs,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        retain = storage.retain_data

        access_logs = SecureBucket(
            self,
            "AccessLogs",
            bucket_name=names.access_logs_bucket,
            # Logs deleted by mistake (or by an intruder covering tracks) stay recoverable for a
            # while; logs are written once, so only expiry and deletes make noncurrent versions.
            retain=retain,
            access_logs=None,
            lifecycle_rules=[
                expire(storage.access_log_expiry_days, id="expire-access-logs"),
                expire_noncurrent(storage.noncurrent_access_log_expiry_days),
            ],
        )
        acknowledge(
            access_logs,
            "AwsSolutions-S1",
            "This is the server access log bucket itself; logging it into itself would loop "
            "and logging it elsewhere only moves the question.",
        )

        def logged(id: str, bucket_name: str, **props: Any) -> s3.Bucket:
            """A bucket whose server access logs go to the log bucket, under `<id>/`."""
            return SecureBucket(
                self,
                id,
                bucket_name=bucket_name,
                retain=retain,
                access_logs=access_logs.bucket,
                access_logs_prefix=f"{id.lower()}/",
                **props,
            ).bucket

        # Model artifacts are what predictions are made from: overwritten and deleted versions
        # stay recoverable for a while.
        self.artifacts_bucket = logged(
            "Artifacts",
            names.artifacts_bucket,
            lifecycle_rules=[
                expire_noncurrent(storage.noncurrent_artifact_expiry_days),
                # Transient, like batch files, and per tenant under <prefix>tenants/<tenant>/:
                # asynchronous predictions' inputs, records, answers and errors; request
                # bodies tenants uploaded (POST /api/v1/uploads), usable for an hour. What
                # expiry hides goes a day later, not with the bucket's overwritten versions.
                expire(
                    storage.async_result_expiry_days,
                    prefix=RESULTS_PREFIX,
                    id="expire-async-results",
                    noncurrent_days=1,
                ),
                expire(
                    storage.upload_expiry_days,
                    prefix=UPLOADS_PREFIX,
                    id="expire-uploads",
                    noncurrent_days=1,
                ),
            ],
            # Browsers on these origins may post uploads' forms (presigned POSTs) straight
            # to the bucket; without any, only non-browser clients can.
            cors=[
                s3.CorsRule(
                    allowed_methods=[s3.HttpMethods.POST],
                    allowed_origins=list(storage.upload_cors_origins),
                    allowed_headers=["*"],
                    max_age=3000,
                )
            ]
            if storage.upload_cors_origins
            else None,
        )

        # Inputs, outputs, work files and captured requests are transient and expire; the job
        # record in the registry is what lasts. A mistaken delete or overwrite of a job's
        # results can be undone for a few days; those versions then expire.
        expiring = {
            INBOX_PREFIX: storage.inbox_expiry_days,
            OUTBOX_PREFIX: storage.outbox_expiry_days,
            WORK_PREFIX: storage.work_expiry_days,
            CAPTURE_PREFIX: storage.capture_expiry_days,
            CAPTURE_ERRORS_PREFIX: storage.capture_expiry_days,
        }
        self.batch_bucket = logged(
            "Batch",
            names.batch_bucket,
            lifecycle_rules=[
                *(expire(days, prefix=prefix) for prefix, days in expiring.items()),
                expire_noncurrent(storage.noncurrent_batch_expiry_days),
            ],
        )

        # Idempotency records and other short-lived items carry an epoch-seconds expiry.
        self.table = _keyed_table(self, "Registry", names.table, retain=retain)
        # Answers batch jobs publish for `precomputed` nodes: always there (on-demand, so it
        # costs nothing unused), keyed as the registry (`T#<tenant>#P#…`) so that the tenant
        # roles' leading-key conditions cover it; old generations leave by their time to live.
        self.precomputed = _keyed_table(self, "Precomputed", names.precomputed_table, retain=retain)


def _keyed_table(scope: Construct, construct_id: str, table_name: str, *, retain: bool) -> dynamodb.TableV2:
    """A table of `pk`/`sk` string keys, as the registry and the precomputed answers are: on
    demand, point-in-time recovery, items that carry an epoch-seconds expiry (`TTL_ATTRIBUTE`),
    encrypted with the AWS-managed key (aws/dynamodb: at rest and auditable in CloudTrail,
    without a key policy for every reader to be added to)."""
    return dynamodb.TableV2(
        scope,
        construct_id,
        table_name=table_name,
        partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
        sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
        billing=dynamodb.Billing.on_demand(),
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True),
        time_to_live_attribute=TTL_ATTRIBUTE,
        encryption=dynamodb.TableEncryptionV2.aws_managed_key(),
        deletion_protection=retain,
        removal_policy=removal_policy(retain),
    )
