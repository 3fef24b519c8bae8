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
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise, repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.errors import (
    Accepted,
    BackendError,
    CasesApart,
    DeadlineExceeded,
    SluiceError,
    Unprocessable,
)
from sluice.domain.graphs import reads_routing_key
from sluice.domain.policy import walk
from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.domain.results import answering_in_place, as_rows, rows_of
from sluice.observability import get_logger
from sluice.routing.choose import sticky_pick

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from sluice.domain import Principal
    from sluice.domain.policy import Node, Split
    from sluice.domain.results import Answer, Prediction, Resolved
    from sluice.inference.predictions import PredictionService

PERMANENT_STATUSES = frozenset({400, 413, 422})  # the records themselves are refused: a retry fails again

Selection = slice | np.ndarray  # records (or rows): a run of them, or their positions in order


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
    outputs) as one row (`as_rows`)."""

    answer: Answer
    prediction: Prediction | None  # the whole prediction, when the call was `predict`
    records: Selection
    rows: Selection
    offsets: np.ndarray | None = None

    def __len__(self) -> int:
        return _count(self.records)

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
        return _count(self.records)

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
            for position in _positions(outcome.records):
                found[position] = outcome
        assert None not in found, "a record has no outcome"
        return found  # type: ignore[return-value]


async def check_answers_in_place(predictions: PredictionService, tenant: str, node: Node, *, what: str) -> None:
    """Refuse `what` (a batch job, a stream) over a policy whose answering versions include one
    served by an asynchronous endpoint (`"invocation": "async"`: each request queued, answered
    later through the results API): scoring in place would queue a SageMaker job per call that
    nothing reads, then fail each row with "queued". A shadow's mirrors do not answer here."""

    for single in (n for n in walk(node, mirrors=False) if n.kind == "single"):
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
    overlaps its presenting with other threads' inference)."""
    with answering_in_place(True):  # nothing reads a queued answer: too large is split, never queued
        count = len(records)
        out = Outcomes(count)
        offsets = None if records.rows is None else _offsets(records.rows)
        routed = isinstance(target, str) and (records.variants is not None or records.keys is not None)
        if isinstance(target, str) and (resolved is None or routed):
            try:
                if resolved is None:
                    resolved = await predictions.resolve(principal, target)
            except Exception as exc:  # the deployment itself: every record waits for the same answer
                if not isinstance(exc, SluiceError):
                    get_logger().warning("bulk call failed unexpectedly", exc_info=True, extra={"records": count})
                out._error(Error(slice(0, count), exc, _retryable(exc)), count)
                return out
        bulk = _Bulk(predictions, principal, target, records, offsets, out, mirrors, stop_on_retry, on_result)
        if not routed and offsets is None and 0 < count <= max_rows and not records.scalars:  # the common case: one call
            await bulk.call(slice(0, count), None, None)
        else:
            for variant, key, chosen in _groups(resolved.node, records, count) if routed else ((None, None, slice(0, count)),):  # type: ignore[union-attr]
                for part in _each(chosen) if records.scalars else _parts(chosen, offsets, max_rows):
                    await bulk.call(part, variant, key)
        assert out.answered + out.failed == count, f"{count} records in, {out.answered} answered and {out.failed} failed"
        return out


def sticky_field(node: Node) -> str | None:
    """The record field a deployment's top split reads its routing key from, when it routes
    by key: a reader takes it from each record beside `routing_key`."""
    split = _sticky_split(node)
    return split.routing_key if split else None


