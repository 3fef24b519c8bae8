"""The request path's profiles: groups of requests folded off the request's path (on the
folder thread) make the very sketches that folding each group inline, in the order the groups
were cut, makes; a request that cuts a group does not wait for it to be sketched; text columns
counted by value give the frequent items and missing counts that making each value a word
gives."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.monitor.profiler import ProfileRecorder
from sluice.monitor.sketches import Column, Profile, frequent

WORDS = ["lyon", "nice", "", None, "oslo", b"rome", b""]
CLASSES = {"p": ["a", "b"]}


class Written:
    """A registry that keeps what a flush writes (the profile records, as the real ones take them)."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, ...]] = []

    def add_profile(self, tenant: str, deployment: str, revision: int, variant: str, window: int, doc: dict[str, Any]) -> None:
        self.records.append((variant, doc))


@st.composite
def requests(draw: st.DrawFn) -> list[tuple[str, dict[str, np.ndarray], dict[str, np.ndarray], int]]:
    """Requests of one to six rows to three variants; their values (with NaN, empty and
    missing categories) from a drawn seed: the sequence's shape is what folding depends on."""
    shape = draw(st.lists(st.tuples(st.sampled_from(["", "b", "c"]), st.integers(1, 6)), min_size=1, max_size=16))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    out = []
    for variant, rows in shape:
        x = rng.normal(size=(rows, 2)).astype(np.float32)
        x[rng.random((rows, 2)) < 0.2] = np.nan
        city = np.empty(rows, dtype=object)
        city[:] = [WORDS[i] for i in rng.integers(0, len(WORDS), rows)]
        out.append((variant, {"x": x, "city": city}, {"label": city.copy(), "p": rng.random((rows, 2)).astype(np.float32)}, rows))
    return out


def inline(sequence: list[tuple[str, dict[str, np.ndarray], dict[str, np.ndarray], int]], fold_rows: int, sample: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """What folding on the request path made: each variant's requests cut into a group by the
    request that brings its rows to `fold_rows`, each group sketched (joined, a sample of
    `sample` rows drawn) when cut; the rest at the flush, in the order the variants came."""
    rng = np.random.default_rng(seed)
    held: dict[str, list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]] = {}
    profiles: dict[str, Profile] = {}

    def fold(variant: str) -> None:
        parts = held[variant]
        joined = [{k: np.concatenate([p[i][k] for p in parts]) for k in parts[0][i]} for i in (0, 1)]
        profiles.setdefault(variant, Profile()).add_rows(joined[0], joined[1], None, CLASSES, sample=sample, rng=rng)
        held[variant] = []

    for variant, inputs, outputs, _ in sequence:
        held.setdefault(variant, []).append((inputs, outputs))
        if sum(len(p[0]["x"]) for p in held[variant]) >= fold_rows:
            fold(variant)
    for variant, parts in held.items():
        if parts:
            fold(variant)
    return [(v, profiles[v].to_dict()) for v in held]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=requests(), fold_rows=st.integers(1, 12), sample=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_folding_off_the_request_path_makes_the_sketches_folding_inline_made(
    sequence: list[tuple[str, dict[str, np.ndarray], dict[str, np.ndarray], int]], fold_rows: int, sample: int, seed: int
) -> None:
    """Few rows a column (no sketch compacts), so equal sketches serialize to equal bytes."""
    registry = Written()
    recorder = ProfileRecorder(
        registry, fold_rows=fold_rows, sample_rows=sample, rng=np.random.default_rng(seed), timed=False, background=True  # type: ignore[arg-type]
    )
    for variant, inputs, outputs, rows in sequence:
        recorder.observe(("t", "d", 1, variant), None, inputs, outputs, CLASSES, rows)
    recorder.flush()
    assert registry.records == inline(sequence, fold_rows, sample, seed)
    assert sum(doc["rows"] for _, doc in registry.records) == sum(r[3] for r in sequence)


def test_a_request_that_cuts_a_group_does_not_wait_for_it_to_be_sketched() -> None:
    registry = Written()
    recorder = ProfileRecorder(registry, fold_rows=4, timed=False, background=True)  # type: ignore[arg-type]
    x = {"x": np.ones((4, 2), np.float32)}
    with recorder._folding:  # a fold under way: the request's path must not need it
        done = threading.Event()
        worker = threading.Thread(target=lambda: (recorder.observe(("t", "d", 1, ""), None, x, {}, {}, 4), done.set()))
        worker.start()
        assert done.wait(30), "the request waited for the fold"
        (held,) = recorder._held.values()
        assert held.profile is None and not held.parts  # cut, not yet sketched
    recorder.flush()
    ((_, doc),) = registry.records
    assert doc["rows"] == 4 and doc["columns"]["x[0]"]["count"] == 4


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.sampled_from([*WORDS, "é", 0, 1.5, True]), min_size=1, max_size=40))
def test_text_counted_by_value_is_what_making_each_value_a_word_gives(values: list[Any]) -> None:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    column = Column("category", "input")
    column.add(array)
    words = [v.decode() if isinstance(v, bytes) else "" if v is None else str(v) for v in values]
    found, counts = np.unique([w for w in words if w], return_counts=True)
    assert column.missing == sum(v is None or v in ("", b"") for v in values)  # a number (0, False) is a value
    assert sorted(frequent(column.sketch)) == sorted(zip(found.tolist(), counts.tolist(), strict=True))


