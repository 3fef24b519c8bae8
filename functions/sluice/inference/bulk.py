"""The bulk call beside the one prediction call: many records' inputs, already decoded and
stacked, scored in as few calls as their routes allow, and one outcome for every record.

    outcomes = await score_many(predictions, principal, "fraud", Records(arrays, rows), max_rows=4096)

Batch, streams and replay all go through it and keep only their reading (records decoded into
arrays) and writing (outcomes presented). It

- groups the records by the route each would take alone: a variant asked for, or a sticky
  split's routing key, hashed here as the split would hash it;
- makes one call (`PredictionService.predict`, or `run_node` for a policy node) per group and
  per `max_rows` rows; but one call per record where its inputs include a scalar (rank 0,
  `Records.scalars`): a rank-0 input takes no batch, so such records are never joined (as the
  adaptive batcher never joins such a request), and a scalar answer is its record's one row;
- isolates the records a call refuses (400, 413, 422: the model or the checks) by bisecting
  it, so no other record fails with one: k refused records among n cost at most about
  2k·log2(n/k) calls more;
- calls again, in runs of one case each, the records of a call whose rows took switch cases
  that cannot share a tensor (other classes), so each record answers as it would alone;
- marks the records of a call that failed otherwise (throttling, 5xx, a timeout, a deployment
  not found, an unexpected exception) for retry, and only those;
- and gives each record one outcome: a `Result` (the call that answered it, and which rows of
  that answer are its own) or an `Error` (why, and whether a retry may succeed). Records in =
  records answered + records failed, checked before it returns.

Outcomes are kept per call, not per record: a batch piece of 65,536 rows is a handful of
objects, and a record's own outputs are views of its call's answer.

The routes are `bulk_routes`'s (and `sticky_fields`, the record fields a reader takes a key
from); how records are cut into calls (runs, halves, runs of one case) is `selections`'s.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.plain import by_row
from sluice.domain.errors import (
    Accepted,
    CasesApart,
    DeadlineExceeded,
    ModelFailed,
    SluiceError,
    Unprocessable,
)
from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.domain.results import answering_in_place, rows_of
from sluice.inference.bulk_routes import groups
from sluice.inference.selections import (
    Selection,
    by_case,
    count_of,
    halves,
    offsets_of,
    one_by_one,
    positions_of,
    rows_of_records,
    runs_of,
)
from sluice.observability import get_logger
from sluice.stats.held import CALL, Splittable, discard

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from sluice.domain import Principal
    from sluice.domain.policy import Node
    from sluice.domain.results import Answer, Prediction, Resolved
    from sluice.inference.predictions import PredictionService

PERMANENT_STATUSES = frozenset({400, 413, 422})  # the records themselves are refused: a retry fails again


@dataclass(slots=True)  # made per call: a frozen dataclass's __init__ costs more
class Records:
    """Many records' inputs, decoded: one array per input holding every record's rows, record
    after record. `rows`: how many rows each record has (None: one each, as batch rows are).
    `variants` and `keys`, where given, say per record which variant it asks for and its
    routing key; they only matter to a deployment that splits. `ids`, where given, are what
    a deployment that captures keeps each record under. `scalars`: the inputs each record
    gives as a scalar (rank 0: a model of a scalar input), held one value per record on a
    leading axis; each such record is scored by a call of its own, given its value as it is."""

    arrays: Mapping[str, np.ndarray]
    rows: np.ndarray | None = None
    variants: Sequence[str | None] | None = None
    keys: Sequence[str | None] | None = None
    ids: Sequence[Any] | None = None  # each record's id, where records have one: capture keeps each apart
    scalars: frozenset[str] = frozenset()  # inputs of rank 0: a value per record, each record a call alone

    def __len__(self) -> int:
        if self.rows is not None:
            return len(self.rows)
        return rows_of(self.arrays)


@dataclass(slots=True)
class Result:
    """Records one call answered. `records`: their positions in `Records`, in the answer's
    order; `rows`: the rows of `Records.arrays` the call took (a driver takes its own columns
    with it: keys, captured outputs); `offsets`: where each record's rows start in the answer,
    and where the last ends (None: one row each). `answer`: the call's, a scalar answer (rank-0
    outputs) as one row, an output not one value per row whole to each (`codecs.plain.by_row`)."""

    answer: Answer
    prediction: Prediction | None  # the whole prediction, when the call was `predict`
    records: Selection
    rows: Selection
    offsets: np.ndarray | None = None

    def __len__(self) -> int:
        return count_of(self.records)

    def rows_of(self, j: int) -> slice:
        """The rows of the answer that are the `j`-th of these records' own."""
        if self.offsets is None:
            return slice(j, j + 1)
        return slice(int(self.offsets[j]), int(self.offsets[j + 1]))

    def outputs_of(self, j: int) -> dict[str, np.ndarray]:
        """The `j`-th record's own outputs: views of the answer's arrays, no copy."""
        rows = self.rows_of(j)
        return {name: array[rows] for name, array in self.answer.result.outputs.items()}


