"""Coroutines driven in line until they wait.

A request that never waits (a model run in this process, the registry's answers cached) needs
no turn of the event loop: `run_inline` drives its coroutine in line, with the loop set as the
running one (so `asyncio.get_running_loop()` answers), and makes it a task only at its first
wait; a Lambda request of the API's hot routes saves the task and the loop's turns (some 20 µs
of a 200 µs request). What needs a task before it first waits says so with `await in_task()`:
asyncio's timers (`timeout` here enters one in a task; ruff refuses `asyncio.timeout` itself),
a runtime that does not declare itself `runs_in_line`, anyio's threads (starlette's
`run_in_threadpool`, a background function). Under a task, as everywhere outside
`run_inline`, `in_task()` does nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import types
from asyncio import events
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Coroutine, Generator

T = TypeVar("T")


class _TaskNeeded:
    """What `in_task` yields to `run_inline`: make the rest a task, then resume at once."""

    __slots__ = ()


TASK_NEEDED = _TaskNeeded()


def run_inline(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    """`loop.run_until_complete(coroutine)`, with the part before its first wait driven in line
    (in a copy of the context, as a task's); at that wait, or where it asks for a task
    (`in_task`), the rest becomes a task on `loop` in the same context."""
    if events._get_running_loop() is not None:
        raise RuntimeError("Cannot run the event loop while another loop is running")
    context = contextvars.copy_context()
    events._set_running_loop(loop)
    try:
        waits_on = context.run(coroutine.send, None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        events._set_running_loop(None)
    return loop.run_until_complete(loop.create_task(_rest(coroutine, waits_on), context=context))


async def _rest(coroutine: Coroutine[Any, Any, T], waits_on: Any) -> T:
    return await resumed(coroutine, waits_on)  # type: ignore[no-any-return]


@types.coroutine
def in_task() -> Generator[Any, None, None]:
    """Nothing under a task; where `run_inline` drives the caller in line, the point from which
    the rest runs as a task (what follows needs one: a timer, anyio, an HTTP client's call)."""
    if asyncio.current_task() is None:
        yield TASK_NEEDED


@types.coroutine
def resumed(coroutine: Coroutine[Any, Any, Any], waits_on: Any) -> Generator[Any, Any, Any]:
    """The rest of `coroutine`, which has yielded `waits_on` to its driver, driven as `await`
    drives it: what the task sends or throws goes to `coroutine`. A `TASK_NEEDED` it yielded is
    answered at once where a task runs this (it is one now), and passed up where none does."""
    while True:
        sent, error = None, None
        if waits_on is not TASK_NEEDED or asyncio.current_task() is None:
            try:
                sent = yield waits_on
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as thrown:
                error = thrown
        try:
            waits_on = coroutine.send(sent) if error is None else coroutine.throw(error)
        except StopIteration as done:
            return done.value


class timeout:
    """`asyncio.timeout(delay)` (or, with `at=`, `asyncio.timeout_at(when)`), entered in a task."""

    __slots__ = ("_at", "_delay", "_timer")

    def __init__(self, delay: float | None = None, *, at: float | None = None) -> None:
        self._delay, self._at = delay, at
        self._timer: asyncio.Timeout | None = None

    async def __aenter__(self) -> asyncio.Timeout:
        await in_task()
        self._timer = asyncio.timeout_at(self._at) if self._at is not None else asyncio.timeout(self._delay)
        return await self._timer.__aenter__()

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._timer.__aexit__(*exc)  # type: ignore[union-attr]
