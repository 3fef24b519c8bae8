"""The stream Lambda end to end: each source's event through `handlers.stream.handler`, the
outputs read back from moto's SQS, Kinesis, Firehose and S3."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import boto3
import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from sluice.routing.choose import sticky_pick
from tests.integration.aws.conftest import REGION
from tests.integration.stream.conftest import (
    SETOSA,
    VIRGINICA,
    kafka_event,
    kinesis_event,
    load,
    rows,
    sqs_event,
)

if TYPE_CHECKING:

    from sluice.domain import Principal
    from sluice.wiring import Container

Bind = Any


def _queue(name: str) -> tuple[Any, str]:
    sqs = boto3.client("sqs", region_name=REGION)
    attributes = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
    return sqs, sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]


def _drain(sqs: Any, url: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages", [])
        if not got:
            return out
        for m in got:
            out.append({**json.loads(m["Body"]), "_attributes": m.get("Attributes", {})})
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def _bucket(name: str = "sluice-stream-out") -> Any:
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
    return s3


def _objects(s3: Any, bucket: str = "sluice-stream-out") -> dict[str, list[dict[str, Any]]]:
    found = {}
    for item in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
        body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode()
        found[item["Key"]] = [json.loads(line) for line in body.splitlines()]
    return found


@pytest.mark.parametrize("name", ["stream_sqs", "stream_sqs_fifo", "stream_kinesis", "stream_msk", "stream_kafka_self_managed"])
def test_every_source_event_is_scored_and_written_to_a_queue(aws: None, bind: Bind, name: str) -> None:
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    assert handle(load(name)) == {"batchItemFailures": []}
    out = sorted(_drain(sqs, url), key=lambda o: o["id"])
    assert [o["id"] for o in out] == ["tx-1", "tx-2"]
    assert [o["prediction"] for o in out] == ["setosa", "virginica"]
    for o in out:
        assert (o["deployment"], o["model"], o["version"]) == ("iris", "iris", 1)
        assert set(o["probabilities"]) == {"setosa", "versicolor", "virginica"}
        assert o["source"]  # the record's own id: message id, sequence number, or topic/partition/offset
    if "kafka" in name or "msk" in name:
        assert {o["source"]["offset"] for o in out} == {15, 16}


def test_one_poisoned_record_among_1000_leaves_999_predictions_and_one_error(aws: None, bind: Bind, demo: Container) -> None:
    s3 = _bucket()
    handle = bind({"kind": "s3", "target": "s3://sluice-stream-out/scores"})
    bodies: list[bytes | str] = list(rows(1000))
    bodies[417] = b'{"id": "tx-417", "features": {"sepal_length": 5.1,'  # cut short
    calls = _count_calls(demo)
    answer = handle(kinesis_event(bodies))
    assert answer == {"batchItemFailures": []}  # nothing retried
    (_key, lines), = _objects(s3).items()
    assert len(lines) == 1000
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 1 and "not JSON" in errors[0]["error"]
    assert errors[0]["source"]["sequence_number"].endswith(str(88898 + 417))
    assert sum(1 for line in lines if "prediction" in line) == 999
    assert [line["source"]["sequence_number"] for line in lines] == sorted(line["source"]["sequence_number"] for line in lines)
    assert len(calls) == 1  # micro-batched: one inference call for the 999


@pytest.mark.parametrize("source", ["sqs", "kinesis"])
def test_a_record_the_model_fails_on_is_an_error_record_and_the_others_of_its_call_answer(aws: None, bind: Bind, demo: Container, acme: Principal, source: str) -> None:
    """ONNX Runtime fails the whole call on one record's value (100 // 0): that record is an
    error record, the others of its call are scored, and nothing is retried (retried, they
    would all fail again, until given up)."""
    from tests.models import ratio_model

    demo.models.push(acme, "ratio", ratio_model())
    demo.deployments.create(acme, "ratio", {"kind": "single", "model": "ratio", "version": 1})
    s3 = _bucket()
    handle = bind({"kind": "s3", "target": "s3://sluice-stream-out/scores"}, deployment="ratio")
    bodies = [json.dumps({"id": f"tx-{n}", "inputs": [[0 if n == 7 else n + 1]]}) for n in range(10)]
    answer = handle(sqs_event(bodies) if source == "sqs" else kinesis_event(bodies))
    assert answer == {"batchItemFailures": []}
    (_key, lines), = _objects(s3).items()
    by_id = {line["id"]: line for line in lines}
    assert len(lines) == 10 and by_id["tx-7"]["error"] == "the ONNX runtime failed (Fail)" and by_id["tx-7"]["code"] == "backend_error"
    assert [by_id[f"tx-{n}"]["prediction"] for n in range(10) if n != 7] == [int(100 / (n + 1)) for n in range(10) if n != 7]


def test_a_kpl_aggregate_is_scored_record_by_record_under_its_sequence_number(aws: None, bind: Bind) -> None:
    """Lambda hands a Kinesis Producer Library aggregate over as it came: its user records are
    each scored and written, with their own ids, in order, under the Kinesis record's sequence
    number and their place in it."""
    import hashlib

    from tests.unit.test_kpl_records import AGGREGATED

    s3 = _bucket()
    handle = bind({"kind": "s3", "target": "s3://sluice-stream-out/scores"})
    bodies = rows(6)
    message = AGGREGATED(partition_key_table=["card-1", "card-2"])
    for i, body in enumerate(bodies[1:5]):
        message.records.add(partition_key_index=i % 2, data=body.encode())
    inner = message.SerializeToString()
    aggregate = b"\xf3\x89\x9a\xc2" + inner + hashlib.md5(inner, usedforsecurity=False).digest()
    event = kinesis_event([bodies[0], aggregate, bodies[5]])
    assert handle(event) == {"batchItemFailures": []}
    (_key, lines), = _objects(s3).items()
    assert [line["id"] for line in lines] == [json.loads(b)["id"] for b in bodies] and all("prediction" in line for line in lines)
    middle = event["Records"][1]["kinesis"]["sequenceNumber"]
    assert [(line["source"]["sequence_number"], line["source"].get("subsequence_number")) for line in lines[1:5]] == [(middle, i) for i in range(4)]


def test_records_that_can_never_succeed_become_error_records_naming_the_field(aws: None, bind: Bind) -> None:
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    good = rows(5)
    bad = [
        json.dumps({"id": "bad-name", "features": {"sepal_length": 1, "sepal_width": 1, "petal_length": 1, "petal_wide": 1}}),
        json.dumps({"id": "bad-type", "features": {"sepal_length": "x", "sepal_width": 1, "petal_length": 1, "petal_width": 1}}),
        json.dumps({"id": "bad-width", "inputs": [[1, 1, 1]]}),
        json.dumps({"id": "other-tenant", "tenant": "globex", "features": {}}),
        json.dumps({"id": "other-deployment", "deployment": "diabetes", "inputs": [[1, 2, 3, 4]]}),
        "[1, 2, 3]",
        '{"id": "past-a-double", "features": {"sepal_length": 1e400, "sepal_width": 1, "petal_length": 1, "petal_width": 1}}',
        '{"id": "nan", "features": {"sepal_length": NaN, "sepal_width": 1, "petal_length": 1, "petal_width": 1}}',
    ]
    answer = handle(sqs_event(good[:3] + bad + good[3:]))
    assert answer == {"batchItemFailures": []}
    out = {o.get("id") or "list": o for o in _drain(sqs, url)}
    assert len(out) == 13
    assert out["past-a-double"]["code"] == out["nan"]["code"] == "bad_request"  # JSON the reader refuses still says whose it is
    assert out["bad-name"]["field"] == "features.petal_width"
    assert out["bad-type"]["code"] == "invalid_input"
    assert out["bad-width"]["field"].startswith("inputs")
    assert out["other-tenant"]["field"] == "tenant"
    assert "bound to deployment 'iris'" in out["other-deployment"]["error"]
    assert out["list"]["field"] == "body"
    assert all("prediction" in out[f"tx-{i}"] for i in range(5))


@pytest.mark.parametrize("rid", ['"\\ud800"', "123456789012345678901234567890"])
def test_an_id_no_output_can_carry_is_left_off_the_error_record_of_json_the_reader_refuses(aws: None, bind: Bind, rid: str) -> None:
    """A record orjson refuses is read again for its id alone: an id a written output cannot
    carry (a lone surrogate, a whole number past 64 bits) is left off, never a crash of the batch."""
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    body = '{"id": ' + rid + ', "features": {"sepal_length": 1e400, "sepal_width": 1, "petal_length": 1, "petal_width": 1}}'
    assert handle(sqs_event([body, *rows(1)])) == {"batchItemFailures": []}
    out = _drain(sqs, url)
    assert sorted(str(o.get("id")) for o in out) == ["None", "tx-0"] and all(o.get("code") in (None, "bad_request") for o in out)


def _count_calls(container: Container) -> list[int]:
    """Spy on the one prediction call: how many calls, how many rows each."""
    calls: list[int] = []
    predict = container.stream_predictions.predict

    async def counting(principal: Principal, request: Any) -> Any:
        calls.append(next(iter(request.inputs.arrays.values())).shape[0])
        return await predict(principal, request)

    container.stream_predictions.predict = counting  # type: ignore[method-assign]
    return calls


def _remote(container: Container, users: list[str]) -> set[int]:
    node = container.predictions.deployment_of  # the split, as the deployment holds it
    from sluice.inference.loop import run

    split = run(node("acme", "mixed"))[1]
    return {n for n, user in enumerate(users) if sticky_pick(split.variants, user).name == "remote"}


def test_a_backend_outage_retries_exactly_the_records_routed_to_it(aws: None, bind: Bind, half_down: Container) -> None:
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url}, deployment="mixed")
    users = [f"user-{n}" for n in range(10)]
    bodies = [json.dumps({"id": f"tx-{n}", "user": u, "features": json.loads(rows(1)[0])["features"]}) for n, u in enumerate(users)]
    event = sqs_event(bodies)
    down = _remote(half_down, users)
    assert 0 < len(down) < 10
    calls = _count_calls(half_down)
    answer = handle(event)
    assert sorted(calls) == sorted([10 - len(down), len(down)])  # one call per variant
    assert {f["itemIdentifier"] for f in answer["batchItemFailures"]} == {event["Records"][n]["messageId"] for n in down}
    written = _drain(sqs, url)
    assert sorted(o["id"] for o in written) == sorted(f"tx-{n}" for n in range(10) if n not in down)
    assert {o["variant"] for o in written} == {"local"}


def test_an_outage_on_a_kinesis_shard_holds_every_later_record_for_order(aws: None, bind: Bind, half_down: Container) -> None:
    s3 = _bucket()
    handle = bind({"kind": "s3", "target": "s3://sluice-stream-out"}, deployment="mixed")
    users = [f"user-{n}" for n in range(10)]
    down = _remote(half_down, users)
    first = min(down)
    event = kinesis_event([json.dumps({"id": n, "routing_key": u, "inputs": [[5.1, 3.5, 1.4, 0.2]]}) for n, u in enumerate(users)])
    answer = handle(event)
    seqs = [r["kinesis"]["sequenceNumber"] for r in event["Records"]]
    assert [f["itemIdentifier"] for f in answer["batchItemFailures"]] == seqs[first:]
    written = [line["id"] for lines in _objects(s3).values() for line in lines]
    assert written == list(range(first))


def test_kafka_failures_name_topic_partition_and_offset(aws: None, bind: Bind, half_down: Container) -> None:
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url}, source="kafka:transactions", deployment="mixed")
    users = [f"user-{n}" for n in range(6)]
    down = _remote(half_down, users)
    event = kafka_event([json.dumps({"id": n, "routing_key": u, "features": json.loads(rows(1)[0])["features"]}) for n, u in enumerate(users)], self_managed=True)
    answer = handle(event)
    failures = answer["batchItemFailures"]
    assert failures  # partition n % 2: a failure holds that partition's later records
    for f in failures:
        assert f["itemIdentifier"]["partition"] in ("transactions-0", "transactions-1")
    failed_offsets = {f["itemIdentifier"]["offset"] for f in failures}
    assert {100 + n for n in down} <= failed_offsets
    assert {o["id"] for o in _drain(sqs, url)} == {n for n in range(6) if 100 + n not in failed_offsets}


def test_a_replayed_invocation_overwrites_its_s3_object(aws: None, bind: Bind) -> None:
    s3 = _bucket()
    handle = bind({"kind": "s3", "target": "s3://sluice-stream-out/scores/"})
    event = kinesis_event(rows(50))
    handle(event)
    first = _objects(s3)
    handle(event)
    again = _objects(s3)
    assert list(again) == list(first) and len(again) == 1
    (key,) = again
    assert key.startswith("scores/sluice-iris-in/shardId-000000000006-")
    assert len(again[key]) == 50


def test_a_redelivered_record_in_a_new_batch_never_overwrites_an_acknowledged_output(aws: None, bind: Bind) -> None:
    """SQS delivers [m0, m1, m2], all acknowledged; m0 comes again with m3. Both batches start
    with m0, and every output acknowledged in either must still be in some object."""
    s3 = _bucket()
    handle = bind({"kind": "s3", "target": "s3://sluice-stream-out/scores/"})
    m = sqs_event(rows(4))["Records"]
    assert handle({"Records": [m[0], m[1], m[2]]}) == {"batchItemFailures": []}
    assert handle({"Records": [m[0], m[3]]}) == {"batchItemFailures": []}
    objects = _objects(s3)
    written = {line["id"] for lines in objects.values() for line in lines}
    assert written == {"tx-0", "tx-1", "tx-2", "tx-3"}
    assert len(objects) == 2
    # The same batch delivered again rewrites its own object, with the same lines.
    assert handle({"Records": [m[0], m[3]]}) == {"batchItemFailures": []}
    assert _objects(s3) == objects


def test_a_replayed_fifo_invocation_is_deduplicated_by_sqs(aws: None, bind: Bind) -> None:
    sqs, url = _queue("scores.fifo")
    handle = bind({"kind": "sqs", "target": url})
    event = sqs_event(rows(7), fifo=True)
    assert handle(event) == {"batchItemFailures": []}
    assert handle(event) == {"batchItemFailures": []}  # Lambda redelivers the same messages
    out = _drain(sqs, url)
    assert sorted(o["id"] for o in out) == [f"tx-{n}" for n in range(7)]
    assert {o["_attributes"]["MessageGroupId"] for o in out} == {"card-0", "card-1", "card-2"}


def test_kinesis_outputs_keep_the_input_partition_key_and_order(aws: None, bind: Bind) -> None:
    kinesis = boto3.client("kinesis", region_name=REGION)
    kinesis.create_stream(StreamName="scores", ShardCount=1)
    handle = bind({"kind": "kinesis", "target": "scores"})
    keys = [f"card-{n % 3}" for n in range(30)]
    assert handle(kinesis_event(rows(30), partition_keys=keys)) == {"batchItemFailures": []}
    shard = kinesis.describe_stream(StreamName="scores")["StreamDescription"]["Shards"][0]["ShardId"]
    it = kinesis.get_shard_iterator(StreamName="scores", ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    got = kinesis.get_records(ShardIterator=it)["Records"]
    assert [json.loads(r["Data"])["id"] for r in got] == [f"tx-{n}" for n in range(30)]
    assert [r["PartitionKey"] for r in got] == keys


def test_firehose_delivers_the_outputs_to_s3(aws: None, bind: Bind) -> None:
    s3 = _bucket("sluice-firehose")
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="firehose", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    boto3.client("firehose", region_name=REGION).create_delivery_stream(
        DeliveryStreamName="scores",
        ExtendedS3DestinationConfiguration={"RoleARN": role, "BucketARN": "arn:aws:s3:::sluice-firehose", "Prefix": "scores/"},
    )
    handle = bind({"kind": "firehose", "target": "scores"})
    assert handle(sqs_event(rows(10))) == {"batchItemFailures": []}
    lines = [line for lines in _objects(s3, "sluice-firehose").values() for line in lines]
    assert sorted(line["id"] for line in lines) == sorted(f"tx-{n}" for n in range(10))


def test_a_source_bound_to_nothing_is_retried_never_scored(aws: None, bind: Bind) -> None:
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url}, source="arn:aws:sqs:eu-west-1:123456789012:the-bound-queue")
    event = sqs_event(rows(3), arn="arn:aws:sqs:eu-west-1:123456789012:some-other-queue")
    answer = handle(event)
    assert len(answer["batchItemFailures"]) == 3
    assert _drain(sqs, url) == []


def test_a_tenant_cannot_be_reached_through_another_tenants_binding(aws: None, bind: Bind, demo: Container, globex: Principal) -> None:
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url}, tenant="globex")  # globex has no deployment 'iris'
    answer = handle(sqs_event(rows(2)))
    assert len(answer["batchItemFailures"]) == 2  # not found: retried, then dead-lettered
    assert _drain(sqs, url) == []


def _throttled_once(kinesis: Any, refused: str) -> Any:
    """A Kinesis client whose PutRecords refuses the record of id `refused` once (throttling,
    as it answers per record) and writes the others to moto."""
    refuse = {refused}

    class Throttled:
        def put_records(self, Records: list[dict[str, Any]], **target: Any) -> dict[str, Any]:
            kept = [r for r in Records if json.loads(r["Data"])["id"] not in refuse]
            answers = iter(kinesis.put_records(Records=kept, **target)["Records"] if kept else [])
            out = [{"ErrorCode": "ProvisionedThroughputExceededException"} if json.loads(r["Data"])["id"] in refuse else next(answers) for r in Records]
            refuse.clear()
            return {"FailedRecordCount": sum("ErrorCode" in a for a in out), "Records": out}

    return Throttled()


def test_a_record_the_destination_refuses_is_retried_with_the_later_records_of_its_shard(aws: None, bind: Bind, monkeypatch: pytest.MonkeyPatch) -> None:
    """PutRecords refuses tx-1 once (throttling, as it answers per record): tx-1 and the records
    after it on the shard are retried, so after Lambda delivers them again the last copy of
    each record stands in the shard's order."""
    from sluice.handlers import stream
    from sluice.stream.sinks import KinesisSink

    kinesis = boto3.client("kinesis", region_name=REGION)
    kinesis.create_stream(StreamName="scores", ShardCount=1)
    handle = bind({"kind": "kinesis", "target": "scores"})
    throttled = _throttled_once(kinesis, "tx-1")  # one for every call: it refuses once
    monkeypatch.setattr(stream, "sink_for", lambda binding: KinesisSink(throttled, "scores"))
    event = kinesis_event(rows(4))
    failed = [f["itemIdentifier"] for f in handle(event)["batchItemFailures"]]
    assert failed == [r["kinesis"]["sequenceNumber"] for r in event["Records"][1:]]  # tx-1 and every record after it
    assert handle({"Records": event["Records"][1:]}) == {"batchItemFailures": []}  # Lambda resumes the shard at tx-1
    shard = kinesis.describe_stream(StreamName="scores")["StreamDescription"]["Shards"][0]["ShardId"]
    it = kinesis.get_shard_iterator(StreamName="scores", ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    got = [json.loads(r["Data"])["id"] for r in kinesis.get_records(ShardIterator=it)["Records"]]
    assert got == ["tx-0", "tx-2", "tx-3", "tx-1", "tx-2", "tx-3"]  # at least once; the last copies in order


def test_a_destination_that_refuses_writes_turns_into_retries(aws: None, bind: Bind) -> None:
    handle = bind({"kind": "s3", "target": "s3://no-such-bucket/x"})
    event = sqs_event(rows(4))
    answer = handle(event)
    assert [f["itemIdentifier"] for f in answer["batchItemFailures"]] == [r["messageId"] for r in event["Records"]]


def test_many_rows_are_scored_in_calls_of_batch_rows(aws: None, bind: Bind, demo: Container) -> None:
    _sqs, _url = _queue("scores")
    handle = bind({"kind": "s3", "target": "s3://sluice-stream-out"})
    _bucket()
    demo.settings.stream.stream_batch_rows = 64
    calls = _count_calls(demo)
    handle(kinesis_event(rows(200)))
    assert calls == [64, 64, 64, 8]


def test_v2_and_batch_shaped_records(aws: None, bind: Bind) -> None:
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    v2 = {"id": "v2", "inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 4], "data": [5.1, 3.5, 1.4, 0.2, 6.7, 3.0, 5.2, 2.3]}]}
    several = {"id": "batch", "batch": [[5.1, 3.5, 1.4, 0.2]]}
    # A record is JSON alone: an input saying binary_data_size is refused naming it, as over
    # HTTP and a WebSocket, never read from its data.
    said = {"id": "said-binary", "inputs": [{**v2["inputs"][0], "parameters": {"binary_data_size": 32}}]}
    assert handle(sqs_event([json.dumps(v2), json.dumps(several), json.dumps(said), *rows(2)])) == {"batchItemFailures": []}
    out = {o["id"]: o for o in _drain(sqs, url)}
    assert [p["prediction"] for p in out["v2"]["predictions"]] == ["setosa", "virginica"]
    assert [p["prediction"] for p in out["batch"]["predictions"]] == ["setosa"]
    assert out["tx-0"]["prediction"] == "setosa"
    assert out["said-binary"]["field"] == "inputs.input.parameters.binary_data_size" and "predictions" not in out["said-binary"], out["said-binary"]



def _captured(demo: Container) -> list[dict[str, Any]]:
    assert demo.capture is not None and demo.capture.drain()
    return [json.loads(x) for f in (demo.settings.home_path / "capture").rglob("*.jsonl") for x in f.read_text().splitlines()]


def test_a_deployment_that_captures_keeps_each_stream_record_under_its_id(aws: None, bind: Bind, demo: Container, acme: Principal) -> None:
    """One captured record per stream record, with its id, its own rows and its own answer,
    however the records were scored together; and each record sampled on its own."""
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    demo.deployments.update(acme, "iris", None, capture={"sample_percent": 100})
    v2 = {"id": "v2", "inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 4], "data": [5.1, 3.5, 1.4, 0.2, 6.7, 3.0, 5.2, 2.3]}]}
    several = {"id": "batch", "batch": [[6.7, 3.0, 5.2, 2.3]]}
    assert handle(sqs_event([*rows(3), json.dumps(v2), json.dumps(several)])) == {"batchItemFailures": []}
    captured = {r["request_id"]: r for r in _captured(demo)}
    assert sorted(captured) == ["batch", "tx-0", "tx-1", "tx-2", "v2"]
    assert [captured[i]["rows"] for i in ("tx-0", "v2", "batch")] == [1, 2, 1]
    assert captured["v2"]["inputs"]["input"]["data"] == pytest.approx([5.1, 3.5, 1.4, 0.2, 6.7, 3.0, 5.2, 2.3])
    assert captured["v2"]["outputs"]["output_label"]["data"] == ["setosa", "virginica"]
    assert [captured[i]["outputs"]["output_label"]["data"] for i in ("tx-0", "tx-1", "batch")] == [["setosa"], ["virginica"], ["virginica"]]
    demo.deployments.update(acme, "iris", None, capture={"sample_percent": 50})
    handle(kinesis_event(rows(400, start=100)))
    # every record answered, the 5 above too (counted in the queue: moto reads each message received against all
    # the queue holds, so receiving 400 costs seconds; their bodies are the other tests')
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"] == "405"
    sampled = [r for r in _captured(demo) if r["request_id"] not in captured]
    assert 120 <= len(sampled) <= 280 and {r["rows"] for r in sampled} == {1}  # half of 400, record by record
    assert len({r["request_id"] for r in sampled}) == len(sampled)


def test_a_record_retried_is_captured_once_when_it_is_answered_for_good(
    aws: None, bind: Bind, demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PutRecords refuses tx-1 once: tx-1 and the records after it on the shard are retried and
    scored again when Lambda delivers them again. Each record is captured once, when its output
    is written for good (captured at scoring, the retried ones were captured twice)."""
    from sluice.handlers import stream
    from sluice.stream.sinks import KinesisSink

    kinesis = boto3.client("kinesis", region_name=REGION)
    kinesis.create_stream(StreamName="captured", ShardCount=1)
    demo.deployments.update(acme, "iris", None, capture={"sample_percent": 100})
    handle = bind({"kind": "kinesis", "target": "captured"})
    throttled = _throttled_once(kinesis, "tx-1")  # one for every call: it refuses once
    monkeypatch.setattr(stream, "sink_for", lambda binding: KinesisSink(throttled, "captured"))
    event = kinesis_event(rows(4))
    assert len(handle(event)["batchItemFailures"]) == 3
    assert sorted(r["request_id"] for r in _captured(demo)) == ["tx-0"]  # the others wait for their delivery again
    assert handle({"Records": event["Records"][1:]}) == {"batchItemFailures": []}
    assert sorted(r["request_id"] for r in _captured(demo)) == ["tx-0", "tx-1", "tx-2", "tx-3"]


def _traffic(demo: Container, acme: Principal, name: str = "iris") -> tuple[int, int, int]:
    """The deployment's statistics as its API reads them: requests, errors, rows."""
    overall = demo.deployments.stats(acme, name)["overall"]
    counters = demo.deployments.counters(acme, demo.registry.get_deployment("acme", name))
    return overall["requests"], overall["errors"], int(counters.get("rows", 0))


def test_a_failed_delivery_is_counted_each_time_and_an_answer_once(
    aws: None, bind: Bind, demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call of its own for each record: tx-1's fails once for now (the model server went
    away), so Lambda delivers it again and it is answered; tx-3's fails for good (an error
    record, never retried). Each failed call is a failed request, as a retry over HTTP is, and
    each answer counts once: tx-1 an error and an answer, tx-3 an error."""
    from sluice.domain.errors import ModelFailed, Unavailable

    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    demo.settings.stream.stream_batch_rows = 1
    runner = type(demo.stream_predictions.runner)
    real, tries = runner.run, []

    async def flaky(self: Any, node: Any, call: Any, arrays: dict[str, np.ndarray], depth: int = 0) -> Any:
        first = round(float(next(iter(arrays.values()))[0, 0]), 3)  # sepal_length: which record this is
        tries.append(first)
        if first == 6.1 and tries.count(first) == 1:
            raise Unavailable("the model server went away")
        if first == 6.3:
            raise ModelFailed("the model fails on this record")
        return await real(self, node, call, arrays, depth)

    monkeypatch.setattr(runner, "run", flaky)
    lengths = [5.1, 6.1, 6.7, 6.3]
    bodies = [json.dumps({"id": f"tx-{n}", "features": {**SETOSA, "sepal_length": x}}) for n, x in enumerate(lengths)]
    event = sqs_event(bodies)
    assert [f["itemIdentifier"] for f in handle(event)["batchItemFailures"]] == [event["Records"][1]["messageId"]]
    assert handle({"Records": event["Records"][1:2]}) == {"batchItemFailures": []}  # delivered again, and answered
    assert tries.count(6.1) == 2
    assert {o["id"]: o.get("code") for o in _drain(sqs, url)} == {"tx-0": None, "tx-1": None, "tx-2": None, "tx-3": "backend_error"}
    assert _traffic(demo, acme) == (5, 2, 3)  # three answered (a row each); tx-1's first delivery and tx-3 failed


def test_records_the_destination_refuses_are_counted_once_in_the_statistics(
    aws: None, bind: Bind, demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PutRecords refuses tx-1 once: tx-1 and the records after it on the shard, answered
    already, are scored again when Lambda delivers them again. Their rows count once, when
    their outputs are written for good (counted at scoring, the four records were seven rows)."""
    from sluice.handlers import stream
    from sluice.stream.sinks import KinesisSink

    kinesis = boto3.client("kinesis", region_name=REGION)
    kinesis.create_stream(StreamName="counted", ShardCount=1)
    handle = bind({"kind": "kinesis", "target": "counted"})
    throttled = _throttled_once(kinesis, "tx-1")
    monkeypatch.setattr(stream, "sink_for", lambda binding: KinesisSink(throttled, "counted"))
    event = kinesis_event(rows(4))
    assert len(handle(event)["batchItemFailures"]) == 3
    assert _traffic(demo, acme) == (1, 0, 1)  # the call answered four; tx-0's answer alone stands
    assert handle({"Records": event["Records"][1:]}) == {"batchItemFailures": []}
    assert _traffic(demo, acme) == (2, 0, 4)


def test_a_kafka_record_is_captured_and_counted(aws: None, bind: Bind, demo: Container, acme: Principal) -> None:
    """A Kafka record's name to the event source is its topic, partition and offset (a dict):
    telling whether it comes again takes it as a key all the same."""
    _sqs, url = _queue("scores")
    demo.deployments.update(acme, "iris", None, capture={"sample_percent": 100})
    handle = bind({"kind": "sqs", "target": url}, source="kafka:transactions")
    assert handle(kafka_event(rows(4), self_managed=True)) == {"batchItemFailures": []}
    assert sorted(r["request_id"] for r in _captured(demo)) == ["tx-0", "tx-1", "tx-2", "tx-3"]
    assert _traffic(demo, acme)[2] == 4


def test_a_record_whose_call_is_bisected_is_captured_once_with_its_own_answer(aws: None, bind: Bind, demo: Container, acme: Principal) -> None:
    """A model answering one row for a whole call has its call bisected after the answer came
    (and was offered to capture): each record is captured once, with the answer written for it."""
    from tests.models import total_model

    demo.models.push(acme, "total", total_model())
    demo.deployments.create(acme, "total", {"kind": "single", "model": "total", "version": 1})
    demo.deployments.update(acme, "total", None, capture={"sample_percent": 100})
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url}, deployment="total")
    assert handle(kinesis_event([json.dumps({"id": f"r{i}", "features": [float(i), 1.0]}) for i in range(4)])) == {"batchItemFailures": []}
    written = {o["id"]: o for o in _drain(sqs, url)}
    captured = _captured(demo)
    assert sorted(r["request_id"] for r in captured) == ["r0", "r1", "r2", "r3"]
    for record in captured:
        assert record["rows"] == 1 and record["outputs"]["total"]["shape"][0] == 1, record
        assert record["outputs"]["total"]["data"] == pytest.approx(np.ravel(written[record["request_id"]]["prediction"]).tolist()), (record, written)


def _refusing_at_once(kinesis: Any, at: int) -> Any:
    """A Kinesis client whose first PutRecords refuses the entry at `at` (throttling) and writes
    the others to moto; every later call writes all."""
    calls = []

    class Throttled:
        def put_records(self, Records: list[dict[str, Any]], **target: Any) -> dict[str, Any]:
            calls.append(len(Records))
            if len(calls) > 1:
                return kinesis.put_records(Records=Records, **target)
            answers = iter(kinesis.put_records(Records=[r for i, r in enumerate(Records) if i != at], **target)["Records"])
            out = [{"ErrorCode": "ProvisionedThroughputExceededException"} if i == at else next(answers) for i in range(len(Records))]
            return {"FailedRecordCount": 1, "Records": out}

    return Throttled()


@pytest.mark.parametrize("ids", [[None] * 4, ["same"] * 4, ["a", None, "a", None]], ids=["no ids", "one id", "mixed"])
def test_records_without_an_id_or_sharing_one_are_captured_once_too(
    aws: None, bind: Bind, demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch, ids: list[str | None]
) -> None:
    """`id` is optional and need not be unique: what is captured once answered for good is the
    record, by its place in the delivery, never every record that shares its id."""
    from sluice.handlers import stream
    from sluice.stream.sinks import KinesisSink

    kinesis = boto3.client("kinesis", region_name=REGION)
    kinesis.create_stream(StreamName="captured", ShardCount=1)
    demo.deployments.update(acme, "iris", None, capture={"sample_percent": 100})
    handle = bind({"kind": "kinesis", "target": "captured"})
    throttled = _refusing_at_once(kinesis, 1)  # one for every call: it refuses once
    monkeypatch.setattr(stream, "sink_for", lambda binding: KinesisSink(throttled, "captured"))
    bodies = [{"features": SETOSA if i % 2 == 0 else VIRGINICA} | ({"id": rid} if rid is not None else {}) for i, rid in enumerate(ids)]
    event = kinesis_event([json.dumps(b) for b in bodies])
    assert len(handle(event)["batchItemFailures"]) == 3  # records 1 to 3: refused, or after the refused one
    first = _captured(demo)
    assert [r["outputs"]["output_label"]["data"] for r in first] == [["setosa"]]  # record 0 alone
    assert handle({"Records": event["Records"][1:]}) == {"batchItemFailures": []}
    every = _captured(demo)
    assert len(every) == 4 and [r["outputs"]["output_label"]["data"][0] for r in every].count("virginica") == 2


def _queue_refusing(sqs: Any, refuses: Any) -> Any:
    """An SQS client that refuses, entry by entry, the messages `refuses(body)` names, as SQS
    refuses what it will never take (SenderFault), and sends the others to moto."""

    class Checked:
        def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            bad = [e for e in Entries if refuses(e["MessageBody"])]
            good = [e for e in Entries if e not in bad]
            sent = sqs.send_message_batch(QueueUrl=QueueUrl, Entries=good).get("Successful", []) if good else []
            failed = [{"Id": e["Id"], "SenderFault": True, "Code": "InvalidParameterValue", "Message": "One or more parameters are invalid."} for e in bad]
            return {"Successful": sent, "Failed": failed}

    return Checked()


def test_a_message_sqs_refuses_for_what_it_holds_becomes_an_error_record_not_a_retry(
    aws: None, bind: Bind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A per-entry refusal with SenderFault (past the queue's own size, a value it does not
    take) is the same on every delivery: that record's output is an error record, counted as
    one, and neither it nor the later records of its shard are retried."""
    from sluice.handlers import stream
    from sluice.stream.sinks import SqsSink

    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    client = _queue_refusing(sqs, lambda body: len(body) > 1500)  # the queue's MaximumMessageSize, say
    monkeypatch.setattr(stream, "sink_for", lambda binding: SqsSink(client, url))
    seen: dict[str, float] = {}
    monkeypatch.setattr(stream.metrics, "add_metric", lambda name, unit, value: seen.__setitem__(name, value))
    monkeypatch.setattr(stream.metrics, "flush_metrics", lambda: None)
    big = json.dumps({"id": "big", "batch": [[5.1, 3.5, 1.4, 0.2]] * 20})
    event = kinesis_event([*rows(1), big, *rows(2, start=2)])
    assert handle(event) == {"batchItemFailures": []}
    out = {o["id"]: o for o in _drain(sqs, url)}
    assert sorted(out) == ["big", "tx-0", "tx-2", "tx-3"]
    assert out["big"]["code"] == "output_refused" and "InvalidParameterValue" in out["big"]["error"]
    assert seen == {"StreamRecordErrors": 1, "StreamRecordRetries": 0}


def test_an_id_with_characters_sqs_refuses_is_written_escaped(aws: None, bind: Bind, monkeypatch: pytest.MonkeyPatch) -> None:
    """U+FFFE and U+FFFF are valid in an id (JSON text) but SQS refuses them raw: the message
    carries them escaped, and reads back as the same id."""
    import re

    from sluice.handlers import stream
    from sluice.stream.sinks import SqsSink

    refused = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")  # what SQS takes, refused otherwise
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    client = _queue_refusing(sqs, refused.search)
    monkeypatch.setattr(stream, "sink_for", lambda binding: SqsSink(client, url))
    ids = [r"card\uffff", r"\ufffe", r"caf\u00e9 \ud83d\ude00 \uFFFF", "plain"]  # as the records' JSON writes them
    bodies = [f'{{"id": "{i}", "features": {json.dumps(SETOSA)}}}' for i in ids]
    assert handle(sqs_event(bodies)) == {"batchItemFailures": []}
    assert sorted(o["id"] for o in _drain(sqs, url)) == sorted(json.loads(f'"{i}"') for i in ids)


def test_an_output_too_large_is_counted_as_a_record_error_and_not_captured(
    aws: None, bind: Bind, demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.handlers import stream

    sqs, url = _queue("scores")
    demo.deployments.update(acme, "iris", None, capture={"sample_percent": 100})
    handle = bind({"kind": "sqs", "target": url})
    seen: dict[str, float] = {}
    monkeypatch.setattr(stream.metrics, "add_metric", lambda name, unit, value: seen.__setitem__(name, value))
    monkeypatch.setattr(stream.metrics, "flush_metrics", lambda: None)
    huge = json.dumps({"id": "huge", "batch": [[5.1, 3.5, 1.4, 0.2]] * 2500})
    assert handle(sqs_event([huge, *rows(2)])) == {"batchItemFailures": []}
    assert {o["id"]: o.get("code") for o in _drain(sqs, url)} == {"huge": "payload_too_large", "tx-0": None, "tx-1": None}
    assert seen.get("StreamRecordErrors") == 1
    assert sorted(r["request_id"] for r in _captured(demo)) == ["tx-0", "tx-1"]


def test_an_output_too_large_for_the_queue_becomes_an_error_record(aws: None, bind: Bind) -> None:
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    rows_ = [[5.1, 3.5, 1.4, 0.2]] * 2500  # one record, 2,500 predictions: over 256 KiB
    event = sqs_event([json.dumps({"id": "huge", "batch": rows_}), *rows(25)])
    assert handle(event) == {"batchItemFailures": []}
    out = {o["id"]: o for o in _drain(sqs, url)}
    assert out["huge"]["code"] == "payload_too_large"
    assert all("prediction" in out[f"tx-{n}"] for n in range(25))


def test_feature_values_that_do_not_stack_are_refused_one_by_one(aws: None, bind: Bind) -> None:
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    flag = {"id": "bool", "features": {"sepal_length": True, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}}
    nested = {"id": "nested", "features": {"sepal_length": [5.1], "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}}
    assert handle(sqs_event([*rows(4), json.dumps(flag), json.dumps(nested)])) == {"batchItemFailures": []}
    out = {o["id"]: o for o in _drain(sqs, url)}
    assert out["bool"]["code"] == "invalid_input" and "true/false" in out["bool"]["error"]
    assert out["nested"]["code"] == "invalid_input"
    assert [out[f"tx-{n}"]["prediction"] for n in range(4)] == ["setosa", "virginica", "setosa", "virginica"]


def test_a_fifo_outage_holds_the_rest_of_each_affected_message_group(aws: None, bind: Bind, half_down: Container) -> None:
    sqs, url = _queue("scores.fifo")
    handle = bind({"kind": "sqs", "target": url}, deployment="mixed")
    users = [f"user-{n}" for n in range(12)]
    down = _remote(half_down, users)
    event = sqs_event([json.dumps({"id": n, "user": u, "inputs": [[5.1, 3.5, 1.4, 0.2]]}) for n, u in enumerate(users)], fifo=True)
    groups = [r["attributes"]["MessageGroupId"] for r in event["Records"]]
    held = set()
    for n, group in enumerate(groups):  # in a group, everything from its first failure on
        if n in down or any(m in down and groups[m] == group for m in range(n)):
            held.add(n)
    answer = handle(event)
    assert {f["itemIdentifier"] for f in answer["batchItemFailures"]} == {event["Records"][n]["messageId"] for n in held}
    assert sorted(o["id"] for o in _drain(sqs, url)) == sorted(set(range(12)) - held)


@pytest.mark.parametrize("source", ["sqs", "kinesis"])  # a body as text, and as bytes
def test_a_record_naming_a_feature_twice_is_refused_not_scored_with_the_last_value(aws: None, bind: Bind, source: str) -> None:
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    features = '"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2'
    bodies = [
        '{"id": "feature", "features": {' + features + ', "sepal_length": 6.7}}',  # the hot path's shape
        '{"id": "in-a-batch", "batch": [{' + features + '}, {' + features + ', "petal_width": 2.3}]}',
        '{"id": "top", "id": "again", "features": {' + features + "}}",
        '{"id": "a, b: c", "features": {' + features + "}}",  # a comma and a colon in a string: scored
        *rows(3),
    ]
    event = sqs_event(bodies) if source == "sqs" else kinesis_event(list(bodies))
    assert handle(event) == {"batchItemFailures": []}
    out = {o["id"]: o for o in _drain(sqs, url)}
    assert out["feature"]["code"] == "invalid_input" and out["feature"]["field"] == "features.sepal_length"
    assert "'sepal_length' is given twice" in out["feature"]["error"] and "prediction" not in out["feature"]
    assert out["in-a-batch"]["code"] == "invalid_input" and "'petal_width' is given twice" in out["in-a-batch"]["error"]
    assert out["again"]["field"] == "id"  # the parser kept the last id; the record is refused all the same
    assert out["a, b: c"]["prediction"] == "setosa"
    assert [out[f"tx-{n}"]["prediction"] for n in range(3)] == ["setosa", "virginica", "setosa"]


def test_a_switch_scores_a_stream_and_each_record_names_its_own_case_and_version(aws: None, bind: Bind, demo: Container, acme: Principal) -> None:
    """The SQS event of `events/` (a setosa by features, a virginica by inputs) through a switch
    on petal length: one bulk call whose rows take different cases; each output says its own."""
    from tests.conftest import MODELS
    from tests.support import single

    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    short = {"field": "inputs.input", "column": "petal_length", "op": "<", "value": 2.5}
    demo.deployments.create(acme, "petals", {"kind": "switch", "cases": [{"name": "short", "when": short, "target": single("iris", 1)}], "default": single("iris", 2)})
    sqs, url = _queue("petal-scores")
    handle = bind({"kind": "sqs", "target": url}, deployment="petals")
    assert handle(load("stream_sqs")) == {"batchItemFailures": []}
    out = sorted(_drain(sqs, url), key=lambda o: o["id"])
    assert [(o["id"], o["prediction"], o["case"], o["model"], o["version"]) for o in out] == [
        ("tx-1", "setosa", "short", "iris", 1),
        ("tx-2", "virginica", "default", "iris", 2),
    ]
    assert all("models" not in o for o in out)  # a record of one row took one case


IRIS = json.dumps(json.loads(rows(1)[0])["features"])


@pytest.mark.parametrize("destination", ["sqs", "s3"])
def test_a_record_whose_id_cannot_come_back_as_given_fails_alone(aws: None, bind: Bind, destination: str) -> None:
    """An id nested 300 deep (JSON the reader takes and the writer cannot write), an integer
    past 64 bits (it would come back rounded), a float, a list, true, 129 characters: each
    record is an error naming `id`; the rest of the batch is scored, ids at the limits kept."""
    refused = ["[" * 300 + "]" * 300, str(2**64), "1.5", "[1]", "true", json.dumps("x" * 129)]
    kept = [json.dumps("x" * 128), str(2**64 - 1), str(-(2**63))]
    bodies = [f'{{"id": {rid}, "features": {IRIS}}}' for rid in [*refused, *kept]]
    if destination == "sqs":
        sqs, url = _queue("scores")
        handle = bind({"kind": "sqs", "target": url})
    else:
        s3 = _bucket()
        handle = bind({"kind": "s3", "target": "s3://sluice-stream-out/scores/"})
    assert handle(kinesis_event([*bodies, *rows(3)])) == {"batchItemFailures": []}
    written = _drain(sqs, url) if destination == "sqs" else [line for lines in _objects(s3).values() for line in lines]
    out = sorted(written, key=lambda o: o["source"]["sequence_number"])
    assert len(out) == len(bodies) + 3
    for o in out[: len(refused)]:
        assert (o["id"], o["code"], o["field"]) == (None, "bad_request", "id") and "prediction" not in o
    assert [o["id"] for o in out[len(refused) :]] == [*map(json.loads, kept), "tx-0", "tx-1", "tx-2"]
    assert all("prediction" in o for o in out[len(refused) :])


def test_an_empty_id_is_no_id_as_the_apis_empty_request_id(aws: None, bind: Bind) -> None:
    """`"id": ""` is none (the output's `id` is null, as a record that gives none), as the API
    takes an empty `request_id`: never echoed as an id nobody can tell from another; an error
    record of the same too."""
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    bodies = [f'{{"id": "", "features": {IRIS}}}', '{"id": "", "inputs": [[5.1, 3.5, 1.4, 0.2]]}', '{"id": "", "features": {"x": 1}}', f'{{"id": 0, "features": {IRIS}}}']
    assert handle(kinesis_event(bodies)) == {"batchItemFailures": []}
    out = sorted(_drain(sqs, url), key=lambda o: o["source"]["sequence_number"])
    assert [o["id"] for o in out] == [None, None, None, 0]
    assert ["prediction" in o for o in out] == [True, True, False, True]


DEEP = object()  # a list nested hundreds deep: JSON the reader takes and the writer cannot write


def _ids() -> Any:
    """Any JSON value as an id: (its text, the value)."""
    from hypothesis import strategies as st

    scalars = st.none() | st.booleans() | st.integers() | st.integers(-(2**65), 2**65) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=140)
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
    return values.map(lambda value: (json.dumps(value), value)) | st.integers(200, 1000).map(lambda depth: ("[" * depth + "]" * depth, DEEP))


def _kept(value: Any) -> bool:
    """docs/streaming.md: an id is a string of at most 128 characters or an integer within 64 bits."""
    return value is None or (isinstance(value, str) and len(value) <= 128) or (type(value) is int and -(2**63) <= value < 2**64)


def _echoed(value: Any) -> Any:
    """The id a kept one comes back as: an empty string is none."""
    return None if value == "" else value


def test_every_id_comes_back_as_given_or_its_record_fails_naming_it(bind: Bind, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever JSON a record's `id` holds, the batch is written: a record whose id the rule
    keeps is scored and carries it back exactly; any other is an error naming `id`."""
    import io

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from sluice.handlers import stream
    from sluice.stream.sinks import FileSink

    handle = bind({"kind": "stdout"})

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(st.lists(_ids(), min_size=1, max_size=4))
    def check(ids: list[tuple[str, Any]]) -> None:
        written = io.BytesIO()
        monkeypatch.setattr(stream, "sink_for", lambda binding: FileSink(written))
        assert handle(sqs_event([f'{{"id": {text}, "features": {IRIS}}}' for text, _ in ids])) == {"batchItemFailures": []}
        out = [json.loads(line) for line in written.getvalue().splitlines()]
        assert len(out) == len(ids)
        for (text, value), o in zip(ids, out, strict=True):
            if value is not DEEP and _kept(value):
                assert o.get("prediction") == "setosa" and type(o["id"]) is type(_echoed(value)) and o["id"] == _echoed(value), (text, o)
            else:
                assert "prediction" not in o and (o["id"], o["field"]) == (None, "id"), (text, o)

    check()


def test_a_fifo_group_is_not_written_past_a_refused_record(aws: None, bind: Bind, monkeypatch: pytest.MonkeyPatch) -> None:
    """A FIFO destination refuses one SendMessageBatch (throttled): the second, tx-1 of group
    card-1 (a call holds one message of a group). The group's later records are not sent, but
    retried with it: sent now, SQS would drop them as duplicates when Lambda delivers them
    again, and the group would read out of order."""
    from sluice.handlers import stream
    from sluice.stream.sinks import SqsSink

    sqs, url = _queue("scores.fifo")
    calls = []

    class Throttled:
        def send_message_batch(self, **call: Any) -> dict[str, Any]:
            calls.append(call)
            if len(calls) == 2:
                raise sqs.exceptions.ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "SendMessageBatch")
            return sqs.send_message_batch(**call)

    handle = bind({"kind": "sqs", "target": url})
    monkeypatch.setattr(stream, "sink_for", lambda binding: SqsSink(Throttled(), url))
    event = sqs_event(rows(25), fifo=True)
    for record in event["Records"]:
        record["attributes"]["MessageGroupId"] = "card-1"
    failed = {f["itemIdentifier"] for f in handle(event)["batchItemFailures"]}
    assert failed == {r["messageId"] for r in event["Records"][1:]}
    assert len(calls) == 2  # nothing of card-1 is sent after the refused call
    assert handle({"Records": event["Records"][1:]}) == {"batchItemFailures": []}  # Lambda delivers them again
    assert [o["id"] for o in _drain(sqs, url)] == [f"tx-{n}" for n in range(25)]


def test_kinesis_and_kafka_data_that_is_not_base64_is_an_error_saying_so(aws: None, bind: Bind) -> None:
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    kinesis = kinesis_event(rows(3))
    kinesis["Records"][1]["kinesis"]["data"] = "not base64!!"
    kafka = kafka_event(rows(2))
    kafka["records"]["transactions-1"][0]["value"] = "%%%"
    for event in (kinesis, kafka):
        assert handle(event) == {"batchItemFailures": []}
    out = _drain(sqs, url)
    assert sorted(o["id"] for o in out if "prediction" in o) == ["tx-0", "tx-0", "tx-2"]
    assert [(o["error"], o["field"]) for o in out if "error" in o] == [("a record's data is not base64", "data")] * 2


def test_a_record_naming_parameters_or_outputs_is_refused_not_scored_without_them(aws: None, bind: Bind, demo: Container, acme: Principal) -> None:
    """A record cannot carry what a request's `parameters` and `outputs` say (a switch on a
    parameter would take another case, fewer outputs were asked for): it gets an error record
    naming the field, and is not retried; a record without them is scored."""
    from tests.support import single

    gold = {"field": "parameters.tier", "op": "==", "value": "gold"}
    demo.deployments.create(acme, "tiered", {"kind": "switch", "cases": [{"name": "gold", "when": gold, "target": single("iris", 1)}], "default": single("iris", 1)})
    sqs, url = _queue("tiered-scores")
    handle = bind({"kind": "sqs", "target": url}, deployment="tiered")
    row = [5.9, 3.0, 5.1, 1.8]
    bodies = [
        {"id": "p", "inputs": [row], "parameters": {"tier": "gold"}},
        {"id": "o", "inputs": [row], "outputs": [{"name": "output_label"}]},
        {"id": "plain", "inputs": [row]},
    ]
    assert handle(sqs_event([json.dumps(b) for b in bodies])) == {"batchItemFailures": []}
    out = {o["id"]: o for o in _drain(sqs, url)}
    assert (out["p"]["code"], out["p"]["field"]) == ("bad_request", "parameters")
    assert (out["o"]["code"], out["o"]["field"]) == ("bad_request", "outputs")
    assert "prediction" not in out["p"] and "prediction" not in out["o"]
    assert out["plain"]["case"] == "default"


def _publish(demo: Container, answers: dict[str, float], now: float) -> None:
    """The table `nightly`: a stored diabetes answer per entity, computed at `now`."""
    from sluice.codecs.stored_rows import encode_rows
    from sluice.registry.precomputed import Publication

    store = demo.precomputed
    assert store is not None
    bodies = encode_rows({"variable": np.asarray([[v] for v in answers.values()], np.float32)}, len(answers))
    store.put_answers("acme", "nightly", "g1", list(zip(answers, bodies, strict=True)), computed_at=now, expires_at=now + 600)
    outputs = [{"name": "variable", "datatype": "FP32", "shape": [-1, 1]}]
    store.publish("acme", "nightly", Publication("g1", "job-1", "diabetes", outputs, published_at=now), expires_at=now + 600)


@pytest.mark.parametrize("key", ["routing_key", "inputs.input"])
def test_a_precomputed_deployment_answers_each_stream_record_as_a_request_of_it_alone(
    aws: None, bind: Bind, demo: Container, acme: Principal, key: str
) -> None:
    """Keyed by the routing key or by an input's column: each record gets its stored answer
    where the table holds its entity, else the live one, as the API answers the record alone;
    its output keeps its position as `source` and says its own `answered_from` and
    `computed_at` (a record of rows answered both ways: one a row)."""
    import asyncio
    import time

    from sluice.domain.requests import ArrayInputs, PredictionRequest
    from tests.support import single

    now = time.time()
    _publish(demo, {"1": 500.0, "u1": 600.0}, now)
    extra = {"column": "age"} if key.startswith("inputs") else {}
    demo.deployments.create(acme, "scores", {"kind": "precomputed", "table": "nightly", "key": key, **extra, "max_age_s": 3600, "live": single("diabetes", 1)})
    ages = {"a": (1.0, "u1"), "b": (2.0, "u7"), "c": (3.0, None)}
    bodies = [{"id": rid, "inputs": [[age, *[0.02] * 9]], **({"routing_key": user} if user else {})} for rid, (age, user) in ages.items()]
    bodies.append({"id": "both", "batch": [[1.0, *[0.02] * 9], [2.0, *[0.02] * 9]], "routing_key": "u7"})
    sqs, url = _queue("precomputed-scores")
    handle = bind({"kind": "sqs", "target": url}, deployment="scores")
    event = sqs_event([json.dumps(b) for b in bodies])
    assert handle(event) == {"batchItemFailures": []}
    out = {o["id"]: o for o in _drain(sqs, url)}
    for body, record in zip(bodies, event["Records"], strict=True):
        rows = np.asarray(body.get("batch") or body["inputs"], np.float32)
        request = PredictionRequest("scores", ArrayInputs({"input": rows}), routing_key=body.get("routing_key"))
        alone = asyncio.run(demo.predictions.predict(acme, request)).answer
        got = out[body["id"]]
        assert got["source"] == {"message_id": record["messageId"]}  # its position, not where its answer came from
        assert got["answered_from"] == alone.source
        assert got.get("computed_at") == (pytest.approx(alone.computed_at) if alone.computed_at is not None else None)
        said = [p["prediction"] for p in got["predictions"]] if "predictions" in got else [got["prediction"]]
        np.testing.assert_allclose(said, alone.result.outputs["variable"][:, 0], rtol=1e-5)
    stored = {"routing_key": {"a"}, "inputs.input": {"a"}}[key]
    assert {rid for rid in ages if out[rid]["answered_from"] == "precomputed"} == stored
    if key == "inputs.input":
        assert out["both"]["answered_from"] == ["precomputed", "live"]


def test_records_taking_switch_cases_of_other_classes_each_answer_as_alone(aws: None, bind: Bind, demo: Container, acme: Principal) -> None:
    """A switch on an input whose cases answer other classes: one-row records of either case,
    scored in one invocation, each answer as a request of it alone (never retried, so never
    dead-lettered); a record whose own rows take both cases is refused as such a request is,
    in an error record, not retried."""
    from tests.models import iris_of_classes
    from tests.support import single

    demo.models.push(acme, "other", iris_of_classes())
    short = {"field": "inputs.input", "column": "petal_length", "op": "<", "value": 2.5}
    demo.deployments.create(acme, "mixed", {"kind": "switch", "cases": [{"name": "short", "when": short, "target": single("other", 1)}], "default": single("iris", 1)})
    sqs, url = _queue("mixed-scores")
    handle = bind({"kind": "sqs", "target": url}, deployment="mixed")
    s, v = [5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]
    bodies = [{"id": "s1", "inputs": [s]}, {"id": "v1", "inputs": [v]}, {"id": "s2", "inputs": [s]}, {"id": "s3", "inputs": [s]}, {"id": "both", "batch": [s, v]}, {"id": "v2", "inputs": [v]}]
    assert handle(sqs_event([json.dumps(b) for b in bodies])) == {"batchItemFailures": []}
    out = {o["id"]: o for o in _drain(sqs, url)}
    assert {rid: (o.get("prediction"), o.get("case")) for rid, o in out.items() if rid != "both"} == {
        "s1": ("A", "short"), "v1": ("virginica", "default"), "s2": ("A", "short"), "s3": ("A", "short"), "v2": ("virginica", "default"),
    }  # fmt: skip
    assert set(out["s1"]["probabilities"]) == {"A", "B", "C"}
    assert (out["both"]["code"], out["both"]["field"]) == ("backend_error", "policy")


def _buffered(bind: Bind, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, io.BytesIO]:
    """A handler bound to stdout, whose lines land in the buffer returned beside it."""
    from sluice.handlers import stream
    from sluice.stream.sinks import FileSink

    handle = bind({"kind": "stdout"})
    written = io.BytesIO()
    monkeypatch.setattr(stream, "sink_for", lambda binding: FileSink(written))
    return handle, written


def _reading_fails(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    """Reading a record that holds "boom" raises `error`; the others are read as they are."""
    from sluice.stream import core

    read = core.StreamScorer._item

    def failing(self: Any, index: int, raw: Any, *args: Any) -> Any:
        if "boom" in str(raw):
            raise error
        return read(self, index, raw, *args)

    monkeypatch.setattr(core.StreamScorer, "_item", failing)


def _nested(depth: int, objects: bool) -> str:
    """A JSON value `depth` arrays (or objects) deep, the innermost holding 1."""
    return ('{"a": ' * depth + "1" + "}" * depth) if objects else "[" * depth + "1" + "]" * depth


def test_a_record_nested_too_deep_to_read_fails_alone_on_every_source(bind: Bind, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/streaming.md#failures: a record is read as orjson reads it (1,024 levels, the record
    itself counted; the HTTP API's 200 are no limit here). One nested deeper, or too deep for
    reading it to walk (hypothesis gives the stack room: see the test below), is an error record
    naming the member, on SQS, Kinesis and Kafka alike; the records beside it are scored and the
    batch reports no failure. One of 200 levels or fewer is read as any other."""
    import io

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from sluice.handlers import stream
    from sluice.stream.sinks import FileSink

    handle = bind({"kind": "stdout"})
    events = {"sqs": sqs_event, "kinesis": kinesis_event, "kafka": kafka_event}

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(
        source=st.sampled_from(sorted(events)),
        member=st.sampled_from(["features", "inputs", "batch", "id"]),
        depth=st.sampled_from([198, 199, 200, 201, 202, 990, 1000, 1023, 1024, 1100]) | st.integers(150, 1100),
        objects=st.booleans(),
        at=st.integers(0, 2),
    )
    def check(source: str, member: str, depth: int, objects: bool, at: int) -> None:
        written = io.BytesIO()
        monkeypatch.setattr(stream, "sink_for", lambda binding: FileSink(written))
        bodies = rows(3)
        bodies.insert(at, f'{{"id": "deep", "{member}": {_nested(depth - 1, objects)}}}' if member != "id" else f'{{"id": {_nested(depth - 1, objects)}, "features": {IRIS}}}')
        assert handle(events[source](bodies)) == {"batchItemFailures": []}
        out = [json.loads(line) for line in written.getvalue().splitlines()]
        assert len(out) == 4
        poison = next(o for o in out if o["id"] in ("deep", None))
        assert sorted(o["prediction"] for o in out if o is not poison) == ["setosa", "setosa", "virginica"]  # Kafka's come by partition
        deep = "nested too deep to read" in poison["error"]
        if deep:
            assert (poison["code"], poison["field"]) == ("bad_request", member) and poison["error"].startswith(f"'{member}' is nested"), poison
        else:  # read, then refused for what it holds (no such feature, rows that are not numbers, an id that is no id, features that are rows)
            assert poison["code"] in ("bad_request", "invalid_input", "invalid_request"), poison
        if depth > 1024:  # past orjson's limit
            assert f"'{member}' is nested too deep to read: more than 1,024 levels" in poison["error"], poison
        elif depth <= 200:
            assert not deep, poison

    check()


@pytest.mark.parametrize("source", ["sqs", "kinesis", "kafka"])
@pytest.mark.parametrize(("member", "deep"), [("features", '{"a": ' * 1000 + "1" + "}" * 1000), ("inputs", "[" * 1000 + "true" + "]" * 1000)])
def test_a_record_too_deep_for_the_stack_is_an_error_record_naming_its_member(bind: Bind, monkeypatch: pytest.MonkeyPatch, source: str, member: str, deep: str) -> None:
    """A valid record 1,001 levels deep (orjson reads it; walking it, for names given twice or
    for true/false among numbers, runs out of Python's stack) is one error record naming the
    member and its depth; the records beside it are scored, and no batch item fails."""


    handle, written = _buffered(bind, monkeypatch)
    bodies = [*rows(2), f'{{"id": "deep", "{member}": {deep}}}', *rows(1, start=2)]
    event = {"sqs": sqs_event, "kinesis": kinesis_event, "kafka": kafka_event}[source](bodies)
    assert handle(event) == {"batchItemFailures": []}
    out = {o["id"]: o for o in map(json.loads, written.getvalue().splitlines())}
    assert (out["deep"]["code"], out["deep"]["field"]) == ("bad_request", member), out["deep"]
    assert out["deep"]["error"].startswith(f"'{member}' is nested too deep to read"), out["deep"]
    assert [out[f"tx-{n}"]["prediction"] for n in range(3)] == ["setosa", "virginica", "setosa"]


@pytest.mark.parametrize("member", ["variant", "routing_key"])
def test_a_variant_or_routing_key_too_deep_for_the_stack_is_the_records_error(bind: Bind, monkeypatch: pytest.MonkeyPatch, member: str) -> None:
    """Routing reads a record's variant and routing key as text: one nested 1,000 deep (its text
    a walk the stack does not hold) is that record's error naming the member, never the batch's
    (it was made at scoring time, past the reader, and failed every record of the batch)."""


    handle, written = _buffered(bind, monkeypatch)
    bodies = [*rows(2), f'{{"id": "deep", "features": {IRIS}, "{member}": {"[" * 1000 + "1" + "]" * 1000}}}', *rows(1, start=2)]
    assert handle(sqs_event(bodies)) == {"batchItemFailures": []}
    out = {o["id"]: o for o in map(json.loads, written.getvalue().splitlines())}
    assert (out["deep"]["code"], out["deep"]["field"]) == ("bad_request", member), out["deep"]
    assert [out[f"tx-{n}"]["prediction"] for n in range(3)] == ["setosa", "virginica", "setosa"]


def test_a_records_routing_key_is_text_or_a_whole_number_as_a_v2_parameters_is(bind: Bind, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record's routing key is held to the rule a v2 request's is (`routing_key_text`): a
    whole number routes as its digits, anything else (true, a fraction, an object) or text past
    256 characters is that record's error naming it, never its Python spelling routed on."""
    handle, written = _buffered(bind, monkeypatch)
    odd = {"true": "true", "fraction": "1.5", "object": '{"a": 1}', "long": json.dumps("u" * 257)}
    bodies = [*rows(1), *(f'{{"id": "{name}", "features": {IRIS}, "routing_key": {key}}}' for name, key in odd.items())]
    bodies.append(f'{{"id": "number", "features": {IRIS}, "routing_key": 7}}')
    assert handle(sqs_event(bodies)) == {"batchItemFailures": []}
    out = {o["id"]: o for o in map(json.loads, written.getvalue().splitlines())}
    for name in odd:
        assert (out[name]["code"], out[name]["field"]) == ("bad_request", "routing_key"), out[name]
    assert out["number"]["prediction"] == out["tx-0"]["prediction"] == "setosa"


def test_a_record_that_breaks_the_reader_unexpectedly_is_an_internal_error_record_not_a_lost_batch(
    bind: Bind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever a record makes the reader raise (a fault of sluice's, here a RecursionError),
    that record gets an `internal_error` record, never retried (reading it again fails again),
    and the rest of the batch is scored: no batch item failure, nothing lost."""


    handle, written = _buffered(bind, monkeypatch)
    _reading_fails(monkeypatch, RecursionError("maximum recursion depth exceeded"))
    bodies = [*rows(2), json.dumps({"id": "boom", "inputs": [[5.1, 3.5, 1.4, 0.2]]}), *rows(2, start=2)]
    assert handle(sqs_event(bodies)) == {"batchItemFailures": []}
    out = {o["id"]: o for o in map(json.loads, written.getvalue().splitlines())}
    assert out["boom"]["code"] == "internal_error" and "prediction" not in out["boom"] and "Recursion" not in out["boom"]["error"]
    assert [out[f"tx-{n}"]["prediction"] for n in range(4)] == ["setosa", "virginica", "setosa", "virginica"]


@pytest.mark.parametrize("source", ["sqs", "kinesis", "kafka"])
def test_each_record_of_a_scalar_model_is_answered_by_a_call_of_its_own(aws: None, bind: Bind, demo: Container, acme: Principal, source: str) -> None:
    """A model whose input is a scalar (shape []) answers every scalar record of a batch, one
    model call each (a rank-0 input takes no batch: records cannot be stacked), with its own
    0-d answer as its one prediction; a record giving a batch instead (shape [1], a list) is
    that record's own error record naming the input, never a retry of the batch."""
    from tests.models import relu_model

    demo.models.push(acme, "scalar", relu_model([]))
    demo.deployments.create(acme, "scalar", {"kind": "single", "model": "scalar", "version": 1})
    sqs, url = _queue("scalar-scores")
    handle = bind({"kind": "sqs", "target": url}, deployment="scalar")
    shapes: list[tuple[int, ...]] = []
    predict = demo.stream_predictions.predict

    async def spying(principal: Principal, request: Any) -> Any:
        shapes.append(request.inputs.arrays["x"].shape)
        return await predict(principal, request)

    demo.stream_predictions.predict = spying  # type: ignore[method-assign]
    values = [-1.5, 2.0, 0.25, -3.0, 7.0]
    bodies = [{"id": f"v2-{i}", "inputs": [{"name": "x", "datatype": "FP32", "shape": [], "data": [x]}]} for i, x in enumerate(values)]
    bodies += [{"id": "plain", "inputs": {"x": 4.5}}]
    bodies += [{"id": "row", "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}, {"id": "list", "inputs": {"x": [1.0, 2.0]}}]
    texts = [json.dumps(b) for b in bodies]
    event = {"sqs": sqs_event, "kinesis": kinesis_event, "kafka": kafka_event}[source](texts)  # type: ignore[operator]
    assert handle(event) == {"batchItemFailures": []}
    out = {o["id"]: o for o in _drain(sqs, url)}
    assert sorted(out) == sorted(b["id"] for b in bodies)  # every record accounted for
    expected = {f"v2-{i}": max(x, 0.0) for i, x in enumerate(values)} | {"plain": 4.5}
    assert {rid: out[rid].get("prediction") for rid in expected} == expected
    assert all(out[rid]["model"] == "scalar" and "predictions" not in out[rid] for rid in expected)
    for rid in ("row", "list"):
        assert (out[rid]["code"], out[rid]["field"]) == ("invalid_input", "inputs.x.shape") and "shape []" in out[rid]["error"], out[rid]
    assert shapes == [()] * len(expected)  # one call per scalar record, given as a scalar


@pytest.mark.parametrize("short", [MemoryError(), OSError(24, "Too many open files")])
def test_a_record_that_finds_the_process_short_of_memory_fails_the_batch_for_a_retry(
    bind: Bind, monkeypatch: pytest.MonkeyPatch, short: Exception
) -> None:
    """Running short of memory (or of files, sockets) while reading a record is no fault of the
    record: a retry may find them. It fails the invocation, so Lambda delivers the batch again,
    and no record of it is written as a permanent error."""


    handle, written = _buffered(bind, monkeypatch)
    _reading_fails(monkeypatch, short)
    bodies = [*rows(2), json.dumps({"id": "boom", "inputs": [[5.1, 3.5, 1.4, 0.2]]})]
    with pytest.raises(type(short)):
        handle(sqs_event(bodies))
    assert written.getvalue() == b""


def test_a_kpl_aggregate_retried_whole_captures_each_user_record_once(aws: None, bind: Bind, demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    """The destination refuses an aggregate's third user record once: the aggregate (one
    sequence number) is the batch item failure and comes back whole, so the user records
    answered before it are answered again; each is captured once, when its aggregate is done."""
    import hashlib

    from sluice.handlers import stream
    from sluice.stream.sinks import KinesisSink
    from tests.unit.test_kpl_records import AGGREGATED

    kinesis = boto3.client("kinesis", region_name=REGION)
    kinesis.create_stream(StreamName="captured", ShardCount=1)
    demo.deployments.update(acme, "iris", None, capture={"sample_percent": 100})
    handle = bind({"kind": "kinesis", "target": "captured"})
    sink = KinesisSink(_throttled_once(kinesis, "tx-2"), "captured")
    monkeypatch.setattr(stream, "sink_for", lambda binding: sink)
    message = AGGREGATED(partition_key_table=["card-1"])
    for body in rows(4):
        message.records.add(partition_key_index=0, data=body.encode())
    inner = message.SerializeToString()
    event = kinesis_event([b"\xf3\x89\x9a\xc2" + inner + hashlib.md5(inner, usedforsecurity=False).digest()])
    assert handle(event)["batchItemFailures"]  # the aggregate, retried
    assert handle(event)["batchItemFailures"] == []  # delivered again, whole, and answered
    assert sorted(r["request_id"] for r in _captured(demo)) == ["tx-0", "tx-1", "tx-2", "tx-3"]


def test_a_failed_delivery_counts_the_step_that_failed_each_time(aws: None, bind: Bind, demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sequence whose model step fails for now, then answers when Lambda delivers the record
    again: the step counts a failure and an answer, as the deployment does (and as over HTTP)."""
    from sluice.domain.errors import Unavailable
    from tests.integration.test_graphs import CHAIN, ROWS
    from tests.models import embed_model, score_model

    demo.models.push(acme, "embed", embed_model())
    demo.models.push(acme, "scorez", score_model("z"))
    demo.deployments.create(acme, "chain", CHAIN)
    _, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url}, deployment="chain")
    runner = type(demo.stream_predictions.runner)
    real, tries = runner.run, []

    async def flaky(self: Any, node: Any, call: Any, arrays: dict[str, np.ndarray], depth: int = 0) -> Any:
        if getattr(node, "model", None) == "scorez":
            tries.append(1)
            if len(tries) == 1:
                raise Unavailable("the model server went away")
        return await real(self, node, call, arrays, depth)

    monkeypatch.setattr(runner, "run", flaky)
    event = sqs_event([json.dumps({"id": "tx-0", "inputs": [ROWS[0]]})])
    assert len(handle(event)["batchItemFailures"]) == 1  # failed for now: delivered again
    assert handle(event) == {"batchItemFailures": []}
    demo.stream_predictions.stats.flush()
    stats = demo.deployments.stats(acme, "chain")
    assert (stats["overall"]["requests"], stats["overall"]["errors"]) == (2, 1)
    assert (stats["steps"]["score"]["requests"], stats["steps"]["score"]["errors"]) == (2, 1), stats["steps"]


def test_a_call_whose_answer_is_thrown_away_is_not_counted(aws: None, bind: Bind, demo: Container, acme: Principal) -> None:
    """A model answering one row for any call: each call of several records is split until its
    records answer alone; the rows counted are the records', once, not each split call's too."""
    from tests.models import total_model

    demo.models.push(acme, "total", total_model())
    demo.deployments.create(acme, "total", {"kind": "single", "model": "total", "version": 1})
    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url}, deployment="total")
    assert handle(kinesis_event([json.dumps({"id": f"r{i}", "features": [float(i), 1.0]}) for i in range(4)])) == {"batchItemFailures": []}
    assert len(_drain(sqs, url)) == 4
    assert _traffic(demo, acme, "total") == (4, 0, 4)


def test_a_refused_record_in_a_bisected_call_is_one_failed_request(
    aws: None, bind: Bind, demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight records in one call, the sixth refused by the model: the call is halved until that
    record fails alone and the others answer. The failure counts once (the record's), in the
    statistics and in the failures' metrics alike, not once per call that held it on the way
    down: three calls answered seven records, one failed."""
    from sluice.domain.errors import ModelFailed

    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    runner = type(demo.stream_predictions.runner)
    real, calls = runner.run, []

    async def refusing(self: Any, node: Any, call: Any, arrays: dict[str, np.ndarray], depth: int = 0) -> Any:
        lengths = np.round(next(iter(arrays.values()))[:, 0], 3).tolist()
        calls.append(len(lengths))
        if 6.5 in lengths:
            raise ModelFailed("the model fails on this record")
        return await real(self, node, call, arrays, depth)

    monkeypatch.setattr(runner, "run", refusing)
    telemetry = demo.stream_predictions.telemetry
    errors_before = telemetry.errors
    lengths = [5.0, 5.1, 5.2, 5.3, 5.4, 6.5, 5.6, 5.7]
    bodies = [json.dumps({"id": f"tx-{n}", "features": {**SETOSA, "sepal_length": x}}) for n, x in enumerate(lengths)]
    assert handle(sqs_event(bodies)) == {"batchItemFailures": []}  # failed for good: an error record
    assert calls == [8, 4, 4, 2, 1, 1, 2]
    assert {o["id"]: o.get("code") for o in _drain(sqs, url)} == {f"tx-{n}": "backend_error" if n == 5 else None for n in range(8)}
    assert _traffic(demo, acme) == (4, 1, 7)
    assert telemetry.errors - errors_before == 1


@hypothesis.settings(max_examples=12, deadline=None, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(refused=st.lists(st.booleans(), min_size=1, max_size=16))
def test_however_refused_records_fall_each_counts_once(
    aws: None, bind: Bind, demo: Container, acme: Principal, refused: list[bool]
) -> None:
    """Whichever of a micro-batch's records the model refuses: one failed request each, and one
    answered request for each call that answered (the statistics and the failures' metrics)."""
    from sluice.domain.errors import ModelFailed

    sqs, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url})
    runner = type(demo.stream_predictions.runner)
    real, answered = runner.run, []
    bad = {4.0 + n / 8 for n, no in enumerate(refused) if no}  # exact in FP32

    async def refusing(self: Any, node: Any, call: Any, arrays: dict[str, np.ndarray], depth: int = 0) -> Any:
        if bad & set(next(iter(arrays.values()))[:, 0].tolist()):
            raise ModelFailed("the model fails on this record")
        answered.append(1)
        return await real(self, node, call, arrays, depth)

    telemetry = demo.stream_predictions.telemetry
    before, errors_before = _traffic(demo, acme), telemetry.errors
    bodies = [json.dumps({"id": f"tx-{n}", "features": {**SETOSA, "sepal_length": 4.0 + n / 8}}) for n in range(len(refused))]
    with pytest.MonkeyPatch.context() as patched:  # each example's own (the fixture's outlives them)
        patched.setattr(runner, "run", refusing)
        assert handle(sqs_event(bodies)) == {"batchItemFailures": []}
    assert len(_drain(sqs, url)) == len(refused)
    requests, errors, rows = (a - b for a, b in zip(_traffic(demo, acme), before, strict=True))
    assert (requests, errors, rows) == (len(answered) + sum(refused), sum(refused), len(refused) - sum(refused))
    assert telemetry.errors - errors_before == sum(refused)


SHADOWED = {
    "kind": "shadow", "primary": {"kind": "single", "model": "iris", "version": 1},
    "mirrors": [{"name": "forest", "target": {"kind": "single", "model": "iris", "version": 2}}],
}  # fmt: skip


def test_a_streams_shadow_mirror_counts_every_call_it_was_handed(aws: None, bind: Bind, demo: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local mirror runs on a loop of its own, after the micro-batch is counted: its calls
    are counted as they end (the verdicts a promotion reads), not held with the micro-batch's,
    and all of them end before the invocation returns."""
    import asyncio

    from sluice.inference.shadow_runner import ShadowRunner
    from tests.conftest import MODELS

    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    demo.deployments.create(acme, "shadowed", SHADOWED)
    real = ShadowRunner.run

    ended: list[str] = []

    async def later(self: Any, job: Any) -> None:  # a mirror answering well after the primary, as a candidate may
        await asyncio.sleep(0.5)
        await real(self, job)
        ended.append(job.mirror)

    monkeypatch.setattr(ShadowRunner, "run", later)
    _, url = _queue("scores")
    handle = bind({"kind": "sqs", "target": url}, deployment="shadowed")
    demo.settings.stream.stream_batch_rows = 1  # a call (and a mirror) for each record
    assert handle(sqs_event(rows(4))) == {"batchItemFailures": []}
    # Ended before the invocation returned (the function runs its mirrors itself, and Lambda
    # freezes it once it returns): nothing waited for here.
    assert ended == ["forest"] * 4
    demo.predictions.stats.flush()
    assert demo.deployments.stats(acme, "shadowed")["mirrors"]["forest"]["requests"] == 4
