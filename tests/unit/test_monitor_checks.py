"""Monitoring checks on data whose drift is known: a shifted feature, a feature gone missing,
a new category, each detected and named; the training distribution itself raises nothing;
the sketches' KS distance against scipy's exact two-sample statistic."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from sluice.domain.rollout_specs import parse_gates
from sluice.monitor.checks import GONE_DRIFT, Thresholds, check, check_column, gate_drift
from sluice.monitor.sketches import Profile

LIMITS = Thresholds()


def rows(rng: np.random.Generator, n: int, *, shift: float = 0.0, missing: float = 0.0, new: float = 0.0) -> dict[str, np.ndarray]:
    x = rng.normal(size=(n, 3)).astype(np.float32)
    x[:, 0] += shift
    x[rng.random(n) < missing, 1] = np.nan
    city = rng.choice(["lyon", "nice", "oslo"], size=n, p=[0.5, 0.3, 0.2]).astype(object)
    city[rng.random(n) < new] = "rome"
    return {"x": x, "city": city}


def profile_of(arrays: dict[str, np.ndarray]) -> Profile:
    profile = Profile()
    profile.add_rows(arrays, None, None)
    return profile


@pytest.fixture(scope="module")
def baseline() -> tuple[Profile, dict[str, np.ndarray]]:
    data = rows(np.random.default_rng(7), 20_000)
    return profile_of(data), data


@pytest.mark.parametrize(
    ("change", "column", "verdict"),
    [({"shift": 1.0}, "x[0]", "drift"), ({"missing": 0.3}, "x[1]", "missing"), ({"new": 0.1}, "city", "unseen_categories")],
)
def test_known_drift_is_detected_and_named(baseline: tuple[Profile, dict[str, np.ndarray]], change: dict[str, float], column: str, verdict: str) -> None:
    found = check(baseline[0], profile_of(rows(np.random.default_rng(1), 1000, **change)), LIMITS)
    assert found["verdict"] == "alert"
    assert found["worst"] == [column]
    assert found["columns"][column]["verdict"] == verdict
    others = {name: c["verdict"] for name, c in found["columns"].items() if name != column}
    assert set(others.values()) == {"ok"}, others


@pytest.mark.parametrize("gone", ["missing on every row", "absent", "kept"])
def test_the_drift_gate_fails_a_column_the_traffic_no_longer_holds(baseline: tuple[Profile, dict[str, np.ndarray]], gone: str) -> None:
    """A column with no value in the candidate's traffic (an input renamed, an output gone, a
    feature missing on every row) has no drift of its own: the gate reads the most a drift
    reads, where the other columns' worst alone (about 0.015) would pass `drift<=0.2`."""
    window = rows(np.random.default_rng(1), 1000, missing=1.0 if gone == "missing on every row" else 0.0)
    if gone == "absent":
        del window["city"]
    found = check(baseline[0], profile_of(window), LIMITS)
    (gate,) = parse_gates("drift<=0.2")
    if gone == "kept":
        assert found["verdict"] == "ok" and gate_drift(found) == found["drift"] and gate.passes(gate_drift(found))
        return
    column = "city" if gone == "absent" else "x[1]"
    assert found["columns"][column]["verdict"] == ("absent" if gone == "absent" else "missing") and found["verdict"] == "alert"
    assert found["drift"] < 0.2 and gate_drift(found) == GONE_DRIFT and not gate.passes(gate_drift(found))


