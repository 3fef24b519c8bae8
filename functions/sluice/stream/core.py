"""The stream core: decode and check each record, score the valid ones micro-batched through
the one prediction call, and sort every record into one of three outcomes:

- a prediction (an output record: the input's `id`, its position, the rows as the simple JSON
  API presents them, and the deployment, model, version and variant that answered);
- an error output (a record that can never succeed: not JSON, the wrong shape, fails the
  signature, refused by the model), never retried;
- a retry (a transient failure: throttling, 502/503/504, a timeout, a deployment not found),
  reported to Lambda as a batch item failure, and in the end to the dead-letter destination.

Records of one deployment and variant are stacked into as few `predict` calls as `batch_rows`
allows. A sticky split's routing key is hashed here exactly as the split would, so records
are grouped by the variant they would get alone. When a stacked call is refused as invalid,
it is bisected until the refused records are found; the rest are still scored.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
from orjson import JSONDecodeError, loads

from sluice.codecs.plain import present_rows, who_answered
from sluice.domain import Principal
from sluice.domain.errors import BadRequest, InvalidInput, SluiceError
from sluice.domain.policy import walk
from sluice.domain.requests import ArrayInputs, PredictionRequest, RowInputs, Tensor, TensorInputs
from sluice.routing.choose import sticky_pick

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.domain.results import Prediction, Resolved
    from sluice.domain.signature import Signature
    from sluice.inference.predictions import PredictionService
    from sluice.stream.records import StreamRecord

# Keys a record may carry beside its inputs; any other is refused, as the HTTP API refuses it.
RECORD_KEYS = frozenset({"id", "features", "inputs", "batch", "routing_key", "variant", "deployment", "parameters", "outputs"})
PERMANENT_STATUSES = frozenset({400, 413, 422})
NOT_AN_OBJECT = "a record's body must be a JSON object with features, inputs or batch"  # the record itself is wrong; others may pass on a retry


@dataclass(slots=True)
class Outcome:
    output: dict[str, Any] | None = None  # a prediction or an error output; None while a retry
    retry: str | None = None  # why it should be retried

    @property
    def failed(self) -> bool:
        return "error" in (self.output or {})


class _Item(tuple):  # type: ignore[type-arg]
    """One record's decoded input: its arrays, or on the hot path one row of feature values.
    A tuple: thousands are made per invocation, and a tuple is made in C."""

    __slots__ = ()
    index = property(itemgetter(0))
    id = property(itemgetter(1))
    rows = property(itemgetter(2))
    several = property(itemgetter(3))
    arrays = property(itemgetter(4))
    row = property(itemgetter(5))


_rows_of = itemgetter(2)  # an item's row count, read in C


class StreamScorer:
    """Scores the records of one source, bound to one tenant and one deployment."""

    def __init__(self, predictions: PredictionService, tenant: str, deployment: str, *, batch_rows: int = 10_000) -> None:
        self.predictions = predictions
        self.deployment = deployment
        self.batch_rows = batch_rows
        self.principal = Principal(tenant, frozenset({"predict"}), f"stream:{deployment}")

    async def score(self, records: Sequence[StreamRecord]) -> list[Outcome]:
        outcomes = [Outcome() for _ in records]
        try:
            resolved = await self.predictions.resolve(self.principal, self.deployment)
        except SluiceError as exc:  # the binding itself is wrong or the registry is away: retry, then DLQ
            for outcome in outcomes:
                outcome.retry = f"{exc.code}: {exc.message}"
            return outcomes
        sticky = _sticky_split(resolved)
        allowed = RECORD_KEYS | ({sticky.routing_key} if sticky else set())
        signature = resolved.version.signature
        only = signature.inputs[0] if len(signature.inputs) == 1 else None
        names = only.feature_names if only is not None and only.feature_names else None
        groups: dict[tuple[str | None, str | None], list[_Item]] = defaultdict(list)
        row_of = _row_getter(names)
        # true/false among feature numbers would stack as 1.0/0.0: such a record takes the full
        # decode, which refuses them as the API does. A substring test of the text costs far
        # less than looking at every value; an `id` that says "true" only takes the slower path.
        true, false = ("true", "false") if records and type(records[0].body) is str else (b"true", b"false")
        plain = groups[None, None]
        hot = plain.append
        width = len(names) if names else -1
        for index, record in enumerate(records):
            raw = record.body
            try:
                try:
                    body = loads(raw)
                except JSONDecodeError:
                    body = _body(raw)  # raises, saying why
                if type(body) is not dict:
                    raise BadRequest(NOT_AN_OBJECT, field="body")
                features = body.get("features")
                if (
                    type(features) is dict and len(features) == width and len(body) <= 2
                    and (len(body) == 1 or "id" in body)
                    and true not in raw and false not in raw  # type: ignore[operator]
                ):  # fmt: skip
                    try:  # the hot path, `{id, features}`: one row, stacked with the others before any array is built
                        hot(_Item((index, body.get("id"), 1, False, None, row_of(features))))
                        continue
                    except KeyError:
                        pass  # the full decode names the missing feature
                item = self._item(index, body, resolved, allowed)
                group = _group(body, sticky)
            except SluiceError as exc:
                outcomes[index].output = self._error(record, record_id(record.body), exc)
                continue
            groups[group].append(item)
        for (variant, routing), items in groups.items():
            for chunk in _chunks(items, self.batch_rows):
                await self._score_chunk(resolved, chunk, variant, routing, records, outcomes)
        return outcomes

    # Decoding ----------------------------------------------------------------------------
    def _item(self, index: int, body: dict[str, Any], resolved: Resolved, allowed: frozenset[str] | set[str]) -> _Item:
        extra = body.keys() - allowed
        if extra:
            name = sorted(extra)[0]
            raise BadRequest(f"unknown field '{name}' in a stream record", field=name)
        named = body.get("deployment")
        if named is not None and named != self.deployment:
            raise BadRequest(f"this source is bound to deployment '{self.deployment}', not '{named}'", field="deployment")
        signature = resolved.version.signature
        features = body.get("features")
        inputs = body.get("inputs")
        if isinstance(inputs, list) and inputs and all(isinstance(t, dict) and "datatype" in t for t in inputs):
            wanted = TensorInputs(tuple(_tensor(t, i) for i, t in enumerate(inputs)))
            request = PredictionRequest(self.deployment, wanted)
        else:
            request = PredictionRequest(self.deployment, RowInputs(inputs=inputs, features=features, batch=body.get("batch")))
        arrays = self.predictions.decode(signature, request)
        rows = next(iter(arrays.values())).shape[0] if arrays else 0
        return _Item((index, body.get("id"), rows, "batch" in body or rows != 1, arrays, None))

    def _stack(
        self, signature: Signature, items: list[_Item], records: Sequence[StreamRecord], outcomes: list[Outcome]
    ) -> tuple[dict[str, np.ndarray], list[_Item]]:
        """The items' rows as one array per input. When the feature rows do not stack (a
        string among numbers, a nested list), each is decoded alone to find and refuse it."""
        name = signature.inputs[0].name
        rows = [item.row for item in items if item.row is not None]
        if rows:
            try:
                fast = np.asarray(rows)
                stacked = fast.dtype.kind in "iuf" and fast.ndim == 2
            except (ValueError, TypeError):
                stacked = False
            if stacked and len(rows) == len(items):
                return {name: fast}, items
            if not stacked:
                items = self._decode_rows(signature, items, records, outcomes)
        parts: dict[str, list[np.ndarray]] = defaultdict(list)
        for item in items:
            for key, array in (item.arrays if item.arrays is not None else {name: np.asarray([item.row])}).items():
                parts[key].append(array)
        return {key: (arrays[0] if len(arrays) == 1 else np.concatenate(arrays)) for key, arrays in parts.items()}, items

    def _decode_rows(
        self, signature: Signature, items: list[_Item], records: Sequence[StreamRecord], outcomes: list[Outcome]
    ) -> list[_Item]:
        kept = []
        for item in items:
            if item.row is not None:
                try:
                    features = _body(records[item.index].body)["features"]
                    request = PredictionRequest(self.deployment, RowInputs(features=features))
                    item = _Item((item.index, item.id, 1, False, self.predictions.decode(signature, request), None))
                except SluiceError as exc:
                    outcomes[item.index].output = self._error(records[item.index], item.id, exc)
                    continue
            kept.append(item)
        return kept

    # Scoring -----------------------------------------------------------------------------
    async def _score_chunk(
        self, resolved: Resolved, items: list[_Item], variant: str | None, routing: str | None,
        records: Sequence[StreamRecord], outcomes: list[Outcome],
    ) -> None:  # fmt: skip
        arrays, items = self._stack(resolved.version.signature, items, records, outcomes)
        if not items:
            return
        request = PredictionRequest(self.deployment, ArrayInputs(arrays), variant=variant, routing_key=routing)
        try:
            prediction = await self.predictions.predict(self.principal, request)
        except SluiceError as exc:
            if exc.status not in PERMANENT_STATUSES:
                for item in items:
                    outcomes[item.index].retry = f"{exc.code}: {exc.message}"
                return
            if len(items) == 1:
                outcomes[items[0].index].output = self._error(records[items[0].index], items[0].id, exc)
                return
            half = len(items) // 2  # bisect: the refused records are found, the rest still scored
            await self._score_chunk(resolved, items[:half], variant, routing, records, outcomes)
            await self._score_chunk(resolved, items[half:], variant, routing, records, outcomes)
            return
        except Exception as exc:  # an unexpected failure of a backend: retried, never lost
            for item in items:
                outcomes[item.index].retry = f"{type(exc).__name__}: {exc}"
            return
        self._present(prediction, items, records, outcomes)

    def _present(self, prediction: Prediction, items: list[_Item], records: Sequence[StreamRecord], outcomes: list[Outcome]) -> None:
        answer = prediction.answer
        rows = present_rows(answer.signature, answer.result)
        who = who_answered(prediction)
        who.pop("latency_ms", None)  # the micro-batch's, not the record's
        head = {"deployment": prediction.resolved.deployment.name, **who}
        if list(map(_rows_of, items)).count(1) == len(items) == len(rows):  # one row a record (always so on the hot path)
            for (index, rid, _, several, _, _), row in zip(items, rows, strict=True):
                if several:
                    row = {"predictions": [row]}
                outcomes[index].output = {"id": rid, "source": records[index].position, **head, **row}
            return
        at = 0
        for item in items:
            position = records[item.index].position
            if item.several:
                out = {"id": item.id, "source": position, **head, "predictions": rows[at : at + item.rows]}
            else:
                out = {"id": item.id, "source": position, **head, **rows[at]}
            at += item.rows
            outcomes[item.index].output = out

    def _error(self, record: StreamRecord, rid: Any, exc: SluiceError) -> dict[str, Any]:
        out = {"id": rid, "source": record.position, "deployment": self.deployment, "error": exc.message, "code": exc.code}
        if exc.field:
            out["field"] = exc.field
        return out


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


def _body(raw: bytes | str) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"a record's body is not JSON: {exc.args[0] if exc.args else exc}", field="body") from None
    if not isinstance(body, dict):
        raise BadRequest(NOT_AN_OBJECT, field="body")
    return body


def record_id(raw: bytes | str) -> Any:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return body.get("id") if isinstance(body, dict) else None


def _tensor(data: dict[str, Any], index: int) -> Tensor:
    try:
        return Tensor(str(data["name"]), str(data["datatype"]), tuple(int(n) for n in data["shape"]), data["data"])
    except (KeyError, TypeError, ValueError):
        raise InvalidInput("a v2 input needs name, datatype, shape (integers) and data", field=f"inputs[{index}]") from None


def _sticky_split(resolved: Resolved) -> Any:
    """The deployment's top split when it routes by key, so records can be grouped by variant."""
    node = resolved.node
    if node.kind == "split" and node.routing_key and node.bandit is None:  # type: ignore[union-attr]
        return node
    if any(n.kind == "split" and n.routing_key for n in walk(node)):  # type: ignore[union-attr]
        return False  # nested: group by the key itself
    return None


def _group(body: dict[str, Any], sticky: Any) -> tuple[str | None, str | None]:
    """(variant, routing key) for the record's stacked call."""
    variant = body.get("variant")
    if variant is not None:
        return str(variant), None
    if sticky is None:
        return None, None
    key = body.get("routing_key")
    if key is None and sticky:
        key = body.get(sticky.routing_key)
    if key is None:
        return None, None
    if sticky:
        return sticky_pick(sticky.variants, str(key)).name, None
    return None, str(key)


def _row_getter(names: Sequence[str] | None) -> Any:
    """A feature dict's values in the signature's order, as a tuple (C speed)."""
    if not names:
        return None
    if len(names) == 1:
        only = names[0]
        return lambda features: (features[only],)
    return itemgetter(*names)


def _chunks(items: list[_Item], rows: int) -> list[list[_Item]]:
    if sum(map(_rows_of, items)) <= rows:  # the common case: everything in one call
        return [items]
    out: list[list[_Item]] = [[]]
    count = 0
    for item in items:
        if out[-1] and count + item.rows > rows:
            out.append([])
            count = 0
        out[-1].append(item)
        count += item.rows
    return [chunk for chunk in out if chunk]
