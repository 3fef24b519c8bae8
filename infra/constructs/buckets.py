"""An S3 bucket with the defaults every sluice bucket shares.

Private (all public access blocked), TLS only, encrypted with S3-managed keys (SSE-S3),
bucket-owner-enforced object ownership, server access logs to the log bucket, and
incomplete multipart uploads cleaned up. SSE-S3 rather than a customer-managed KMS key:
the data is protected at rest either way, and SSE-KMS would add kms:Decrypt grants to every
reader (SageMaker, the Step Functions item reader), a KMS request per object for batch
chunks, and is refused outright as a target of S3 server access logs.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct

ABORT_INCOMPLETE_UPLOADS = s3.LifecycleRule(
    id="abort-incomplete-multipart-uploads",
    abort_incomplete_multipart_upload_after=Duration.days(2),
)


class SecureBucket(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        bucket_name: str,
        versioned: bool,
        retain: bool,
        access_logs: s3.IBucket | None,
        access_logs_prefix: str = "",
        lifecycle_rules: Sequence[s3.LifecycleRule] = (),
        cors: Sequence[s3.CorsRule] | None = None,
    ) -> None:
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
            versioned=versioned,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix=access_logs_prefix or None,
            lifecycle_rules=[ABORT_INCOMPLETE_UPLOADS, *lifecycle_rules],
            cors=list(cors) if cors else None,
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        )
