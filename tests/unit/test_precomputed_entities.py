"""Entity keys as a table of precomputed answers stores them (`entity_of`): two keys that are
not the same key are never one entity, so one row's answer is never served for another's."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sluice.domain.precomputed import MAX_ENTITY_BYTES, entity_of


@given(a=st.binary(max_size=8), b=st.binary(max_size=8))
def test_two_binary_keys_are_one_entity_only_where_they_are_the_same_bytes(a: bytes, b: bytes) -> None:
    ea, eb = entity_of(a), entity_of(b)
    if ea is not None and ea == eb:
        assert a == b
    if ea is not None:  # a key that is UTF-8 text is that text, as the same key sent as text is
        assert ea == a.decode("utf-8") == entity_of(a.decode("utf-8"))


def test_binary_that_is_no_text_is_no_entity() -> None:
    assert entity_of(b"\xff") is None and entity_of(b"\xfe") is None and entity_of(b"u\xc3") is None
    assert entity_of(b"caf\xc3\xa9") == "café" and entity_of(bytearray(b"u1")) == "u1"
    assert entity_of("é" * (MAX_ENTITY_BYTES // 2)) is not None and entity_of("é" * (MAX_ENTITY_BYTES // 2 + 1)) is None