@pytest.mark.parametrize("rows_now", [1000, 10])
def test_a_column_whose_values_changed_kind_alerts_and_fails_the_drift_gate(baseline: tuple[Profile, dict[str, np.ndarray]], rows_now: int) -> None:
    """A new model version that reads text where the baseline had numbers (or the other way)
    leaves nothing to compare: the column says so at once, however few rows, and the gate
    reads it as the most drift there is, as it does a column gone from the traffic."""
    window = rows(np.random.default_rng(2), rows_now)
    window["x"] = window["x"].round(1).astype(str).astype(object)  # numbers then, text now
    window["city"] = np.arange(rows_now, dtype=np.float64)  # text then, numbers now
    found = check(baseline[0], profile_of(window), LIMITS)
    assert found["verdict"] == "alert"
    for column, then, now in (("x[0]", "number", "category"), ("x[2]", "number", "category"), ("city", "category", "number")):
        said = found["columns"][column]
        assert (said["verdict"], said["drift"], said["kind"], said["window_kind"], said["rows"]) == ("type_changed", None, then, now, rows_now)
    (gate,) = parse_gates("drift<=0.2")
    assert gate_drift(found) == GONE_DRIFT and not gate.passes(gate_drift(found))
    assert check_column(baseline[0].columns["city"], profile_of(window).columns["city"], LIMITS)["verdict"] == "type_changed"


def test_the_training_distribution_raises_no_alarm_in_100_windows(baseline: tuple[Profile, dict[str, np.ndarray]]) -> None:
    rng = np.random.default_rng(2)
    alarms = [check(baseline[0], profile_of(rows(rng, 1000)), LIMITS) for _ in range(100)]
    raised = [a["worst"] for a in alarms if a["verdict"] != "ok"]
    assert raised == []  # false-alarm rate 0/100 at the default thresholds, 1000-row windows
    assert max(a["drift"] for a in alarms) < LIMITS.drift / 2


def test_sketch_ks_is_within_the_sketches_rank_error_of_the_exact_statistic(baseline: tuple[Profile, dict[str, np.ndarray]]) -> None:
    from scipy.stats import ks_2samp

    from sluice.monitor.checks import ks_distance

    base, data = baseline
    rng = np.random.default_rng(3)
    for shift in (0.0, 0.1, 0.3, 1.0):
        window = rows(rng, 5000, shift=shift)
        sketched = ks_distance(base.columns["x[0]"].sketch, profile_of(window).columns["x[0]"].sketch)
        exact = ks_2samp(data["x"][:, 0], window["x"][:, 0]).statistic
        bound = base.columns["x[0]"].sketch.normalized_rank_error(False) * 2  # each sketch's rank error
        assert abs(sketched - exact) <= bound, (shift, sketched, exact, bound)


def test_profiles_merge_and_round_trip_as_one_stream() -> None:
    data = rows(np.random.default_rng(4), 4000, missing=0.1)
    whole = profile_of(data)
    halves = [profile_of({k: v[:2000] for k, v in data.items()}), profile_of({k: v[2000:] for k, v in data.items()})]
    merged = Profile.from_dict(halves[0].to_dict())
    merged.merge(Profile.from_dict(halves[1].to_dict()))
    assert merged.rows == whole.rows == 4000
    for name, column in whole.columns.items():
        assert (merged.columns[name].count, merged.columns[name].missing) == (column.count, column.missing)
    a, b = merged.summary()["columns"]["x[0]"], whole.summary()["columns"]["x[0]"]
    assert a["min"] == b["min"] and a["max"] == b["max"]
    assert abs(a["quantiles"]["p50"] - b["quantiles"]["p50"]) < 0.1
    assert merged.summary()["columns"]["city"]["top"][0]["value"] == "lyon"


def test_held_requests_never_hold_the_tensors_profiles_leave_out() -> None:
    """An image-sized input waits for its fold as an empty array of its rows: a process holding
    thousands of requests between folds does not hold their pixels."""
    from sluice.monitor.profiler import ProfileRecorder

    recorder = ProfileRecorder(None, timed=False)  # type: ignore[arg-type]  # nothing is flushed here
    image = np.zeros((2, 3, 64, 64), np.float32)
    wide = np.zeros((2, 500), np.float32)
    recorder.observe(("t", "d", 1, ""), None, {"image": image, "x": np.ones((2, 4))}, {"e": wide, "y": np.ones(2)}, {}, 2)
    (held,) = recorder._held.values()
    inputs, outputs, _ = next(iter(held.parts))
    assert inputs["image"].nbytes == 0 and inputs["image"].shape == (2, 0)
    assert outputs["e"].nbytes == 0 and inputs["x"].shape == (2, 4) and outputs["y"].shape == (2,)


