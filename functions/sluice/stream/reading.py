"""Reading a stream's records: each record's body into arrays, checked as the HTTP API checks a
request, and the records grouped by layout into the bulk call's `Records`.

The `{id, features}` hot path makes one tuple per record (in C) and one array of all their
rows; any other shape takes the full decode (`_item`: the fields a record may carry, a name
given twice, v2 tensors, the variant and routing key it asks for). A record that cannot be
read is that record's error output, never its batch's (unless the process ran short of
something a retry may find again).
"""

from __future__ import annotations

import json
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
from orjson import JSONDecodeError, loads

from sluice.capture.held import RecordAt
from sluice.codecs.binary import json_alone
from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.codecs.json_text import exact_where_long, too_deep
from sluice.codecs.json_text import loads as loads_or_too_deep
from sluice.domain.errors import BadRequest, InvalidInput, InvalidRequest, SluiceError
from sluice.domain.requests import (
    PredictionRequest,
    RowInputs,
    Tensor,
    TensorInputs,
    routing_key_text,
)
from sluice.domain.results import rows_of
from sluice.inference.bulk import Records
from sluice.observability import get_logger
from sluice.stream.records import NOT_BASE64

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.domain import Deployment, Principal
    from sluice.domain.signature import Signature
    from sluice.inference.predictions import PredictionService
    from sluice.stream.core import Outcome
    from sluice.stream.records import StreamRecord

# Keys a record may carry beside its inputs; any other is refused, as the HTTP API refuses it.
RECORD_KEYS = frozenset({"id", "features", "inputs", "batch", "routing_key", "variant", "deployment"})
# Request fields a stream record cannot carry: refused, as a record scored without them would
# answer other than the request that names them (a switch on a parameter, fewer outputs).
NOT_FOR_STREAMS = {
    "parameters": "a stream record carries no parameters (a condition on one does not hold for it); send them to the API",
    "outputs": "a stream record's output holds every output the deployment answers; it cannot name some",
}
NOT_AN_OBJECT = "a record's body must be a JSON object with features, inputs or batch"  # the record itself is wrong; others may pass on a retry
ID_CHARS = 128  # as the API's request_id
BAD_ID = f"a record's id must be a string of at most {ID_CHARS} characters or an integer within 64 bits"
# A record that fails reading for a reason nobody foresaw: a fault of sluice's, never of its batch.
UNREADABLE = "the record could not be read (an internal error); the rest of its batch is scored"
# ... unless the process ran short of what a retry may find again (memory, a file, a socket):
# then the batch fails, and is retried.
SHORT_OF = (MemoryError, OSError)


class _Item(tuple):  # type: ignore[type-arg]
    """A record the full decode read: its arrays, and the route it asks for."""

    __slots__ = ()
    index = property(itemgetter(0))
    id = property(itemgetter(1))
    rows = property(itemgetter(2))
    several = property(itemgetter(3))
    arrays = property(itemgetter(4))
    variant = property(itemgetter(5))
    key = property(itemgetter(6))


_row = itemgetter(2)  # a hot record's feature values, read in C


def _key_field(body: dict[str, Any], fields: tuple[str, ...]) -> str:
    """The field a record's routing key is read from where it gives no `routing_key`: the one
    of its sticky splits' fields it gives. One key routes every split of the record (as
    `routing_key` does): two such fields with different values are refused, naming the second."""
    given = [f for f in fields if routing_key_text(body.get(f), f) is not None]  # "" is no key, as an empty header
    for other in given[1:]:
        if routing_key_text(body[other], other) != routing_key_text(body[given[0]], given[0]):
            raise BadRequest(
                f"'{given[0]}' and '{other}' both give this record's routing key, and differ: give one (or routing_key)", field=other
            )
    return given[0] if given else "routing_key"


