"""Where output records go: an SQS queue, a Kinesis stream, a Firehose delivery stream, S3, or
a file (the local twin's stdout). Each sink writes JSON, one record per message (one per line
in S3 and Firehose), and answers which records it could not write: those are retried.

- SQS FIFO queues get the input record's order key (`_group_id`) as the group id and a
  deduplication id derived from the input record, so a redelivered record is dropped by SQS.
  So once a record of a group is refused, that group's later records are not sent either:
  sent ahead of it, they would be dropped as duplicates when it comes again.
- Kinesis records take the input's partition key, so one input partition stays one output
  partition and keeps its order.
- S3 gets one object per write, named by the whole set of records it holds (the first
  one's position, then a digest of every record's identity, in order): a batch delivered
  again rewrites its own object with the same lines, and a different set of records (one
  redelivered beside new ones) never overwrites another's object.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from orjson import JSONEncodeError

from sluice.stream.reading import valid_id

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import BinaryIO

    from sluice.clients import AwsClients
    from sluice.stream.bindings import Destination
    from sluice.stream.records import StreamRecord

KiB, MiB = 1024, 1024 * 1024
Output = tuple[int, dict[str, Any]]  # (index of the input record, the output record)


class Sink(Protocol):
    def write(self, records: Sequence[StreamRecord], outputs: Sequence[Output]) -> set[int]:
        """Write the outputs; return the indexes of the records whose output was not written."""
        ...


_ONE = orjson.OPT_SERIALIZE_NUMPY
_LINE = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE


def encode(output: dict[str, Any]) -> bytes:
    """The output as JSON; one JSON cannot hold becomes its record's error output (`UNWRITABLE`)."""
    try:
        return orjson.dumps(output, option=_ONE)
    except JSONEncodeError:
        return orjson.dumps(_instead(output, *UNWRITABLE), option=_ONE)


def _instead(output: dict[str, Any], error: str, code: str, *, source: Any = None) -> dict[str, Any]:
    """`output` made its record's error output, in place: the record's outcome holds this very
    dict, so what is counted (a record error, never a prediction) is what was written. It keeps
    the output's id only where the id rule allows it (so it encodes in turn), and its source:
    the record's position where given."""
    rid = output.get("id")
    made = {
        "id": rid if valid_id(rid) else None,
        "source": output.get("source") if source is None else source,
        "deployment": output.get("deployment"),
        "error": error,
        "code": code,
    }
    output.clear()
    output.update(made)
    return output


def json_lines(outputs: Sequence[Output]) -> bytes:
    """The outputs as JSON Lines, each as `encode` makes it. Each line is copied into one
    buffer as it is made: holding a thousand encoder results until a join costs several times
    the encoding itself."""
    buffer = bytearray()
    extend, dumps = buffer.extend, orjson.dumps
    for _, output in outputs:
        try:
            extend(dumps(output, option=_LINE))
        except JSONEncodeError:
            extend(dumps(_instead(output, *UNWRITABLE), option=_LINE))
    return bytes(buffer)


# The error output of a record whose output JSON cannot hold (a value nested past the encoder's
# depth, one of a type it does not know): that record fails alone, never its batch.
UNWRITABLE = ("the output holds a value JSON cannot carry", "internal_error")


