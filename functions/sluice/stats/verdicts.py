"""Turning counters into verdicts: percentiles, agreement with a Wilson interval, and the
mean absolute difference with a normal-approximation interval; a rollout's gate metrics from
them (`gate_metrics`). Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sluice.domain.rollouts import CANDIDATE, STABLE
from sluice.stats.histogram import percentile

Z95 = 1.959964


def wilson(successes: float, n: float, z: float = Z95) -> tuple[float, float] | None:
    if n <= 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (round(max(0.0, centre - half), 6), round(min(1.0, centre + half), 6))


def mean_interval(total: float, total_sq: float, n: float, z: float = Z95) -> tuple[float, float, float] | None:
    if n <= 0:
        return None
    mean = total / n
    variance = max(total_sq / n - mean * mean, 0.0) * (n / (n - 1) if n > 1 else 0.0)
    half = z * math.sqrt(variance / n) if n > 1 else 0.0
    return (round(mean, 9), round(mean - half, 9), round(mean + half, 9))


# Counters kept as maxima, not sums: when a deployment last had a request (the recorder's
# `LAST_REQUEST`) and a mirror's largest difference from its primary.
MAXIMA = frozenset({"last_request_ms", "diff_max"})


def merged(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    """Two sets of one subject's counters as one, as the registry merges them: sums added,
    maxima (`MAXIMA`) kept."""
    out = dict(a)
    for name, value in b.items():
        if name not in out:
            out[name] = value
        else:
            out[name] = max(out[name], value) if name in MAXIMA else out[name] + value
    return out


def traffic(counters: Mapping[str, float]) -> dict[str, Any]:
    requests = counters.get("requests", 0)
    errors = counters.get("errors", 0)
    invalid = counters.get("invalid_inputs", 0)  # failed for what they carried (`sluice.inference.outcomes`)
    return {
        "requests": int(requests),
        "errors": int(errors),
        "error_rate": round(errors / requests, 6) if requests else None,
        "invalid_inputs": int(invalid),
        "invalid_input_rate": round(invalid / requests, 6) if requests else None,
        "latency_ms": {q: percentile(counters, float(q[1:])) for q in ("p50", "p95", "p99")},
    }


def comparison(counters: Mapping[str, float]) -> dict[str, Any]:
    compared = counters.get("compared", 0)
    labelled = counters.get("labelled", 0)
    agree = counters.get("agree", 0)
    diff = mean_interval(counters.get("diff_sum", 0), counters.get("diff_sumsq", 0), counters.get("diff_n", 0))
    ratio_n = counters.get("ratio_n", 0)
    return {
        "compared": int(compared),
        "agreement": round(agree / labelled, 6) if labelled else None,
        "agreement_ci95": wilson(agree, labelled),
        "mean_abs_diff": diff[0] if diff else None,
        "mean_abs_diff_ci95": [diff[1], diff[2]] if diff else None,
        "max_abs_diff": counters.get("diff_max"),
        "not_finite_rows": int(counters.get("diff_not_finite", 0)),  # left out of the differences (`sluice.inference.compare`)
        "latency_ratio": round(counters.get("ratio_sum", 0) / ratio_n, 4) if ratio_n else None,
    }


def gate_metrics(counters: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The gate metrics (module docstring of `sluice.domain.rollouts`) from one revision's
    counters, with the counts behind them: its split's variants at the top of the policy and
    the mirror of its stable variant, each counted by its path (`sluice.inference.execution.Call.path`)."""
    candidate = traffic(counters.get(f"variant:{CANDIDATE}", {}))
    stable = traffic(counters.get(f"variant:{STABLE}", {}))
    mirror_counters = counters.get(f"mirror:{STABLE}/{CANDIDATE}", {})
    compared = comparison(mirror_counters)
    c99, s99 = candidate["latency_ms"]["p99"], stable["latency_ms"]["p99"]
    labelled = mirror_counters.get("labelled", 0)
    return {
        "candidate_requests": candidate["requests"],
        "candidate_errors": candidate["errors"],
        "candidate_invalid_inputs": candidate["invalid_inputs"],
        "mirrored": int(mirror_counters.get("requests", 0)),
        "mirror_errors": int(mirror_counters.get("errors", 0)),
        "stable_requests": stable["requests"],
        "stable_errors": stable["errors"],
        "compared": compared["compared"],
        "labelled_rows": int(labelled),
        "agreement": compared["agreement"],
        "agreement_ci95": list(wilson(mirror_counters.get("agree", 0), labelled) or []) or None,
        "mean_abs_diff": compared["mean_abs_diff"],
        "not_finite_rows": compared["not_finite_rows"],
        "error_rate": candidate["error_rate"],
        "invalid_input_rate": candidate["invalid_input_rate"],
        "candidate_p99_ms": c99,
        "stable_p99_ms": s99,
        "p99_ratio": round(c99 / s99, 4) if c99 is not None and s99 else None,
    }


def fallback_rate(sources: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A precomputed node's share of rows answered live (`sources`: each source's figures,
    with `rows`); nothing when it answered none."""
    live = sources.get("live", {}).get("rows", 0)
    total = live + sources.get("precomputed", {}).get("rows", 0)
    return {"fallback_rate": round(live / total, 6)} if total else {}
