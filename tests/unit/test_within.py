"""`within`: a request's run under its timeout, the timer set only once the run first waits."""

from __future__ import annotations

import asyncio

import pytest

from sluice.inference.execution import within


async def _run(waits: list[float], fails: bool = False) -> str:
    for wait in waits:
        await asyncio.sleep(wait) if wait else await asyncio.sleep(0)
    if fails:
        raise ValueError("the run's own failure")
    return "answer"


@pytest.mark.parametrize(
    ("waits", "fails", "expected"),
    [
        ([], False, "answer"),  # never waits: no timer
        ([0, 0, 0.001], False, "answer"),  # waits, within the limit
        ([0, 5], False, TimeoutError),  # waits past it
        ([], True, ValueError),
        ([0.001], True, ValueError),
    ],
)
def test_a_run_ends_as_under_asyncio_timeout(waits: list[float], fails: bool, expected: object) -> None:
    async def both() -> list[object]:
        outcomes: list[object] = []
        for bounded in (lambda c: within(c, 0.05), lambda c: _timeout(c, 0.05)):
            try:
                outcomes.append(await bounded(_run(waits, fails)))
            except Exception as error:  # the outcome compared
                outcomes.append(type(error))
        return outcomes

    assert asyncio.run(both()) == [expected, expected]


async def _timeout(coro: object, seconds: float) -> object:
    async with asyncio.timeout(seconds):
        return await coro  # type: ignore[misc]


def test_a_waiting_run_cancelled_from_outside_is_cancelled() -> None:
    async def outside() -> bool:
        task = asyncio.ensure_future(within(_run([0, 5]), 10.0))
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(outside())
