"""`sluice.inline.run_inline`: a coroutine driven in line until it waits ends as the loop would
end it, for any mix of waits, requests for a task, timers, failures and context changes."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.inference.execution import within
from sluice.inline import in_task, run_inline, timeout

SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("SEEN", default="outside")

# One step of a program: what a request's code does between its start and its answer.
STEPS = st.sampled_from(["compute", "yield", "sleep", "in_task", "timer", "within", "thread", "set", "fail", "gather"])


async def _program(steps: list[str], log: list[Any]) -> str:
    for step in steps:
        if step == "compute":
            log.append(sum(range(10)))
        elif step == "yield":
            await asyncio.sleep(0)
        elif step == "sleep":
            await asyncio.sleep(0.0005)
        elif step == "in_task":
            await in_task()
            log.append(asyncio.current_task() is not None)  # a task from here on
        elif step == "timer":
            async with timeout(5):
                await asyncio.sleep(0)
        elif step == "within":
            log.append(await within(_program(["compute"], log), 5))
        elif step == "thread":
            log.append(await asyncio.to_thread(lambda: "from a thread"))
        elif step == "set":
            SEEN.set("inside")
        elif step == "gather":
            log.append(await asyncio.gather(_program(["yield"], log), _program(["compute"], log)))
        elif step == "fail":
            raise LookupError("the program's own failure")
    log.append(SEEN.get())
    return "answer"


def _outcome(run: Any, steps: list[str]) -> tuple[Any, list[Any]]:
    log: list[Any] = []
    try:
        return run(_program(steps, log)), log
    except LookupError as error:
        return type(error), log


@settings(max_examples=150, deadline=None)
@given(st.lists(STEPS, max_size=8))
def test_in_line_ends_as_the_loop_ends_it(steps: list[str]) -> None:
    loop = asyncio.new_event_loop()
    try:
        inline = _outcome(lambda c: run_inline(loop, c), steps)
        looped = _outcome(loop.run_until_complete, steps)
    finally:
        loop.close()
    assert inline == looped
    assert SEEN.get() == "outside"  # a context variable set inside stays inside, as in a task


def test_a_run_that_never_waits_makes_no_task() -> None:
    loop = asyncio.new_event_loop()
    made: list[object] = []
    loop.set_task_factory(lambda lp, coro, **kw: made.append(coro) or asyncio.Task(coro, loop=lp, **kw))

    async def answer() -> tuple[bool, bool]:
        return asyncio.get_running_loop() is loop, asyncio.current_task() is None

    try:
        assert run_inline(loop, answer()) == (True, True)
        assert made == []
        assert run_inline(loop, _program(["sleep"], [])) == "answer"  # waits: a task from there
        assert len(made) == 1
    finally:
        loop.close()


def test_a_timer_in_line_fires_in_the_task_it_asked_for() -> None:
    loop = asyncio.new_event_loop()

    async def late() -> None:
        async with timeout(0.01):
            await asyncio.sleep(5)

    try:
        with pytest.raises(TimeoutError):
            run_inline(loop, late())
    finally:
        loop.close()


def test_not_inside_a_running_loop() -> None:
    async def outer() -> None:
        coroutine = _program([], [])
        with pytest.raises(RuntimeError, match="another loop is running"):
            run_inline(asyncio.new_event_loop(), coroutine)
        coroutine.close()

    asyncio.run(outer())
