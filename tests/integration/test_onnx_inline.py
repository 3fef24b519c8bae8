"""Where an ONNX call runs (`OnnxRuntime.infer`): on the event loop where it takes little (a small
input, or a large one of a model whose calls have been quick for their size), on a thread
otherwise. Real sessions of a real model; which thread ran each call is what is observed."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.runtimes.onnx import OnnxRuntime
from tests.models import total_model

if TYPE_CHECKING:
    from sluice.domain import ModelVersion, Principal
    from sluice.wiring import Container


@pytest.fixture
def total(container: Container, acme: Principal) -> ModelVersion:
    return container.models.push(acme, "total", total_model())


def _threads(runtime: OnnxRuntime, version: ModelVersion, rows: int, calls: int) -> list[bool]:
    """For each call, whether it ran on the event loop's own thread; its answers checked."""
    x = np.ones((rows, 2), np.float32)
    ran: list[bool] = []

    async def main() -> None:
        loop_thread = threading.current_thread()
        session_run = None
        for _ in range(calls):
            entry = runtime.cache.loaded(version.sha256)
            if entry is not None and session_run is None:  # the session's calls seen from inside
                session = entry.session
                session_run = session.run

                def run(*args: object, inner: Any = session_run, **kwargs: object) -> object:
                    ran.append(threading.current_thread() is loop_thread)
                    return inner(*args, **kwargs)

                entry.session = type("Watched", (), {"run": staticmethod(run), "get_outputs": session.get_outputs})()
            result = await runtime.infer(version, {"x": x})
            assert result.outputs["total"].tolist() == [[float(rows), float(rows)]]

    asyncio.run(main())
    return ran


def test_a_large_input_of_a_quick_model_runs_on_the_loop_once_its_calls_say_so(container: Container, total: ModelVersion) -> None:
    runtime = OnnxRuntime(container.store, container.settings.onnx.model_copy(update={"inline_infer_elements": 4096, "inline_infer_us": 50_000}))
    ran = _threads(runtime, total, 131_072, 5)  # 1 MiB of FP32: far past the size that runs on the loop by itself
    # The first call loads the session on a thread (not watched) and is timed there: every call
    # after it runs on the loop.
    assert ran == [True] * 4


def test_a_large_input_whose_calls_take_longer_than_the_budget_stays_on_a_thread(container: Container, total: ModelVersion) -> None:
    runtime = OnnxRuntime(container.store, container.settings.onnx.model_copy(update={"inline_infer_elements": 4096, "inline_infer_us": 0.001}))
    assert _threads(runtime, total, 131_072, 5) == [False] * 4


def test_by_size_alone_where_the_budget_is_zero(container: Container, total: ModelVersion) -> None:
    settings = container.settings.onnx.model_copy(update={"inline_infer_elements": 4096, "inline_infer_us": 0})
    assert _threads(OnnxRuntime(container.store, settings), total, 131_072, 4) == [False] * 3
    assert _threads(OnnxRuntime(container.store, settings), total, 16, 4) == [True] * 3  # small: on the loop, as always


def test_a_call_on_no_rows_says_nothing_of_a_models_rate(container: Container, total: ModelVersion) -> None:
    """An empty input's call is the session's fixed cost: counted per element, it would send
    every large input after it to a thread."""
    runtime = OnnxRuntime(container.store, container.settings.onnx.model_copy(update={"inline_infer_elements": 4096, "inline_infer_us": 50_000}))
    assert _threads(runtime, total, 131_072, 2) == [True]
    asyncio.run(runtime.infer(total, {"x": np.ones((0, 2), np.float32)}))
    assert _threads(runtime, total, 131_072, 2) == [True, True]


