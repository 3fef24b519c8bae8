"""The prediction cache's parts: what the key depends on, which policies are deterministic, the
shared tier's form of an answer, and the per-container tier's limits."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.domain import CacheSettings, Deployment, ModelVersion, Signature, TensorSpec
from sluice.domain.policy import parse_policy, uncacheable
from sluice.domain.results import Answer, InferenceResult
from sluice.inference.prediction_cache import PredictionCache, answer_key, dump_answer, load_answer

DEP = Deployment("acme", "scoring", {}, revision=3, cache=CacheSettings(60.0, 2))
ROUTE = (("iris", 1),)
X = {"input": np.arange(8, dtype=np.float32).reshape(2, 4)}


def key(dep: Deployment = DEP, route: tuple = ROUTE, outputs: tuple | None = None, arrays: dict | None = None) -> str:
    return answer_key(dep, route, outputs, X if arrays is None else arrays)


def test_the_key_depends_on_everything_that_could_change_the_answer() -> None:
    base = key()
    assert key() == base and key(arrays={"input": X["input"].copy()}) == base
    others = [
        key(dep=Deployment("globex", "scoring", {}, revision=3)),
        key(dep=Deployment("acme", "other", {}, revision=3)),
        key(dep=Deployment("acme", "scoring", {}, revision=4)),
        key(route=(("iris", 2),)),
        key(route=(("variant", "canary"), ("iris", 1))),
        key(outputs=("output_label",)),
        key(arrays={"input": X["input"].astype(np.float64)}),  # the same values, another dtype
        key(arrays={"input": X["input"].reshape(4, 2)}),  # the same bytes, another shape
        key(arrays={"input": X["input"] + np.float32(1e-6)}),
        key(arrays={"other": X["input"]}),
    ]
    assert len({base, *others}) == len(others) + 1
    # A transposed (non-contiguous) array hashes by its values, as a copy would.
    t = X["input"].T
    assert key(arrays={"input": t}) == key(arrays={"input": np.ascontiguousarray(t)})


def test_string_inputs_hash_by_value_not_by_address() -> None:
    a = {"text": np.array(["ab", "c"], dtype=object)}
    b = {"text": np.array(["a", "bc"], dtype=object)}
    assert key(arrays=a) == key(arrays={"text": np.array(["ab", "c"], dtype=object)})
    assert key(arrays=a) != key(arrays=b)


SINGLE = {"kind": "single", "model": "m", "version": 1}


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (SINGLE, None),
        ({"kind": "split", "routing_key": "x-user", "variants": [{"name": "a", "weight": 1, "target": SINGLE}, {"name": "b", "weight": 1, "target": SINGLE}]}, None),
        ({"kind": "split", "variants": [{"name": "a", "weight": 1, "target": SINGLE}, {"name": "b", "weight": 0, "target": SINGLE}]}, None),
        ({"kind": "split", "variants": [{"name": "a", "weight": 1, "target": SINGLE}, {"name": "b", "weight": 1, "target": SINGLE}]}, "policy.routing_key"),
        ({"kind": "split", "bandit": {"algorithm": "thompson"}, "variants": [{"name": "a", "weight": 1, "target": SINGLE}]}, "policy.bandit"),
        ({"kind": "ensemble", "aggregator": "mean", "members": [{"name": "a", "target": SINGLE}, {"name": "b", "target": SINGLE}]}, None),
        ({"kind": "ensemble", "aggregator": "first_success", "members": [{"name": "a", "target": SINGLE}]}, "policy.aggregator"),
        ({"kind": "ensemble", "aggregator": "mean", "min_members": 1, "members": [{"name": "a", "target": SINGLE}, {"name": "b", "target": SINGLE}]}, "policy.min_members"),
        (
            {"kind": "shadow", "primary": SINGLE, "mirrors": [{"name": "m", "target": {"kind": "split", "variants": [{"name": "a", "weight": 1, "target": SINGLE}, {"name": "b", "weight": 1, "target": SINGLE}]}}]},
            None,  # a mirror never answers
        ),
        (
            {"kind": "ensemble", "aggregator": "mean", "members": [{"name": "a", "target": SINGLE}, {"name": "b", "target": {"kind": "split", "variants": [{"name": "x", "weight": 1, "target": SINGLE}, {"name": "y", "weight": 1, "target": SINGLE}]}}]},
            "policy.members.1.target.routing_key",
        ),
    ],
)
def test_which_policies_are_deterministic(policy: dict, field: str | None) -> None:
    found = uncacheable(parse_policy(policy))
    assert (found[0] if found else None) == field


def _answer(outputs: dict[str, np.ndarray]) -> Answer:
    spec = TensorSpec("input", "FP32", (-1, 4))
    version = ModelVersion("acme", "iris", 1, "onnx", "file:///x", "0" * 64, 1, Signature((spec,), ()))
    return Answer(version.signature, InferenceResult(outputs, {"probs": ["a", "b"]}), version, variant="canary", members=[{"name": "a", "ok": True}])


def test_an_answer_survives_the_shared_tiers_form() -> None:
    outputs = {
        "label": np.array(["setosa", "virginica"], dtype=object),
        "probs": np.array([[0.25, 0.75], [1.0, 0.0]], dtype=np.float32),
        "ids": np.array([[1], [2]], dtype=np.int64),
        "empty": np.zeros((0, 3), dtype=np.float16),
    }
    header, back = load_answer(dump_answer(_answer(outputs)))
    assert (header["model"], header["version"], header["variant"]) == ("iris", 1, "canary")
    assert header["members"] == [{"name": "a", "ok": True}] and header["classes"] == {"probs": ["a", "b"]}
    assert list(back) == list(outputs)
    for name, array in outputs.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        np.testing.assert_array_equal(back[name], array)


def test_the_container_tier_keeps_small_answers_read_only_and_refuses_big_ones() -> None:
    cache = PredictionCache(max_entry_bytes=64)
    small = _answer({"probs": np.zeros((2, 2), dtype=np.float32)})
    assert cache.put(DEP, "k", small) and cache.get(DEP, "k") is small
    with pytest.raises(ValueError, match="read-only"):
        small.result.outputs["probs"][0, 0] = 1.0  # every later hit shares these arrays
    assert not cache.put(DEP, "big", _answer({"probs": np.zeros((4, 8), dtype=np.float32)}))
    assert cache.get(DEP, "big") is None
    # New settings for the deployment: a new tier, sized by them.
    assert cache.get(Deployment("acme", "scoring", {}, revision=3, cache=CacheSettings(5.0, 2)), "k") is None
    cache.drop("acme", "scoring")
    assert cache.get(DEP, "k") is None


def test_all_deployments_together_stay_within_the_byte_budget() -> None:
    cache = PredictionCache(max_entry_bytes=1024, max_bytes=100)
    other = Deployment("acme", "other", {}, revision=1, cache=CacheSettings(60.0, 10))
    wide = Deployment("acme", "wide", {}, revision=1, cache=CacheSettings(60.0, 10))
    answer = lambda: _answer({"probs": np.zeros(10, dtype=np.float32)})  # noqa: E731  (40 bytes)
    assert cache.put(other, "a", answer()) and cache.put(other, "b", answer())
    # 80 of 100 bytes are other's: wide cannot push them out, so its answer is not kept.
    assert not cache.put(wide, "c", answer()) and cache.get(wide, "c") is None
    assert cache.get(other, "a") is not None and cache.get(other, "b") is not None
    # Within one deployment the least recently used makes room.
    assert cache.put(other, "d", answer())
    assert cache.get(other, "a") is None and cache.get(other, "b") is not None and cache.get(other, "d") is not None
    cache.drop("acme", "other")
    assert cache.put(wide, "c", answer())


def test_string_answers_are_counted_by_their_text_within_both_bounds() -> None:
    """A text answer (a summary, a generated string) holds its text, not the 8 bytes of a
    pointer per element NumPy counts: one over the entry limit is not kept, and many of them
    stay within the container's budget."""
    cache = PredictionCache(max_entry_bytes=1 << 20, max_bytes=4 << 20)
    text = lambda size: _answer({"summary": np.array(["x" * size], dtype=object)})  # noqa: E731
    assert not cache.put(DEP, "long", text(2 << 20))  # one 2 MiB string, over the 1 MiB an answer may hold
    assert cache.get(DEP, "long") is None
    assert not cache.put(DEP, "bytes", _answer({"raw": np.array([b"x" * (2 << 20)], dtype=object)}))
    summaries = Deployment("acme", "summaries", {}, revision=1, cache=CacheSettings(60.0, 100))
    for i in range(16):  # 16 answers of 512 KiB of text: 8 MiB, twice the 4 MiB budget
        assert cache.put(summaries, f"k{i}", text(512 << 10))
    kept = [cache.get(summaries, f"k{i}") for i in range(16)]
    held = sum(len(answer.result.outputs["summary"][0]) for answer in kept if answer is not None)
    assert 0 < held <= 4 << 20, held
    assert kept[-1] is not None  # the newest kept, the least recently used gone


