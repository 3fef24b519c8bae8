"""The config file: defaults that deploy without GPUs, and mistakes caught before synth."""

from __future__ import annotations

from pathlib import Path

import pytest
from infra.config import DEFAULT_CONFIG, SluiceConfig, load_config
from pydantic import ValidationError

from tests.infra.synth import FULL_CONFIG


def test_the_shipped_config_has_no_endpoints_and_the_runtime_that_monitors_drift() -> None:
    from infra.constructs.functions import MONITOR_PYTHONS

    config = load_config(DEFAULT_CONFIG)
    assert config.endpoints == ()
    # The newest Python Apache DataSketches publishes wheels for: with the defaults the
    # functions profile their traffic and the hourly check reports drift (docs/monitoring.md).
    assert config.functions.python == "3.13" == max(MONITOR_PYTHONS)
    assert config.functions.architecture == "x86_64"
    assert config == SluiceConfig()  # the file spells out the defaults


def test_context_overrides_architecture_and_python(tmp_path: Path) -> None:
    config = load_config(
        DEFAULT_CONFIG, context={"sluice:architecture": "arm64", "sluice:python": "3.14"}
    )
    assert (config.functions.architecture, config.functions.python) == ("arm64", "3.14")


def test_an_empty_file_means_all_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(path) == SluiceConfig()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"log_retention_days": 31}, "log_retention_days must be one of"),
        ({"api": {"tenants": [{"tenant": "Acme!", "rate_limit": 1, "burst_limit": 1}]}}, "tenant"),
        ({"batch": {"max_concurrency": 0}}, "max_concurrency"),
        ({"typo_section": {}}, "Extra inputs are not permitted"),
        (
            {"api": {"mlflow_credentials": {"acme": "mlflow/acme"}, "mlflow_credentials_kms_keys": ["arn:aws:kms:us-east-1:123456789012:alias/mlflow"]}},
            "an alias does not authorize kms:Decrypt",
        ),
        (
            {"api": {"mlflow_credentials_kms_keys": ["arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"]}},
            "name those secrets too",
        ),
    ],
)
def test_mistakes_are_refused(change: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SluiceConfig.model_validate(change)


QUEUE = "arn:aws:sqs:eu-west-1:123456789012:transactions"
STREAM = "arn:aws:kinesis:eu-west-1:123456789012:stream/clicks"


def _stream(name: str, source: dict, **fields: object) -> dict:
    return {"name": name, "tenant": "acme", "deployment": "fraud", "destination": {"kind": "s3"}, "source": source, **fields}


@pytest.mark.parametrize(
    ("streams", "message"),
    [
        ([_stream("a", {"kind": "sqs", "arn": QUEUE}), _stream("b", {"kind": "sqs", "arn": QUEUE}, deployment="other")], "read the same queue"),
        ([_stream("a", {"kind": "sqs", "create": True}, retry_attempts=5000)], r"at most 999"),
        ([_stream("a", {"kind": "sqs", "create": True}, deployment="Fraud")], "deployment"),
        ([_stream("a", {"kind": "sqs", "arn": STREAM})], "is not the ARN of a sqs queue"),
        ([_stream("a", {"kind": "kinesis", "arn": QUEUE})], "is not the ARN of a kinesis stream"),
        ([_stream("a", {"kind": "sqs", "create": True}, destination={"kind": "sqs", "arn": "garbage"})], "destination.arn 'garbage'"),
    ],
)
def test_stream_mistakes_are_refused_before_they_synthesize(streams: list, message: str) -> None:
    """Each synthesized before: two mappings splitting one queue's messages between their
    deployments at random; a redrive policy SQS refuses at deploy; a deployment no name can be."""
    with pytest.raises(ValidationError, match=message):
        SluiceConfig.model_validate({"streams": streams})


def test_streams_that_may_share_a_source_are_taken() -> None:
    """A Kinesis stream gives every mapping all of its records; SQS takes up to 999 retries."""
    SluiceConfig.model_validate({"streams": [_stream("a", {"kind": "kinesis", "arn": STREAM}), _stream("b", {"kind": "kinesis", "arn": STREAM}, deployment="other")]})
    SluiceConfig.model_validate({"streams": [_stream("a", {"kind": "sqs", "arn": QUEUE}, retry_attempts=999)]})


def test_endpoint_variants_must_be_sane() -> None:
    endpoint = FULL_CONFIG["endpoints"][0]
    variant = dict(endpoint["variants"][0])
    with pytest.raises(
        ValidationError, match="min_instances <= initial_instance_count <= max_instances"
    ):
        SluiceConfig.model_validate(
            {"endpoints": [{**endpoint, "variants": [{**variant, "initial_instance_count": 5}]}]}
        )
    with pytest.raises(ValidationError, match="model_data_key"):
        SluiceConfig.model_validate(
            {"endpoints": [{**endpoint, "variants": [{**variant, "model_data_key": "a/b.zip"}]}]}
        )
    with pytest.raises(ValidationError, match="unique"):
        SluiceConfig.model_validate({"endpoints": [endpoint, endpoint]})


def test_endpoint_names_sagemaker_cannot_take_are_refused_naming_the_endpoint() -> None:
    """Both synthesized, then failed in CloudFormation on a resource's name."""
    (ranker,) = [e for e in FULL_CONFIG["endpoints"] if e.get("inference_components")]
    assert ranker["inference_components"] is not None
    variant = ranker["variants"][0]
    long = {**ranker, "name": "e" * 47}  # 16 + 1 + 47 characters
    with pytest.raises(ValidationError, match="SageMaker takes 63"):
        SluiceConfig.model_validate({"name": "sluice-prod-eu01", "endpoints": [long]})
    first = {**ranker, "name": "a-b", "variants": [{**variant, "name": "c"}]}
    second = {**ranker, "name": "a", "variants": [{**variant, "name": "b-c"}]}
    with pytest.raises(ValidationError, match="both make the inference component 'sluice-a-b-c'"):
        SluiceConfig.model_validate({"endpoints": [first, second]})
    SluiceConfig.model_validate({"endpoints": [first, {**second, "variants": [{**variant, "name": "d"}]}]})