@settings(max_examples=25, deadline=None)
@given(k=st.integers(193, 1000), seed=st.integers(0, 2**32 - 1))
@example(k=217, seed=9997)  # a category the window drew more often than the baseline's sketch bound, by chance
def test_more_categories_than_the_sketch_tracks_raise_no_false_alarm(k: int, seed: int) -> None:
    """Past the frequent-items sketch's 192 values it keeps only bounds on the rarer ones: a
    window drawn from the baseline's own categories has none unseen and no drift."""
    rng = np.random.default_rng(seed)
    cats = np.array([f"zip{i:05d}" for i in range(k)], dtype=object)
    found = check(profile_of({"zip": cats[rng.integers(0, k, 50 * k)]}), profile_of({"zip": cats[rng.integers(0, k, 20 * k)]}), LIMITS)
    column = found["columns"]["zip"]
    assert column["unseen"] == 0.0
    assert column["verdict"] == "ok" and column["psi"] < LIMITS.drift, column


@settings(max_examples=15, deadline=None)
@given(k=st.integers(193, 1000), share=st.floats(0.1, 0.5), seed=st.integers(0, 2**32 - 1))
def test_a_new_category_among_more_than_the_sketch_tracks_is_still_unseen(k: int, share: float, seed: int) -> None:
    """Past the sketch's capacity a category the baseline never had is still found, by being
    more common in the window than the baseline's sketch can have let go."""
    rng = np.random.default_rng(seed)
    cats = np.array([f"zip{i:05d}" for i in range(k)], dtype=object)
    window = cats[rng.integers(0, k, 20 * k)]
    window[rng.random(window.size) < share] = "new-zip"
    column = check(profile_of({"zip": cats[rng.integers(0, k, 50 * k)]}), profile_of({"zip": window}), LIMITS)["columns"]["zip"]
    drawn = float(np.mean(window == "new-zip"))  # the share drawn, not the one asked for (3,860 rows at k=193: 2.7 sigma apart once)
    assert column["unseen"] == pytest.approx(drawn, abs=0.02) and column["verdict"] == "unseen_categories", column


@settings(max_examples=25, deadline=None)
@given(zeros=st.floats(0.25, 0.99), seed=st.integers(0, 2**32 - 1))
def test_a_sparse_feature_whose_zeros_vanish_drifts(zeros: float, seed: int) -> None:
    """The baseline's zeros fill two deciles or more: their bin of their own sees them go."""
    rng = np.random.default_rng(seed)
    def sparse(n: int, share: float) -> np.ndarray:
        return np.where(rng.random(n) < share, 0.0, rng.uniform(0, 10, n))
    base = profile_of({"f": sparse(20_000, zeros)})
    same = check(base, profile_of({"f": sparse(2000, zeros)}), LIMITS)["columns"]["f"]
    gone = check(base, profile_of({"f": sparse(2000, 0.0)}), LIMITS)["columns"]["f"]
    assert same["verdict"] == "ok", same
    assert gone["verdict"] == "drift", gone


@settings(max_examples=25, deadline=None)
@given(value=st.floats(-1e6, 1e6), step=st.floats(1e-3, 1e3))
def test_a_constant_feature_that_moves_drifts(value: float, step: float) -> None:
    assume(np.float32(value + step) != np.float32(value))  # the sketch holds float32
    base = profile_of({"f": np.full(5000, value)})
    assert check(base, profile_of({"f": np.full(1000, value)}), LIMITS)["columns"]["f"]["psi"] == 0.0
    moved = check(base, profile_of({"f": np.full(1000, value + step)}), LIMITS)["columns"]["f"]
    assert moved["psi"] > LIMITS.drift and moved["js"] == 1.0, moved
