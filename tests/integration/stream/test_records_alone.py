"""A stream's records scored together against each scored alone: whatever a batch holds (records
on the fast path of `{id, features}` rows stacked together, odd values among them, records that
are not JSON, v2 and batch-shaped records, names given twice), each record's outcome is the
one it has in a batch of its own: one record never changes another's answer or error."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sluice.inference.loop import run
from sluice.stream.core import StreamScorer
from sluice.stream.records import StreamRecord

if TYPE_CHECKING:
    from sluice.wiring import Container

NAMES = ("sepal_length", "sepal_width", "petal_length", "petal_width")
VOLATILE = ("latency_ms",)

_VALUE = st.one_of(
    st.floats(-10, 10), st.floats(-10, 10), st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70),
    st.integers(-5, 5), st.booleans(), st.none(), st.text(max_size=3), st.lists(st.floats(-1, 1), max_size=2),
)  # fmt: skip
_FEATURES = st.fixed_dictionaries({n: _VALUE for n in NAMES}) | st.dictionaries(st.sampled_from([*NAMES, "petal", "x"]), _VALUE, max_size=5)
_ID = st.one_of(st.integers(0, 99), st.text(max_size=6), st.just("true, false"), st.none())


@st.composite
def _record(draw: Any) -> str:
    kind = draw(st.sampled_from(["row", "row", "row", "twice", "text", "inputs", "v2", "extra"]))
    if kind == "text":
        return draw(st.text(max_size=8))
    body: dict[str, Any] = {"id": draw(_ID)} if draw(st.booleans()) else {}
    if kind == "inputs":
        body["inputs"] = draw(st.lists(st.lists(_VALUE, min_size=4, max_size=4), min_size=1, max_size=2))
    elif kind == "v2":
        body["inputs"] = [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": draw(st.lists(st.floats(-10, 10), min_size=4, max_size=4))}]
    else:
        body["features"] = draw(_FEATURES)
    if kind == "extra":
        body[draw(st.sampled_from(["deployment", "variant", "bogus"]))] = draw(st.sampled_from(["iris", "nope", 1]))
    text = json.dumps(body)
    if kind == "twice" and '"features": {' in text:  # a feature named twice, the last value a number
        text = text.replace('"features": {', '"features": {"sepal_length": 9.5, ', 1)
    return text


def _same(a: Any, b: Any) -> bool:
    """The same outcome, a model's numbers within float32 rounding (a batch of several rows may
    take other kernels than a row alone), the latency aside."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = a.keys() - set(VOLATILE)
        return keys == b.keys() - set(VOLATILE) and all(_same(a[k], b[k]) for k in keys)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)
    return bool(a == b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(_record(), min_size=2, max_size=8))
def test_each_record_is_answered_as_alone(demo: Container, bodies: list[str]) -> None:
    scorer = StreamScorer(demo.predictions, "acme", "iris")
    records = [StreamRecord(body.encode(), "arn:aws:sqs:eu-west-1:123456789012:in", f"m{i}", {"message_id": f"m{i}"}) for i, body in enumerate(bodies)]
    together = run(scorer.score(records))
    for record, outcome in zip(records, together, strict=True):
        (alone,) = run(scorer.score([record]))
        event("retried" if outcome.retry else "refused" if outcome.failed else "answered")
        assert outcome.retry == alone.retry and _same(outcome.output, alone.output), (record.body, outcome.output, alone.output)
