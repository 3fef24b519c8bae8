"""Latencies to the microsecond (`sluice.millis.ms3`), as answers, reports and lines give them."""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sluice.millis import ms3


@settings(max_examples=800, deadline=None)
@given(st.floats(min_value=0.0, max_value=1e7) | st.floats(min_value=0.0, max_value=2.0) | st.floats(min_value=-1e7, max_value=1e20))
@example(0.0005)
@example(0.0015)
@example(2.675)
@example(1e16)
@example(-0.0005)
@example(4.5e12)
def test_a_latency_to_three_places_is_rounds_to_the_last_place(ms: float) -> None:
    """Within a thousandth of a millisecond's rounding of round(ms, 3) (the two can differ on a
    value that is a half to within a float's precision; nowhere by more), and exactly round's
    where the number is beyond any latency."""
    got, want = ms3(ms), round(ms, 3)
    assert math.isclose(got, want, rel_tol=1e-15, abs_tol=1e-3 + 1e-12)
    assert abs(got * 1000 - round(got * 1000)) <= 1e-6 * max(1.0, abs(got * 1000))  # three places at most
    if abs(ms) >= 4.5e12:
        assert got == want


@given(st.sampled_from([math.inf, -math.inf, math.nan]))
def test_a_number_that_is_no_latency_is_rounds_own(ms: float) -> None:
    got = ms3(ms)
    assert got == ms or (math.isnan(got) and math.isnan(ms))
