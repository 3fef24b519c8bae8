"""A number written as text is read by one rule wherever sluice reads one: a CSV or JSON Lines
cell (batch), a header or parameter a switch compares, a rollout's steps. Python's int() and
float() took `1_0` for 10 and the digits of other scripts (Arabic-Indic ten, full-width ten) for
numbers: a switch routed on them, and a rollout's steps `1_0,100` read as 10 and 100."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.domain.errors import InvalidRequest
from sluice.domain.rollout_specs import parse_steps
from sluice.domain.values import number_of, parse_number
from sluice.routing.conditions import _number

NOT_NUMBERS = ["1_0", "\u0661\u0660", "\uff11\uff10", "\u2003" + "5", "5\u00a0", "0x10", "1e", "", " ", "--1", "\u0661"]


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_text_python_would_read_as_a_number_is_none_everywhere(text: str) -> None:
    assert number_of(text) is None and parse_number(text) is None and _number(text) is None
    if text and text == text.strip():  # a step's text is trimmed of white space first, as a list written "1, 100" is
        with pytest.raises(InvalidRequest):
            parse_steps(f"{text},100")


@given(st.one_of(st.integers(-(10**30), 10**30).map(str), st.floats(allow_nan=False, allow_infinity=False).map(repr), st.text(max_size=12)))
def test_every_reader_reads_text_alike(text: str) -> None:
    whole, read, routed = number_of(text), parse_number(text), _number(text)
    assert (whole is None) == (read is None)
    if whole is None:
        assert routed is None
        return
    assert float(whole) == read or (math.isnan(read) and math.isnan(float(whole)))
    assert routed == (whole if isinstance(whole, int) or math.isfinite(whole) else None)
    if isinstance(whole, int):
        assert whole == int(text)  # exactly, past 2**53 too
