"""Storage: private, encrypted, TLS-only buckets with lifecycles; PITR, TTL'd tables (the
registry, precomputed answers)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.synth import Synthesized, properties


def test_every_bucket_is_private_encrypted_and_owner_enforced(default_app: Synthesized) -> None:
    template = default_app.template("storage")
    buckets = properties(template, "AWS::S3::Bucket")
    assert len(buckets) == 3  # artifacts, batch, access logs
    for bucket in buckets:
        assert bucket["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        rules = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rules[0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
        assert bucket["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]
        assert {
            "Id": "abort-incomplete-multipart-uploads",
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2},
            "Status": "Enabled",
        } in bucket["LifecycleConfiguration"]["Rules"]


def test_every_bucket_policy_refuses_plain_http(default_app: Synthesized) -> None:
    template = default_app.template("storage")
    policies = properties(template, "AWS::S3::BucketPolicy")
    assert len(policies) == 3
    for policy in policies:
        assert any(
            statement["Effect"] == "Deny"
            and statement["Condition"].get("Bool") == {"aws:SecureTransport": "false"}
            for statement in policy["PolicyDocument"]["Statement"]
        )


def test_buckets_log_access_to_the_log_bucket(default_app: Synthesized) -> None:
    template = default_app.template("storage")
    logged = [b for b in properties(template, "AWS::S3::Bucket") if "LoggingConfiguration" in b]
    assert len(logged) == 2
    assert {b["LoggingConfiguration"]["LogFilePrefix"] for b in logged} == {"artifacts/", "batch/"}


def test_artifacts_are_versioned_and_batch_prefixes_expire(full_app: Synthesized) -> None:
    from aws_cdk.assertions import Match

    template = full_app.template("storage")
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "VersioningConfiguration": {"Status": "Enabled"},
            "LifecycleConfiguration": {
                "Rules": Match.array_with(
                    [Match.object_like({"NoncurrentVersionExpiration": {"NoncurrentDays": 90}})]
                )
            },
        },
    )
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "LifecycleConfiguration": {
                "Rules": Match.array_with(
                    [
                        Match.object_like({"Prefix": "inbox/", "ExpirationInDays": 30}),
                        Match.object_like({"Prefix": "outbox/", "ExpirationInDays": 9}),
                    ]
                )
            }
        },
    )


def test_table_is_on_demand_with_pitr_ttl_and_string_keys(default_app: Synthesized) -> None:
    template = default_app.template("storage")
    template.resource_count_is("AWS::DynamoDB::GlobalTable", 2)  # the registry, precomputed answers
    for name in ("sluice-registry", "sluice-precomputed"):
        _is_on_demand_with_pitr_ttl_and_string_keys(template, name)


def _is_on_demand_with_pitr_ttl_and_string_keys(template: Any, name: str) -> None:
    from aws_cdk.assertions import Match

    template.has_resource_properties(
        "AWS::DynamoDB::GlobalTable",
        {
            "TableName": name,
            "BillingMode": "PAY_PER_REQUEST",
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "AttributeDefinitions": Match.array_with(
                [
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                ]
            ),
            "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
            "SSESpecification": {"SSEEnabled": True},
            "Replicas": [
                Match.object_like(
                    {
                        "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                        "DeletionProtectionEnabled": True,
                    }
                )
            ],
        },
    )


def test_data_outlives_the_stack_by_default(default_app: Synthesized) -> None:
    template = default_app.template("storage")
    for resource_type in ("AWS::S3::Bucket", "AWS::DynamoDB::GlobalTable"):
        for resource in template.find_resources(resource_type).values():
            assert resource["DeletionPolicy"] == "Retain"


def test_every_bucket_is_versioned_and_its_old_versions_expire(default_app: Synthesized) -> None:
    """A mistaken delete or overwrite can be undone, and versioning keeps nothing forever:
    the versions a delete, overwrite or expiry hides go after a while, then their markers."""
    storage = default_app.config.storage
    buckets = {
        b.get("LoggingConfiguration", {}).get("LogFilePrefix", "access-logs"): b
        for b in properties(default_app.template("storage"), "AWS::S3::Bucket")
    }
    expected = {
        # asynchronous results (artifacts/results/) and uploads (artifacts/uploads/) are
        # transient: what their expiry hides goes in a day
        "artifacts/": [storage.noncurrent_artifact_expiry_days, 1, 1],
        "batch/": [storage.noncurrent_batch_expiry_days],
        "access-logs": [storage.noncurrent_access_log_expiry_days],
    }
    assert set(buckets) == set(expected)
    for name, bucket in buckets.items():
        assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}, name
        rules = bucket["LifecycleConfiguration"]["Rules"]
        assert [
            r["NoncurrentVersionExpiration"]["NoncurrentDays"]
            for r in rules
            if "NoncurrentVersionExpiration" in r
        ] == expected[name], name
        if any("ExpirationInDays" in r for r in rules):
            marker = {
                "Id": "remove-expired-delete-markers",
                "ExpiredObjectDeleteMarker": True,
                "Status": "Enabled",
            }
            assert marker in rules, name


def test_async_results_and_uploads_expire(default_app: Synthesized) -> None:
    """Inputs, answers and errors of asynchronous predictions (sluice.storage.results) go
    after `async_result_expiry_days`, uploaded request bodies (sluice.storage.uploads) after
    `upload_expiry_days`; nothing else in the artifacts bucket expires."""
    (artifacts,) = [
        b
        for b in properties(default_app.template("storage"), "AWS::S3::Bucket")
        if b.get("LoggingConfiguration", {}).get("LogFilePrefix") == "artifacts/"
    ]
    expiring = [r for r in artifacts["LifecycleConfiguration"]["Rules"] if "ExpirationInDays" in r]
    assert expiring == [
        {
            "Id": "expire-async-results",
            "Prefix": "artifacts/results/",
            "ExpirationInDays": default_app.config.storage.async_result_expiry_days,
            "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
            "Status": "Enabled",
        },
        {
            "Id": "expire-uploads",
            "Prefix": "artifacts/uploads/",
            "ExpirationInDays": default_app.config.storage.upload_expiry_days,
            "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
            "Status": "Enabled",
        },
    ]
    assert "CorsConfiguration" not in artifacts  # no browser origin configured


def test_browsers_of_the_configured_origins_may_post_uploads(full_app: Synthesized) -> None:
    (artifacts,) = [
        b
        for b in properties(full_app.template("storage"), "AWS::S3::Bucket")
        if b.get("LoggingConfiguration", {}).get("LogFilePrefix") == "artifacts/"
    ]
    assert artifacts["CorsConfiguration"]["CorsRules"] == [
        {
            "AllowedMethods": ["POST"],
            "AllowedOrigins": ["https://app.example.com"],
            "AllowedHeaders": ["*"],
            "MaxAge": 3000,
        }
    ]


@pytest.mark.parametrize("origin", ["*", "https://app.example.com/page", "app.example.com"])
def test_an_upload_origin_is_an_origin(origin: str) -> None:
    from infra.config import StorageConfig

    with pytest.raises(ValueError, match="origin"):
        StorageConfig(upload_cors_origins=(origin,))