def test_an_answer_joined_with_others_holds_only_its_own_rows_within_the_budget() -> None:
    """An answer of adaptive batching is its rows of the joined call's output: the cache keeps
    them on their own, never the whole joined output, so its byte budget bounds the memory it
    holds (it kept a 1-row answer's 40 bytes while holding a 1000-row neighbour's 40,000)."""
    import gc
    import tracemalloc

    from sluice.inference.batching import split

    cache = PredictionCache(max_entry_bytes=64, max_bytes=4096)
    dep = Deployment("acme", "scoring", {}, revision=3, cache=CacheSettings(60.0, 1000))
    tracemalloc.start()
    try:
        for i in range(20):
            joined = InferenceResult({"probs": np.ones((1001, 10), dtype=np.float32)})  # a 1-row request joined with a 1000-row one
            parts = split(joined, [1, 1000])
            assert parts is not None
            small, big = parts
            assert cache.put(dep, f"small{i}", _answer(small.outputs))
            assert not cache.put(dep, f"big{i}", _answer(big.outputs))  # too big to keep
            del joined, parts, small, big
        gc.collect()
        arrays = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
        held = sum(stat.size for stat in arrays.statistics("filename"))
    finally:
        tracemalloc.stop()
    assert all(cache.get(dep, f"small{i}") is not None for i in range(20))
    assert held <= 4096, held


