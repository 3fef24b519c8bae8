"""Streams: per configured source a function bound to one tenant's deployment, an event source
mapping with partial batch responses, a dead-letter queue, least-privilege grants and alarms
(the full test config has an SQS, a FIFO SQS, a Kinesis, an MSK and a self-managed Kafka
stream)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from sluice.stream.bindings import parse_bindings
from tests.infra.synth import (
    Synthesized,
    policy_statements_of_role,
    properties,
    role_of,
)

if TYPE_CHECKING:
    from aws_cdk.assertions import Template

HANDLER = "sluice.handlers.stream.handler"


@pytest.fixture(scope="module")
def streams(full_app: Synthesized) -> Template:
    return full_app.template("streams")


def _functions(template: Template) -> dict[str, tuple[str, dict[str, Any]]]:
    found = {}
    for logical_id, resource in template.find_resources("AWS::Lambda::Function").items():
        props = resource["Properties"]
        if props.get("Handler") == HANDLER:
            found[props["FunctionName"].removeprefix("sluice-stream-")] = (logical_id, props)
    return found


def _mappings(template: Template) -> dict[str, dict[str, Any]]:
    """Event source mappings by the stream name of the function they invoke."""
    by_id = {logical_id: name for name, (logical_id, _) in _functions(template).items()}
    return {by_id[p["FunctionName"]["Ref"]]: p for p in properties(template, "AWS::Lambda::EventSourceMapping")}


def test_one_function_per_stream_bound_to_its_tenant_and_deployment(full_app: Synthesized) -> None:
    functions = _functions(full_app.resolved("streams"))
    assert set(functions) == {"orders", "payments", "sensors", "clicks", "ledger", "refunds"}
    _, orders = functions["orders"]
    variables = orders["Environment"]["Variables"]
    bindings = parse_bindings(json.loads(variables["SLUICE_STREAMS"]))  # what the handler reads
    assert bindings["*"].tenant == "acme" and bindings["*"].deployment == "fraud"
    assert bindings["*"].destination.kind == "s3"
    assert bindings["*"].destination.target == "s3://sluice-batch-123456789012-us-east-1/outbox/acme/streams/orders/"
    assert variables["SLUICE_MIRROR"] == "local"  # its mirrors run in it, under its tenant's grants
    assert orders["ReservedConcurrentExecutions"] == 10


def test_every_mapping_reports_batch_item_failures_with_its_limits(streams: Template) -> None:
    mappings = _mappings(streams)
    assert set(mappings) == {"orders", "payments", "sensors", "clicks", "ledger", "refunds"}
    for mapping in mappings.values():
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    orders = mappings["orders"]
    assert (orders["BatchSize"], orders["MaximumBatchingWindowInSeconds"]) == (50, 2)
    assert orders["ScalingConfig"] == {"MaximumConcurrency": 5}
    assert mappings["payments"]["ScalingConfig"] == {"MaximumConcurrency": 10}  # unset: its reserved concurrency
    sensors = mappings["sensors"]
    assert sensors["ParallelizationFactor"] == 2
    assert sensors["MaximumRecordAgeInSeconds"] == 600
    assert sensors["MaximumRetryAttempts"] == 2
    assert sensors["BisectBatchOnFunctionError"] is True
    for name in ("sensors", "clicks", "ledger"):  # Kinesis and Kafka: failures to the DLQ
        assert "OnFailure" in mappings[name]["DestinationConfig"], name
    assert mappings["clicks"]["Topics"] == ["clicks"]
    assert mappings["ledger"]["SelfManagedEventSource"]["Endpoints"]["KafkaBootstrapServers"] == ["kafka-1.example.com:9096"]


def test_created_sqs_sources_redrive_to_the_dead_letter_queue(streams: Template) -> None:
    queues = {p.get("QueueName"): p for p in properties(streams, "AWS::SQS::Queue")}
    orders = queues["sluice-stream-orders-in"]
    assert orders["RedrivePolicy"]["maxReceiveCount"] == 4  # retry_attempts 3, then the DLQ
    assert orders["VisibilityTimeout"] == 360  # six times the function's timeout
    payments = queues["sluice-stream-payments-in.fifo"]
    assert payments["FifoQueue"] is True
    assert queues["sluice-stream-payments-dlq.fifo"]["FifoQueue"] is True
    for queue in queues.values():
        assert queue["KmsMasterKeyId"] == "alias/aws/sqs"
    assert not any("refunds" in str(name) for name in queues)  # a queue the tenant brings: no DLQ made


def test_grants_are_confined_to_the_tenant_and_the_destination(full_app: Synthesized) -> None:
    template = full_app.template("streams")
    functions = _functions(template)

    def statements(name: str) -> list[dict[str, Any]]:
        return policy_statements_of_role(template, role_of(functions[name][1]))

    for name in functions:
        tables = [
            s for s in statements(name)
            if any(str(a).startswith("dynamodb:") for a in _list(s["Action"])) and not str(s.get("Sid", "")).startswith("LookupSource")
        ]  # fmt: skip
        assert len(tables) == 2, name  # the registry, and precomputed answers
        for only in tables:
            keys = only["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
            tenant = "globex" if name in ("sensors", "refunds") else "acme"
            assert keys == [f"T#{tenant}", f"T#{tenant}#*"], name  # never another tenant's items
    orders_s3 = [s for s in statements("orders") if "s3:PutObject" in _list(s["Action"])]
    assert any("outbox/acme/streams/orders/*" in json.dumps(s["Resource"]) for s in orders_s3)
    firehose = [s for s in statements("clicks") if "firehose:PutRecordBatch" in _list(s["Action"])]
    resources = [r for s in firehose for r in _list(s["Resource"])]
    assert "arn:aws:firehose:us-east-1:123456789012:deliverystream/ctr-scores" in resources
    for name in functions:  # and data capture's stream, nothing more
        capture = [json.dumps(s["Resource"]) for s in statements(name) if "firehose:PutRecordBatch" in _list(s["Action"])]
        assert any("deliverystream/sluice-capture" in r for r in capture), name
    ledger = [s for s in statements("ledger") if "sqs:SendMessage" in _list(s["Action"])]
    assert ledger[0]["Resource"] == "arn:aws:sqs:us-east-1:123456789012:ledger-scores"
    assert any("kinesis:PutRecords" in _list(s["Action"]) for s in statements("sensors"))
    for name in functions:  # run-time endpoints: its tenant's alone, by the tag the API puts on those it deploys
        from infra.constructs.grants import ENDPOINT_TENANT_TAG

        from sluice.endpoints.sagemaker_support import Tag

        assert ENDPOINT_TENANT_TAG == Tag.TENANT
        tenant = "globex" if name in ("sensors", "refunds") else "acme"
        invoke = [s for s in statements(name) if "sagemaker:InvokeEndpoint" in _list(s["Action"])]
        runtime = [s for s in invoke if "endpoint/sluice-*" in json.dumps(s["Resource"])]
        assert runtime and all(s["Condition"] == {"StringEquals": {"aws:ResourceTag/sluice:tenant": tenant}} for s in runtime), (name, runtime)
        # ... and the config file's endpoints, by name, with no condition (they carry no tenant tag).
        plain = json.dumps([s["Resource"] for s in invoke if "Condition" not in s])
        assert all(f"endpoint/{e}" in plain for e in ("sluice-resnet", "sluice-segmenter", "sluice-ranker")), (name, plain)
    # MSK's poller: the cluster's brokers and its network interfaces, not the managed policy's
    # `logs:*` on every log group of the account.
    clicks_role = template.to_json()["Resources"][role_of(functions["clicks"][1])]["Properties"]
    assert "ManagedPolicyArns" not in clicks_role
    for statement in statements("clicks"):
        if any(str(a).startswith("logs:") for a in _list(statement["Action"])):
            assert "*" not in _list(statement["Resource"]), statement
    kafka = [s for s in statements("clicks") if "kafka:GetBootstrapBrokers" in _list(s["Action"])]
    assert kafka and all(":cluster/" in json.dumps(s["Resource"]) for s in kafka), kafka
    for name in functions:  # no invoke of the shared shadow function, which acts for the tenant its job names
        invokes = [json.dumps(s["Resource"]) for s in statements(name) if "lambda:InvokeFunction" in _list(s["Action"])]
        assert not any("sluice-shadow" in r for r in invokes), (name, invokes)
    for name in ("sensors", "refunds"):  # globex's: none of acme's objects, functions or stores
        granted = json.dumps(statements(name))
        artifacts = [json.dumps(s["Resource"]) for s in statements(name) if "s3:GetObject" in _list(s["Action"]) and "artifacts" in json.dumps(s["Resource"])]
        assert artifacts and all("artifacts/tenants/globex/*" in r for r in artifacts), (name, artifacts)
    for name in functions:  # artifacts read alone: no shadow body to write since its mirrors run in it
        writes = [json.dumps(s["Resource"]) for s in statements(name) if "s3:PutObject" in _list(s["Action"])]
        assert not any("artifacts/" in r for r in writes), (name, writes)
        assert "acme-" not in granted, name


def test_alarms_watch_lag_dead_letters_and_error_rate(full_app: Synthesized) -> None:
    alarms = full_app.template("observability").find_resources("AWS::CloudWatch::Alarm")
    ids = " ".join(alarms)
    for name in ("orders", "payments", "sensors", "clicks", "ledger", "refunds"):
        for kind in ("StreamBehind", "StreamDeadLetters", "StreamErrorRate"):
            if (kind, name) != ("StreamDeadLetters", "refunds"):  # its own queue's redrive, not ours
                assert f"{kind}{name}" in ids.replace("-", ""), (kind, name)
    assert "StreamDeadLettersrefunds" not in ids.replace("-", "")
    metrics = {json.dumps(a["Properties"].get("MetricName")) for a in alarms.values()}
    assert {'"IteratorAge"', '"OffsetLag"', '"ApproximateAgeOfOldestMessage"', '"ApproximateNumberOfMessagesVisible"'} <= metrics


def test_no_streams_no_stack(default_app: Synthesized) -> None:
    assert "streams" not in default_app.stacks


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
