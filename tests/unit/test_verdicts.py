from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.results import InferenceResult
from sluice.inference.compare import compare
from sluice.stats.histogram import PREFIX, bucket, bucket_name, percentile
from sluice.stats.verdicts import MAXIMA, comparison, mean_interval, merged, traffic, wilson
from tests.unit.test_aggregators import CLF, REG


@settings(max_examples=500, deadline=None)
@given(st.floats(min_value=0.0, max_value=1e300) | st.floats(min_value=0.0, max_value=0.02) | st.sampled_from([0.0, 0.01, 0.0100000001, 1.05, 1e-300]))
def test_a_latencys_counter_is_its_buckets_however_it_is_worked_out(latency_ms: float) -> None:
    """`bucket_name` works the bucket out itself (a call less per sample): the same counter
    `bucket` names, from no time at all to beyond any clock."""
    assert bucket_name(latency_ms) == f"{PREFIX}{bucket(latency_ms)}"


def test_histogram_percentiles_are_within_a_few_percent() -> None:
    rng = np.random.default_rng(0)
    latencies = rng.lognormal(mean=1.0, sigma=0.6, size=20_000)
    counters: dict[str, float] = {}
    for x in latencies:
        counters[f"{PREFIX}{bucket(x)}"] = counters.get(f"{PREFIX}{bucket(x)}", 0) + 1
    for q in (50, 95, 99):
        assert percentile(counters, q) == pytest.approx(np.percentile(latencies, q), rel=0.04)
    assert percentile({}, 50) is None


def test_wilson_interval_matches_the_textbook() -> None:
    low, high = wilson(90, 100)  # type: ignore[misc]
    assert (low, high) == pytest.approx((0.8256, 0.9448), abs=1e-3)
    assert wilson(0, 0) is None


def test_mean_interval() -> None:
    values = np.array([1.0, 2.0, 3.0, 4.0])
    mean, low, high = mean_interval(values.sum(), np.square(values).sum(), 4)  # type: ignore[misc]
    half = 1.959964 * values.std(ddof=1) / 2
    assert mean == pytest.approx(2.5) and low == pytest.approx(2.5 - half) and high == pytest.approx(2.5 + half)


def test_compare_classifiers_agreement_and_differences() -> None:
    primary = InferenceResult({"label": np.array(["cat", "dog"], dtype=object), "probs": np.array([[0.6, 0.4], [0.3, 0.7]])}, {"probs": ["cat", "dog"]})
    mirror = InferenceResult({"label": np.array(["cat", "cat"], dtype=object), "probs": np.array([[0.45, 0.55], [0.9, 0.1]])}, {"probs": ["dog", "cat"]})
    sums, maxes = compare(CLF, primary, CLF, mirror)
    assert sums["labelled"] == 2 and sums["agree"] == 1
    # aligned by class: cat |0.6-0.55|, |0.3-0.1|; dog |0.4-0.45|, |0.7-0.9|
    assert sums["diff_sum"] == pytest.approx(0.05 + 0.2 + 0.05 + 0.2)
    assert sums["diff_n"] == 4
    assert maxes["diff_max"] == pytest.approx(0.2)
    verdict = comparison({**sums, **maxes})
    assert verdict["agreement"] == 0.5 and verdict["max_abs_diff"] == pytest.approx(0.2)
    assert verdict["mean_abs_diff"] == pytest.approx(0.125)


def test_compare_regressors() -> None:
    sums, maxes = compare(REG, InferenceResult({"y": np.array([[1.0], [2.0]])}), REG, InferenceResult({"y": np.array([[1.5], [1.0]])}))
    assert sums["diff_sum"] == pytest.approx(1.5) and maxes["diff_max"] == pytest.approx(1.0)
    assert "agree" not in sums


def test_traffic_summary() -> None:
    t = traffic({"requests": 10, "errors": 1, f"{PREFIX}{bucket(2.0)}": 9})
    assert t["requests"] == 10 and t["error_rate"] == 0.1
    assert t["latency_ms"]["p50"] == pytest.approx(2.0, rel=0.05)


