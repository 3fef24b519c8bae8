"""Data capture on AWS: an encrypted Firehose delivery stream partitioned by tenant and
deployment into the batch bucket's capture/ prefix, which expires; the API may only put
records on it."""

from __future__ import annotations

from tests.infra.synth import (
    Synthesized,
    function_by_handler,
    policy_statements_of_role,
    properties,
    resources,
    role_of,
)


def test_the_delivery_stream_is_encrypted_and_partitioned_by_tenant(default_app: Synthesized) -> None:
    (stream,) = properties(default_app.template("api"), "AWS::KinesisFirehose::DeliveryStream")
    assert stream["DeliveryStreamEncryptionConfigurationInput"] == {"KeyType": "AWS_OWNED_CMK"}
    s3 = stream["ExtendedS3DestinationConfiguration"]
    assert s3["Prefix"].startswith("capture/tenant=!{partitionKeyFromQuery:tenant}/deployment=!{partitionKeyFromQuery:deployment}/")
    assert s3["ErrorOutputPrefix"].startswith("capture-errors/")
    assert s3["DynamicPartitioningConfiguration"] == {"Enabled": True}
    (processor,) = s3["ProcessingConfiguration"]["Processors"]
    assert {"ParameterName": "MetadataExtractionQuery", "ParameterValue": "{tenant:.tenant,deployment:.deployment}"} in processor["Parameters"]


def test_the_delivery_role_writes_capture_prefixes_only(default_app: Synthesized) -> None:
    template = default_app.template("api")
    (stream,) = properties(template, "AWS::KinesisFirehose::DeliveryStream")
    role = stream["ExtendedS3DestinationConfiguration"]["RoleARN"]["Fn::GetAtt"][0]
    writes = [s for s in policy_statements_of_role(template, role) if "s3:PutObject" in s["Action"]]
    (write,) = writes
    keys = [part for resource in write["Resource"] for part in resource["Fn::Join"][1] if isinstance(part, str) and "capture" in part]
    assert sorted(keys) == ["/capture-errors/*", "/capture/*"]


def test_the_api_may_only_put_records_on_the_capture_stream(default_app: Synthesized) -> None:
    template = default_app.template("api")
    _, api = function_by_handler(template, "sluice.handlers.api.handler")
    assert api["Environment"]["Variables"]["SLUICE_CAPTURE"].startswith("firehose://")
    (stream_id,) = resources(template, "AWS::KinesisFirehose::DeliveryStream")
    puts = [s for s in policy_statements_of_role(template, role_of(api)) if "firehose" in str(s["Action"])]
    assert puts == [{"Action": "firehose:PutRecordBatch", "Effect": "Allow", "Resource": {"Fn::GetAtt": [stream_id, "Arn"]}}]


def test_captured_requests_expire(default_app: Synthesized) -> None:
    rules = [
        rule
        for bucket in properties(default_app.template("storage"), "AWS::S3::Bucket")
        for rule in bucket.get("LifecycleConfiguration", {}).get("Rules", [])
    ]
    days = default_app.config.storage.capture_expiry_days
    assert {"Id": "expire-capture", "Prefix": "capture/", "ExpirationInDays": days, "Status": "Enabled"} in rules
    assert {"Id": "expire-capture-errors", "Prefix": "capture-errors/", "ExpirationInDays": days, "Status": "Enabled"} in rules
