"""A window's profile against the baseline, column by column: how far each distribution moved
(drift) and whether the data got worse (quality), each against a threshold, with a verdict.

Drift, from the sketches alone:

- `psi`: the population stability index over ten bins, the baseline's deciles for numbers
  (a point mass its own bin; its categories, and one bin for all others, for categories), with
  shares floored at 1e-4;
  the column's `drift`, the figure its verdict and the rollout gate `drift` read;
- `js`: the Jensen-Shannon distance (base 2, 0 to 1) over the same bins;
- `ks` (numbers): the Kolmogorov-Smirnov distance, the largest gap between the two CDFs,
  evaluated at both sketches' percentiles; each sketch's rank error (about 1.3% at k=200)
  bounds its error;
- `tv` (categories): the total variation distance, half the sum of the shares' differences.

Quality: `missing_change` (the window's missing rate less the baseline's), `out_of_range`
(numbers: the share of the window's values below the baseline's minimum or above its maximum),
`unseen` (categories: the share of the window's values the baseline certainly never had).

A column with fewer than `min_rows` values in the window gets no verdict (`too_few_rows`). A
column whose values changed kind since the baseline (numbers then, text now, or the other way:
a new model version reads another type) has no distribution to compare with the baseline's: its
verdict is `type_changed`, read at once, and the rollout gate reads it as the most drift there is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.monitor.sketches import NUMBER, frequent

if TYPE_CHECKING:  # NumPy is imported where used: sluice serve's supervisor reads these modules
    import numpy as np

    from sluice.monitor.sketches import Column, Profile

FLOOR = 1e-4
DECILES = [i / 10 for i in range(1, 10)]
PERCENTILES = [i / 100 for i in range(1, 100)]


@dataclass(frozen=True, slots=True)
class Thresholds:
    drift: float = 0.2  # psi: 0.1 is commonly read as "some shift", 0.2 as "a significant one"
    missing: float = 0.05  # missing rate up by 5 points
    out_of_range: float = 0.05  # values outside the baseline's range, or categories it never had
    min_rows: int = 500


def psi(p: np.ndarray, q: np.ndarray) -> float:
    import numpy as np
    p, q = np.maximum(p, FLOOR), np.maximum(q, FLOOR)
    return float(np.sum((q - p) * np.log(q / p)))


def js_distance(p: np.ndarray, q: np.ndarray) -> float:
    import numpy as np
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log2(a[nz] / m[nz])))

    return math.sqrt(max(0.0, (kl(p) + kl(q)) / 2))


def number_bins(base: Any, window: Any) -> tuple[np.ndarray, np.ndarray]:
    """Both sketches' shares in the baseline's decile bins; a value at two or more deciles (a
    point mass: a sparse or constant feature) gets a bin of its own, so that its share moving
    is read rather than merged away."""
    import numpy as np
    deciles = list(map(float, base.get_quantiles(DECILES)))
    edges = sorted(set(deciles))
    atoms = [e for e in edges if deciles.count(e) > 1]

    def shares(sketch: Any) -> np.ndarray:
        below = sketch.get_cdf(edges, False)[:-1]  # the share under each edge
        upto = dict(zip(atoms, sketch.get_cdf(atoms, True)[:-1], strict=True)) if atoms else {}  # and at it, for a point mass
        cuts = [c for e, b in zip(edges, below, strict=True) for c in ((b, upto[e]) if e in upto else (b,))]
        return np.diff([0.0, *cuts, 1.0])

    return shares(base), shares(window)


def ks_distance(base: Any, window: Any) -> float:
    import numpy as np
    points = sorted(set(map(float, base.get_quantiles(PERCENTILES))) | set(map(float, window.get_quantiles(PERCENTILES))))
    points += [float(base.get_min_value()), float(base.get_max_value()), float(window.get_min_value()), float(window.get_max_value())]
    points = sorted(set(points))
    a = np.asarray(base.get_cdf(points, True), dtype=float)[:-1]
    b = np.asarray(window.get_cdf(points, True), dtype=float)[:-1]
    return float(np.max(np.abs(a - b)))


def category_bins(base: Any, window: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """Shares of the baseline's categories, then one bin for every other; and the window's
    share of categories the baseline never had. Past the sketch's capacity a count is known
    only within bounds (a frequent-items sketch's estimate is the upper one): each share is
    read at the middle of its bounds, and a category is unseen where the baseline never
    certainly had it and the window has it more often than the baseline can have (exactly: the
    baseline never had it), never because the sketch let it go."""
    import numpy as np
    bt, wt = max(base.total_weight, 1), max(window.total_weight, 1)

    def count(sketch: Any, name: str) -> float:
        return (sketch.get_lower_bound(name) + sketch.get_upper_bound(name)) / 2

    names = [name for name, _ in frequent(base)]
    p = [count(base, n) / bt for n in names]
    q = [count(window, n) / wt for n in names]
    p.append(max(0.0, 1 - sum(p)))
    q.append(max(0.0, 1 - sum(q)))
    unseen = sum(
        count(window, name)
        for name, _ in frequent(window)
        # never certainly in the baseline, and more common now than the baseline can have had it
        if base.get_lower_bound(name) == 0 and _beyond_chance(window.get_lower_bound(name), wt, base.get_upper_bound(name) / bt)
    ) / wt
    return np.asarray(p), np.asarray(q), unseen


UNSEEN_Z = 5.0  # standard deviations: over a thousand categories drawn alike, no false unseen one


def _beyond_chance(count: float, total: float, share: float) -> bool:
    """`count` of `total` rows is more than a window drawn at the baseline's `share` gives, by
    more than chance would (`UNSEEN_Z` binomial deviations); with no share (the baseline's
    sketch exact: it never had the category), any count is."""
    expected = total * share
    return count > expected + UNSEEN_Z * math.sqrt(expected * max(1.0 - share, 0.0))


def check_column(base: Column, window: Column, limits: Thresholds) -> dict[str, Any]:
    import numpy as np
    out: dict[str, Any] = {"kind": base.kind, "role": base.role, "rows": window.count}
    out["missing_rate"] = round(window.missing / window.count, 6) if window.count else None
    base_missing = base.missing / base.count if base.count else 0.0
    out["missing_change"] = round(out["missing_rate"] - base_missing, 6) if window.count else None
    if window.seen == 0 or base.seen == 0:
        out.update(drift=None, verdict=_missing_verdict(out, limits) or ("too_few_rows" if window.count < limits.min_rows else "ok"))
        return out
    if window.kind != base.kind:  # a KLL sketch and a frequent-items one have no figure in common
        out.update(drift=None, window_kind=window.kind, verdict="type_changed")
        return out
    if base.kind == NUMBER:
        p, q = number_bins(base.sketch, window.sketch)
        below = window.sketch.get_rank(base.sketch.get_min_value(), False)
        above = 1 - window.sketch.get_rank(base.sketch.get_max_value(), True)
        out |= {"psi": psi(p, q), "js": js_distance(p, q), "ks": ks_distance(base.sketch, window.sketch), "out_of_range": float(below + above)}
    else:
        p, q, unseen = category_bins(base.sketch, window.sketch)
        out |= {"psi": psi(p, q), "js": js_distance(p, q), "tv": float(np.abs(p - q).sum() / 2), "unseen": unseen}
    for name in ("psi", "js", "ks", "tv", "out_of_range", "unseen"):
        if name in out:
            out[name] = round(out[name], 6)
    out["drift"] = out["psi"]
    out["verdict"] = _verdict(out, limits, window.count)
    return out


def _missing_verdict(out: dict[str, Any], limits: Thresholds) -> str | None:
    change = out.get("missing_change")
    return "missing" if change is not None and change > limits.missing else None


def _verdict(out: dict[str, Any], limits: Thresholds, rows: int) -> str:
    missing = _missing_verdict(out, limits)
    if missing:
        return missing  # an empty feature is read at once, however few rows
    if rows < limits.min_rows:
        return "too_few_rows"
    if out.get("unseen", 0) > limits.out_of_range:
        return "unseen_categories"
    if out.get("out_of_range", 0) > limits.out_of_range:
        return "out_of_range"
    if out["drift"] > limits.drift:
        return "drift"
    return "ok"


# The drift of a column the traffic has no value of (gone from it, or missing on every row, or
# of another kind than the baseline's): the population stability index of ten equal bins
# against none, at its floors (about 6.9), the most it reads.
GONE_DRIFT = round(10 * (0.1 - FLOOR) * math.log(0.1 / FLOOR), 6)
GONE = ("absent", "missing", "type_changed")  # the verdicts of a column with no value to compare


def gate_drift(found: dict[str, Any]) -> float | None:
    """The rollout gate `drift` of a check: its worst column's drift, or `GONE_DRIFT` where a
    column the baseline has holds no value in the traffic (its verdict `absent` or `missing`,
    no drift of its own) or none of the baseline's kind (`type_changed`): the gate fails on it,
    where the other columns alone would pass it."""
    if any(c["drift"] is None and c["verdict"] in GONE for c in found["columns"].values()):
        return GONE_DRIFT
    drift: float | None = found["drift"]
    return drift


def check(baseline: Profile, window: Profile, limits: Thresholds) -> dict[str, Any]:
    """Every baseline column checked against the window: the columns, the worst named, a verdict."""
    columns: dict[str, Any] = {}
    for name, base in sorted(baseline.columns.items()):
        seen = window.columns.get(name)
        if seen is None:
            columns[name] = {"kind": base.kind, "role": base.role, "rows": 0, "drift": None,
                             "verdict": "absent" if window.rows >= limits.min_rows else "too_few_rows"}  # fmt: skip
            continue
        columns[name] = check_column(base, seen, limits)
    alerts = {n: c for n, c in columns.items() if c["verdict"] not in ("ok", "too_few_rows")}
    drifts = [c["drift"] for c in columns.values() if c.get("drift") is not None and c["rows"] >= limits.min_rows]
    worst = sorted(alerts, key=lambda n: -(columns[n]["drift"] if columns[n].get("drift") is not None else math.inf))
    return {
        "rows": window.rows,
        "verdict": "alert" if alerts else ("ok" if window.rows >= limits.min_rows else "too_few_rows"),
        "drift": round(max(drifts), 6) if drifts else None,
        "worst": worst[:5],
        "columns": columns,
    }
