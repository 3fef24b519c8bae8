"""Adaptive batching: concurrent requests for one version joined into one runtime call, each
request getting exactly its own answer; a bad input fails only its request; a runtime failure
fails each joined request with its status; the setting is validated (422 naming the field)
and kept with the deployment; in Lambda nothing waits."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from sluice.domain import BatchingSettings
from sluice.domain.errors import BackendError, InvalidInput, Overloaded, SluiceError
from sluice.domain.requests import PredictionRequest, RowInputs
from sluice.inference.batching import Batcher
from tests.integration.conftest import auth

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container

BATCHING = {"max_batch_size": 16, "max_delay_us": 200_000}  # long enough for every request to join
ROWS = [[round(0.01 * i - 0.05 * j, 3) for j in range(10)] for i in range(12)]  # 10 features: the diabetes MLP


@pytest.fixture
def batched(demo: Container, acme: Principal) -> Container:
    """acme's `diabetes` (regression MLP) and `iris` (classifier) with batching on."""
    demo.deployments.update(acme, "diabetes", None, batching=BATCHING)
    demo.deployments.update(acme, "iris", None, batching=BATCHING)
    return demo


def request(deployment: str, rows: Any) -> PredictionRequest:
    return PredictionRequest(deployment=deployment, inputs=RowInputs(inputs=rows))


async def concurrently(container: Container, principal: Principal, requests: list[PredictionRequest]) -> list[Any]:
    return await asyncio.gather(*(container.predictions.predict(principal, r) for r in requests), return_exceptions=True)


def outputs(prediction: Any) -> dict[str, np.ndarray]:
    return prediction.answer.result.outputs


def test_joined_requests_get_exactly_their_own_rows(batched: Container, acme: Principal) -> None:
    alone = [asyncio.run(batched.predictions.predict(acme, request("diabetes", [row]))) for row in ROWS[:3]]
    # Requests of 1, 2 and 3 rows, and single rows: one joined call of 12 rows.
    sizes = [1, 2, 3, 1, 1, 1, 1, 2]
    chunks, at = [], 0
    for n in sizes:
        chunks.append(ROWS[at : at + n])
        at += n
    batcher = batched.predictions.batcher
    before = (batcher.calls, batcher.joined)
    got = asyncio.run(concurrently(batched, acme, [request("diabetes", c) for c in chunks]))
    assert (batcher.calls - before[0], batcher.joined - before[1]) == (1, len(chunks))
    for chunk, prediction in zip(chunks, got, strict=True):
        (name,) = outputs(prediction)
        assert outputs(prediction)[name].shape[0] == len(chunk)
        expected = np.concatenate([outputs(asyncio.run(batched.predictions.predict(acme, request("diabetes", [r]))))[name] for r in chunk])
        np.testing.assert_allclose(outputs(prediction)[name], expected, rtol=1e-5, atol=1e-6)
    for prediction, single in zip(got[:1], alone[:1], strict=True):
        np.testing.assert_allclose(next(iter(outputs(prediction).values())), next(iter(outputs(single).values())), rtol=1e-5, atol=1e-6)


def test_a_classifier_s_labels_and_maps_are_split_per_request(batched: Container, acme: Principal) -> None:
    setosa, virginica = [5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]
    got = asyncio.run(concurrently(batched, acme, [request("iris", [setosa]), request("iris", [virginica, setosa]), request("iris", [virginica])]))
    labels = [outputs(p)["output_label"].tolist() for p in got]
    assert labels == [["setosa"], ["virginica", "setosa"], ["virginica"]]
    maps = [p.answer.result.maps.get("output_probability") for p in got]
    assert [len(m) for m in maps if m is not None] == [1, 2, 1]
    assert batched.predictions.batcher.joined >= 3


def test_a_bad_input_fails_only_its_own_request(batched: Container, acme: Principal) -> None:
    bad = request("diabetes", [[1.0, 2.0]])  # 2 features, not 10: refused before joining
    got = asyncio.run(concurrently(batched, acme, [request("diabetes", [ROWS[0]]), bad, request("diabetes", [ROWS[1]])]))
    assert isinstance(got[1], InvalidInput) and got[1].status == 400
    assert not isinstance(got[0], BaseException) and not isinstance(got[2], BaseException)
    assert batched.predictions.batcher.joined >= 2