def test_requests_held_for_a_fold_add_nothing_for_the_garbage_collector_to_walk() -> None:
    """A busy worker holds thousands of requests between folds. Their dicts of arrays are not
    tracked by the collector; held as they are (not a tuple each) they add no tracked object, so
    the collector's full passes neither come more often nor take longer as they pile up."""
    import gc

    recorder = ProfileRecorder(Written(), fold_rows=100_000, timed=False)  # type: ignore[arg-type]
    x = np.ones((1, 4), np.float32)
    recorder.observe(("t", "d", 1, ""), None, {"x": x}, {"y": x[:, 0]}, {}, 1)  # the window's own objects, once
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(5000):
        recorder.observe(("t", "d", 1, ""), None, {"x": x}, {"y": x[:, 0]}, {}, 1)
    gc.collect()
    assert len(gc.get_objects()) - before < 50
    (held,) = recorder._held.values()
    assert held.rows == 5001 and len(held.parts) == 5001
    assert recorder.flush() is True and recorder.registry.records[0][1]["rows"] == 5001  # every one folded


def test_a_classifiers_labels_held_for_a_fold_are_held_once_while_they_stay_the_same() -> None:
    """A classifier answers the same class labels request after request (a new list each time):
    held once while they do not change, they add nothing per request for the collector either,
    and a request whose labels differ is held with its own."""
    import gc

    recorder = ProfileRecorder(Written(), fold_rows=100_000, timed=False)  # type: ignore[arg-type]
    x, p = np.ones((1, 4), np.float32), np.full((1, 2), 0.5, np.float32)
    recorder.observe(("t", "d", 1, ""), None, {"x": x}, {"p": p}, {"p": ["a", "b"]}, 1)
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(5000):
        recorder.observe(("t", "d", 1, ""), None, {"x": x}, {"p": p}, {"p": ["a", "b"]}, 1)
    recorder.observe(("t", "d", 1, ""), None, {"x": x}, {"p": p}, {"p": ["b", "a"]}, 1)
    gc.collect()
    assert len(gc.get_objects()) - before < 50
    (held,) = recorder._held.values()
    assert [c["p"] for c in held.parts.classes[-2:]] == [["a", "b"], ["b", "a"]]
    assert recorder.flush() is True and recorder.registry.records[0][1]["rows"] == 5002


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.tuples(st.integers(1, 3), st.sampled_from(["float32", "float64", "int64"])), min_size=1, max_size=1400),
    width=st.integers(1, 4), odd=st.one_of(st.none(), st.tuples(st.integers(0, 1399), st.sampled_from(["wider", "no y", "a date"]))),
)  # fmt: skip
def test_the_folder_threads_join_in_pieces_is_the_join_in_one_call(sizes: list[tuple[int, str]], width: int, odd: tuple[int, str] | None) -> None:
    """On the folder thread a group's requests are joined a few hundred at a time, the GIL let
    go between: the tensors are those one call makes, whatever the dtypes of the requests, and
    a group that does not join (a request of another width, without a tensor, of a date) does
    not join either way (it is then folded a request at a time)."""
    from sluice.monitor import profiler

    rng = np.random.default_rng(len(sizes) * 10 + width)
    parts = [{"x": (rng.random((n, width)) * 100).astype(dtype), "y": rng.random(n)} for n, dtype in sizes]
    if odd is not None and odd[0] < len(parts):
        parts[odd[0]] = {
            "wider": {"x": np.ones((1, width + 1), np.float32), "y": np.ones(1)},
            "no y": {"x": np.ones((1, width), np.float32)},
            "a date": {"x": np.full((1, width), np.datetime64("2026-01-01")), "y": np.ones(1)},
        }[odd[1]]
    pauses = []
    whole, pieces = profiler._joined(parts), profiler._joined(parts, lambda: pauses.append(1))
    if whole is None:
        assert pieces is None
        return
    assert pieces is not None and whole.keys() == pieces.keys()
    for name in whole:
        assert np.array_equal(whole[name], pieces[name]) and whole[name].dtype == pieces[name].dtype
    assert len(pauses) == (0 if len(parts) <= profiler.JOIN_AT_ONCE else 2 * -(-len(parts) // profiler.JOIN_AT_ONCE))
