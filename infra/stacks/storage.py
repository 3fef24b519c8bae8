"""Storage: the artifacts bucket, the batch bucket, the registry table, and the access logs.

Everything is private, TLS-only and encrypted at rest; the buckets and the table are kept
when the stack is deleted unless the config says otherwise.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.config import SluiceConfig
from infra.constructs.buckets import SecureBucket
from infra.nag import acknowledge
from infra.naming import ResourceNames

ARTIFACTS_PREFIX = "artifacts"
RESULTS_PREFIX = "results/"  # under the artifacts prefix: sluice.storage.results
UPLOADS_PREFIX = "uploads/"  # under the artifacts prefix: sluice.storage.uploads
# Push-by-URI reads model files from `imports/<tenant>/` in the artifacts bucket, and only there
# (SLUICE_IMPORT_PREFIXES); tenants put them there with credentials of their own.
IMPORTS_PREFIX = "imports/"
INBOX_PREFIX = "inbox/"
OUTBOX_PREFIX = "outbox/"
WORK_PREFIX = "work/"
# Data capture: the Firehose delivery stream writes `capture/tenant=…/deployment=…/dt=…/hour=…/`
# and what it could not partition under `capture-errors/`.
CAPTURE_PREFIX = "capture/"
CAPTURE_ERRORS_PREFIX = "capture-errors/"
TTL_ATTRIBUTE = "expires_at"


def noncurrent_cleanup(days: int) -> list[s3.LifecycleRule]:
    """In a versioned bucket an expiry or delete only adds a delete marker: these rules
    remove the versions it hid after `days`, and then the markers left with nothing behind."""
    return [
        s3.LifecycleRule(
            id="expire-noncurrent-versions",
            noncurrent_version_expiration=Duration.days(days),
        ),
        s3.LifecycleRule(id="remove-expired-delete-markers", expired_object_delete_marker=True),
    ]


class StorageStack(Stack):
    def __init__(
        self, scope: Construct, id: str, *, config: SluiceConfig, names: ResourceNames, **kwargs
    ) -> None:
        super().__init__(scope, id, **kwargs)
        storage = config.storage
        retain = storage.retain_data

        access_logs = SecureBucket(
            self,
            "AccessLogs",
            bucket_name=names.access_logs_bucket,
            # Versioned so that logs deleted by mistake (or by an intruder covering tracks)
            # stay recoverable for a while; logs are written once, so only expiry and
            # deletes make noncurrent versions.
            versioned=True,
            retain=retain,
            access_logs=None,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-access-logs",
                    expiration=Duration.days(storage.access_log_expiry_days),
                ),
                *noncurrent_cleanup(storage.noncurrent_access_log_expiry_days),
            ],
        )
        acknowledge(
            access_logs,
            "AwsSolutions-S1",
            "This is the server access log bucket itself; logging it into itself would loop "
            "and logging it elsewhere only moves the question.",
        )

        self.artifacts_bucket = SecureBucket(
            self,
            "Artifacts",
            bucket_name=names.artifacts_bucket,
            # Model artifacts are what predictions are made from: keep overwritten and
            # deleted versions recoverable for a while.
            versioned=True,
            retain=retain,
            access_logs=access_logs.bucket,
            access_logs_prefix="artifacts/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-noncurrent-versions",
                    noncurrent_version_expiration=Duration.days(
                        storage.noncurrent_artifact_expiry_days
                    ),
                ),
                # Asynchronous predictions: inputs, records, answers and errors, per tenant
                # under results/tenants/<tenant>/; transient, like batch files.
                s3.LifecycleRule(
                    id="expire-async-results",
                    prefix=f"{ARTIFACTS_PREFIX}/{RESULTS_PREFIX}",
                    expiration=Duration.days(storage.async_result_expiry_days),
                    # The bucket is versioned: what expiry hides goes a day later, not in 90.
                    noncurrent_version_expiration=Duration.days(1),
                ),
                # Request bodies tenants uploaded (POST /api/v1/uploads), under
                # uploads/tenants/<tenant>/: usable for an hour, deleted after a day or more.
                s3.LifecycleRule(
                    id="expire-uploads",
                    prefix=f"{ARTIFACTS_PREFIX}/{UPLOADS_PREFIX}",
                    expiration=Duration.days(storage.upload_expiry_days),
                    noncurrent_version_expiration=Duration.days(1),
                ),
                s3.LifecycleRule(
                    id="remove-expired-delete-markers", expired_object_delete_marker=True
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
        ).bucket

        self.batch_bucket = SecureBucket(
            self,
            "Batch",
            bucket_name=names.batch_bucket,
            # Inputs, outputs and work files are transient and expire; the job record in the
            # registry is what lasts. Versioned so that a mistaken delete or overwrite of a
            # job's results can be undone for a few days; those versions then expire.
            versioned=True,
            retain=retain,
            access_logs=access_logs.bucket,
            access_logs_prefix="batch/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-inbox",
                    prefix=INBOX_PREFIX,
                    expiration=Duration.days(storage.inbox_expiry_days),
                ),
                s3.LifecycleRule(
                    id="expire-outbox",
                    prefix=OUTBOX_PREFIX,
                    expiration=Duration.days(storage.outbox_expiry_days),
                ),
                s3.LifecycleRule(
                    id="expire-work",
                    prefix=WORK_PREFIX,
                    expiration=Duration.days(storage.work_expiry_days),
                ),
                s3.LifecycleRule(
                    id="expire-capture",
                    prefix=CAPTURE_PREFIX,
                    expiration=Duration.days(storage.capture_expiry_days),
                ),
                s3.LifecycleRule(
                    id="expire-capture-errors",
                    prefix=CAPTURE_ERRORS_PREFIX,
                    expiration=Duration.days(storage.capture_expiry_days),
                ),
                *noncurrent_cleanup(storage.noncurrent_batch_expiry_days),
            ],
        ).bucket

        self.table = dynamodb.TableV2(
            self,
            "Registry",
            table_name=names.table,
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing=dynamodb.Billing.on_demand(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            # Idempotency records and other short-lived items carry an epoch-seconds expiry.
            time_to_live_attribute=TTL_ATTRIBUTE,
            # Encrypted with the AWS-managed key (aws/dynamodb): at rest and auditable in
            # CloudTrail, without a key policy for every reader to be added to.
            encryption=dynamodb.TableEncryptionV2.aws_managed_key(),
            deletion_protection=retain,
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        )
