"""Kinesis Producer Library aggregates read as their user records (`stream.records`): each
record's data and partition key as protobuf's own parser reads the `AggregatedRecord` the KPL
writes (its messages.proto, built here as a descriptor), in order; a body that only looks like
one (a digest that does not match, a message that does not parse) is taken as it is."""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sluice.stream.records import KPL_MAGIC, kpl_records


def _classes() -> tuple[Any, Any]:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="kpl_messages.proto", package="kpl", syntax="proto2")
    tag = proto.message_type.add(name="Tag")
    tag.field.add(name="key", number=1, type=9, label=2)
    tag.field.add(name="value", number=2, type=9, label=1)
    record = proto.message_type.add(name="Record")
    record.field.add(name="partition_key_index", number=1, type=4, label=2)
    record.field.add(name="explicit_hash_key_index", number=2, type=4, label=1)
    record.field.add(name="data", number=3, type=12, label=2)
    record.field.add(name="tags", number=4, type=11, label=3, type_name=".kpl.Tag")
    aggregated = proto.message_type.add(name="AggregatedRecord")
    aggregated.field.add(name="partition_key_table", number=1, type=9, label=3)
    aggregated.field.add(name="explicit_hash_key_table", number=2, type=9, label=3)
    aggregated.field.add(name="records", number=3, type=11, label=3, type_name=".kpl.Record")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("kpl.AggregatedRecord")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("kpl.Tag")))  # fmt: skip


AGGREGATED, TAG = _classes()
_KEYS = st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=4, unique=True)


@given(keys=_KEYS, data=st.data())
def test_an_aggregate_is_its_records_with_their_partition_keys_in_order(keys: list[str], data: st.DataObject) -> None:
    records = data.draw(st.lists(st.tuples(st.binary(max_size=60), st.integers(0, len(keys) - 1), st.booleans()), min_size=1, max_size=30))
    message = AGGREGATED(partition_key_table=keys, explicit_hash_key_table=["123456789"])
    for payload, key, tagged in records:
        one = message.records.add(partition_key_index=key, data=payload, explicit_hash_key_index=0)
        if tagged:
            one.tags.append(TAG(key="k", value="v"))
    body = message.SerializeToString()
    aggregate = KPL_MAGIC + body + hashlib.md5(body, usedforsecurity=False).digest()
    assert kpl_records(aggregate) == [(payload, keys[key]) for payload, key, _ in records]
    broken = aggregate[:-1] + bytes([aggregate[-1] ^ 1])
    assert kpl_records(broken) is None and kpl_records(aggregate[:-16]) is None  # the digest does not vouch for it


@given(st.binary(max_size=200))
def test_a_message_is_read_as_protobuf_reads_it_or_taken_as_it_is(body: bytes) -> None:
    """Differential: bytes whose digest matches are an aggregate exactly where protobuf's
    parser reads an `AggregatedRecord` of at least one record, each key in its table."""
    from google.protobuf.message import DecodeError

    got = kpl_records(KPL_MAGIC + body + hashlib.md5(body, usedforsecurity=False).digest())
    try:
        parsed = AGGREGATED.FromString(body)
        table = [k.decode("utf-8", "replace") if isinstance(k, bytes) else k for k in parsed.partition_key_table]  # proto2: bytes where not UTF-8
        want = [(r.data, table[r.partition_key_index]) for r in parsed.records] or None
    except (DecodeError, IndexError, RuntimeWarning):
        want = None
    assert got == want


def _varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        out += bytes([low | (0x80 if n else 0)])
        if not n:
            return out


def _field(number: int, wire: int, payload: bytes | int) -> bytes:
    key = _varint(number << 3 | wire)
    return key + (_varint(len(payload)) + payload if isinstance(payload, bytes) else _varint(payload))


_RECORD = st.lists(st.one_of(
    st.builds(_field, st.just(1), st.just(0), st.integers(0, 5)), st.builds(_field, st.just(3), st.just(2), st.binary(max_size=5)),
    st.builds(_field, st.just(2), st.just(0), st.integers(0, 3)), st.builds(_field, st.just(4), st.just(2), st.binary(max_size=4)),
    st.builds(_field, st.just(1), st.just(2), st.binary(max_size=2)), st.builds(_field, st.just(3), st.just(0), st.integers(0, 3)),
), max_size=4).map(b"".join)  # fmt: skip
_MESSAGE = st.lists(st.one_of(
    st.builds(_field, st.just(1), st.just(2), st.binary(max_size=4)), st.builds(_field, st.just(3), st.just(2), _RECORD),
    st.builds(_field, st.just(2), st.just(2), st.binary(max_size=3)), st.builds(_field, st.just(9), st.just(0), st.integers(0, 9)),
    st.builds(_field, st.just(1), st.just(0), st.integers(0, 9)),
), max_size=6).map(b"".join)  # fmt: skip


@given(_MESSAGE)
def test_messages_near_the_schema_are_read_as_protobuf_reads_them(body: bytes) -> None:
    """The same differential on messages made of the schema's fields, of the right and the wrong
    wire types, unknown ones, records and tags that do not parse."""
    test_a_message_is_read_as_protobuf_reads_it_or_taken_as_it_is.hypothesis.inner_test(body)  # type: ignore[attr-defined]
