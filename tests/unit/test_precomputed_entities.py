"""Entity keys as a table of precomputed answers stores them (`entity_of`): two keys that are
not the same key are never one entity, so one row's answer is never served for another's."""

from __future__ import annotations

import math
from decimal import Decimal

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


@given(
    st.one_of(
        st.floats(),
        st.decimals(),
        st.integers(0, 1030).map(lambda n: Decimal(f"-1E+{n}")),
        st.integers(0, 1030).map(lambda n: Decimal(f"1E+{n}")),
        st.integers(1, 1100).map(lambda n: Decimal("0." + "1" * n)),
    )
)
def test_a_number_is_an_entity_within_the_bound_and_never_an_infinitys_text(value: float | Decimal) -> None:
    """No entity is longer than MAX_ENTITY_BYTES (a Decimal `-1E+1023` was 1,025 bytes: its
    sign was not counted), and no number is the entity of the text "inf" or "nan" (an infinite
    float was "inf"): both are no entity, as NaN is. (Parquet's decimals hold at most 76 digits
    and JSON Lines reads a number's text, so the Decimals here reach it only from code.)"""
    entity = entity_of(value)
    if entity is not None:
        assert len(entity.encode()) <= MAX_ENTITY_BYTES and entity.lstrip("-").lower() not in ("inf", "infinity", "nan", "snan")
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        assert (entity is None) == (len(str(int(value))) > MAX_ENTITY_BYTES)
    assert entity_of(math.inf) is None and entity_of(-math.inf) is None and entity_of(math.nan) is None
