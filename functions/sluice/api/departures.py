"""A hot route's request that ends before its answer: its client leaving mid-request, or its
slot taken back for another tenant while its body arrives.

- Client gone: `sluice serve`'s protocol (`sluice.cli.protocol`) puts a list in the scope
  (`CLIENT_GONE`) and calls what is in it when the connection closes mid-request; while a hot
  route's handler works, the edge puts `leaving(scope)` there: the request's task cancelled
  (`predict` counts it, `cancelled`) and the scope marked (`CLIENT_LEFT`) so the edge answers
  nobody. No task or watcher per request.
- Evicted: a prediction's slot is taken before its body is read, and a tenant that finds the
  worker full takes back one held above another tenant's share while its body still arrives
  (`sluice.services.admission.Capacity.reading`); `body_unless_evicted` reads the body, and
  answers 503 `overloaded` (the scope marked `EVICTED`: the slot was given back already).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sluice.api.bodies import read_body
from sluice.domain.errors import Overloaded
from sluice.services.admission import RETRY_AFTER_S

if TYPE_CHECKING:
    from collections.abc import Callable

    from starlette.types import Receive, Scope

    from sluice.domain import Principal
    from sluice.wiring import Container

CLIENT_GONE = "sluice.client_gone"  # what the server calls when the client leaves (a list; other servers put none)
CLIENT_LEFT = "sluice.client_left"  # set once the client left mid-request: its task was cancelled for it
EVICTED = "sluice.evicted"  # set where the slot was taken back for another tenant while the body came


def leaving(scope: Scope) -> Callable[[], None]:
    """What the server calls when the client of the request `scope` is for leaves: the current
    task (the request's) cancelled, and the scope marked."""
    task = asyncio.current_task()

    def left() -> None:
        scope[CLIENT_LEFT] = True
        task.cancel()  # type: ignore[union-attr]

    return left


async def body_unless_evicted(container: Container, principal: Principal, scope: Scope, receive: Receive) -> bytes:
    """The request's body (`read_body`), its slot held while it comes unless another tenant is
    turned away meanwhile and this tenant holds more than its share: then a 503 `overloaded`,
    and the connection closed (the rest of the body is not waited for)."""
    admission = container.admission
    reading = admission.reading(principal) if admission is not None else None
    try:
        return await read_body(receive, container.settings.limits.body_timeout_s)
    except asyncio.CancelledError:
        if reading is None or not reading.evicted:
            raise
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
        scope[EVICTED] = True
        raise Overloaded(
            "the service is at capacity and this tenant holds more than its share of it while its body was still "
            f"arriving: its slot went to another tenant; retry in {RETRY_AFTER_S} s",
            retry_after_s=RETRY_AFTER_S,
            limit=admission.capacity.limit if admission.capacity is not None else None,  # type: ignore[union-attr]
        ) from None
    finally:
        if reading is not None:
            admission.read(reading)  # type: ignore[union-attr]
