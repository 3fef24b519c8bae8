"""A stream's answers are counted in the statistics, and their lines and metrics written, once
they stand (`sluice.stream.run.process`), as they are captured: the counts made while a micro-batch is scored wait in `HELD`, each with
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
FAILURE = "_failure"  # a held failure's metrics (`Outcomes.failed_as`): counted at once, as its call's failed request
LINE = "line"  # a held answer's line and metrics (`inference.reports.Reports.line`): written whole once any of its records' answers stand


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
        share = 1.0 if call is None or id(call) in failed or method == FAILURE else _share(call, kept)
        if share == 0.0:
            _dropped(recorder, method, args)
            continue
        if share == 1.0 or method not in ("request", "add"):
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


class _Scope(list):  # type: ignore[type-arg]
    """A call's held counts. Work the call started may still count after the call has ended (an
    ensemble's member stopped when another answered counts its steps on its way out): once the
    call has settled, such a count goes where the call's went; once it was split, nowhere."""

    __slots__ = ("outer", "state")

    def __init__(self, outer: list[Held] | None) -> None:
        super().__init__()
        self.outer, self.state = outer, "open"

    def append(self, entry: Held) -> None:  # type: ignore[override]
        if self.state == "open":
            super().append(entry)
        elif self.state == "settled":
            _pass_on(self.outer, [entry])
        else:
            _dropped(entry[0], entry[2], entry[3])


def _dropped(recorder: Any, method: str, args: tuple[Any, ...]) -> None:
    """A held count not counted: an answer's line says, on their own lines, the lookups it made
    (`Reports.unanswered`: their store calls were made all the same)."""
    if method == LINE:
        recorder.unanswered(args[-1])


def _pass_on(outer: list[Held] | None, held: list[Held]) -> None:
    """`held` into the enclosing stream's counts, or counted now (with nothing held: a late
    count arrives in the context of the work that made it, which holds this call's scope)."""
    if outer is not None:
        outer.extend(held)
        return
    token = HELD.set(None)
    try:
        for recorder, _, method, args in held:
            getattr(recorder, method)(*args)
    finally:
        HELD.reset(token)


class Splittable:
    """Around one call of the bulk call that it will split should it be refused (a call of
    several records, `sluice.inference.bulk`): what the call counts is held until its outcome is
    known. Split (refused for some of its records, or its answer thrown away), it counts nothing:
    its parts count, each as it ends, so a record refused in a call halved on the way down to it
    is one failed request, not one per call that held it. Otherwise what it held goes on: into
    the stream's held counts where a stream holds them, else counted now.

        counting = Splittable()
        with counting:
            ...  # the call
        counting.split()  # or counting.settle()"""

    __slots__ = ("_held", "_token")

    def __enter__(self) -> Splittable:
        self._held = _Scope(HELD.get())
        self._token = HELD.set(self._held)
        return self

    def __exit__(self, *exc: object) -> None:
        HELD.reset(self._token)

    def split(self) -> None:
        """What the call counted, and counts from now on, dropped: its parts count."""
        held = self._held
        held.state = "split"
        for recorder, _, method, args in held:
            _dropped(recorder, method, args)
        held.clear()

    def settle(self) -> None:
        """What the call counted, and counts from now on, counted (or held by the stream)."""
        held = self._held
        if held.state != "open":
            return
        held.state = "settled"
        _pass_on(held.outer, list(held))
        held.clear()


def discard(call: Any) -> None:
    """Forget what `call` (the tuple `CALL` held for it) counted: its answer was thrown away (a
    model answering another number of rows than it was asked: the call is split and its parts
    answer, each counted as it stands)."""
    held = HELD.get()
    if held:
        for recorder, of, method, args in held:
            if of is call:
                _dropped(recorder, method, args)
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

