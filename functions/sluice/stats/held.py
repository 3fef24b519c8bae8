"""A stream's answers are counted in the statistics once they stand (`sluice.stream.run.process`),
as they are captured: the counts made while a micro-batch is scored wait in `HELD`, each with
the records of the call that made it (`CALL`, set by the bulk call). An answer whose records will
be delivered and scored again (held behind an earlier record of its partition, refused by the
destination, a user record of a KPL aggregate retried whole) is not counted now: it is when they
come again, so an answer counts once. A failed call is counted at once, at every delivery, as a
client's retry over HTTP is a request of its own: a record failing for now and then answered is
an error and an answer, and an outage shows in the error rate (and the rollout gates) while
Lambda is still retrying. Nothing is kept past the micro-batch. Apart from the recorder, so that
the bulk call imports no more than this."""

from __future__ import annotations

import contextvars
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

T = TypeVar("T")

# (the recorder, the call's records or None, the recorder's method, its arguments)
Held = tuple[Any, Any, str, tuple[Any, ...]]
HELD: ContextVar[list[Held] | None] = ContextVar("sluice_stats_held", default=None)
# The records of the call being made: (their ids, each a `RecordAt`; where each one's rows
# start and the last ends, or None for a row each), as the prediction request carries them.
CALL: ContextVar[tuple[Sequence[Any], Any] | None] = ContextVar("sluice_stats_call", default=None)


def count_held(held: list[Held], kept: Sequence[bool]) -> None:
    """Count what `held` holds, for the records `kept` (by their place in the micro-batch) says
    are answered for good: a failed call at once, whatever comes again; an answering call none
    of whose records are is not counted (it is when they come again); one some of whose records
    are is counted with their share of its rows (its request, its latency, its steps once: the
    call was made, and its answers stand for them)."""
    # A call failed where its request was counted failed: its steps' samples (the step that
    # failed, those before it) are the failure's too, counted with it.
    failed = {id(call) for _, call, method, args in held if call is not None and method == "request" and not args[2]}  # (key, latency_ms, ok, ...)
    for recorder, call, method, args in held:
        share = 1.0 if call is None or id(call) in failed else _share(call, kept)
        if share == 0.0:
            continue
        if share == 1.0 or method == "requests":
            getattr(recorder, method)(*args)
        elif method == "request":
            key, latency_ms, ok, rows, invalid, steps = args
            recorder.request(key, latency_ms, ok, round(rows * share), invalid, steps)
        else:
            key, sums, maxes = args
            recorder.add(key, {name: value * share for name, value in sums.items()}, maxes)


def _share(call: tuple[Sequence[Any], Any], kept: Sequence[bool]) -> float:
    """The share of the call's rows that belong to records answered for good."""
    ids, offsets = call
    marks = [kept[rid.at] for rid in ids]
    if all(marks):
        return 1.0
    if not any(marks):
        return 0.0
    total = 0 if offsets is None else int(offsets[-1] - offsets[0])
    if not total:  # a row each
        return sum(marks) / len(marks)
    return sum(int(offsets[j + 1] - offsets[j]) for j, mark in enumerate(marks) if mark) / total


def discard(call: Any) -> None:
    """Forget what `call` (the tuple `CALL` held for it) counted: its answer was thrown away (a
    model answering another number of rows than it was asked: the call is split and its parts
    answer, each counted as it stands)."""
    held = HELD.get()
    if held:
        held[:] = [entry for entry in held if entry[1] is not call]


def outside(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a copy of this context with nothing held: work handed to another loop or
    thread that outlives the micro-batch (a shadow mirror's job) counts its statistics as it goes,
    not into a list thrown away before it ends."""
    def run() -> T:
        HELD.set(None)
        CALL.set(None)
        return fn(*args)

    return contextvars.copy_context().run(run)