@dataclass(slots=True)
class Error:
    """Records that failed together: a call refused for a record alone, or a call that failed
    for a reason a later try may not meet (`retry`)."""

    records: Selection
    error: Exception
    retry: bool

    def __len__(self) -> int:
        return count_of(self.records)

    @property
    def reason(self) -> str:
        """`code: message` of a sluice error; an unexpected exception by its type only (its
        text, logged where it was caught, is not for callers)."""
        exc = self.error
        if isinstance(exc, SluiceError):
            return f"{exc.code}: {exc.message}"
        return f"unexpected {type(exc).__name__}"


Outcome = Result | Error


class Outcomes:
    """What became of every record: `results` and `errors` together hold each record once
    (`answered` and `failed` of them)."""

    __slots__ = ("answered", "calls", "count", "errors", "failed", "results")

    def __init__(self, count: int) -> None:
        self.count = count
        self.results: list[Result] = []
        self.errors: list[Error] = []
        self.answered = self.failed = 0
        self.calls = 0  # calls made, bisecting included

    def _result(self, result: Result, records: int) -> None:
        self.results.append(result)
        self.answered += records

    def _error(self, error: Error, records: int) -> None:
        self.errors.append(error)
        self.failed += records

    def by_record(self) -> list[Outcome]:
        """Each record's outcome, in the records' order (a Python object per record: for
        drivers that make one anyway, and for tests)."""
        found: list[Outcome | None] = [None] * self.count
        for outcome in (*self.results, *self.errors):
            for position in positions_of(outcome.records):
                found[position] = outcome
        assert None not in found, "a record has no outcome"
        return found  # type: ignore[return-value]


async def check_answers_in_place(
    predictions: PredictionService, tenant: str, node: Node, *, what: str, refs: Mapping[str, int] | None = None
) -> None:
    """Refuse `what` (a batch job, a stream) over a policy whose answering versions include one
    served by an asynchronous endpoint (`"invocation": "async"`: each request queued, answered
    later through the results API): scoring in place would queue a SageMaker job per call that
    nothing reads, then fail each row with "queued". A shadow's mirrors do not answer here."""

    for single in (n for n in await predictions.walk_through(tenant, node, mirrors=False, refs=refs) if n.kind == "single"):
        version = await predictions.version_of(tenant, single.model, single.version)  # type: ignore[attr-defined]
        if version.runtime == "sagemaker" and version.config.get("invocation") == "async":
            raise Unprocessable(
                f"{what} needs answers in place, and version {version.ref} is served by an asynchronous endpoint "
                f"({version.config.get('endpoint_name')}: each request queued, answered later); deploy a real-time "
                "endpoint for it, or send the requests to the API and read their results",
                field="deployment",
            )


