"""A policy is kept as JSON, which has no NaN or Infinity: a non-finite number anywhere in one
(a transform's mean, a condition's value, a weight) is refused where it is written, naming its
place, however it came (the CLI reads `--policy @file` with Python's reader, which takes them).
Before, the CLI stored such a number as null and every prediction of the deployment then failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.domain.errors import InvalidRequest
from sluice.domain.policy import parse_policy

POLICIES = sorted((Path(__file__).resolve().parents[2] / "examples" / "policies").glob("*.json"))


def _numbers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if type(value) in (int, float):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _numbers(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _numbers(v, (*path, i))]
    return []


def _replaced(value: Any, path: tuple[Any, ...], by: float) -> Any:
    if not path:
        return by
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], by)
    return copy


@given(data=st.data())
@pytest.mark.parametrize("file", POLICIES, ids=lambda p: p.stem)
def test_a_number_that_is_not_finite_is_refused_naming_its_place(file: Path, data: st.DataObject) -> None:
    policy = json.loads(file.read_text())
    parse_policy(policy)  # as written: taken
    places = _numbers(policy)
    if not places:
        return
    place = data.draw(st.sampled_from(places))
    bad = data.draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
    with pytest.raises(InvalidRequest) as refused:
        parse_policy(_replaced(policy, place, bad))
    assert refused.value.field == ".".join(["policy", *map(str, place)])
    assert "finite" in refused.value.message
