"""A stream's records are captured once they are answered for good (`sluice.stream.run.process`):
their offers wait in `HELD` while the micro-batch is scored, and a record held back or refused
by the destination, to be delivered and scored again, is not captured now (it is then). Apart
from the capturer, so that the stream's path imports no more than this."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

HELD: ContextVar[list[tuple[Any, tuple[Any, ...]]] | None] = ContextVar("sluice_capture_held", default=None)


def captured_id(rid: Any) -> str:
    """A record's id as its capture keeps it."""
    return "" if rid is None else str(rid)
