"""One micro-batch end to end: score, keep each partition's order, write the outputs. The
Lambda handler and `sluice stream` both call `process`; only their transports differ."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.capture.held import HELD
from sluice.inference.loop import gc_paused
from sluice.stats import held as stats_held
from sluice.stream.core import hold_order

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.stream.core import Outcome, StreamScorer
    from sluice.stream.records import StreamRecord
    from sluice.stream.sinks import Sink

__all__ = ["NOT_WRITTEN", "gc_paused", "process"]

NOT_WRITTEN = "the output could not be written"


async def process(scorer: StreamScorer, records: Sequence[StreamRecord], sink: Sink, *, last: bool = False) -> list[Outcome]:
    """Every record ends as an output written to `sink` (a prediction or an error record) or
    as a retry (`outcome.retry` says why). Order is held before the write (nothing after a
    record that will be retried is written) and again after it: a record the destination
    refused is retried, and so are the later records of its order group, already written in
    the same call (the destination sees them again after it: at least once).

    A record's answer is counted in the deployment's statistics once, when it stands: one
    whose record comes again is counted then (`sluice.stats.held`); a failed call is counted at
    every delivery. `last`: the caller tries no record again (`sluice stream`'s last try), so
    every answer stands."""
    with gc_paused():
        held: list[tuple[Any, int, tuple[Any, ...]]] = []
        counts: list[stats_held.Held] = []
        token, counting = HELD.set(held), stats_held.HELD.set(counts)  # captured and counted once answered for good, below
        try:
            outcomes = await scorer.score(records)
        finally:
            HELD.reset(token)
            stats_held.HELD.reset(counting)
        hold_order(records, outcomes)
        outputs = [(i, o.output) for i, o in enumerate(outcomes) if o.retry is None and o.output is not None]
        refused = sink.write(records, outputs)
        for index in refused:
            outcomes[index].output, outcomes[index].retry = None, NOT_WRITTEN
        if refused:
            hold_order(records, outcomes)
        # Records named as one to the event source (a KPL aggregate's user records share its
        # sequence number) come back together when any of them is retried: counted and captured then.
        again = {_named(records[i].ident) for i, o in enumerate(outcomes) if o.retry is not None}
        kept = [_named(record.ident) not in again for record in records] if again else [True] * len(records)
        if counts:
            stats_held.count_held(counts, [True] * len(records) if last else kept)
        if held:  # by the record's place: ids may be absent or repeated, and a retried record's twin is not it
            # A record's last offer is its answer's: a call whose answer was thrown away (a
            # model answering the wrong number of rows, bisected) offered it first.
            offers = {(id(capturer), at): (capturer, offer) for capturer, at, offer in held}
            for (_, at), (capturer, offer) in offers.items():
                outcome = outcomes[at]  # written as its prediction: not retried, nor an error output in its place (too large, refused)
                if outcome.retry is None and outcome.output is not None and not outcome.failed and kept[at]:
                    capturer.offer(*offer)
        return outcomes


def _named(ident: Any) -> Any:
    """A record's name to the event source, hashable (a Kafka record's is its topic, partition and offset)."""
    return tuple(ident.values()) if isinstance(ident, dict) else ident
