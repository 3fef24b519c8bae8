"""What the stream sinks send, on a recorded SendMessageBatch (no AWS): an output JSON cannot
hold becomes its record's error output, never a failed batch; and a FIFO message group is
always one SQS takes, whatever the input's key."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sluice.stream.records import StreamRecord
from sluice.stream.sinks import FileSink, SqsSink

FIFO = "https://sqs.eu-west-1.amazonaws.com/123456789012/scores.fifo"
# The SendMessageBatch reference: 1 to 128 characters, alphanumerics and ASCII punctuation.
SQS_GROUP = re.compile(r"[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}")


class Recorded:
    """boto3's SQS client as far as SendMessageBatch goes: every entry taken, and kept."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.entries.extend(Entries)
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}


def _record(n: int, key: str | None = None) -> StreamRecord:
    return StreamRecord(b"{}", "arn:aws:kinesis:eu-west-1:123456789012:stream/in", str(n), {"shard": "s", "sequence_number": str(n)}, "s", key)


def _output(n: int, value: Any = "setosa") -> dict[str, Any]:
    return {"id": f"tx-{n}", "source": {"shard": "s", "sequence_number": str(n)}, "deployment": "iris", "prediction": value}


@pytest.mark.parametrize(
    "value",
    [
        json.loads("[" * 300 + "]" * 300),  # nested past the encoder's depth
        2**70,  # past 64 bits
        "\ud800",  # a lone surrogate: not UTF-8
        object(),
        np.array([1, 2], dtype=object),
    ],
    ids=["deep", "big-int", "surrogate", "object", "object-array"],
)
def test_an_output_json_cannot_hold_fails_alone_in_every_sink(value: Any) -> None:
    records = [_record(n) for n in range(3)]
    outputs = [(0, _output(0)), (1, _output(1, value)), (2, _output(2))]
    buffer = io.BytesIO()
    assert FileSink(buffer).write(records, outputs) == set()  # JSON Lines: S3 and `sluice stream` too
    client = Recorded()
    assert SqsSink(client, FIFO).write(records, outputs) == set()
    for lines in (buffer.getvalue().splitlines(), [e["MessageBody"] for e in client.entries]):
        out = [json.loads(line) for line in lines]
        assert [o["id"] for o in out] == ["tx-0", "tx-1", "tx-2"]
        assert [o.get("prediction") for o in out] == ["setosa", None, "setosa"]
        assert out[1]["code"] == "internal_error" and out[1]["source"] == {"shard": "s", "sequence_number": "1"}


keys = st.text(max_size=300) | st.binary(max_size=40).map(lambda raw: raw.decode("utf-8", "replace"))


@settings(max_examples=200)
@given(keys)
@example("customer " + "x" * 191)  # a Kinesis partition key may be 256 characters
@example("größe/ü")
@example("\x00\x01\ufffd\ufffdavro")  # a binary Kafka key, as Lambda's base64 decodes
@example("card-1")
@example("x" * 128)
def test_a_fifo_message_group_is_always_one_sqs_takes_and_the_key_itself_when_it_is(key: str) -> None:
    client = Recorded()
    SqsSink(client, FIFO).write([_record(0, key or None)], [(0, _output(0))])
    (entry,) = client.entries
    assert SQS_GROUP.fullmatch(entry["MessageGroupId"]), entry["MessageGroupId"]
    if SQS_GROUP.fullmatch(key):
        assert entry["MessageGroupId"] == key
    assert SQS_GROUP.fullmatch(entry["MessageDeduplicationId"])


def test_distinct_keys_give_distinct_groups() -> None:
    client = Recorded()
    keys = ["größe/ü", "grösse/ü", "x" * 129, "x" * 130, "a b", "a  b"]
    SqsSink(client, FIFO).write([_record(n, key) for n, key in enumerate(keys)], [(n, _output(n)) for n in range(len(keys))])
    assert len({e["MessageGroupId"] for e in client.entries}) == len(keys)


class RefusingFirst(Recorded):
    """SendMessageBatch refusing, for now, the first entry it is given of `group` (throttled):
    the others of the call are taken, as SQS takes them."""

    def __init__(self, group: str) -> None:
        super().__init__()
        self.group, self.calls, self.refused = group, 0, False

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        taken, failed = [], []
        for entry in Entries:
            if entry["MessageGroupId"] == self.group and not self.refused:
                self.refused = True
                failed.append({"Id": entry["Id"], "SenderFault": False, "Code": "ThrottlingException"})
            else:
                taken.append(entry)
        self.entries.extend(taken)
        return {"Successful": [{"Id": e["Id"]} for e in taken], "Failed": failed}


def test_a_fifo_group_is_never_written_out_of_order_when_sqs_refuses_one_of_its_messages_for_now() -> None:
    """Three messages of group a among others in what one SendMessageBatch could hold: SQS
    refuses the first of a for now. Nothing of a after it is written (each call holds one message
    of a group, the next call waits for it), so all of a is retried, in order; b and c are written."""
    keys = ["a", "b", "a", "c", "a", "b"]
    client = RefusingFirst("a")
    failed = SqsSink(client, FIFO).write([_record(n, key) for n, key in enumerate(keys)], [(n, _output(n)) for n in range(len(keys))])
    assert failed == {0, 2, 4}
    assert [json.loads(e["MessageBody"])["id"] for e in client.entries] == ["tx-1", "tx-3", "tx-5"]
    assert client.calls == 3  # one message of a group in each call: [a, b], [a, c], [a, b]


class Bounded(Recorded):
    """SendMessageBatch as SQS bounds it: a call whose messages' text passes 256 KiB in all is
    refused whole (BatchRequestTooLong), for good."""

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        if sum(len(e["MessageBody"].encode()) for e in Entries) > 256 * 1024:
            raise RuntimeError("BatchRequestTooLong")
        return super().send_message_batch(QueueUrl, Entries)


@pytest.mark.parametrize("queue", [FIFO, FIFO.removesuffix(".fifo")])
def test_an_sqs_message_is_measured_as_sqs_takes_it_with_its_not_characters_escaped(queue: str) -> None:
    """U+FFFE and U+FFFF go to SQS escaped (3 bytes each in UTF-8, 6 escaped): an output under
    256 KiB raw that passes it once escaped is an error output saying so, written, where it was
    refused whole at every try (its record never written, the records of its call retried with it)."""
    records = [_record(n) for n in range(3)]
    wide = "\ufffe" * 60_000  # 180,000 bytes raw, 360,000 escaped
    outputs = [(0, _output(0)), (1, _output(1, wide)), (2, _output(2, "\uffff" * 30_000))]  # the last: 90,000 and 180,000
    client = Bounded()
    assert SqsSink(client, queue).write(records, outputs) == set()
    out = {json.loads(e["MessageBody"])["id"]: json.loads(e["MessageBody"]) for e in client.entries}
    assert set(out) == {"tx-0", "tx-1", "tx-2"}
    assert out["tx-1"]["code"] == "payload_too_large" and "prediction" not in out["tx-1"], out["tx-1"]
    assert out["tx-2"]["prediction"] == "\uffff" * 30_000 and out["tx-0"]["prediction"] == "setosa"
