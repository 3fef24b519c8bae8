"""What the core gives back: a runtime's result, a policy node's answer, a whole prediction."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

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
