"""One micro-batch end to end: score, keep each partition's order, write the outputs. The
Lambda handler and `sluice stream` both call `process`; only their transports differ."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sluice.stream.core import hold_order

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from sluice.stream.core import Outcome, StreamScorer
    from sluice.stream.records import StreamRecord
    from sluice.stream.sinks import Sink

NOT_WRITTEN = "the output could not be written"


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector held off while a micro-batch is read, scored and written:
    its records, rows and outputs are thousands of small acyclic objects, freed by reference
    counting once written, and every allocation threshold crossed among them would otherwise
    walk the live objects (a quarter of the time of a batch of 1,000 records). Nests."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


async def process(scorer: StreamScorer, records: Sequence[StreamRecord], sink: Sink) -> list[Outcome]:
    """Every record ends as an output written to `sink` (a prediction or an error record) or
    as a retry (`outcome.retry` says why)."""
    with gc_paused():
        outcomes = await scorer.score(records)
        hold_order(records, outcomes)
        outputs = [(i, o.output) for i, o in enumerate(outcomes) if o.retry is None and o.output is not None]
        for index in sink.write(records, outputs):
            outcomes[index].output, outcomes[index].retry = None, NOT_WRITTEN
        return outcomes