class RecordReader:
    """The reading side of a `StreamScorer` (bound to one deployment): records into layouts,
    and the error output of a record that fails."""

    predictions: PredictionService
    deployment: str
    principal: Principal

    def _read(
        self, records: Sequence[StreamRecord], outcomes: list[Outcome], signature: Signature, fields: tuple[str, ...], dep: Deployment | None = None
    ) -> list[Layout]:
        """The records by layout (`_layouts`); a record that cannot be read gets its error
        output in `outcomes` instead, and is counted as a failed request of `dep` (the stream's
        deployment), as a refused request is on every door. `fields`: those the policy's sticky
        splits read a key from."""
        allowed = RECORD_KEYS | set(fields)
        only = signature.inputs[0] if len(signature.inputs) == 1 else None
        names = only.feature_names if only is not None and only.feature_names else None
        row_of = _row_getter(names)
        # true/false among feature numbers would stack as 1.0/0.0: such a record takes the full
        # decode, which refuses them as the API does. A substring test of the text costs far
        # less than looking at every value; an `id` that says "true" only takes the slower path.
        # A name given twice is kept once by the parser (the last value): the hot path's
        # records have one comma between each two members, and one more is a name given twice
        # (or a comma in the `id`, which only takes the slower path, which looks closer).
        text = bool(records) and type(records[0].body) is str
        true, false, comma = ("true", "false", ",") if text else (b"true", b"false", b",")
        hot: list[tuple[int, Any, tuple[Any, ...]]] = []  # (index, id, feature values)
        full: list[_Item] = []
        keep = hot.append
        width = len(names) if names else -1
        for index, record in enumerate(records):
            raw = record.body
            try:
                try:
                    body = exact_where_long(raw, loads(raw))  # an integer past 64 bits kept whole, as the API keeps it
                except JSONDecodeError:
                    body = _body(raw)  # raises, saying why
                if type(body) is not dict:
                    raise BadRequest(NOT_AN_OBJECT, field="body")
                rid = given_id(body)
                if not valid_id(rid):
                    raise BadRequest(BAD_ID, field="id")
                features = body.get("features")
                if (
                    type(features) is dict and len(features) == width and len(body) <= 2
                    and (len(body) == 1 or "id" in body)
                    and true not in raw and false not in raw  # type: ignore[operator]
                    and raw.count(comma) == width + len(body) - 2  # type: ignore[arg-type]
                ):  # fmt: skip
                    try:  # the hot path, `{id, features}`: one row, stacked with the others before any array is built
                        keep((index, rid, row_of(features)))
                        continue
                    except KeyError:
                        pass  # the full decode names the missing feature
                full.append(self._item(index, rid, raw, body, signature, allowed, fields))
            except SluiceError as exc:
                outcomes[index].output = self._refused(record, record_id(record.body), exc, dep)
            except SHORT_OF:
                raise
            except Exception as exc:  # reading is the same on a retry: this record's error, never the batch's
                outcomes[index].output = self._unreadable(record, exc, dep)
        stacked = self._stack_hot(signature, hot, full, records, outcomes, dep) if hot else None
        return _layouts(hot, stacked, full)

    def _item(
        self, index: int, rid: Any, raw: bytes | str, body: dict[str, Any], signature: Signature, allowed: frozenset[str] | set[str], fields: tuple[str, ...]
    ) -> _Item:
        extra = body.keys() - allowed
        if extra:
            name = sorted(extra)[0]
            raise BadRequest(NOT_FOR_STREAMS.get(name, f"unknown field '{name}' in a stream record"), field=name)
        named = body.get("deployment")
        if named is not None and named != self.deployment:
            raise BadRequest(f"this source is bound to deployment '{self.deployment}', not '{named}'", field="deployment")
        _refuse_names_given_twice(raw, body)
        features = body.get("features")
        if features is not None and type(features) is not dict and (type(features) is not list or not features or any(type(v) in (dict, list) for v in features)):
            # A record's features: an object of names and values, or one row's values in order (a
            # list of rows is `batch`); anything else refused naming `features`, not the shape it made.
            raise InvalidRequest("features must be an object of feature names and values, or one row's values in order", field="features")
        inputs = body.get("inputs")
        if isinstance(inputs, list) and inputs and all(isinstance(t, dict) and "datatype" in t for t in inputs):
            wanted = TensorInputs(tuple(_tensor(t, i) for i, t in enumerate(inputs)))
            request = PredictionRequest(self.deployment, wanted)
        else:
            request = PredictionRequest(self.deployment, RowInputs(inputs=inputs, features=features, batch=body.get("batch")))
        arrays = self.predictions.decode(signature, request)
        rows = rows_of({name: array for name, array in arrays.items() if array.ndim} or arrays)  # a scalar is one row; beside batched inputs, theirs
        named = "routing_key" if body.get("routing_key") is not None else _key_field(body, fields)
        key = routing_key_text(body.get(named), named)  # text, or a whole number's digits: as a v2 parameter
        variant = body.get("variant")
        # Routing reads a variant and a key as text: a container's text is made here, where what
        # fails in it (a list nested 1,000 deep) is this record's error, not the batch's.
        if variant is not None and type(variant) is not str:
            variant = str(variant)
        return _Item((index, rid, rows, "batch" in body or rows != 1, arrays, variant, key))

    def _stack_hot(
        self, signature: Signature, hot: list[tuple[int, Any, tuple[Any, ...]]], full: list[_Item],
        records: Sequence[StreamRecord], outcomes: list[Outcome], dep: Deployment | None = None,
    ) -> tuple[str, np.ndarray] | None:  # fmt: skip
        """The hot records' rows as one array, for the one input. When they do not stack (a
        string among numbers, a nested list), each hot record is decoded alone, to find and
        refuse it; the others join the full decode's records (and `hot` is emptied)."""
        try:
            stacked = np.asarray(list(map(_row, hot)))
            # A text input's numbers are decoded record by record, as a request's are: stacked
            # beside a float, 7 would reach the model as "7.0".
            datatype = signature.inputs[0].datatype
            # ... and an integer input's beside a float: each record kept exact, as a request's are.
            whole = stacked.dtype.kind in "iu" or V2_TO_NUMPY[datatype].kind not in "iu"
            if stacked.dtype.kind in "iuf" and stacked.ndim == 2 and datatype != "BYTES" and whole:
                return signature.inputs[0].name, stacked
        except (ValueError, TypeError):
            pass
        for index, rid, _ in hot:
            try:
                features = _body(records[index].body)["features"]
                arrays = self.predictions.decode(signature, PredictionRequest(self.deployment, RowInputs(features=features)))
            except SluiceError as exc:
                outcomes[index].output = self._refused(records[index], rid, exc, dep)
                continue
            except SHORT_OF:
                raise
            except Exception as exc:
                outcomes[index].output = self._unreadable(records[index], exc, dep)
                continue
            full.append(_Item((index, rid, 1, False, arrays, None, None)))
        hot.clear()
        return None

    def _unreadable(self, record: StreamRecord, exc: Exception, dep: Deployment | None = None) -> dict[str, Any]:
        """The error output of a record reading failed on other than a `SluiceError`: one
        nested too deep for the stack (a `RecursionError`) is bad input naming its member
        (`sluice.codecs.json_text.too_deep`); anything else is sluice's fault (logged)."""
        rid = record_id(record.body)
        if isinstance(exc, RecursionError) and (refused := too_deep(record.body)) is not None:
            return self._refused(record, rid, refused, dep)
        get_logger().exception("a stream record could not be read", extra={"deployment": self.deployment, "source": record.position})
        return self._refused(record, rid, SluiceError(UNREADABLE), dep)  # 500: internal_error

    def _refused(self, record: StreamRecord, rid: Any, exc: SluiceError, dep: Deployment | None) -> dict[str, Any]:
        """A record refused as it was read: one failed request counted (`Outcomes.failed_with`,
        for the rollout gates' `error_rate` and `invalid_input_rate` too), and its error output."""
        self.predictions.outcomes.failed_with(self.principal.tenant, dep, exc)
        return self._error(record, rid, exc)

    def _error(self, record: StreamRecord, rid: Any, exc: SluiceError) -> dict[str, Any]:
        out = {"id": rid, "source": record.position, "deployment": self.deployment, "error": exc.message, "code": exc.code}
        if exc.field:
            out["field"] = exc.field
        return out


