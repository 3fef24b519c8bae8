"""An S3 bucket with the defaults every sluice bucket shares.

Private (all public access blocked), TLS only, encrypted with S3-managed keys (SSE-S3),
bucket-owner-enforced object ownership, server access logs to the log bucket, versioned (a
mistaken overwrite or delete stays recoverable until its rules expire what it hid), and
incomplete multipart uploads and delete markers left with nothing behind cleaned up. SSE-S3 rather than a customer-managed KMS key:
the data is protected at rest either way, and SSE-KMS would add kms:Decrypt grants to every
reader (SageMaker, the Step Functions item reader), a KMS request per object for batch
chunks, and is refused outright as a target of S3 server access logs.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.logs import removal_policy

ABORT_INCOMPLETE_UPLOADS = s3.LifecycleRule(
    id="abort-incomplete-multipart-uploads",
    abort_incomplete_multipart_upload_after=Duration.days(2),
)
# In a versioned bucket an expiry or delete only adds a delete marker: once the versions it
# hid are gone (`expire_noncurrent`), this removes the markers left with nothing behind.
REMOVE_EXPIRED_DELETE_MARKERS = s3.LifecycleRule(
    id="remove-expired-delete-markers", expired_object_delete_marker=True
)


def expire(
    days: int, *, prefix: str | None = None, id: str | None = None, noncurrent_days: int | None = None
) -> s3.LifecycleRule:
    """Delete objects (under `prefix`) `days` after they were written; `id` defaults to
    `expire-<prefix>`. In a versioned bucket, `noncurrent_days` removes what the expiry hid
    sooner than the bucket's rule for overwritten versions would."""
    return s3.LifecycleRule(
        id=id or f"expire-{(prefix or '').strip('/')}",
        prefix=prefix,
        expiration=Duration.days(days),
        noncurrent_version_expiration=Duration.days(noncurrent_days) if noncurrent_days else None,
    )


def expire_noncurrent(days: int) -> s3.LifecycleRule:
    """Delete overwritten and deleted versions `days` after they stopped being current."""
    return s3.LifecycleRule(
        id="expire-noncurrent-versions", noncurrent_version_expiration=Duration.days(days)
    )


class SecureBucket(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        bucket_name: str,
        retain: bool,
        access_logs: s3.IBucket | None,
        access_logs_prefix: str = "",
        lifecycle_rules: Sequence[s3.LifecycleRule] = (),
        cors: Sequence[s3.CorsRule] | None = None,
    ) -> None:
        """`lifecycle_rules`: the bucket's own, between the cleanup of incomplete uploads and
        that of expired delete markers."""
        super().__init__(scope, id)
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=bucket_name,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix=access_logs_prefix or None,
            lifecycle_rules=[ABORT_INCOMPLETE_UPLOADS, *lifecycle_rules, REMOVE_EXPIRED_DELETE_MARKERS],
            cors=list(cors) if cors else None,
            removal_policy=removal_policy(retain),
        )