_PROB = st.one_of(st.floats(0, 1), st.sampled_from([np.nan, np.inf, -np.inf, 3e38]))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(_PROB, _PROB, _PROB, _PROB), min_size=1, max_size=6))
def test_a_row_that_is_not_a_finite_number_is_left_out_of_the_differences_and_counted(
    rows: list[tuple[float, float, float, float]],
) -> None:
    """Whatever an answer holds, the counters a comparison adds are finite numbers (a NaN one
    would keep every later comparison from being stored): a row with a difference that is not
    finite is counted in `diff_not_finite`, the others compared as they would be alone."""
    table = np.array(rows, dtype=np.float64)
    primary_probs, mirror_probs = table[:, :2], table[:, 2:]

    def answer(probs: np.ndarray) -> InferenceResult:
        return InferenceResult({"label": np.array(["cat"] * len(probs), dtype=object), "probs": probs}, {"probs": ["cat", "dog"]})

    sums, maxes = compare(CLF, answer(primary_probs), CLF, answer(mirror_probs))
    assert all(np.isfinite(v) for v in [*sums.values(), *maxes.values()]), (sums, maxes)
    with np.errstate(invalid="ignore", over="ignore"):
        good = np.isfinite(np.square(primary_probs - mirror_probs)).all(axis=1)
    assert sums.get("diff_not_finite", 0) == int((~good).sum())
    assert sums["compared"] == 1 and sums["labelled"] == len(rows)  # the request and its labels still count
    alone, alone_max = compare(CLF, answer(primary_probs[good]), CLF, answer(mirror_probs[good]))
    assert sums["diff_n"] == alone["diff_n"] == 2 * good.sum()
    assert sums["diff_sum"] == pytest.approx(alone["diff_sum"]) and sums["diff_sumsq"] == pytest.approx(alone["diff_sumsq"])
    assert maxes.get("diff_max") == (alone_max["diff_max"] if good.any() else None)
    assert comparison({**sums, **maxes})["not_finite_rows"] == int((~good).sum())


def test_a_regressor_answer_that_is_not_finite_is_left_out() -> None:
    primary = InferenceResult({"y": np.array([[1.0], [np.nan], [3.0], [1e300]])})
    mirror = InferenceResult({"y": np.array([[1.5], [2.0], [np.inf], [-1e300]])})  # 2e300 squared: past float64
    sums, maxes = compare(REG, primary, REG, mirror)
    assert (sums["diff_n"], sums["diff_not_finite"], sums["diff_sum"], maxes["diff_max"]) == (1, 3, 0.5, 0.5)


_FAR = st.one_of(st.floats(-1e6, 1e6), st.floats(-1.3e154, 1.3e154), st.sampled_from([1e154, -1e154, 1.34e154, 1e200]))


@settings(max_examples=40, deadline=None)
@given(pairs=st.lists(st.tuples(_FAR, _FAR), min_size=1, max_size=8))
def test_finite_answers_far_apart_still_give_finite_sums(pairs: list[tuple[float, float]]) -> None:
    """Rows whose differences square to finite numbers can still sum past float64's largest
    (two rows 1e154 apart): the sums a comparison adds stay finite, the rows of largest
    differences left out (and counted) while they would not be, so the request still counts
    as compared and its mean is that of the rows kept."""
    table = np.array(pairs, dtype=np.float64)
    primary, mirror = InferenceResult({"y": table[:, :1]}), InferenceResult({"y": table[:, 1:]})
    sums, maxes = compare(REG, primary, REG, mirror)
    assert all(np.isfinite(v) for v in [*sums.values(), *maxes.values()]), (sums, maxes)
    assert sums["compared"] == 1
    assert sums["diff_n"] + sums.get("diff_not_finite", 0) == len(pairs)
    kept = np.sort(np.abs(table[:, 0] - table[:, 1]))[: int(sums["diff_n"])]  # the smallest differences are those kept
    assert sums["diff_sum"] == pytest.approx(float(kept.sum()))
    assert sums["diff_sumsq"] == pytest.approx(float(np.square(kept).sum()))


def test_two_rows_far_apart_are_compared_and_the_request_counted() -> None:
    primary, mirror = InferenceResult({"y": np.array([[1e154], [1e154]])}), InferenceResult({"y": np.array([[0.0], [0.0]])})
    sums, maxes = compare(REG, primary, REG, mirror)
    assert (sums["compared"], sums["diff_n"], sums["diff_not_finite"], sums["diff_sumsq"]) == (1, 1, 1, 1e308)
    assert maxes["diff_max"] == 1e154


_COUNTERS = st.dictionaries(st.sampled_from(["requests", "errors", "latency_ms_sum", "reward_n", *sorted(MAXIMA)]), st.integers(0, 10**6).map(float))


@given(_COUNTERS, _COUNTERS)
def test_merged_counters_add_sums_and_keep_maxima_as_the_registry_does(a: dict[str, float], b: dict[str, float]) -> None:
    """One subject's counters stored in two parts (by an earlier release under another name)
    read as one: what a single store of both would hold, in either order."""
    out = merged(a, b)
    assert out == merged(b, a) and set(out) == set(a) | set(b)
    for name in out:
        parts = [p[name] for p in (a, b) if name in p]
        assert out[name] == (max(parts) if name in MAXIMA else sum(parts))
