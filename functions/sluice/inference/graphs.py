"""Running the graph nodes of a policy: a `switch` (the case each row's conditions pick) here,
a `sequence` (steps one after another) in `sluice.inference.sequences`; and what a graph
takes and answers (`input_signature`, `answer_signature`).

A switch decides per row (`sluice.routing.conditions`): when every row takes one case the
request goes there whole; otherwise each case gets its own rows, the cases run concurrently
and their answers are put back in the rows' order, so a row takes the same case alone as in
any batch or bulk call. Statistics count each case (`case:<name>`; `case:<path>/<name>` for a
switch nested in another node, `Call.path`) beside variants and mirrors; a case's own nodes
run under its path, so splits in two cases never count as one.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.conditions import comparisons, reads_inputs
from sluice.domain.errors import (
    Accepted,
    CasesApart,
    InvalidInput,
    ModelFailed,
    RowInvalid,
    SluiceError,
    Unavailable,
)
from sluice.domain.functions import Function
from sluice.domain.graphs import DEFAULT_CASE, sequence_signature
from sluice.domain.lookups import Lookup
from sluice.domain.policy import MAX_DEPTH
from sluice.domain.results import Answer, InferenceResult, Part, joined_case, put_together, rows_of
from sluice.domain.signature import Signature
from sluice.domain.transform_specs import derive
from sluice.domain.transforms import Transform
from sluice.routing.conditions import Facts, decide

if TYPE_CHECKING:
    from sluice.domain.policy import Node, Switch
    from sluice.inference.execution import Call, PolicyRunner

MAX_REFS = 8


async def input_signature(runner: PolicyRunner, node: Node, tenant: str) -> Signature:
    """The signature that describes what `node` takes: its first branch's version, down
    through references (as `PredictionService.resolve` finds it)."""
    for _ in range(MAX_REFS * MAX_DEPTH):
        if node.kind == "single":  # the common case first
            version = runner.lookups.cached_version(tenant, node.model, node.version)  # type: ignore[union-attr]
            if version is None:
                version = await runner.lookups.version_of(tenant, node.model, node.version)  # type: ignore[union-attr]
            return version.signature
        if isinstance(node, Transform | Lookup):  # a sequence's first step: what it declares
            return Signature(node.input_specs(), ())
        if isinstance(node, Function):  # a sequence's step: what it declares
            return node.signature
        node = await runner.lookups.node_of(tenant, node.deployment) if node.kind == "ref" else node.children()[0]  # type: ignore[union-attr]
    raise Unavailable("deployment references nest too deep to find a model version", field="policy")


# Switches ---------------------------------------------------------------------------------
async def run_switch(runner: PolicyRunner, node: Switch, call: Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
    rows = rows_of(arrays)
    per_row = any(reads_inputs(case.when) for case in node.cases)
    if per_row:  # each row goes its own way: every input must have the rows the first has
        for name, array in arrays.items():
            if array.ndim == 0:
                raise InvalidInput(
                    f"input '{name}' is a scalar (shape []): a switch that decides row by row by an input needs inputs with a batch dimension",
                    field=f"inputs.{name}",
                )
            if array.shape[0] != rows:
                raise InvalidInput(
                    f"input '{name}' has {array.shape[0]} rows and the others {rows}: a switch that decides row by row needs one row of each input per row",
                    field=f"inputs.{name}",
                )
    names: dict[str, tuple[str, ...]] = {}
    if per_row and any(isinstance(c.column, str) for case in node.cases for c, _ in comparisons(case.when)):
        signature = await input_signature(runner, node, call.tenant)
        names = {spec.name: spec.feature_names or () for spec in signature.inputs}
    request = call.request
    facts = Facts(
        rows=rows if per_row else 1,
        routing_key=request.routing_key if request is not None else None,
        headers=request.headers if request is not None else {},
        arrays=arrays,
        feature_names=names,
        parameters=(request.parameters or {}) if request is not None else {},
    )
    chosen = decide([case.when for case in node.cases], facts)
    targets = [*((c.name, c.target) for c in node.cases), (DEFAULT_CASE, node.default)]
    taken = np.unique(chosen)
    if len(taken) <= 1:  # the whole request takes one case (or has no rows: the default)
        name, target = targets[int(taken[0]) if len(taken) else -1]
        path = call.subject(name)
        try:
            answer = await runner.run_counted(target, call.under(path), arrays, depth + 1, f"case:{path}", rows=rows)
        except Accepted:
            raise
        except SluiceError as exc:
            raise _in_case(exc, name) from None
        inner = answer.case  # a switch's inside it: one case, or one a row (none for a precomputed table's rows)
        answer.case = [joined_case(name, c) for c in inner] if isinstance(inner, list) else joined_case(name, inner)
        return answer
    groups = [(int(i), np.flatnonzero(chosen == i)) for i in taken]

    async def case(name: str, target: Node, path: str, at: np.ndarray) -> Answer:
        try:
            return await runner.run_counted(target, call.under(path), {k: a[at] for k, a in arrays.items()}, depth + 1, f"case:{path}", rows=len(at))
        except RowInvalid as exc:  # a row of the case's: named as the request's row
            if not 0 <= exc.row < len(at):
                raise _in_case(exc, name) from None
            raise _in_case(exc.at(int(at[exc.row])), name) from None
        except Accepted:
            raise
        except SluiceError as exc:
            raise _in_case(exc, name) from None

    answers = await asyncio.gather(*(case(targets[i][0], targets[i][1], call.subject(targets[i][0]), at) for i, at in groups))
    merged = _merge(rows, [at for _, at in groups], [a.result for a in answers], [targets[i][0] for i, _ in groups], chosen)
    first = answers[next(g for g, (_, at) in enumerate(groups) if at[0] == 0)]  # the answer names the first row's version
    # Each row's case (with a switch's inside it), the version that answered it, and where its
    # answer came from (a case that is a precomputed node), in the rows' order.
    said = put_together(rows, [Part(at, answer, targets[i][0]) for (i, at), answer in zip(groups, answers, strict=True)], first.version)
    exposed = frozenset().union(*(a.exposed for a in answers))
    answer = Answer(first.signature, merged, first.version, case=said["case"], models=said["models"], exposed=exposed)
    answer.source, answer.computed_at = said["source"], said["computed_at"]
    return answer


def _in_case(exc: SluiceError, name: str) -> SluiceError:
    """A case's error, its message naming the case (as a sequence's names its step), and the
    case taken in its details (`outer/inner` where a switch inside it named its own)."""
    exc.message = f"case '{name}': {exc.message}"
    exc.args = (exc.message,)
    exc.details = {**exc.details, "case": joined_case(name, exc.details.get("case"))}
    return exc


def _merge(rows: int, where: list[np.ndarray], results: list[InferenceResult], cases: list[str], chosen: np.ndarray) -> InferenceResult:
    """The cases' answers put back in the rows' order (`chosen`: each row's case)."""
    outputs: dict[str, np.ndarray] = {}
    for name, array in results[0].outputs.items():
        parts = [r.outputs.get(name) for r in results]
        if any(p is None or p.ndim == 0 or p.shape[1:] != array.shape[1:] for p in parts):
            raise CasesApart(f"the cases {cases} answer output '{name}' in different shapes: their rows cannot be put together", cases=chosen, field="policy")
        dtype = np.result_type(*parts) if all(p.dtype.kind not in "OUS" for p in parts) else np.dtype(object)  # type: ignore[union-attr]
        out = np.empty((rows, *array.shape[1:]), dtype=dtype)
        for at, part, case in zip(where, parts, cases, strict=True):
            if part.shape[0] != len(at):  # put back, one row would be broadcast over every row of its case
                raise ModelFailed(
                    f"case '{case}' answered output '{name}' with {part.shape[0]} rows for the {len(at)} it was given: "
                    "a switch that decides row by row needs cases that answer row by row",
                    field="policy",
                )
            out[at] = part
        outputs[name] = out
    for name, labels in results[0].classes.items():  # one tensor has one list of classes
        other = next((r.classes.get(name) for r in results[1:] if list(r.classes.get(name) or ()) != list(labels)), None)
        if other is not None or any(name not in r.classes for r in results[1:]):
            raise CasesApart(
                f"the cases {cases} answer output '{name}' with different classes ({list(labels)[:5]}, {list(other or ())[:5]}): "
                "their rows cannot be put in one tensor; give them models of the same classes, or decide by something other than input values",
                cases=chosen,
                field="policy",
            )
    maps: dict[str, list[dict[Any, float]]] = {}
    for name in results[0].maps:
        if all(name in r.maps for r in results):
            together: list[Any] = [None] * rows
            for at, result in zip(where, results, strict=True):
                for row, value in zip(at.tolist(), result.maps[name], strict=True):
                    together[row] = value
            maps[name] = together
    return InferenceResult(outputs, dict(results[0].classes), maps)


async def answer_signature(runner: PolicyRunner, node: Node, tenant: str) -> Signature | None:
    """What `node`'s answer holds where its first branch's version does not say it: a
    sequence on the first branch answers with its last step's outputs (and those it
    exposes). None when the first branch's version says it."""
    from sluice.domain.policy import Sequence

    for _ in range(MAX_REFS * MAX_DEPTH):
        if node.kind == "single":
            return None
        if isinstance(node, Sequence):
            flow: list[Signature] = []
            for i, step in enumerate(node.steps):
                target = step.target
                if isinstance(target, Transform):
                    takes = target.input_specs() if i == 0 else flow[-1].outputs
                    flow.append(Signature(takes if i == 0 else flow[-1].inputs, derive(target, takes)[0]))
                elif isinstance(target, Function):
                    flow.append(Signature(target.signature.inputs if i == 0 else flow[-1].inputs, target.signature.outputs))
                elif isinstance(target, Lookup):
                    takes = target.input_specs() if i == 0 else flow[-1].outputs
                    flow.append(Signature(takes if i == 0 else flow[-1].inputs, target.derive(takes)))
                else:
                    flow.append(await answer_signature(runner, target, tenant) or await input_signature(runner, target, tenant))
            return sequence_signature(node, flow)
        node = await runner.lookups.node_of(tenant, node.deployment) if node.kind == "ref" else node.children()[0]  # type: ignore[union-attr]
    return None