class Layout:
    """Records whose arrays stack (the same inputs, the same shape past the batch axis, the
    same inputs given as scalars): the hot records first, then the full decode's, as one
    `Records`. Scalars (rank 0) are stacked on a new leading axis, one value per record, and
    the bulk call scores each such record alone (a rank-0 input takes no batch)."""

    __slots__ = ("full", "hot", "records")

    def __init__(self, hot: list[tuple[int, Any, Any]], full: list[_Item], records: Records) -> None:
        self.hot, self.full, self.records = hot, full, records


def _layouts(hot: list[tuple[int, Any, Any]], stacked: tuple[str, np.ndarray] | None, full: list[_Item]) -> list[Layout]:
    """The records by layout, the hot records' first (almost always the only one)."""
    if not full:
        return [Layout(hot, full, Records(dict((stacked,)), ids=[RecordAt(at, rid) for at, rid, _ in hot]))] if stacked is not None else []
    groups: dict[tuple[Any, ...], list[_Item]] = {}
    for item in full:
        groups.setdefault(_shape(item.arrays), []).append(item)
    layouts = []
    if stacked is not None:
        name, rows = stacked
        layouts.append(_layout(hot, {name: [rows]}, groups.pop(((name, rows.shape[1:]),), [])))
    layouts.extend(_layout([], {}, items) for items in groups.values())
    return layouts


def _shape(arrays: dict[str, np.ndarray]) -> tuple[Any, ...]:
    """What records must share to stack: each input's shape past the batch axis (None for a
    scalar, which has no batch axis: never stacked with a record of one row)."""
    return tuple(sorted((name, array.shape[1:] if array.ndim else None) for name, array in arrays.items()))