def _runtime(container: Container) -> Any:
    return container.predictions.runtimes["onnx"]


def test_a_runtime_failure_fails_each_joined_request_with_its_status(batched: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(version: Any, inputs: dict[str, np.ndarray], outputs: Any = None) -> Any:
        raise BackendError("the ONNX runtime failed (Fail)")

    monkeypatch.setattr(_runtime(batched), "infer", broken)  # alone and joined
    got = asyncio.run(concurrently(batched, acme, [request("diabetes", [row]) for row in ROWS[:4]]))
    assert all(isinstance(e, SluiceError) and e.status == 502 for e in got)
    assert len({id(e) for e in got}) == 4  # each request its own error


def test_a_refused_joined_input_is_retried_alone_so_only_the_culprit_fails(batched: Container, acme: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = _runtime(batched)
    real = runtime.infer
    joined: list[int] = []
    culprit = np.float32(ROWS[2][0])

    async def picky(version: Any, inputs: dict[str, np.ndarray], outputs: Any = None) -> Any:
        joined.append(next(iter(inputs.values())).shape[0])  # every call's rows: alone and joined
        if any((a[:, 0] == culprit).any() for a in inputs.values()):  # the model refuses this row
            raise InvalidInput("the model rejected the input (shape or type)", field="inputs")
        return await real(version, inputs, outputs)

    monkeypatch.setattr(runtime, "infer", picky)
    got = asyncio.run(concurrently(batched, acme, [request("diabetes", [row]) for row in ROWS[:4]]))
    assert joined == [4, 1, 1, 1, 1]  # one joined call, refused; then each alone
    assert isinstance(got[2], InvalidInput) and got[2].status == 400
    assert all(not isinstance(got[i], BaseException) for i in (0, 1, 3))


def test_a_request_as_large_as_the_batch_goes_alone_and_others_wait_at_most_the_delay() -> None:
    class Runtime:
        calls: list[int] = []

        async def infer(self, version: Any, inputs: dict[str, np.ndarray], outputs: Any = None) -> Any:
            from sluice.domain.results import InferenceResult

            self.calls.append(next(iter(inputs.values())).shape[0])
            return InferenceResult({"y": next(iter(inputs.values())).sum(axis=1, keepdims=True)})

    class Version:
        tenant, model, version, sha256 = "t", "m", 1, "x"

    runtime, batcher = Runtime(), Batcher()
    settings = BatchingSettings(max_batch_size=4, max_delay_us=1000)

    async def go() -> list[Any]:
        arrays = [np.ones((n, 2), np.float32) * (i + 1) for i, n in enumerate([4, 1, 1, 3, 1])]
        return await asyncio.gather(*(batcher.infer(runtime, Version(), {"x": a}, None, settings) for a in arrays))  # type: ignore[arg-type]

    got = asyncio.run(go())
    # 4 rows alone; then 1+1 joined, 3 does not fit (5 > 4) so those two leave; 3+1 leave full.
    assert sorted(runtime.calls) == [2, 4, 4]
    assert [r.outputs["y"].ravel().tolist() for r in got] == [[2.0] * 4, [4.0], [6.0], [8.0] * 3, [10.0]]


def test_while_a_call_is_under_way_the_next_batch_keeps_growing() -> None:
    release = asyncio.Event()

    class Runtime:
        calls: list[int] = []

        async def infer(self, version: Any, inputs: dict[str, np.ndarray], outputs: Any = None) -> Any:
            from sluice.domain.results import InferenceResult

            self.calls.append(next(iter(inputs.values())).shape[0])
            await release.wait()  # a slow model
            return InferenceResult({"y": next(iter(inputs.values()))})

    class Version:
        tenant, model, version, sha256 = "t", "m", 1, "x"

    runtime, batcher = Runtime(), Batcher()
    settings = BatchingSettings(max_batch_size=64, max_delay_us=0)  # leave at the end of the loop's turn

    async def one() -> Any:
        return await batcher.infer(runtime, Version(), {"x": np.ones((1, 2), np.float32)}, None, settings)  # type: ignore[arg-type]

    async def go() -> list[int]:
        first = [asyncio.ensure_future(one()) for _ in range(2)]
        for _ in range(3):
            await asyncio.sleep(0)
        assert runtime.calls == [2]  # under way, and slow
        later = []
        for _ in range(3):  # arrive one turn apart: each turn's batch is due, but waits
            later.append(asyncio.ensure_future(one()))
            for _ in range(3):
                await asyncio.sleep(0)
        assert runtime.calls == [2]
        release.set()
        await asyncio.gather(*first, *later)
        return runtime.calls

    assert asyncio.run(go()) == [2, 3]


class _Gated:
    """A slow model for the scheduling rules: each call waits until the test lets it return,
    and records its rows and how many calls were under way at once."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.under_way = self.most = 0
        self.release = asyncio.Event()

    async def infer(self, version: Any, inputs: dict[str, np.ndarray], outputs: Any = None) -> Any:
        from sluice.domain.results import InferenceResult

        self.calls.append(next(iter(inputs.values())).shape[0])
        self.under_way += 1
        self.most = max(self.most, self.under_way)
        try:
            await self.release.wait()
        finally:
            self.under_way -= 1
        return InferenceResult({"y": next(iter(inputs.values())) * 2})


class _Version:
    tenant, model, version, sha256 = "t", "m", 1, "x"


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.mark.parametrize("instances", [1, 2])
def test_a_version_runs_at_most_its_instances_calls_at_once_even_with_full_batches(instances: int) -> None:
    runtime, batcher = _Gated(), Batcher()
    settings = BatchingSettings(max_batch_size=2, max_delay_us=0, instances=instances)

    async def go() -> list[Any]:
        values = [np.full((1, 2), i, np.float32) for i in range(8)]  # four full batches at once
        waiting = [asyncio.ensure_future(batcher.infer(runtime, _Version(), {"x": v}, None, settings)) for v in values]  # type: ignore[arg-type]
        await _turns()
        assert runtime.calls == [2] * instances  # the others wait for an instance
        runtime.release.set()
        return await asyncio.gather(*waiting)

    got = asyncio.run(go())
    assert runtime.most == instances and batcher.most_running == instances
    assert [r.outputs["y"][0, 0] for r in got] == [2.0 * i for i in range(8)]  # each its own rows


def test_what_queued_while_the_model_was_busy_goes_at_once_and_a_preferred_size_does_not_wait() -> None:
    runtime, batcher = _Gated(), Batcher()
    # A delay far longer than the test: any request that waited it out would stall the test.
    settings = BatchingSettings(max_batch_size=8, max_delay_us=1_000_000, preferred_batch_sizes=(2,))

    async def one(i: int) -> Any:
        return await batcher.infer(runtime, _Version(), {"x": np.full((1, 2), i, np.float32)}, None, settings)  # type: ignore[arg-type]

    async def go() -> list[Any]:
        first = [asyncio.ensure_future(one(i)) for i in range(2)]
        await _turns()
        assert runtime.calls == [2]  # the preferred size reached: it left without the delay
        later = [asyncio.ensure_future(one(i)) for i in range(2, 5)]
        await _turns()
        assert runtime.calls == [2]  # queued behind the call under way
        runtime.release.set()
        for _ in range(20):  # bounded: a few loop turns, far less than the delay
            await asyncio.sleep(0)
            if len(runtime.calls) == 2:
                break
        assert runtime.calls == [2, 3]  # all that queued, at once: 3 is not a preferred size
        return await asyncio.gather(*first, *later)

    got = asyncio.run(go())
    assert [r.outputs["y"][0, 0] for r in got] == [2.0 * i for i in range(5)]


def test_a_request_that_gives_up_leaves_the_queue() -> None:
    runtime, batcher = _Gated(), Batcher()
    settings = BatchingSettings(max_batch_size=2, max_delay_us=0)

    async def one(i: int) -> Any:
        return await batcher.infer(runtime, _Version(), {"x": np.full((1, 2), i, np.float32)}, None, settings)  # type: ignore[arg-type]

    async def go() -> list[Any]:
        first = [asyncio.ensure_future(one(i)) for i in range(2)]
        await _turns()
        gives_up, stays, last = (asyncio.ensure_future(one(i)) for i in range(2, 5))
        await _turns()
        gives_up.cancel()  # its deadline passed while the model was busy
        await _turns()
        runtime.release.set()
        return await asyncio.gather(*first, stays, last)

    got = asyncio.run(go())
    assert runtime.calls == [2, 2]  # the one that left took no place in the next batch
    assert [r.outputs["y"][0, 0] for r in got] == [0.0, 2.0, 6.0, 8.0]


def test_requests_waiting_to_be_batched_are_bounded_and_the_next_is_refused_at_once(settings: Any) -> None:
    release = asyncio.Event()

    class Runtime:
        async def infer(self, version: Any, inputs: dict[str, np.ndarray], outputs: Any = None) -> Any:
            from sluice.domain.results import InferenceResult

            await release.wait()  # a slow model
            return InferenceResult({"y": next(iter(inputs.values()))})

    class Version:
        tenant, model, version, sha256 = "t", "m", 1, "x"

    runtime, batcher = Runtime(), Batcher(max_queue=3)
    settings_ = BatchingSettings(max_batch_size=2, max_delay_us=0)

    async def one() -> Any:
        return await batcher.infer(runtime, Version(), {"x": np.ones((1, 2), np.float32)}, None, settings_)  # type: ignore[arg-type]

    async def go() -> None:
        waiting = [asyncio.ensure_future(one()) for _ in range(3)]  # a full batch under way, one more open
        for _ in range(3):
            await asyncio.sleep(0)
        with pytest.raises(Overloaded) as refused:
            await one()  # at once, not after the others
        assert (refused.value.status, refused.value.code, refused.value.retry_after_s) == (503, "overloaded", 1)
        assert "waiting to be batched" in refused.value.message
        release.set()
        await asyncio.gather(*waiting)
        await one()  # the queue emptied: room again

    asyncio.run(go())
    from sluice.wiring import Container

    assert Container.from_settings(settings.replace(batching_max_queue=7)).predictions.batcher.max_queue == 7


def test_in_lambda_nothing_waits(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    from sluice.wiring import Container

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "sluice-api")
    assert Container.from_settings(settings).predictions.batcher.enabled is False


def test_the_setting_is_validated_kept_and_shown(demo: Container, acme: Principal, client: TestClient, keys: dict[str, str]) -> None:
    key = keys["acme"]
    for bad, where in (
        ({"max_batch_size": 1, "max_delay_us": 100}, "batching.max_batch_size"),
        ({"max_batch_size": 8, "max_delay_us": -1}, "batching.max_delay_us"),
        ({"max_batch_size": 8}, "batching.max_delay_us"),
        ({"max_batch_size": 8, "max_delay_us": 100, "size": 2}, "batching.size"),
    ):
        r = client.post("/api/v1/deployments", json={"name": "b", "model": "iris", "batching": bad}, headers=auth(key))
        assert r.status_code == 422, r.text
        assert r.json()["field"] == where, r.json()
    r = client.post("/api/v1/deployments", json={"name": "b", "model": "iris", "batching": BATCHING}, headers=auth(key))
    assert r.status_code == 201 and r.json()["batching"] == BATCHING
    r = client.put("/api/v1/deployments/b", json={"batching": {"max_batch_size": 1000000, "max_delay_us": 0}}, headers=auth(key))
    assert r.status_code == 422 and r.json()["field"] == "batching.max_batch_size"
    r = client.put("/api/v1/deployments/b", json={"cache": None}, headers=auth(key))
    assert r.status_code == 200 and r.json()["batching"] == BATCHING  # left out: kept
    r = client.put("/api/v1/deployments/b", json={"batching": None}, headers=auth(key))
    assert r.status_code == 200 and r.json().get("batching") is None
    with pytest.raises(SluiceError) as refused:
        demo.deployments.update(acme, "iris", None, batching={"max_batch_size": 8, "max_delay_us": 1.5})
    assert refused.value.status == 422 and refused.value.field == "batching.max_delay_us"  # type: ignore[attr-defined]


def test_preferred_sizes_and_instances_are_validated_kept_and_serve_exactly_each_request_s_rows(
    batched: Container, acme: Principal, client: TestClient, keys: dict[str, str]
) -> None:
    key = keys["acme"]
    for bad, where in (
        ({"preferred_batch_sizes": [4, 32]}, "batching.preferred_batch_sizes"),  # above max_batch_size
        ({"preferred_batch_sizes": [4, 4]}, "batching.preferred_batch_sizes"),
        ({"instances": 0}, "batching.instances"),
        ({"instances": 17}, "batching.instances"),
    ):
        r = client.put("/api/v1/deployments/diabetes", json={"batching": {**BATCHING, **bad}}, headers=auth(key))
        assert r.status_code == 422 and r.json()["field"] == where, r.text
    chosen = {**BATCHING, "preferred_batch_sizes": [8, 4], "instances": 2}
    r = client.put("/api/v1/deployments/diabetes", json={"batching": chosen}, headers=auth(key))
    assert r.status_code == 200 and r.json()["batching"] == {**chosen, "preferred_batch_sizes": [4, 8]}, r.text
    assert client.get("/api/v1/deployments/diabetes", headers=auth(key)).json()["batching"]["instances"] == 2
    # The real model: four single rows reach the preferred size 4 and leave as one call.
    batcher = batched.predictions.batcher
    before = batcher.calls
    got = asyncio.run(concurrently(batched, acme, [request("diabetes", [row]) for row in ROWS[:4]]))
    assert batcher.calls - before == 1
    for row, prediction in zip(ROWS[:4], got, strict=True):
        alone = asyncio.run(batched.predictions.predict(acme, request("diabetes", [row] * 4)))  # 4 rows: a preferred size
        np.testing.assert_allclose(next(iter(outputs(prediction).values())), next(iter(outputs(alone).values()))[:1], rtol=1e-5, atol=1e-6)


def test_a_lone_request_on_an_idle_version_makes_its_call_in_its_own_task_and_company_still_joins() -> None:
    """With no delay, a request that finds its version idle waits out one turn of the loop; the
    requests read in that turn join it, and where none did it calls the model itself: no task,
    timer or future of its own (what one connection's requests pay)."""
    runtime, batcher = _Gated(), Batcher()
    runtime.release.set()
    settings = BatchingSettings(max_batch_size=4, max_delay_us=0)
    made: list[object] = []

    async def one(i: int) -> Any:
        return await batcher.infer(runtime, _Version(), {"x": np.full((1, 2), i, np.float32)}, None, settings)  # type: ignore[arg-type]

    async def go() -> list[Any]:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(lambda lp, coro, **kw: made.append(coro) or asyncio.Task(coro, loop=lp, **kw))
        alone = await one(7)
        tasks_for_alone = len(made)
        together = await asyncio.gather(*(one(i) for i in range(3)))  # read in one turn
        return [alone, tasks_for_alone, together]

    alone, tasks_for_alone, together = asyncio.run(go())
    assert alone.outputs["y"][0, 0] == 14.0 and tasks_for_alone == 0
    assert runtime.calls == [1, 3]  # the three of one turn in one call
    assert [r.outputs["y"][0, 0] for r in together] == [0.0, 2.0, 4.0]


def test_a_leader_that_gives_up_in_its_turn_leaves_the_requests_that_joined_it_answered() -> None:
    runtime, batcher = _Gated(), Batcher()
    runtime.release.set()
    settings = BatchingSettings(max_batch_size=4, max_delay_us=0)

    async def one(i: int) -> Any:
        return await batcher.infer(runtime, _Version(), {"x": np.full((1, 2), i, np.float32)}, None, settings)  # type: ignore[arg-type]

    async def go() -> list[Any]:
        leader = asyncio.ensure_future(one(1))
        joined = [asyncio.ensure_future(one(i)) for i in (2, 3)]
        await asyncio.sleep(0)  # the leader opened the batch, and the others joined it in its turn
        leader.cancel()
        done = await asyncio.wait_for(asyncio.gather(leader, *joined, return_exceptions=True), 5)  # none left waiting for ever
        return [type(done[0]).__name__, *(r.outputs["y"][0, 0] for r in done[1:])]

    assert asyncio.run(go()) == ["CancelledError", 4.0, 6.0]
    assert runtime.calls == [2]


@pytest.mark.parametrize(("us", "seconds"), [(0, 0.0), (100, 0.0), (499, 0.0), (500, 0.001), (1499, 0.001), (1500, 0.002), (1_000_000, 1.0)])
def test_the_delay_is_waited_in_whole_milliseconds(us: int, seconds: float) -> None:
    """What the loop's timers can wait: below half a millisecond, the end of the loop's turn."""
    from sluice.inference.batching import delay_s

    assert delay_s(BatchingSettings(max_batch_size=8, max_delay_us=us)) == seconds


_STEP = st.one_of(
    st.tuples(st.just("arrive"), st.integers(1, 5)),  # a request of this many rows
    st.tuples(st.just("turn"), st.integers(1, 3)),  # turns of the loop
    st.tuples(st.just("cancel"), st.integers(0, 30)),  # the request at this place gives up
    st.tuples(st.just("release"), st.just(0)),  # the model answers from now on
)


@examples(max_examples=120, deadline=None)
@given(
    st.lists(_STEP, max_size=25),
    st.integers(1, 8),
    st.sampled_from([0, 300, 1000]),
    st.integers(1, 2),
    st.lists(st.integers(1, 8), max_size=2),
)
def test_any_arrivals_get_exactly_their_own_rows_and_none_is_left_waiting(
    steps: list[tuple[str, int]], max_batch: int, delay_us: int, instances: int, preferred: list[int]
) -> None:
    """Requests arriving in any turns, of any sizes, some giving up, the model slow or quick:
    each request that stays gets exactly its own rows back, one that gives up is cancelled and
    nothing else, no request is left waiting, and a version never has more than `instances`
    calls under way."""
    runtime, batcher = _Gated(), Batcher()
    preferred_sizes = tuple(sorted({p for p in preferred if p <= max_batch}))
    config = BatchingSettings(max_batch_size=max_batch, max_delay_us=delay_us, instances=instances, preferred_batch_sizes=preferred_sizes)

    async def go() -> list[tuple[Any, Any]]:
        sent: list[tuple[np.ndarray, asyncio.Future[Any]]] = []
        for kind, n in steps:
            if kind == "arrive":
                rows = np.arange(len(sent) * 10, len(sent) * 10 + n * 2, dtype=np.float32).reshape(n, 2)
                sent.append((rows, asyncio.ensure_future(batcher.infer(runtime, _Version(), {"x": rows}, None, config))))  # type: ignore[arg-type]
            elif kind == "turn":
                await _turns(n)
            elif kind == "cancel" and sent:
                sent[n % len(sent)][1].cancel()
            elif kind == "release":
                runtime.release.set()
        runtime.release.set()
        done = await asyncio.wait_for(asyncio.gather(*(f for _, f in sent), return_exceptions=True), 10)
        return [(rows, answer) for (rows, _), answer in zip(sent, done, strict=True)]

    for rows, answer in asyncio.run(go()):
        if isinstance(answer, asyncio.CancelledError):
            continue
        assert not isinstance(answer, BaseException), answer
        assert np.array_equal(answer.outputs["y"], rows * 2)
    assert runtime.most <= instances


def test_a_request_that_gives_up_behind_others_leaves_the_queue_cancelled() -> None:
    """The queue finds the request that gave up by itself, not by comparing its arrays with
    those of the requests before it (which failed it with a ValueError, a 500, and left it
    queued)."""
    runtime, batcher = _Gated(), Batcher()
    settings = BatchingSettings(max_batch_size=2, max_delay_us=0)

    async def one(i: int) -> Any:
        return await batcher.infer(runtime, _Version(), {"x": np.full((1, 2), i, np.float32)}, None, settings)  # type: ignore[arg-type]

    async def go() -> list[Any]:
        first = asyncio.ensure_future(one(0))
        await _turns()  # the model is busy with it
        queued = [asyncio.ensure_future(one(i)) for i in (1, 2, 3)]
        await _turns()
        queued[2].cancel()  # behind two others
        await _turns()
        runtime.release.set()
        return await asyncio.wait_for(asyncio.gather(first, *queued, return_exceptions=True), 5)

    done = asyncio.run(go())
    assert isinstance(done[3], asyncio.CancelledError)
    assert [r.outputs["y"][0, 0] for r in done[:3]] == [0.0, 2.0, 4.0]
    assert runtime.calls == [1, 2]  # the one that left is in no call


def test_whether_a_joined_call_may_be_queued_is_its_members_not_the_task_that_started_it() -> None:
    """A batch job's request (which reads its answer in place) and an API request joined in one
    call: the call runs in the task of whichever started it, so it took that task's
    `ANSWERS_IN_PLACE`. An API request joined by a batch job's was refused where it could be
    queued, and alone after the refusal still so. Now a joined call may be queued unless every
    member reads in place, and a member alone calls as its own caller asked."""
    from sluice.domain.errors import PayloadTooLarge
    from sluice.domain.results import ANSWERS_IN_PLACE, InferenceResult

    class Runtime:
        seen: list[tuple[int, bool]] = []

        async def infer(self, version: Any, inputs: dict[str, np.ndarray], outputs: Any = None) -> Any:
            rows, in_place = next(iter(inputs.values())).shape[0], ANSWERS_IN_PLACE.get()
            self.seen.append((rows, in_place))
            if rows > 1 and in_place:
                raise PayloadTooLarge("too large to answer in place", field="inputs")  # as an endpoint that queues large ones
            return InferenceResult({"y": next(iter(inputs.values())).sum(axis=1, keepdims=True)})

    class Version:
        tenant, model, version, sha256 = "t", "m", 1, "x"

    runtime, batcher = Runtime(), Batcher()
    settings = BatchingSettings(max_batch_size=8, max_delay_us=5000)

    async def ask(in_place: bool, value: float) -> Any:
        ANSWERS_IN_PLACE.set(in_place)  # this task's own caller
        return await batcher.infer(runtime, Version(), {"x": np.full((1, 2), value, np.float32)}, None, settings)  # type: ignore[arg-type]

    async def go() -> list[Any]:
        return await asyncio.gather(ask(True, 1.0), ask(False, 2.0), ask(True, 3.0))

    got = asyncio.run(go())
    assert [r.outputs["y"].ravel().tolist() for r in got] == [[2.0], [4.0], [6.0]]
    assert runtime.seen[0] == (3, False)  # joined: one member may be queued, so the call may be


def test_requests_from_threads_with_their_own_event_loops_are_each_answered_on_their_own() -> None:
    """A local batch job's scoring threads each run an event loop and share the process's
    batcher: a request that queued behind another thread's call was answered from that thread,
    its own loop never woken, and it waited out its deadline (25 s a call, a job of minutes)."""
    import threading
    import time

    from sluice.domain.results import InferenceResult

    started = threading.Event()

    class Runtime:
        threads: list[str] = []

        async def infer(self, version: Any, inputs: dict[str, np.ndarray], outputs: Any = None) -> Any:
            self.threads.append(threading.current_thread().name)
            started.set()
            await asyncio.sleep(0.3)  # a slow call: the other thread's request arrives meanwhile
            return InferenceResult({"y": next(iter(inputs.values())) * 2})

    runtime, batcher = Runtime(), Batcher()
    settings = BatchingSettings(max_batch_size=64, max_delay_us=0)
    answered: dict[str, tuple[float, float]] = {}

    def score(value: float) -> None:
        async def one() -> None:
            began = time.perf_counter()
            inputs = {"x": np.full((1, 2), value, np.float32)}
            result = await asyncio.wait_for(batcher.infer(runtime, _Version(), inputs, None, settings), 5)  # type: ignore[arg-type]
            answered[threading.current_thread().name] = (float(result.outputs["y"][0, 0]), time.perf_counter() - began)

        asyncio.run(one())

    first = threading.Thread(target=score, args=(1.0,), name="first")
    second = threading.Thread(target=score, args=(2.0,), name="second")
    first.start()
    assert started.wait(5)
    second.start()
    first.join(10)
    second.join(10)
    assert sorted(runtime.threads) == ["first", "second"]  # each request's call on its own thread's loop
    assert answered["first"][0] == 2.0 and answered["second"][0] == 4.0
    assert answered["second"][1] < 2  # its call's time, not its deadline


class _Named(_Gated):
    """A slow model with two outputs, `a` (x * 2) and `b` (x * 3): it answers those asked for,
    in the order asked (both where none is named)."""

    async def infer(self, version: Any, inputs: dict[str, np.ndarray], outputs: Any = None) -> Any:
        from sluice.domain.results import InferenceResult

        await super().infer(version, inputs, outputs)
        x = next(iter(inputs.values()))
        return InferenceResult({name: x * (2 if name == "a" else 3) for name in outputs or ("a", "b")})


ASKS: list[list[str] | None] = [None, ["a"], ["b"], ["a", "b"], ["b", "a"]]


def test_the_queue_bound_and_instances_count_every_request_for_the_version_whatever_it_asks() -> None:
    """`SLUICE_BATCHING_MAX_QUEUE` and `instances` are the version's: requests that ask for other
    outputs wait in queues of their own, yet count against one bound and share its instances
    (each set of outputs had a bound and an instance of its own)."""
    runtime, batcher = _Named(), Batcher(max_queue=3)
    settings = BatchingSettings(max_batch_size=2, max_delay_us=0, instances=1)

    async def go() -> list[Any]:
        sent = [
            asyncio.ensure_future(batcher.infer(runtime, _Version(), {"x": np.full((1, 2), i, np.float32)}, ASKS[i % 5], settings))  # type: ignore[arg-type]
            for i in range(10)
        ]
        await _turns()
        runtime.release.set()
        return await asyncio.gather(*sent, return_exceptions=True)

    got = asyncio.run(go())
    assert sum(isinstance(r, Overloaded) for r in got) == 7
    assert runtime.most == 1
    for i, answer in enumerate(got[:3]):
        assert list(answer.outputs) == (ASKS[i] or ["a", "b"])


def test_a_deployment_s_delay_never_holds_another_s_requests_for_the_same_version() -> None:
    """Two deployments of one version, one waiting up to a second for company and one never:
    the second's request does not join the first's open batch (it waited out that second)."""
    runtime, batcher = _Gated(), Batcher()
    runtime.release.set()
    slow = BatchingSettings(max_batch_size=64, max_delay_us=1_000_000)
    fast = BatchingSettings(max_batch_size=64, max_delay_us=0)

    async def go() -> Any:
        waiting = asyncio.ensure_future(batcher.infer(runtime, _Version(), {"x": np.ones((1, 2), np.float32)}, None, slow))  # type: ignore[arg-type]
        await _turns()
        quick = await asyncio.wait_for(batcher.infer(runtime, _Version(), {"x": np.full((1, 2), 2, np.float32)}, None, fast), 0.5)  # type: ignore[arg-type]
        assert not waiting.done()  # the slow deployment's batch still waits, as it asked
        waiting.cancel()
        return quick

    assert asyncio.run(go()).outputs["y"][0, 0] == 4.0
    assert runtime.calls == [1]


@examples(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("arrive"), st.integers(1, 4), st.integers(0, len(ASKS) - 1), st.integers(0, 1)),
            st.tuples(st.just("turn"), st.integers(1, 3), st.just(0), st.just(0)),
            st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0), st.just(0)),
            st.tuples(st.just("release"), st.just(0), st.just(0), st.just(0)),
        ),
        max_size=25,
    ),
    st.integers(1, 8),
    st.integers(1, 2),
)
def test_requests_asking_for_any_outputs_under_any_settings_get_their_own_answers(
    steps: list[tuple[str, int, int, int]], max_batch: int, instances: int
) -> None:
    """Requests for one version asking for any outputs, in any order, under either of two
    deployments' settings: each that stays gets exactly its own rows of exactly the outputs it
    asked for, in its order; none is left waiting; the version never has more than `instances`
    calls under way, whichever queues they come from."""
    runtime, batcher = _Named(), Batcher()
    configs = [BatchingSettings(max_batch_size=max_batch, max_delay_us=us, instances=instances) for us in (0, 1000)]

    async def go() -> list[tuple[np.ndarray, list[str] | None, Any]]:
        sent: list[tuple[np.ndarray, list[str] | None, asyncio.Future[Any]]] = []
        for kind, n, ask, config in steps:
            if kind == "arrive":
                rows = np.arange(len(sent) * 10, len(sent) * 10 + n * 2, dtype=np.float32).reshape(n, 2)
                future = asyncio.ensure_future(batcher.infer(runtime, _Version(), {"x": rows}, ASKS[ask], configs[config]))  # type: ignore[arg-type]
                sent.append((rows, ASKS[ask], future))
            elif kind == "turn":
                await _turns(n)
            elif kind == "cancel" and sent:
                sent[n % len(sent)][2].cancel()
            elif kind == "release":
                runtime.release.set()
        runtime.release.set()
        done = await asyncio.wait_for(asyncio.gather(*(f for *_, f in sent), return_exceptions=True), 10)
        return [(rows, ask, answer) for (rows, ask, _), answer in zip(sent, done, strict=True)]

    for rows, ask, answer in asyncio.run(go()):
        if isinstance(answer, asyncio.CancelledError):
            continue
        assert not isinstance(answer, BaseException), answer
        assert list(answer.outputs) == (ask or ["a", "b"])
        for name, array in answer.outputs.items():
            assert np.array_equal(array, rows * (2 if name == "a" else 3))
    assert runtime.most <= instances
    assert not batcher._versions  # every queue let go