def test_an_answer_copied_from_the_shared_tier_goes_when_it_goes_there() -> None:
    """Kept no longer than the shared tier keeps it (what is left of its time there), never a
    fresh time to live of its own."""
    now = [1000.0]
    cache = PredictionCache(timer=lambda: now[0], wall=lambda: now[0])
    answer = _answer({"probs": np.zeros(2, dtype=np.float32)})
    assert cache.put(DEP, "shared", answer, expires_at=now[0] + 5)  # DEP keeps answers longer
    assert not cache.put(DEP, "gone", _answer({"probs": np.zeros(2, dtype=np.float32)}), expires_at=now[0] - 1)
    now[0] += 4.9
    assert cache.get(DEP, "shared") is answer
    now[0] += 0.2
    assert cache.get(DEP, "shared") is None


def test_an_answer_of_the_shared_tier_past_its_own_expiry_is_not_served() -> None:
    """A shared tier may keep an answer a little longer than it is good for (DynamoDB's time
    to live is whole seconds): the expiry the answer carries decides."""
    now = [1000.0]
    kept = dump_answer(_answer({"probs": np.zeros(2, dtype=np.float32)}), expires_at=1010.4)

    class Shared:
        def get_cached_answer(self, tenant: str, deployment: str, key: str, *, now: float) -> bytes | None:
            return kept if now < 1011 else None  # its expiry rounded up to a second

        def put_cached_answer(self, *args: Any, **kw: Any) -> None: ...

    async def version_of(tenant: str, model: str, version: int) -> ModelVersion:
        return _answer({}).version

    cache = PredictionCache(Shared(), timer=lambda: now[0], wall=lambda: now[0])
    now[0] = 1010.3
    assert asyncio.run(cache.get_shared(DEP, "a", version_of)) is not None
    now[0] = 1010.6
    assert asyncio.run(cache.get_shared(DEP, "b", version_of)) is None
    assert cache.get(DEP, "b") is None


