"""What the core gives back: a runtime's result, a policy node's answer, a whole prediction."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    import numpy as np

    from sluice.domain.objects import Deployment, ModelVersion
    from sluice.domain.policy import Node
    from sluice.domain.signature import Signature


# True while the caller reads every answer in place and nothing reads a queued one (a batch job's
# or a stream's calls, `sluice.inference.bulk.score_many`): a request too large for a
# synchronous call is then refused (PayloadTooLarge, which the caller answers by splitting the
# call), never queued for asynchronous inference. Tasks and threads started within inherit it.
ANSWERS_IN_PLACE: ContextVar[bool] = ContextVar("sluice_answers_in_place", default=False)


@contextmanager
def answering_in_place(in_place: bool) -> Iterator[None]:
    """`ANSWERS_IN_PLACE` as `in_place` for the block (and what it starts), as it was after."""
    token = ANSWERS_IN_PLACE.set(in_place)
    try:
        yield
    finally:
        ANSWERS_IN_PLACE.reset(token)


def rows_of(arrays: Mapping[str, np.ndarray]) -> int:
    """How many rows a request's (or an answer's) arrays hold: the first array's leading
    dimension. A scalar (rank 0) is one row, as one value is one example; no arrays, none.
    Every count of rows (statistics, capture, profiles, kept answers, batch, streams) is this."""
    first = next(iter(arrays.values()), None)
    if first is None:
        return 0
    return int(first.shape[0]) if first.shape else 1


def as_rows(result: InferenceResult) -> InferenceResult:
    """`result` with each rank-0 output (a scalar model's answer to one scalar) viewed as one
    row, by `rows_of`'s rule, for what reads an answer row by row (plain JSON, batch columns,
    the bulk call sharing an answer out by record). `result` itself is left as it is (a cache
    or capture may hold it); one without such outputs is returned as it is."""
    if all(getattr(array, "ndim", 1) for array in result.outputs.values()):
        return result
    outputs = {name: array if getattr(array, "ndim", 1) else array[None] for name, array in result.outputs.items()}
    return InferenceResult(outputs, result.classes, result.maps, result.loaded)


@dataclass(slots=True)
class InferenceResult:
    outputs: dict[str, np.ndarray]
    # Column labels of probability outputs that arrived as maps (skl2onnx's ZipMap).
    classes: dict[str, list[int | str]] = field(default_factory=dict)
    # Those maps as the runtime gave them, one {label: probability} per row, where it kept
    # them: plain JSON presents them as they are rather than rebuild them from the array.
    maps: dict[str, list[dict[Any, float]]] = field(default_factory=dict)
    # The ONNX session this call ran on: False found in this process's cache, True loaded for
    # it; None where no session of this process ran it (a model server's call).
    loaded: bool | None = None


def with_classes(signature: Signature, result: InferenceResult) -> InferenceResult:
    """`result` with the column labels its version's signature gives a probabilities output
    (`TensorSpec.classes`) where the runtime said none: the same classes whichever runtime
    answered (ONNX Runtime in process, a SageMaker endpoint, Triton, a fallback between them)."""
    for spec in signature.outputs:
        if spec.classes is not None and spec.name not in result.classes:
            array = result.outputs.get(spec.name)
            if array is not None and array.ndim == 2 and array.shape[1] == len(spec.classes):
                result.classes[spec.name] = list(spec.classes)
    return result


@dataclass(frozen=True, slots=True)
class Resolved:
    """The deployment a request named, its policy, and the version whose signature
    describes the input (the primary path's version)."""

    deployment: Deployment
    node: Node
    version: ModelVersion
    answers: Signature | None = None  # what the answer holds, where the version does not say (a sequence's last step)


@dataclass(slots=True)
class Answer:
    """What a policy node produced."""

    signature: Signature
    result: InferenceResult
    version: ModelVersion  # the version that answered (an ensemble: its first member that did)
    variant: str | None = None  # split choices on the way, outermost first: "canary/b"
    members: list[dict[str, Any]] | None = None  # an ensemble's report per member
    steps: list[dict[str, Any]] | None = None  # a sequence's report per step, in order
    case: str | list[str] | None = None  # the switch case taken; per row where rows took different ones
    # Where rows took different cases: the version that answered each row ("model:version");
    # `version` is then the first row's.
    models: list[str] | None = None
    source: str | list[str] | None = None  # a precomputed node's: "precomputed" or "live"; per row where rows differ
    computed_at: float | list[float | None] | None = None  # when its stored answers were computed (epoch seconds)
    # Outputs a sequence exposes from a step before its last (`<step>.<output>`), and all a step
    # after them made: they may hold the request's inputs as they came (capture's `redact`).
    exposed: frozenset[str] = frozenset()


def joined_case(name: str, inner: str | None) -> str:
    """A case's name with the case a switch inside it took (`outer/inner`)."""
    return name if inner is None else f"{name}/{inner}"


class Part(NamedTuple):
    """Rows of an answer put together (`put_together`): those a node answered (`answer`, under
    the switch case `case`), or those read from a precomputed table (`stored`: when each of
    their answers was computed)."""

    at: np.ndarray
    answer: Answer | None = None
    case: str | None = None
    stored: Sequence[float] = ()


def put_together(rows: int, parts: Sequence[Part], fallback: ModelVersion) -> dict[str, Any]:
    """What an answer put together from parts says of each row, in the rows' order (`Part`);
    `fallback`: the version a table's rows name (as an answer all from the table does). The one rule for a
    switch's rows that took different cases and a precomputed node's rows from the table and
    live alike: `case`, `models`, `source` and `computed_at` of one entry a row (None where a
    row has none), each said once where every row says the same; `source` where a part says
    one (a row computed by a model outside any precomputed node is live), else none."""
    case: list[Any] = [None] * rows
    models: list[Any] = [None] * rows
    source: list[Any] = ["live"] * rows
    times: list[Any] = [None] * rows
    sourced = False
    for at, answer, name, stored in parts:
        places = at.tolist()
        n = len(places)
        if answer is None:  # rows from the table: no case, its answers' own times
            sourced = True
            for row, when in zip(places, stored, strict=True):
                models[row], source[row], times[row] = fallback.ref, "precomputed", when
            continue
        inner = _each(answer.case, n)
        said = answer.models or [answer.version.ref] * n
        sources, computed = _each(answer.source, n), _each(answer.computed_at, n)
        sourced = sourced or answer.source is not None
        for j, row in enumerate(places):
            case[row] = joined_case(name, inner[j]) if name is not None else inner[j]
            models[row] = said[j]
            if sources[j] is not None:
                source[row] = sources[j]
            times[row] = computed[j]
    return {
        "case": _once(case),
        "models": models,
        "source": _once(source) if sourced else None,
        "computed_at": _once(times) if sourced else None,
    }


def _each(value: Any, n: int) -> list[Any]:
    """A part's per-row value (a list) or its one value for all its rows, as a list of `n`."""
    return list(value) if isinstance(value, list) else [value] * n


def _once(values: list[Any]) -> Any:
    """The values of the rows, said once where every row has the same one."""
    return values[0] if values and all(v == values[0] for v in values) else values


@dataclass(slots=True)
class Prediction:
    """The whole answer to one request: who answered, what, and how fast."""

    resolved: Resolved
    answer: Answer
    latency_ms: float
    mirrored: int = 0  # shadow jobs handed to the mirror
    cached: bool = False  # answered from the prediction cache, not computed
    batch: bool = False  # the rows came as a simple-JSON `batch` (in the request or its upload): answered as a list

    @property
    def result(self) -> InferenceResult:
        return self.answer.result

    @property
    def rows(self) -> int:
        return rows_of(self.answer.result.outputs)
