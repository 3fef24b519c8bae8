"""Where an ONNX call runs (`OnnxRuntime.infer`): on the event loop where it takes little (a small
input, or a large one of a model whose calls have been quick for their size), on a thread
otherwise. Real sessions of a real model; which thread ran each call is what is observed."""

from __future__ import annotations

import asyncio
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