class FileSink:
    """JSON Lines to a binary file: `sluice stream`'s stdout."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out

    def write(self, records: Sequence[StreamRecord], outputs: Sequence[Output]) -> set[int]:
        self.out.write(json_lines(outputs))
        self.out.flush()
        return set()


class SqsSink:
    # SendMessageBatch: ten messages, 256 KiB in all (and so per message).
    COUNT, TOTAL, ITEM = 10, 256 * KiB, 256 * KiB

    def __init__(self, client: Any, queue_url: str) -> None:
        self.client, self.queue_url = client, queue_url
        self.fifo = queue_url.endswith(".fifo")

    def write(self, records: Sequence[StreamRecord], outputs: Sequence[Output]) -> set[int]:
        failed: set[int] = set()
        held: set[str] = set()  # FIFO: groups with a refused record, whose later records wait for it
        answers = dict(outputs)
        faulted: list[Output] = []  # outputs the queue refused as they are: their error outputs, sent after
        for part in self._parts(records, outputs):
            refused, faults = self._send(records, part, held, failed)
            for index, reason in faults:
                # Refused for what it holds (past the queue's own size, a value it does not take):
                # sent again it would be refused again, so it is not retried.
                error = _instead(answers[index], f"the destination refused the output: {reason}", "output_refused", source=records[index].position)
                faulted.append((index, error))
            failed.update(refused)
            if self.fifo:
                held.update(_group_id(records[index]) for index in refused)
        for part in self._parts(records, faulted):
            refused, faults = self._send(records, part, held, failed, again=True)
            failed.update(refused)
            failed.update(index for index, _ in faults)  # an error output refused too: retried, never lost
        return failed

    def _parts(self, records: Sequence[StreamRecord], outputs: Sequence[Output]) -> Iterator[list[tuple[int, bytes]]]:
        """The SendMessageBatch calls; on a FIFO queue, at most one message of a group in each: an
        entry SQS refuses for now while a later one of its group in the same call is taken would
        put them out of order for good (sent again, the refused one lands after it, and the later
        one, sent again too, is dropped as a duplicate), so each call waits for the one before."""
        for part in _calls(records, outputs, self.COUNT, self.TOTAL, self.ITEM, _sqs_encoded):
            if not self.fifo:
                yield part
                continue
            call: list[tuple[int, bytes]] = []
            groups: set[str] = set()
            for entry in part:
                group = _group_id(records[entry[0]])
                if group in groups:
                    yield call
                    call, groups = [], set()
                call.append(entry)
                groups.add(group)
            if call:
                yield call

    def _send(
        self, records: Sequence[StreamRecord], part: list[tuple[int, bytes]], held: set[str], failed: set[int], *, again: bool = False
    ) -> tuple[list[int], list[tuple[int, str]]]:
        """One SendMessageBatch: the records refused for now (retried), and those the queue
        refused for what they hold (SenderFault: the same message is refused every time), with
        why. `again`: error outputs in place of refused ones (their own deduplication ids)."""
        entries, sent = [], []
        for index, body in part:
            entry: dict[str, Any] = {"Id": str(len(entries)), "MessageBody": body.decode()}  # escaped as measured (`_sqs_encoded`)
            if self.fifo:
                record = records[index]
                group = entry["MessageGroupId"] = _group_id(record)
                if group in held:
                    failed.add(index)
                    continue
                entry["MessageDeduplicationId"] = record.dedup if not again else hashlib.sha256(f"{record.dedup}:error".encode()).hexdigest()
            entries.append(entry)
            sent.append(index)
        if not entries:
            return [], []
        try:
            answer = self.client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        except Exception:  # throttled, unreachable: every record of this call is retried
            return sent, []
        refused, faults = [], []
        for f in answer.get("Failed") or ():
            index = sent[int(f["Id"])]
            if f.get("SenderFault"):
                faults.append((index, f"{f.get('Code') or 'refused'}: {str(f.get('Message') or '')[:200]}"))
            else:
                refused.append(index)
        return refused, faults


class KinesisSink:
    # PutRecords: 500 records, 5 MiB in all, 1 MiB per record (its partition key included).
    COUNT, TOTAL, ITEM = 500, 5 * MiB, MiB - 256

    def __init__(self, client: Any, stream: str) -> None:
        self.client = client
        self.target = {"StreamARN": stream} if stream.startswith("arn:") else {"StreamName": stream}

    def write(self, records: Sequence[StreamRecord], outputs: Sequence[Output]) -> set[int]:
        failed: set[int] = set()
        for part in _calls(records, outputs, self.COUNT, self.TOTAL - 256 * self.COUNT, self.ITEM):
            entries = [{"Data": body, "PartitionKey": _partition_key(records[index])} for index, body in part]
            try:
                answer = self.client.put_records(Records=entries, **self.target)
            except Exception:
                failed.update(index for index, _ in part)
                continue
            failed.update(part[n][0] for n, r in enumerate(answer.get("Records") or ()) if r.get("ErrorCode"))
        return failed


class FirehoseSink:
    # PutRecordBatch: 500 records, 4 MiB in all, 1,000 KiB per record.
    COUNT, TOTAL, ITEM = 500, 4 * MiB, 1000 * KiB - 1

    def __init__(self, client: Any, delivery_stream: str) -> None:
        self.client, self.name = client, delivery_stream

    def write(self, records: Sequence[StreamRecord], outputs: Sequence[Output]) -> set[int]:
        failed: set[int] = set()
        for part in _calls(records, outputs, self.COUNT, self.TOTAL - self.COUNT, self.ITEM):
            entries = [{"Data": body + b"\n"} for _, body in part]
            try:
                answer = self.client.put_record_batch(DeliveryStreamName=self.name, Records=entries)
            except Exception:
                failed.update(index for index, _ in part)
                continue
            failed.update(part[n][0] for n, r in enumerate(answer.get("RequestResponses") or ()) if r.get("ErrorCode"))
        return failed


def _calls(
    records: Sequence[StreamRecord], outputs: Sequence[Output], count: int, total: int, item: int, encoded: Callable[[Any], bytes] = encode
) -> Iterator[list[tuple[int, bytes]]]:
    """The outputs `encoded` as the destination takes them, in calls of at most `count` records
    and `total` bytes (measured so). An output over `item` bytes can never be written: its
    record gets an error output instead."""
    part: list[tuple[int, bytes]] = []
    size = 0
    for index, output in outputs:
        body = encoded(output)
        if len(body) > item:
            too_large = f"the output is {len(body)} bytes; the destination takes {item} at most"
            body = encoded(_instead(output, too_large, "payload_too_large", source=records[index].position))
        if part and (len(part) == count or size + len(body) > total):
            yield part
            part, size = [], 0
        part.append((index, body))
        size += len(body)
    if part:
        yield part


_NOT_CHARACTERS = ((b"\xef\xbf\xbe", b"\\ufffe"), (b"\xef\xbf\xbf", b"\\uffff"))


def _sqs_encoded(output: Any) -> bytes:
    """An output as the message body SQS takes, measured as sent: SQS refuses U+FFFE and U+FFFF,
    which JSON writes escaped instead (in JSON they can only stand inside a string; each 3 bytes
    raw, 6 escaped)."""
    body = encode(output)
    if b"\xef\xbf" in body:
        for raw, escaped in _NOT_CHARACTERS:
            body = body.replace(raw, escaped)
    return body


class S3Sink:
    def __init__(self, client: Any, uri: str) -> None:
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        self.client, self.bucket = client, bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"

    def key_for(self, records: Sequence[StreamRecord], outputs: Sequence[Output]) -> str:
        """`<prefix><source>/<first position>-<digest>.jsonl`: the digest covers the identity
        (source and position) of every record the object holds, in order."""
        first = records[outputs[0][0]]
        source = first.source.rsplit(":", 1)[-1].rsplit("/", 1)[-1] or "source"
        # JSON of (source, position) pairs: unambiguous, and one encoder call for the batch.
        identities = orjson.dumps([(records[index].source, records[index].position) for index, _ in outputs])
        digest = hashlib.sha256(identities).hexdigest()[:32]
        return f"{self.prefix}{_safe(source)}/{_safe(first.label)}-{digest}.jsonl"

    def write(self, records: Sequence[StreamRecord], outputs: Sequence[Output]) -> set[int]:
        if not outputs:
            return set()
        body = json_lines(outputs)
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self.key_for(records, outputs), Body=body, ContentType="application/x-ndjson"
            )
        except Exception:
            return {index for index, _ in outputs}
        return set()


def build_sink(destination: Destination, clients: AwsClients, out: BinaryIO | None = None) -> Sink:
    kind, target = destination.kind, destination.target
    if kind == "sqs":
        return SqsSink(clients.client("sqs"), target)
    if kind == "kinesis":
        return KinesisSink(clients.client("kinesis"), target)
    if kind == "firehose":
        return FirehoseSink(clients.client("firehose"), target)
    if kind == "s3":
        return S3Sink(clients.client("s3"), target)
    import sys

    return FileSink(out or sys.stdout.buffer)


_GROUP_ID = re.compile(r"[!-~]{1,128}")  # what SQS takes: ASCII letters, digits and punctuation


def _group_id(record: StreamRecord) -> str:
    """A FIFO message group: the input's order key (an SQS message group, a Kinesis partition
    key, a Kafka record key), or the sha256 of one SQS would refuse."""
    key = record.key or record.order or "sluice"
    return key if _GROUP_ID.fullmatch(key) else hashlib.sha256(key.encode()).hexdigest()


def _partition_key(record: StreamRecord) -> str:
    key = record.key or record.order or record.label
    return key if 0 < len(key.encode()) <= 256 else hashlib.sha256(key.encode()).hexdigest()


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in text)[:200]
