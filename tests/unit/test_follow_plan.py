"""A follow binding's rollout plan is read by the rules `sluice rollout start` applies, so a
binding is refused when it is made, not at every version it takes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.domain.errors import InvalidRequest
from sluice.domain.follows import parse_plan
from sluice.domain.rollout_specs import MAX_MIN_REQUESTS, parse_steps


@given(minimum=st.one_of(st.integers(0, 3 * MAX_MIN_REQUESTS), st.integers(0, 10**30)))
def test_a_plans_min_is_what_a_rollout_takes(minimum: int) -> None:
    text = f"5,100 every 1m gate error_rate<=0.01 min {minimum}"
    if 1 <= minimum <= MAX_MIN_REQUESTS:
        assert parse_plan(text).min_requests == minimum
        return
    with pytest.raises(InvalidRequest) as refused:
        parse_plan(text)
    assert refused.value.field == "rollout" and f"from 1 to {MAX_MIN_REQUESTS}" in refused.value.message


STEP = st.one_of(
    st.decimals(min_value="0.0000001", max_value="99.9999999", places=7, allow_nan=False),
    st.floats(min_value=1e-9, max_value=100, exclude_min=False).filter(lambda f: f < 100),
)


@given(st.lists(STEP, min_size=1, max_size=5, unique=True))
def test_a_plan_kept_reads_back_as_the_plan_given(steps: list[object]) -> None:
    """The binding keeps `str(plan)`: steps written with `:g` read back as others (99.9999999 as
    100, refused at every version: "steps must increase"; 0.0000001 as 1e-07, no plan at all)."""
    numbers = sorted({float(s) for s in steps})
    text = ",".join(repr(n) if "e" not in repr(n) else f"{n:.20f}" for n in numbers) + ",100 every 1m gate error_rate<=0.01"
    try:
        given_plan = parse_plan(text)
    except InvalidRequest:
        return  # e.g. two steps that are one float
    kept = parse_plan(str(given_plan))
    assert kept == given_plan
    assert kept.steps == parse_steps(list(kept.steps))
