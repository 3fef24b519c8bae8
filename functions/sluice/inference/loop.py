"""One event loop per thread, kept across calls: a Lambda container's handlers (Mangum runs the
app on the current loop, and tasks and the clients bound to a loop survive between requests)
and each batch scoring thread reuse theirs rather than build one per call (a request of the
API's hot routes runs in line until it waits: `sluice.inline`)."""

from __future__ import annotations

import asyncio
import gc
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Coroutine, Iterator

T = TypeVar("T")
_local = threading.local()


def container_loop() -> asyncio.AbstractEventLoop:
    """This thread's loop (Lambda calls handlers on one thread), set as its current loop."""
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = _local.loop = asyncio.new_event_loop()
    if _current(asyncio.events._event_loop_policy) is not loop:  # set already: as it was (four calls a request saved)
        asyncio.set_event_loop(loop)
    return loop


def _current(policy: Any) -> Any:
    """The loop `policy` (asyncio's default policy, as the standard library keeps it) holds as
    this thread's, without the calls `get_event_loop` makes; None where it cannot tell (no
    policy yet, or another kind), and the caller then sets its loop as always."""
    local = getattr(policy, "_local", None)
    return getattr(local, "_loop", None)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return container_loop().run_until_complete(coroutine)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector held off while a batch is read, scored and written (a
    stream's micro-batch, a replay's batch of captured records): its records, rows and outputs
    are thousands of small acyclic objects, freed by reference counting once written, and every
    allocation threshold crossed among them would otherwise walk the live objects (a quarter of
    the time of a batch of 1,000 records). Nests."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