@settings(max_examples=60, deadline=None)
@given(data=st.data(), datatype=st.sampled_from([*sorted(V2_TO_NUMPY), "BF16"]), shape=st.lists(st.integers(0, 3), max_size=3), swapped=st.booleans())
def test_every_v2_datatype_reads_back_from_the_shared_tier_as_it_was_kept(data: st.DataObject, datatype: str, shape: list[int], swapped: bool) -> None:
    """Whatever v2 datatype an answer holds (BF16, whose NumPy name is raw bytes, too; in either
    byte order), another container reads the same datatype and the same values back."""
    from sluice.codecs.datatypes import answer_dtypes, v2_of_numpy

    pytest.importorskip("ml_dtypes")  # BF16's NumPy type: it comes with tritonclient
    dtype = answer_dtypes()[datatype]
    count = int(np.prod(shape, dtype=np.int64))
    if datatype == "BYTES":
        array = np.array(data.draw(st.lists(st.text(max_size=5), min_size=count, max_size=count)), dtype=object).reshape(shape)
    else:
        raw = data.draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))
        array = np.frombuffer(raw, dtype=dtype).reshape(shape)
        if swapped and dtype.itemsize > 1 and datatype != "BF16":
            array = array.astype(dtype.newbyteorder(">"))
    _, back = load_answer(dump_answer(_answer({"y": array})))
    assert v2_of_numpy(back["y"].dtype) == datatype and back["y"].shape == array.shape
    if datatype == "BYTES":
        assert back["y"].tolist() == array.tolist()
    else:
        assert back["y"].astype(dtype).tobytes() == array.astype(dtype).tobytes()  # bit for bit: NaNs too


def _old_entry(outputs: list[tuple[dict[str, Any], bytes]]) -> bytes:
    """An entry as the release before wrote it: each output's NumPy dtype name (`dtype.str`)."""
    header = {"model": "iris", "version": 1, "variant": None, "members": None, "classes": {}, "outputs": [spec for spec, _ in outputs]}
    head = json.dumps(header).encode()
    return len(head).to_bytes(4, "big") + head + b"".join(tail for _, tail in outputs)


def test_an_entry_an_earlier_release_wrote_reads_or_is_a_miss_never_a_failure() -> None:
    """Numbers and strings it wrote read as they were; its BF16 (stored as raw bytes, '<V2')
    cannot be told from other bytes and is a miss: the answer is computed again."""
    probs = np.array([[0.25, 0.75]], dtype=np.float32)
    old = _old_entry([({"name": "probs", "dtype": "<f4", "shape": [1, 2]}, probs.tobytes()), ({"name": "label", "dtype": "O", "shape": [1], "values": ["a"]}, b"")])
    _, back = load_answer(old)
    np.testing.assert_array_equal(back["probs"], probs)
    assert back["label"].tolist() == ["a"]

    bf16 = _old_entry([({"name": "y", "dtype": "<V2", "shape": [1, 2]}, b"\xc0?\x10@")])

    class Shared:
        def get_cached_answer(self, tenant: str, deployment: str, key: str, *, now: float) -> bytes | None:
            return bf16

        def put_cached_answer(self, *args: Any, **kw: Any) -> None: ...

    async def version_of(tenant: str, model: str, version: int) -> ModelVersion:
        return _answer({}).version

    assert asyncio.run(PredictionCache(Shared()).get_shared(DEP, "k", version_of)) is None