def _layout(hot: list[tuple[int, Any, Any]], parts: dict[str, list[np.ndarray]], items: list[_Item]) -> Layout:
    for item in items:
        for name, array in item.arrays.items():
            parts.setdefault(name, []).append(array)
    scalars = frozenset(name for name, arrays in parts.items() if arrays[0].ndim == 0)  # a layout's records all give them so
    arrays = {
        name: np.stack(arrays) if name in scalars else arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        for name, arrays in parts.items()
    }  # fmt: skip
    ids = [RecordAt(at, rid) for at, rid, _ in hot] + [RecordAt(item.index, item.id) for item in items]
    if not items:  # hot records only: a row each, no route asked for
        return Layout(hot, items, Records(arrays, ids=ids))
    rows = np.asarray([1] * len(hot) + [item.rows for item in items], dtype=np.intp)
    variants = [None] * len(hot) + [item.variant for item in items] if any(item.variant is not None for item in items) else None
    keys = [None] * len(hot) + [item.key for item in items] if any(item.key is not None for item in items) else None
    return Layout(hot, items, Records(arrays, rows, variants, keys, ids, scalars))


def _body(raw: bytes | str) -> dict[str, Any]:
    if raw is NOT_BASE64:
        raise BadRequest("a record's data is not base64", field="data")
    try:
        body = loads_or_too_deep(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"a record's body is not JSON: {exc.args[0] if exc.args else exc}", field="body") from None
    if not isinstance(body, dict):
        raise BadRequest(NOT_AN_OBJECT, field="body")
    return body


def given_id(body: dict[str, Any]) -> Any:
    """A record's `id` as it gave it; an empty string is no id (its output's `id` is null), as
    the API takes an empty `request_id` (or v2 `id`) for none."""
    rid = body.get("id")
    return None if rid == "" else rid


def valid_id(value: Any) -> bool:
    """Whether `value` may be a record's `id`, which its output carries back as given: none, a
    string of at most `ID_CHARS` characters, or an integer within 64 bits (JSON readers and
    writers keep no more: a larger one would come back rounded, a nested one may not encode)."""
    kind = type(value)
    return value is None or (kind is str and len(value) <= ID_CHARS) or (kind is int and -(2**63) <= value < 2**64)


def record_id(raw: bytes | str) -> Any:
    """The `id` an error output carries: the record's, when it is one (`valid_id`)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:  # JSON orjson will not read (a number past a double, NaN, deeper than it goes) may still say its id
            body = json.loads(raw)
            rid = given_id(body) if isinstance(body, dict) else None
            orjson.dumps(rid)  # one the output can carry: not a lone surrogate, nor a whole number past 64 bits
        except (ValueError, RecursionError, TypeError):
            return None
    rid = given_id(body) if isinstance(body, dict) else None
    return rid if valid_id(rid) else None


def _refuse_names_given_twice(raw: bytes | str, body: dict[str, Any]) -> None:
    """A record that gives a name twice in one object (`{"features": {"a": 1, "a": 2}}`) is
    refused: the parser keeps the last value, the sender may have meant the first. Each
    member of an object has one colon; when the text holds no more colons than the members
    parsed, no name was dropped. Otherwise (a colon in a string, or objects in lists not
    counted) the text is read again by a parser that sees every pair."""
    if raw.count(":" if type(raw) is str else b":") == _members(body):  # type: ignore[arg-type]
        return
    twice: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> None:
        names = [name for name, _ in items]
        if len(set(names)) != len(names):
            twice.extend(name for n, name in enumerate(names) if name in names[:n])

    try:
        json.loads(raw, object_pairs_hook=pairs)
    except ValueError:
        return  # read by the first parser; nothing more to learn here
    if twice:
        name = twice[0]
        features = body.get("features")
        where = f"features.{name}" if isinstance(features, dict) and name in features else (name if name in body else "body")
        raise InvalidInput(f"'{name}' is given twice in one object of the record; give each name once", field=where)


def _members(value: dict[str, Any]) -> int:
    """The members of `value` and of the objects inside it, through objects and lists of
    objects (other lists are not looked into: a lower bound, which only costs a closer look)."""
    count = len(value)
    for inner in value.values():
        kind = type(inner)
        if kind is dict:
            count += _members(inner)
        elif kind is list and inner and type(inner[0]) is dict:
            count += sum(_members(x) for x in inner if type(x) is dict)
    return count


def _tensor(data: dict[str, Any], index: int) -> Tensor:
    if type(data) is dict:  # a record is JSON alone, as a WebSocket message is
        json_alone(data.get("name"), data.get("parameters"))
    try:
        return Tensor(str(data["name"]), str(data["datatype"]), tuple(int(n) for n in data["shape"]), data["data"])
    except (KeyError, TypeError, ValueError):
        raise InvalidInput("a v2 input needs name, datatype, shape (integers) and data", field=f"inputs[{index}]") from None


def _row_getter(names: Sequence[str] | None) -> Any:
    """A feature dict's values in the signature's order, as a tuple (C speed)."""
    if not names:
        return None
    if len(names) == 1:
        only = names[0]
        return lambda features: (features[only],)
    return itemgetter(*names)
