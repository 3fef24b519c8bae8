"""A transform's fast paths for a request's few rows give what the paths for a batch part's
many rows give, bit for bit, and leave the request's arrays as they were."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.transforms import Transform
from sluice.routing import transforms
from sluice.routing.transforms import run_transform

numbers = st.one_of(st.floats(width=32), st.just(float("nan")))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(numbers, min_size=0, max_size=40),
    st.sampled_from([np.float32, np.float64, np.int64]),
    st.sampled_from([(-1,), (-1, 1), (-1, 2)]),
    st.floats(-1e6, 1e6),
    st.booleans(),
)
def test_a_fill_of_few_rows_gives_what_a_fill_of_many_gives(
    values: list[float], dtype: Any, shape: tuple[int, ...], value: float, standardize: bool
) -> None:
    if dtype is np.int64:
        values = [0.0 if np.isnan(v) or abs(v) > 2**40 else v for v in values]
    width = shape[-1] if len(shape) == 2 else 1
    values = values[: len(values) // width * width]
    x = np.asarray(values, dtype=dtype).reshape(-1, *shape[1:])
    before = x.copy()
    ops: list[dict[str, Any]] = [{"op": "fill", "input": "x", "value": value}]
    if standardize:  # a fill that starts a chain of element-wise ops
        ops.append({"op": "standardize", "input": "x", "mean": 1.5, "std": 0.8})
    node = Transform.model_validate({"kind": "transform", "ops": ops})
    with np.errstate(all="ignore"):
        few = run_transform(node, {"x": x}, {})["x"]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(transforms, "SMALL_FILL", -1)  # every size takes the batch part's path
            many = run_transform(Transform.model_validate({"kind": "transform", "ops": ops}), {"x": x}, {})["x"]
    assert few.dtype == many.dtype and few.shape == many.shape
    assert few.tobytes() == many.tobytes()  # the same bits, NaN and infinities too
    assert not np.isnan(few).any()
    assert x.tobytes() == before.tobytes()  # the request's own array is not written to
