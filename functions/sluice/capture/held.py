"""A stream's records are captured once they are answered for good (`sluice.stream.run.process`):
their offers wait in `HELD` while the micro-batch is scored, and a record held back or refused
by the destination, to be delivered and scored again, is not captured now (it is then). Apart
from the capturer, so that the stream's path imports no more than this."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, NamedTuple

# (the capturer, the record's place in its micro-batch, the offer)
HELD: ContextVar[list[tuple[Any, int, tuple[Any, ...]]] | None] = ContextVar("sluice_capture_held", default=None)


class RecordAt(NamedTuple):
    """A stream record's id (what its capture is kept under) and its place in the micro-batch
    (what tells whether it was answered for good: ids may be absent or repeated)."""

    at: int
    id: Any


def captured_id(rid: Any) -> str:
    """A record's id as its capture keeps it."""
    if type(rid) is RecordAt:
        rid = rid.id
    return "" if rid is None else str(rid)
