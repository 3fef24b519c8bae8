"""How far a candidate's answers are from the original's: a NaN an input made in both is no
difference, and a value NaN in one answer alone is never within any budget."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sluice.domain.signature import Signature, TensorSpec
from sluice.optimize.measure import agreement
from sluice.optimize.report import Budget

VALUE = Signature((TensorSpec("x", "FP32", (-1, 1)),), (TensorSpec("y", "FP32", (-1, 1), role="value"),))


@given(
    off=st.sampled_from([0.0, 0.1, 0.4, 0.6, 5.0]),  # away from the budget's 0.5: float32 sums round
    nan_rows=st.lists(st.integers(0, 49), max_size=5),
    alone=st.lists(st.integers(0, 49), max_size=3),
)
def test_a_nan_never_hides_a_difference(off: float, nan_rows: list[int], alone: list[int]) -> None:
    original = np.linspace(0, 10, 50, dtype=np.float32).reshape(-1, 1)
    candidate = original + np.float32(off)
    original[nan_rows], candidate[nan_rows] = np.nan, np.nan  # a NaN input: NaN in both answers
    lone = sorted(set(alone) - set(nan_rows))
    candidate[lone] = np.nan  # the candidate alone answers NaN
    found = agreement(VALUE, {"y": original}, {"y": candidate})
    within = Budget(0.99, 0.5).misses(found) is None
    assert within == (off <= 0.5 and not lone), found
    assert np.isfinite(found["max_abs_diff"])  # never NaN: the registry keeps it