async def score_many(
    predictions: PredictionService,
    principal: Principal,
    target: str | Node,
    records: Records,
    *,
    max_rows: int,
    mirrors: bool = True,
    stop_on_retry: bool = False,
    resolved: Resolved | None = None,
    on_result: Callable[[Result], object] | None = None,
    revision: int | None = None,
    refs: Mapping[str, int] | None = None,
) -> Outcomes:
    """Score every record for `principal`: through deployment `target` (`predict`, its
    routing, checks, statistics), or through policy node `target` (`run_node`, for
    `principal`'s tenant: no routing by key, no mirrors). At most `max_rows` rows per call
    (a record with more goes alone; a record of scalars always does). `mirrors`: False
    offline (a batch job runs no shadow mirrors). `stop_on_retry`: once a call fails for retry, the records not yet tried are
    marked for retry too, without a call (for a driver that retries everything anyway).
    `resolved`: deployment `target` as the reader already resolved it (to decode against its
    signature), so it is not looked up again here. `on_result`: called with each result as
    its call answers, before the next call (a driver that presents on this thread then
    overlaps its presenting with other threads' inference). `revision`: every call scored by the
    deployment's policy as it stood at that revision, and `refs` the deployments it references at
    theirs (`PredictionService.resolve`)."""
    with answering_in_place(True):  # nothing reads a queued answer: too large is split, never queued
        count = len(records)
        out = Outcomes(count)
        offsets = None if records.rows is None else offsets_of(records.rows)
        routed = isinstance(target, str) and (records.variants is not None or records.keys is not None)
        if isinstance(target, str) and (resolved is None or routed):
            try:
                if resolved is None:
                    resolved = await predictions.resolve(principal, target, revision=revision, refs=refs)
            except Exception as exc:  # the deployment itself: every record waits for the same answer
                if not isinstance(exc, SluiceError):
                    get_logger().warning("bulk call failed unexpectedly", exc_info=True, extra={"records": count})
                out._error(Error(slice(0, count), exc, _retryable(exc)), count)
                return out
        bulk = _Bulk(predictions, principal, target, records, offsets, out, mirrors, stop_on_retry, on_result, revision, refs)
        if not routed and offsets is None and 0 < count <= max_rows and not records.scalars:  # the common case: one call
            await bulk.call(slice(0, count), None, None)
        else:
            for variant, key, chosen in groups(resolved.node, records, count) if routed else ((None, None, slice(0, count)),):  # type: ignore[union-attr]
                for part in one_by_one(chosen) if records.scalars else runs_of(chosen, offsets, max_rows):
                    await bulk.call(part, variant, key)
        assert out.answered + out.failed == count, f"{count} records in, {out.answered} answered and {out.failed} failed"
        return out