def test_a_small_input_of_a_model_whose_calls_are_slow_runs_on_a_thread(container: Container, total: ModelVersion) -> None:
    """A model slow at any size (a fixed cost, or one its inputs' values set) never holds the
    event loop, and so every other request of the worker, once a call of it was slow; it comes
    back to the loop as its calls are quick again."""
    settings = container.settings.onnx.model_copy(update={"inline_infer_elements": 4096, "inline_infer_us": 0})
    runtime = OnnxRuntime(container.store, settings)
    assert _threads(runtime, total, 16, 3) == [True] * 2  # quick: on the loop after the first
    entry = runtime.cache.loaded(total.sha256)
    assert entry is not None
    entry.timed(9_000_000_000, 32)  # one call of 9 s
    assert _threads(runtime, total, 16, 1) == [False]


def _held_for_acme(container: Container) -> tuple[OnnxRuntime, threading.Event]:
    """A runtime whose every call runs on a thread, acme's held there until the event is set
    (at most 30 s): calls that outlive their requests."""
    runtime = OnnxRuntime(container.store, container.settings.onnx.model_copy(update={"inline_infer_elements": 0, "inline_infer_us": 0}))
    release = threading.Event()
    plain = runtime._run

    def held(version: ModelVersion, *args: Any) -> Any:
        if version.tenant == "acme":
            release.wait(30)
        return plain(version, *args)

    runtime._run = held  # type: ignore[method-assign]
    return runtime, release


def test_calls_that_outlive_their_requests_hold_at_most_half_the_threads_for_their_tenant(container: Container, total: ModelVersion) -> None:
    """ONNX Runtime cannot be stopped: a call whose request gave up runs on. While a tenant has
    half the runtime's threads held so, its next call that needs a thread is refused at once
    (503, Retry-After) instead of queuing behind them; as they end, its calls are taken again.
    Another tenant's calls never wait on them."""
    from sluice.domain.errors import Overloaded

    runtime, release = _held_for_acme(container)
    x = {"x": np.ones((4, 2), np.float32)}
    other = dataclasses.replace(total, tenant="globex")  # the same artifact: its session is shared

    async def main() -> None:
        for _ in range(runtime.abandoned_limit):  # each request gives up after 10 ms
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(runtime.infer(total, x), 0.01)
        with pytest.raises(Overloaded) as refused:
            await runtime.infer(total, x)
        assert refused.value.retry_after_s == 1 and refused.value.status == 503
        assert (await runtime.infer(other, x)).outputs["total"].tolist() == [[4.0, 4.0]]  # another tenant's: answered
        release.set()
        for _ in range(200):
            if not runtime._abandoned:
                break
            await asyncio.sleep(0.01)
        assert (await runtime.infer(total, x)).outputs["total"].tolist() == [[4.0, 4.0]]

    asyncio.run(main())


def test_batched_calls_that_outlive_every_request_in_them_count_as_abandoned(container: Container, total: ModelVersion) -> None:
    """With adaptive batching a call runs in a task of the batcher's: once every request in it
    has given up, it is cancelled as a request's own would be, so what the runtime cannot stop
    is counted, the tenant refused past its share, and another tenant answered at once."""
    from sluice.domain import BatchingSettings
    from sluice.domain.errors import Overloaded
    from sluice.inference.batching import Batcher

    runtime, release = _held_for_acme(container)
    runtime.threads, runtime.abandoned_limit = 4, 2
    batcher = Batcher()
    batching = BatchingSettings(max_batch_size=8, max_delay_us=2000, preferred_batch_sizes=(), instances=16)
    x = {"x": np.ones((1, 2), np.float32)}

    async def main() -> None:
        for _ in range(runtime.abandoned_limit):  # each request gives up after 50 ms, its batch with it
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(batcher.infer(runtime, total, x, None, batching), 0.05)
        await asyncio.sleep(0.01)
        assert sum(runtime._abandoned.values()) == runtime.abandoned_limit
        with pytest.raises(Overloaded):
            await asyncio.wait_for(batcher.infer(runtime, total, x, None, batching), 1.0)
        other = dataclasses.replace(total, tenant="globex")
        assert (await asyncio.wait_for(runtime.infer(other, x), 2.0)).outputs["total"].tolist() == [[1.0, 1.0]]
        release.set()

    asyncio.run(main())
