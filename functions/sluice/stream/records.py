"""The events of each source, read into `StreamRecord`s.

Shapes as AWS delivers them to Lambda: SQS (`Records[].messageId/body`, FIFO adds
`attributes.MessageGroupId`), Kinesis (`Records[].kinesis.data`, base64), Amazon MSK
(`eventSource: aws:kafka`) and self-managed Kafka (`eventSource: SelfManagedKafka`), both with
`records: {"topic-partition": [{topic, partition, offset, key, value (base64), headers}]}`.
A Kinesis record that is a Kinesis Producer Library aggregate is read as its user records.
"""

from __future__ import annotations

import binascii
import hashlib
from dataclasses import dataclass
from typing import Any

from sluice.codecs.protobuf_fields import LENGTH_DELIMITED, fields, varint

SQS, KINESIS, KAFKA = "sqs", "kinesis", "kafka"
NOT_BASE64 = b"\x00not base64"  # not JSON: the core knows this object (not its bytes) and says why (`core._body`)


@dataclass(slots=True)
class StreamRecord:
    body: bytes | str
    source: str  # what the record came from: a queue or stream ARN, or `kafka:<topic>`
    ident: Any  # how Lambda's batchItemFailures names it (message id, sequence number, partition+offset)
    position: dict[str, Any]  # the record's own id, kept beside its output
    order: str | None = None  # records of one order group must not overtake each other
    key: str | None = None  # the output's partition key (Kinesis) or message group (FIFO)

    @property
    def dedup(self) -> str:
        """Stable across redeliveries of the same record: a FIFO deduplication id."""
        text = "|".join([self.source, *(str(v) for v in self.position.values())])
        return hashlib.sha256(text.encode()).hexdigest()[:64]

    @property
    def label(self) -> str:
        """The position as one short string (S3 object names, log lines)."""
        return "-".join(str(v) for v in self.position.values())


def source_kind(event: dict[str, Any]) -> str:
    if "records" in event and event.get("eventSource") in ("aws:kafka", "SelfManagedKafka"):
        return KAFKA
    records = event.get("Records") or []
    first = records[0] if records else {}
    source = first.get("eventSource") or first.get("EventSource")
    if source == "aws:sqs":
        return SQS
    if source == "aws:kinesis":
        return KINESIS
    raise ValueError(f"not an SQS, Kinesis or Kafka event (eventSource {source or event.get('eventSource')!r})")


def read_event(event: dict[str, Any]) -> tuple[str, list[StreamRecord]]:
    kind = source_kind(event)
    return kind, _READERS[kind](event)


def _sqs(event: dict[str, Any]) -> list[StreamRecord]:
    out = []
    for r in event["Records"]:
        attrs = r.get("attributes") or {}
        group = attrs.get("MessageGroupId")
        position: dict[str, Any] = {"message_id": r["messageId"]}
        if group is not None:
            position["group"] = group
            position["sequence_number"] = attrs.get("SequenceNumber")
        out.append(StreamRecord(r.get("body") or "", r.get("eventSourceARN", ""), r["messageId"], position, group, group))
    return out


def _kinesis(event: dict[str, Any]) -> list[StreamRecord]:
    out: list[StreamRecord] = []
    append, decode = out.append, binascii.a2b_base64
    for r in event["Records"]:
        k = r["kinesis"]
        shard = r.get("eventID", "").partition(":")[0]
        seq = k["sequenceNumber"]
        data = k.get("data")
        try:  # inline: a function call per record is a tenth of reading it
            body = decode(data, strict_mode=True) if data else b""
        except (binascii.Error, ValueError, TypeError):
            body = NOT_BASE64
        # One invocation reads one shard; Lambda resumes it from the first failure, so the
        # whole shard is one order group.
        parts = kpl_records(body) if body[:4] == KPL_MAGIC else None
        if parts is None:
            position = {"shard": shard, "sequence_number": seq}
            append(StreamRecord(body, r.get("eventSourceARN", ""), seq, position, shard or "shard", k.get("partitionKey")))
            continue
        # A KPL aggregate: each user record one record, under the Kinesis record's sequence
        # number (retried, the aggregate is delivered again whole: those answered before it
        # failed are answered again, at least once, as any record a retry delivers again).
        for sub, (data, key) in enumerate(parts):
            position = {"shard": shard, "sequence_number": seq, "subsequence_number": sub}
            append(StreamRecord(data, r.get("eventSourceARN", ""), seq, position, shard or "shard", key or k.get("partitionKey")))
    return out


KPL_MAGIC = b"\xf3\x89\x9a\xc2"  # how a Kinesis Producer Library aggregate begins


def kpl_records(body: bytes) -> list[tuple[bytes, str]] | None:
    """The user records of a Kinesis Producer Library aggregate (its magic number, an
    `AggregatedRecord` protobuf message, the MD5 digest of it), each with its partition key;
    None where `body` is no aggregate (one whose digest does not match, or whose message is not
    an `AggregatedRecord` of at least one record, is taken as it is, as the KPL's own
    deaggregation takes it: never read as no records). Lambda hands an aggregate over as it
    came."""
    if len(body) < len(KPL_MAGIC) + 16 or not body.startswith(KPL_MAGIC):
        return None
    message, digest = body[len(KPL_MAGIC) : -16], body[-16:]
    if hashlib.md5(message, usedforsecurity=False).digest() != digest:
        return None
    keys: list[str] = []
    found: list[tuple[bytes, int]] = []
    try:
        for number, wire, _, value, end in fields(message):
            if number == 0:
                return None  # no field is numbered 0: not a protobuf message
            if number == 1 and wire == LENGTH_DELIMITED:  # partition_key_table
                keys.append(message[value:end].decode("utf-8", "replace"))
            elif number == 3 and wire == LENGTH_DELIMITED:  # records: Record {partition_key_index = 1, data = 3}
                data, index = b"", 0  # as protobuf reads a field left out: its default
                for inner, kind, _, at, stop in fields(message, value, end):
                    if inner == 0:
                        return None
                    if inner == 1 and kind == 0:
                        index = varint(message, at)[0]
                    elif inner == 3 and kind == LENGTH_DELIMITED:
                        data = message[at:stop]
                    elif inner == 4 and kind == LENGTH_DELIMITED and any(n == 0 for n, *_ in fields(message, at, stop)):
                        return None  # a tag that is no message: protobuf refuses the whole
                found.append((data, index))
    except (ValueError, IndexError):  # not the message its digest vouches for: taken as it is
        return None
    if not found or any(i >= len(keys) for _, i in found):  # no record, or a key not in the table: taken as it is
        return None
    return [(data, keys[i]) for data, i in found]


def _kafka(event: dict[str, Any]) -> list[StreamRecord]:
    out = []
    for records in (event.get("records") or {}).values():
        for r in records:
            topic, partition, offset = r["topic"], int(r["partition"]), int(r["offset"])
            position = {"topic": topic, "partition": partition, "offset": offset}
            key = r.get("key")
            out.append(
                StreamRecord(
                    _b64(r.get("value")),
                    f"kafka:{topic}",
                    {"topic": topic, "partition": partition, "offset": offset},
                    position,
                    f"{topic}-{partition}",
                    _b64(key).decode("utf-8", "replace") if key else f"{topic}-{partition}",
                )
            )
    return out


def _b64(data: str | None) -> bytes:
    if not data:
        return b""
    try:
        return binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError, TypeError):
        return NOT_BASE64


_READERS = {SQS: _sqs, KINESIS: _kinesis, KAFKA: _kafka}

