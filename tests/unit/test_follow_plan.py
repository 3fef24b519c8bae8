"""A follow binding's rollout plan is read by the rules `sluice rollout start` applies, so a
binding is refused when it is made, not at every version it takes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.domain.errors import InvalidRequest
from sluice.domain.follows import parse_plan
from sluice.domain.rollouts import MAX_MIN_REQUESTS


@given(minimum=st.one_of(st.integers(0, 3 * MAX_MIN_REQUESTS), st.integers(0, 10**30)))
def test_a_plans_min_is_what_a_rollout_takes(minimum: int) -> None:
    text = f"5,100 every 1m gate error_rate<=0.01 min {minimum}"
    if 1 <= minimum <= MAX_MIN_REQUESTS:
        assert parse_plan(text).min_requests == minimum
        return
    with pytest.raises(InvalidRequest) as refused:
        parse_plan(text)
    assert refused.value.field == "rollout" and f"from 1 to {MAX_MIN_REQUESTS}" in refused.value.message