class _Bulk:
    """One `score_many`: its calls, and the bisecting of a refused one."""

    __slots__ = (
        "arrays", "ids", "mirrors", "offsets", "on_result", "out", "predictions", "principal", "rows", "scalars", "stop_on_retry", "stopped", "target",
    )  # fmt: skip

    def __init__(
        self, predictions: PredictionService, principal: Principal, target: str | Node, records: Records,
        offsets: np.ndarray | None, out: Outcomes, mirrors: bool, stop_on_retry: bool, on_result: Callable[[Result], object] | None,
    ) -> None:  # fmt: skip
        self.predictions, self.principal, self.target = predictions, principal, target
        self.arrays, self.offsets, self.out, self.ids, self.scalars = records.arrays, offsets, out, records.ids, records.scalars
        # Every row: the arrays as they are (never with scalars: each call takes one record's).
        self.rows = -1 if not records.arrays or records.scalars else rows_of(records.arrays)
        self.mirrors, self.stop_on_retry, self.on_result = mirrors, stop_on_retry, on_result
        self.stopped: Error | None = None

    async def call(self, chosen: Selection, variant: str | None, key: str | None) -> None:
        if self.stopped is not None:
            self.out._error(Error(chosen, self.stopped.error, True), _count(chosen))
            return
        rows, offsets = _rows(chosen, self.offsets)
        taken = _count(rows)
        whole = isinstance(rows, slice) and rows.start == 0 and rows.stop == self.rows
        if self.scalars:  # one record (`_each`): its scalars as it gave them, rank 0, its other inputs' rows
            (at,) = _positions(chosen)
            arrays = {name: array[at, ...] if name in self.scalars else array[rows] for name, array in self.arrays.items()}
        else:
            arrays = self.arrays if whole else {name: array[rows] for name, array in self.arrays.items()}
        prediction = None
        self.out.calls += 1
        try:
            if isinstance(self.target, str):
                ids = None if self.ids is None else self.ids[chosen] if isinstance(chosen, slice) else [self.ids[i] for i in chosen.tolist()]
                request = PredictionRequest(
                    self.target, ArrayInputs(arrays), variant=variant, routing_key=key, mirrors=self.mirrors, record_ids=ids, record_offsets=offsets
                )  # fmt: skip
                prediction = await self.predictions.predict(self.principal, request)
                answer = prediction.answer
            else:
                budget = self.predictions.settings.request_timeout_s
                try:
                    answer = await self.predictions.run_node(self.principal.tenant, self.target, arrays, budget_s=budget)
                except TimeoutError:
                    raise DeadlineExceeded(f"no answer within {budget:g} s") from None
            shared = as_rows(answer.result)  # shared out by record below: a scalar answer is one row
            for name, array in shared.outputs.items():  # one row each asked for
                if array.shape[0] != taken:
                    raise BackendError(f"output '{name}' has {array.shape[0]} rows for {taken} asked")
            if shared is not answer.result:  # the answer as the call gave it stays as it is (a cache may hold it)
                answer = replace(answer, result=shared)
        except Exception as exc:  # sorted below: refused (bisect), or retried; never lost
            retry = _retryable(exc)
            if not isinstance(exc, SluiceError):
                get_logger().warning("bulk call failed unexpectedly", exc_info=True, extra={"records": _count(chosen)})
            if not retry and _count(chosen) > 1:
                for part in _by_case(exc, chosen, offsets) or _halves(chosen):
                    await self.call(part, variant, key)
                return
            error = Error(chosen, exc, retry)
            self.out._error(error, _count(chosen))
            if retry and self.stop_on_retry:
                self.stopped = error
            return
        result = Result(answer, prediction, chosen, rows, offsets)
        self.out._result(result, taken if offsets is None else len(offsets) - 1)
        if self.on_result is not None:
            self.on_result(result)


def _retryable(exc: Exception) -> bool:
    """A call that may answer if tried again. Not one refused for its records, nor one queued
    (`Accepted`: an answer nobody here reads; split, its halves are answered in place), nor one
    whose rows took switch cases that cannot share a tensor (`CasesApart`: its records of each
    case answer apart, and a record whose rows took several is refused again when retried)."""
    return not (isinstance(exc, SluiceError) and (exc.status in PERMANENT_STATUSES or isinstance(exc, Accepted | CasesApart)))


# Routes ---------------------------------------------------------------------------------
def _sticky_split(node: Node) -> Split | bool | None:
    """The top split when it routes by key (records are grouped by the variant each would get
    alone); False when a split further down does, or a switch's condition reads the key
    (records are grouped by the key itself); None when nothing routes by key."""
    if node.kind == "split" and node.routing_key and node.bandit is None:  # type: ignore[union-attr]
        return node  # type: ignore[return-value]
    if any(n.kind == "split" and n.routing_key for n in walk(node)) or reads_routing_key(node):  # type: ignore[union-attr]
        return False
    return None


def _groups(node: Node, records: Records, count: int) -> list[tuple[str | None, str | None, Selection]]:
    """(variant, routing key, records) per route, in the order routes first appear."""
    whole: list[tuple[str | None, str | None, Selection]] = [(None, None, slice(0, count))]
    if records.variants is None and records.keys is None:
        return whole
    sticky = _sticky_split(node)
    variants = repeat(None) if records.variants is None else records.variants
    keys = repeat(None) if records.keys is None else records.keys
    routes: dict[tuple[str | None, str | None], list[int]] = {}
    for position, variant, key in zip(range(count), variants, keys, strict=False):
        routes.setdefault(_route(variant, key, sticky), []).append(position)
    if len(routes) == 1:
        (variant, key), _ = routes.popitem()
        return [(variant, key, slice(0, count))]
    return [(variant, key, np.asarray(positions, dtype=np.intp)) for (variant, key), positions in routes.items()]


