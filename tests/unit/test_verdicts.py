from __future__ import annotations

import numpy as np
import pytest

from sluice.domain.results import InferenceResult
from sluice.inference.compare import compare
from sluice.stats.histogram import PREFIX, bucket, percentile
from sluice.stats.verdicts import comparison, mean_interval, traffic, wilson
from tests.unit.test_aggregators import CLF, REG


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