class _Bulk:
    """One `score_many`: its calls, and the bisecting of a refused one."""

    __slots__ = (
        "arrays", "ids", "mirrors", "offsets", "on_result", "out", "predictions", "principal", "refs", "revision", "rows", "scalars", "stop_on_retry", "stopped",
        "target",
    )  # fmt: skip

    def __init__(
        self, predictions: PredictionService, principal: Principal, target: str | Node, records: Records,
        offsets: np.ndarray | None, out: Outcomes, mirrors: bool, stop_on_retry: bool, on_result: Callable[[Result], object] | None,
        revision: int | None = None, refs: Mapping[str, int] | None = None,
    ) -> None:  # fmt: skip
        self.predictions, self.principal, self.target = predictions, principal, target
        self.arrays, self.offsets, self.out, self.ids, self.scalars = records.arrays, offsets, out, records.ids, records.scalars
        # Every row: the arrays as they are (never with scalars: each call takes one record's).
        self.rows = -1 if not records.arrays or records.scalars else rows_of(records.arrays)
        self.mirrors, self.stop_on_retry, self.on_result, self.revision, self.refs = mirrors, stop_on_retry, on_result, revision, refs
        self.stopped: Error | None = None

    async def call(self, chosen: Selection, variant: str | None, key: str | None) -> None:
        if self.stopped is not None:
            self.out._error(Error(chosen, self.stopped.error, True), count_of(chosen))
            return
        rows, offsets = rows_of_records(chosen, self.offsets)
        taken = count_of(rows)
        whole = isinstance(rows, slice) and rows.start == 0 and rows.stop == self.rows
        if self.scalars:  # one record (`_each`): its scalars as it gave them, rank 0, its other inputs' rows
            (at,) = positions_of(chosen)
            arrays = {name: array[at, ...] if name in self.scalars else array[rows] for name, array in self.arrays.items()}
        else:
            arrays = self.arrays if whole else {name: array[rows] for name, array in self.arrays.items()}
        self.out.calls += 1
        # A call of several records is split should it be refused: what it counts waits for
        # its outcome, and is dropped if it is split (its parts count: `Splittable`).
        counting = Splittable() if count_of(chosen) > 1 else None
        answered: list[tuple[Prediction, Any]] = []  # the prediction and its statistics' tag, once made
        try:
            if counting is not None:
                with counting:
                    answer = await self._answer(chosen, arrays, variant, key, offsets, taken, answered)
            else:
                answer = await self._answer(chosen, arrays, variant, key, offsets, taken, answered)
        except asyncio.CancelledError:  # stopped (the stream's time is up): what it counted stands
            if counting is not None:
                counting.settle()
            raise
        except Exception as exc:  # sorted below: refused (bisect), or retried; never lost
            retry = _retryable(exc)
            if not isinstance(exc, SluiceError):
                get_logger().warning("bulk call failed unexpectedly", exc_info=True, extra={"records": count_of(chosen)})
                if isinstance(self.target, str):  # a failed request all the same (`predict` counts only its own errors)
                    await self.predictions.outcomes.failed(self.principal.tenant, self.target, exc)
            if not retry and counting is not None:
                counting.split()
                for part in by_case(exc, chosen, offsets) or halves(chosen):
                    await self.call(part, variant, key)
                return
            if answered and counting is not None:  # answered, and the answer thrown away: its statistics with it
                counting.split()
            elif answered:
                discard(answered[0][1])
            if counting is not None:
                counting.settle()
            error = Error(chosen, exc, retry)
            self.out._error(error, count_of(chosen))
            if retry and self.stop_on_retry:
                self.stopped = error
            return
        if counting is not None:
            counting.settle()
        prediction = answered[0][0] if answered else None
        result = Result(answer, prediction, chosen, rows, offsets)
        self.out._result(result, taken if offsets is None else len(offsets) - 1)
        if self.on_result is not None:
            self.on_result(result)


    async def _answer(
        self, chosen: Selection, arrays: dict[str, np.ndarray], variant: str | None, key: str | None, offsets: Any, taken: int,
        answered: list[tuple[Prediction, Any]],
    ) -> Answer:  # fmt: skip
        """The call's answer, one row for each row asked; `answered` gets the prediction (and
        what its statistics are counted for) as soon as it is made."""
        if isinstance(self.target, str):
            ids = None if self.ids is None else self.ids[chosen] if isinstance(chosen, slice) else [self.ids[i] for i in chosen.tolist()]
            request = PredictionRequest(
                self.target, ArrayInputs(arrays), variant=variant, routing_key=key, mirrors=self.mirrors, record_ids=ids, record_offsets=offsets,
                revision=self.revision, refs=self.refs,
            )  # fmt: skip
            tag = (ids, offsets)
            token = CALL.set(tag) if ids is not None else None  # what its statistics are counted for
            try:
                prediction = await self.predictions.predict(self.principal, request)
            finally:
                if token is not None:
                    CALL.reset(token)
            answered.append((prediction, tag))
            answer = prediction.answer
        else:
            budget = self.predictions.settings.request_timeout_s
            try:
                answer = await self.predictions.run_node(self.principal.tenant, self.target, arrays, budget_s=budget)
            except TimeoutError:
                raise DeadlineExceeded(f"no answer within {budget:g} s") from None
        # Shared out by record below: one row each asked for (an output not one value per row,
        # a scalar or a constant, whole to each; any other of another length, ModelFailed: the
        # same again if tried again).
        shared = by_row(answer.signature, answer.result, taken)
        if shared is not answer.result:  # the answer as the call gave it stays as it is (a cache may hold it)
            answer = replace(answer, result=shared)
        return answer


def _retryable(exc: Exception) -> bool:
    """A call that may answer if tried again. Not one refused for its records, nor one queued
    (`Accepted`: an answer nobody here reads; split, its halves are answered in place), nor one
    whose rows took switch cases that cannot share a tensor (`CasesApart`: its records of each
    case answer apart, and a record whose rows took several is refused again when retried), nor
    one the model failed in process (`ModelFailed`: split, the record it fails on fails alone,
    and the others answer, rather than all of them retried until they are given up)."""
    return not (isinstance(exc, SluiceError) and (exc.status in PERMANENT_STATUSES or isinstance(exc, Accepted | CasesApart | ModelFailed)))