def _route(variant: str | None, key: Any, sticky: Split | bool | None) -> tuple[str | None, str | None]:
    if variant is not None:
        return str(variant), None
    if sticky is None or key is None:
        return None, None
    if sticky:
        return sticky_pick(sticky.variants, str(key)).name, None  # type: ignore[union-attr]
    return None, str(key)


# Selections -------------------------------------------------------------------------------
def _offsets(rows: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(rows) + 1, dtype=np.intp)
    np.cumsum(rows, out=offsets[1:])
    return offsets


def _count(chosen: Selection) -> int:
    return chosen.stop - chosen.start if isinstance(chosen, slice) else len(chosen)


def _positions(chosen: Selection) -> range | np.ndarray:
    return range(chosen.start, chosen.stop) if isinstance(chosen, slice) else chosen


def _each(chosen: Selection) -> list[Selection]:
    """The chosen records one by one, in order."""
    if isinstance(chosen, slice):
        return [slice(at, at + 1) for at in range(chosen.start, chosen.stop)]
    return [chosen[at : at + 1] for at in range(len(chosen))]


def _halves(chosen: Selection) -> tuple[Selection, Selection]:
    half = _count(chosen) // 2
    if isinstance(chosen, slice):
        return slice(chosen.start, chosen.start + half), slice(chosen.start + half, chosen.stop)
    return chosen[:half], chosen[half:]


def _by_case(exc: Exception, chosen: Selection, offsets: np.ndarray | None) -> list[Selection] | None:
    """The chosen records in runs whose rows took one switch case, in order (a record whose
    rows took several is a run alone: it fails alone), where `exc` says each row's case; None
    where it does not say it for these rows (a switch under a node that answers some rows
    itself saw fewer), or they are one run."""
    if not isinstance(exc, CasesApart):
        return None
    count = _count(chosen)
    cases = np.asarray(exc.cases)
    if cases.shape != ((count if offsets is None else int(offsets[-1])),):
        return None
    own = cases
    if offsets is not None:
        own = np.empty(count, dtype=np.intp)
        for j in range(count):
            mine = cases[offsets[j] : offsets[j + 1]]
            own[j] = mine[0] if len(mine) and (mine == mine[0]).all() else -1 - j  # a case of its own
    edges = [0, *(np.flatnonzero(own[1:] != own[:-1]) + 1).tolist(), count]
    if len(edges) == 2:
        return None
    if isinstance(chosen, slice):
        return [slice(chosen.start + a, chosen.start + b) for a, b in pairwise(edges)]
    return [chosen[a:b] for a, b in pairwise(edges)]


def _rows(chosen: Selection, offsets: np.ndarray | None) -> tuple[Selection, np.ndarray | None]:
    """The rows of the chosen records, and where each record's start among them."""
    if offsets is None:
        return chosen, None
    if isinstance(chosen, slice):
        start, stop = int(offsets[chosen.start]), int(offsets[chosen.stop])
        return slice(start, stop), offsets[chosen.start : chosen.stop + 1] - start
    starts, lengths = offsets[chosen], offsets[chosen + 1] - offsets[chosen]
    local = _offsets(lengths)
    rows = np.repeat(starts - local[:-1], lengths) + np.arange(local[-1], dtype=np.intp)
    return rows, local


def _parts(chosen: Selection, offsets: np.ndarray | None, max_rows: int) -> list[Selection]:
    """The chosen records in runs of at most `max_rows` rows, in order (a record with more
    rows than that is a run of its own)."""
    count = _count(chosen)
    if offsets is None:
        if count <= max_rows:
            return [chosen] if count else []
        if isinstance(chosen, slice):
            return [slice(at, min(at + max_rows, chosen.stop)) for at in range(chosen.start, chosen.stop, max_rows)]
        return [chosen[at : at + max_rows] for at in range(0, count, max_rows)]
    if not count:
        return []
    _, local = _rows(chosen, offsets)
    assert local is not None
    if local[-1] <= max_rows:
        return [chosen]
    parts: list[Selection] = []
    at = 0
    while at < count:
        end = max(int(np.searchsorted(local, local[at] + max_rows, side="right")) - 1, at + 1)
        parts.append(slice(chosen.start + at, chosen.start + end) if isinstance(chosen, slice) else chosen[at:end])
        at = end
    return parts
