"""The stream core: read each record into arrays, score them all through the data plane's bulk
call (`inference.bulk.score_many`), and write each record's outcome as one of three:

- a prediction (an output record: the input's `id`, its position, the rows as the simple JSON
  API presents them, and the deployment, model, version and variant that answered);
- an error output (a record that can never succeed: not JSON, nested too deep to read, the
  wrong shape, fails the signature, refused by the model; or one sluice fails to read, a fault
  of its own), never retried;
- a retry (a transient failure: throttling, 502/503/504, a timeout, a deployment not found),
  reported to Lambda as a batch item failure, and in the end to the dead-letter destination.

Reading is `stream.reading`'s (`RecordReader`, which `StreamScorer` is): the `{id, features}`
hot path makes one tuple per record (in C) and one array of all their rows; any other shape
takes the full decode. Scoring and writing are this module's. Grouping by route,
calls of at most `batch_rows` rows, and finding the records a call refuses (so the rest are
still scored) are the bulk call's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.codecs.plain import present_rows, said_per_row, who_answered, who_of_rows
from sluice.domain import Principal
from sluice.domain.errors import SluiceError
from sluice.inference.bulk import check_answers_in_place, score_many
from sluice.inference.bulk_routes import sticky_fields
from sluice.stream.reading import RecordReader

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from sluice.domain.results import Resolved
    from sluice.inference.bulk import Outcomes
    from sluice.inference.predictions import PredictionService
    from sluice.stream.reading import Layout
    from sluice.stream.records import StreamRecord


@dataclass(slots=True)
class Outcome:
    """A record's outcome as written: its output (a prediction or an error output), or why it
    is retried (then no output)."""

    output: dict[str, Any] | None = None
    retry: str | None = None

    @property
    def failed(self) -> bool:
        return "error" in (self.output or {})


class StreamScorer(RecordReader):
    """Scores the records of one source, bound to one tenant and one deployment."""

    def __init__(self, predictions: PredictionService, tenant: str, deployment: str, *, batch_rows: int = 10_000) -> None:
        self.predictions = predictions
        self.deployment = deployment
        self.batch_rows = batch_rows
        self.principal = Principal(tenant, frozenset({"predict"}), f"stream:{deployment}")
        # The nodes the policy last reached (through its references) when found to answer in
        # place (`check_answers_in_place`): checked again once any of them is read anew.
        self._in_place: list[Any] = []

    async def score(self, records: Sequence[StreamRecord]) -> list[Outcome]:
        outcomes = [Outcome() for _ in records]
        try:
            resolved = await self.predictions.resolve(self.principal, self.deployment)
            reached = await self.predictions.walk_through(self.principal.tenant, resolved.node)
            if len(reached) != len(self._in_place) or any(a is not b for a, b in zip(reached, self._in_place, strict=False)):
                # once per policy read (its own, or a referenced one's), not per batch of records
                await check_answers_in_place(self.predictions, self.principal.tenant, resolved.node, what="a stream")
                self._in_place = reached
        except SluiceError as exc:  # the binding itself is wrong or the registry is away: retry, then DLQ
            for outcome in outcomes:
                outcome.retry = f"{exc.code}: {exc.message}"
            return outcomes
        fields = sticky_fields(reached)
        layouts = self._read(records, outcomes, resolved.version.signature, fields, resolved.deployment)
        for layout in layouts:
            await self._score(resolved, layout, records, outcomes)
        return outcomes

    # Scoring and writing ----------------------------------------------------------------
    async def _score(self, resolved: Resolved, layout: Layout, records: Sequence[StreamRecord], outcomes: list[Outcome]) -> None:
        done = await score_many(
            self.predictions, self.principal, self.deployment, layout.records, max_rows=self.batch_rows, resolved=resolved
        )  # fmt: skip
        self._write(done, layout, records, outcomes)

    def _write(self, done: Outcomes, layout: Layout, records: Sequence[StreamRecord], outcomes: list[Outcome]) -> None:
        hot, full, first = layout.hot, layout.full, len(layout.hot)
        for error in done.errors:
            exc = error.error
            for position in _positions(error.records):
                index, rid = hot[position][:2] if position < first else full[position - first][:2]
                if error.retry:
                    outcomes[index].retry = error.reason
                else:
                    outcomes[index].output = self._error(records[index], rid, exc)  # type: ignore[arg-type]  # refused: a SluiceError
        for result in done.results:
            prediction = result.prediction
            assert prediction is not None  # answered by `predict`
            answer = result.answer  # a scalar answer as its record's one row
            rows = present_rows(answer.signature, answer.result)
            who = who_answered(prediction)
            who.pop("latency_ms", None)  # the call's, not the record's
            head = {"deployment": prediction.resolved.deployment.name, **who}
            chosen = result.records
            mixed = said_per_row(head)  # rows took different switch cases or sources: each record says its own
            told = _told(head)
            if result.offsets is None and isinstance(chosen, slice) and chosen.stop <= first and not mixed:  # hot records only: a row each
                for (index, rid, _), row in zip(hot[chosen], rows, strict=True):
                    outcomes[index].output = {"id": rid, "source": records[index].position, **told, **row}
                continue
            for j, position in enumerate(_positions(chosen)):
                own = rows[result.rows_of(j)]
                mine = _told(who_of_rows(head, result.rows_of(j))) if mixed else told
                if position < first:
                    index, rid = hot[position][:2]
                    outcomes[index].output = {"id": rid, "source": records[index].position, **mine, **own[0]}
                    continue
                item = full[position - first]
                body = {"predictions": own} if item.several else own[0]
                outcomes[item.index].output = {"id": item.id, "source": records[item.index].position, **mine, **body}


def _told(who: dict[str, Any]) -> dict[str, Any]:
    """`who_answered` as an output record says it: a precomputed node's `source` is named
    `answered_from` (a record's `source` is its position)."""
    if "source" not in who:
        return who
    return {("answered_from" if name == "source" else name): value for name, value in who.items()}


def hold_order(records: Sequence[StreamRecord], outcomes: list[Outcome]) -> None:
    """Within an order group (a Kinesis shard, a Kafka partition, a FIFO message group), a
    record after one that will be retried is retried too: nothing overtakes it."""
    held: set[str] = set()
    for record, outcome in zip(records, outcomes, strict=True):
        if record.order is None:
            continue
        if record.order in held and outcome.retry is None:
            outcome.output, outcome.retry = None, "held behind an earlier record of its partition"
        elif outcome.retry is not None:
            held.add(record.order)


def _positions(chosen: slice | np.ndarray) -> range | np.ndarray:
    return range(chosen.start, chosen.stop) if isinstance(chosen, slice) else chosen.tolist()

