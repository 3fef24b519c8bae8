"""Running the graph nodes of a policy: a `sequence` (steps one after another, each one's
outputs the next one's inputs) and a `switch` (the case each row's conditions pick).

A sequence runs under the request's one deadline: a step that does not answer before it
fails the request naming the step, as does a step that fails. Its answer is the last step's,
with the outputs the node exposes (`step.output`) beside it, and a report per step (model,
version, latency). A switch decides per row (`sluice.routing.conditions`): when every row
takes one case the request goes there whole; otherwise each case gets its own rows, the
cases run concurrently and their answers are put back in the rows' order, so a row takes the
same case alone as in any batch or bulk call. Statistics count each step (`step:<name>`)
and each case (`case:<name>`) beside variants and mirrors.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.conditions import comparisons, reads_inputs
from sluice.domain.errors import Accepted, BackendError, DeadlineExceeded, SluiceError, Unavailable
from sluice.domain.functions import Function
from sluice.domain.graphs import DEFAULT_CASE, sequence_signature
from sluice.domain.lookups import Lookup
from sluice.domain.policy import MAX_DEPTH
from sluice.domain.results import Answer, InferenceResult
from sluice.domain.signature import Signature
from sluice.domain.transform_specs import derive
from sluice.domain.transforms import Transform
from sluice.routing.conditions import Facts, decide
from sluice.routing.transforms import plan_of

if TYPE_CHECKING:
    from collections.abc import Sequence as Sequence_

    from sluice.domain.policy import Node, Sequence, Step, Switch
    from sluice.inference.execution import Call, PolicyRunner
    from sluice.runtimes.lookups import Looked

MAX_REFS = 8
MAX_PREPARED = 64  # what a sequence works out once, per step and per signature it takes
DEADLINE_SLACK_S = 0.001  # a timer may fire this early (the event loop's clock resolution, and more)


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


# Sequences --------------------------------------------------------------------------------
async def run_sequence(runner: PolicyRunner, node: Sequence, call: Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
    report: list[dict[str, Any]] = []
    exposed: dict[str, tuple[np.ndarray, Any]] = {}
    expose = _exposed(node, call.outputs)
    dep = call.deployment
    at = ("stats", dep.tenant, dep.name, dep.revision)  # each step's statistics key, worked out once
    stat_keys = _kept(node, at, None) or _keep(node, at, None, tuple((*at[1:], f"step:{s.name}") for s in node.steps))
    samples: list[tuple[Any, float | None]] = []  # each step's statistics, recorded in one call
    answer: Answer | None = None  # the last model's answer (a transform after it reshapes it)
    given, given_signature = arrays, None  # the previous step's outputs, and their signature
    finite: frozenset[str] = frozenset()  # those a transform made finite by construction
    last = len(node.steps) - 1
    step = node.steps[0]
    try:
        for index, step in enumerate(node.steps):
            stat_key = stat_keys[index]
            wanted = call.outputs if index == last else None  # only the last step answers with the outputs asked for
            started = time.perf_counter()
            if isinstance(step.target, Transform):
                given_signature, given, finite = _transform(node, step, index, given_signature, given, wanted, call)
                ms = (time.perf_counter() - started) * 1000
                report.append({"name": step.name, "kind": "transform", "latency_ms": round(ms, 3)})
                if answer is not None:
                    _reshape(answer, given_signature, given)
            elif isinstance(step.target, Lookup):
                try:
                    given_signature, given, looked = await _lookup(runner, step, index, call, given, given_signature)
                except SluiceError as exc:
                    samples.append((stat_key, None))
                    raise _named(exc, step.name, report) from None
                ms = (time.perf_counter() - started) * 1000
                report.append(looked.report(step.name, ms))
                if looked.cache_hits is not None:  # rows from the feature cache, and rows whose entity was read
                    runner.stats.add(stat_key, {"cache_hits": looked.cache_hits, "cache_misses": looked.cache_misses})
                if answer is not None:
                    _reshape(answer, given_signature, given)
            elif isinstance(step.target, Function):
                feed = given if index == 0 else (await _inputs_of(runner, node, index, given, call))[0]
                try:
                    given_signature, given = await _function(runner, node, step, index, call, feed, given_signature, wanted)
                except SluiceError as exc:
                    samples.append((stat_key, None))
                    raise _named(exc, step.name, report) from None
                ms = (time.perf_counter() - started) * 1000
                report.append({"name": step.name, "kind": "function", "latency_ms": round(ms, 3)})
                if answer is not None:
                    _reshape(answer, given_signature, given)
            else:
                feed, takes = (given, call.checked) if index == 0 else await _inputs_of(runner, node, index, given, call)
                try:
                    if index > 0:  # inputs nobody checked yet: here, so a refusal names the step (NaN and
                        feed = runner.check(takes, feed, finite=finite)  # infinity looked for where a step may have made them)
                    answer = await runner.run(step.target, call.narrowed(wanted, takes), feed, depth + 1)
                except Accepted:
                    raise
                except SluiceError as exc:
                    samples.append((stat_key, None))
                    raise _named(exc, step.name, report) from None
                ms = (time.perf_counter() - started) * 1000
                report.append(_step_report(step.name, answer, ms))
                given, given_signature, finite = answer.result.outputs, answer.signature, frozenset()
            samples.append((stat_key, ms))
            for name, output in expose.get(index, ()):
                if output in given:
                    exposed[name] = (given[output], given_signature.output(output) if given_signature else None)
    except asyncio.CancelledError:
        # The request's one deadline (`PredictionService.predict`, `run_node`) cancels whatever
        # step is running: the request fails naming it. Any other cancellation goes on as it is.
        if time.monotonic() < call.deadline - DEADLINE_SLACK_S:
            raise
        samples.append(((dep.tenant, dep.name, dep.revision, f"step:{step.name}"), None))
        raise DeadlineExceeded(f"step '{step.name}' gave no answer within the request's deadline", step=step.name, steps=report) from None
    finally:
        if samples:
            runner.stats.requests(samples)
    assert answer is not None  # a sequence runs at least one model (checked when parsed)
    if not exposed:
        answer.steps = report  # the answer is this request's own: set in place, not copied
        return answer
    outputs = {**answer.result.outputs, **{name: array for name, (array, _) in exposed.items()}}
    specs = [dataclasses.replace(spec, name=name, role="value") for name, (_, spec) in exposed.items() if spec is not None]
    signature = Signature(answer.signature.inputs, (*answer.signature.outputs, *specs), answer.signature.metadata)
    result = InferenceResult(outputs, answer.result.classes, answer.result.maps)
    return dataclasses.replace(answer, signature=signature, result=result, steps=report)


def _kept(node: Sequence, key: tuple[Any, ...], after: Signature | None) -> Any:
    """What `node.prepared` holds for `key`, worked out for the signature `after` (the one a
    step took: the same object request after request while the policy and its versions hold)."""
    found = node.prepared.get(key)
    return found[1] if found is not None and found[0] is after else None


def _keep(node: Sequence, key: tuple[Any, ...], after: Signature | None, value: Any) -> Any:
    if len(node.prepared) >= MAX_PREPARED:  # bounded, whatever the signatures a step meets
        node.prepared.clear()
    node.prepared[key] = (after, value)
    return value


def _exposed(node: Sequence, outputs: Sequence_[str] | None) -> dict[int, list[tuple[str, str]]]:
    """The intermediate outputs the answer carries (`step.output`), by step index: those the
    node exposes, of those asked for when the request names outputs."""
    if not node.expose:
        return {}
    key = ("expose", tuple(outputs) if outputs else None)
    found = _kept(node, key, None)
    if found is None:
        wanted = set(node.expose) & set(outputs) if outputs else set(node.expose)
        found = {}
        for index, step in enumerate(node.steps[:-1]):
            for name in sorted(wanted):
                if name.startswith(f"{step.name}."):
                    found.setdefault(index, []).append((name, name[len(step.name) + 1 :]))
        _keep(node, key, None, found)
    return found


def _transform(
    sequence: Sequence, step: Step, index: int, signature: Signature | None, given: dict[str, np.ndarray], wanted: Sequence_[str] | None, call: Call
) -> tuple[Signature, dict[str, np.ndarray], frozenset[str]]:
    """A transform step's signature and outputs: it takes what it declares (a first step) or
    the previous step's outputs; and the outputs finite by construction. Its plan, the
    signature it answers and what it keeps are worked out once per signature it takes."""
    node: Transform = step.target  # type: ignore[assignment]
    takes = node.input_specs() if index == 0 or signature is None else signature.outputs
    checked = index == 0 and call.checked is not None and call.checked.inputs == takes  # the request's inputs, checked
    key = ("transform", index, id(signature), tuple(wanted) if wanted else None, checked)
    prepared = _kept(sequence, key, signature)
    try:
        if prepared is None:
            specs, columns = derive(node, takes)
            plan = plan_of(node, columns)
            keep = frozenset(wanted) if wanted else None
            if keep is not None:
                specs = tuple(s for s in specs if s.name in keep)
            inputs = node.input_specs() if index == 0 or signature is None else signature.inputs
            answers = Signature(inputs, specs, signature.metadata if signature else {})
            prepared = _keep(sequence, key, signature, (plan, answers, keep, plan.finite[checked]))
        plan, answers, keep, finite = prepared
        outputs = plan.run(given)
    except SluiceError as exc:
        raise _named(exc, step.name, []) from None
    if keep is not None:
        outputs = {k: v for k, v in outputs.items() if k in keep}
    return answers, outputs, finite


async def _function(
    runner: PolicyRunner,
    sequence: Sequence,
    step: Step,
    index: int,
    call: Call,
    feed: dict[str, np.ndarray],
    before: Signature | None,
    wanted: Sequence_[str] | None,
) -> tuple[Signature, dict[str, np.ndarray]]:
    """A function step's signature and its answer, checked against what it declares
    (`sluice.runtimes.functions`), within its own timeout (the request's deadline is the
    sequence's). As a later step the signature keeps the sequence's inputs (`before`'s), as
    a transform's does."""
    node: Function = step.target  # type: ignore[assignment]
    if runner.functions is None:
        raise Unavailable("function steps are not served here", field="policy")
    outputs = await runner.functions.call(node, call.tenant, feed, timeout_s=node.timeout_s)
    key = ("function", index, id(before), tuple(wanted) if wanted else None)
    answers = _kept(sequence, key, before)
    if answers is None:
        specs = tuple(s for s in node.signature.outputs if s.name in wanted) if wanted else node.signature.outputs
        answers = _keep(sequence, key, before, Signature(before.inputs if before else node.signature.inputs, specs, before.metadata if before else {}))
    if wanted:
        outputs = {k: v for k, v in outputs.items() if k in wanted}
    return answers, outputs


async def _lookup(
    runner: PolicyRunner, step: Step, index: int, call: Call, given: dict[str, np.ndarray], before: Signature | None
) -> tuple[Signature, dict[str, np.ndarray], Looked]:
    """A lookup step's signature, what it gives and what it did, within the request's deadline (`sluice.runtimes.lookups`)."""
    node: Lookup = step.target  # type: ignore[assignment]
    if runner.lookup_steps is None:
        raise Unavailable("lookup steps are not served here", field="policy")
    looked = await runner.lookup_steps.lookup(node, call.tenant, given, timeout_s=max(call.deadline - time.monotonic(), 0.0))
    takes = node.input_specs() if index == 0 or before is None else before.outputs
    return Signature(takes if index == 0 or before is None else before.inputs, node.derive(takes), before.metadata if before else {}), looked.outputs, looked


def _reshape(answer: Answer, signature: Signature, outputs: dict[str, np.ndarray]) -> None:
    """A model's answer (this request's own) made what a transform after it left."""
    result = answer.result
    classes = {k: v for k, v in result.classes.items() if k in outputs} if result.classes else {}
    maps = {k: v for k, v in result.maps.items() if k in outputs and outputs[k] is result.outputs.get(k)} if result.maps else {}
    answer.signature, answer.result = signature, InferenceResult(outputs, classes, maps)


async def _inputs_of(
    runner: PolicyRunner, sequence: Sequence, index: int, given: dict[str, np.ndarray], call: Call
) -> tuple[dict[str, np.ndarray], Signature]:
    """The step's inputs: the previous step's outputs of the same names, or those its map
    names (worked out once per signature); and the signature they are checked against."""
    step = sequence.steps[index]
    signature = await input_signature(runner, step.target, call.tenant)
    sources = _kept(sequence, ("feed", index), signature) or _keep(
        sequence, ("feed", index), signature, tuple((spec.name, (step.map or {}).get(spec.name, spec.name)) for spec in signature.inputs)
    )
    feed: dict[str, np.ndarray] = {}
    for name, source in sources:
        if (array := given.get(source)) is None:
            raise BackendError(f"step '{step.name}' takes input '{name}' from output '{source}' of step '{sequence.steps[index - 1].name}', which gave {sorted(given)}", field="policy", step=step.name)
        feed[name] = array
    return feed, signature


def _named(exc: SluiceError, step: str, report: list[dict[str, Any]]) -> SluiceError:
    """The step's error, its message naming the step, the steps that answered before it in its details."""
    exc.message = f"step '{step}': {exc.message}"
    exc.args = (exc.message,)
    exc.details = {**exc.details, "step": step, "steps": report}
    return exc


def _step_report(name: str, answer: Answer, ms: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "model": answer.version.model, "version": answer.version.version, "latency_ms": round(ms, 3)}
    for key in ("variant", "case", "models", "members", "steps"):
        value = getattr(answer, key)
        if value is not None:
            entry[key] = value
    return entry


# Switches ---------------------------------------------------------------------------------
async def run_switch(runner: PolicyRunner, node: Switch, call: Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
    first = next(iter(arrays.values()), None)
    rows = 0 if first is None or first.ndim == 0 else int(first.shape[0])
    per_row = any(reads_inputs(case.when) for case in node.cases)
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
        answer = await _case(runner, call, name, target, arrays, depth, rows)
        inner = answer.case
        answer.case = name if inner is None else f"{name}/{inner}" if isinstance(inner, str) else [f"{name}/{c}" for c in inner]
        return answer
    groups = [(int(i), np.flatnonzero(chosen == i)) for i in taken]
    answers = await asyncio.gather(
        *(_case(runner, call, targets[i][0], targets[i][1], {k: a[at] for k, a in arrays.items()}, depth, len(at)) for i, at in groups)
    )
    merged = _merge(rows, [at for _, at in groups], [a.result for a in answers], [targets[i][0] for i, _ in groups])
    per_row_case = np.array([name for name, _ in targets], dtype=object)[chosen].tolist()
    models: list[Any] = [None] * rows  # who answered each row: the answer names the first row's
    for (_, at), answer in zip(groups, answers, strict=True):
        refs = answer.models or [answer.version.ref] * len(at)
        for row, ref in zip(at.tolist(), refs, strict=True):
            models[row] = ref
    first = answers[next(g for g, (_, at) in enumerate(groups) if at[0] == 0)]
    return Answer(first.signature, merged, first.version, case=per_row_case, models=models)


async def _case(runner: PolicyRunner, call: Call, name: str, target: Node, arrays: dict[str, np.ndarray], depth: int, rows: int) -> Answer:
    dep = call.deployment
    stat_key = (dep.tenant, dep.name, dep.revision, f"case:{name}")
    started = time.perf_counter()
    try:
        answer = await runner.run(target, call, arrays, depth + 1)
    except SluiceError:
        runner.stats.request(stat_key, 0.0, ok=False)
        raise
    runner.stats.request(stat_key, (time.perf_counter() - started) * 1000, ok=True, rows=rows)
    return answer


def _merge(rows: int, where: list[np.ndarray], results: list[InferenceResult], cases: list[str]) -> InferenceResult:
    """The cases' answers put back in the rows' order."""
    outputs: dict[str, np.ndarray] = {}
    for name, array in results[0].outputs.items():
        parts = [r.outputs.get(name) for r in results]
        if any(p is None or p.ndim == 0 or p.shape[1:] != array.shape[1:] for p in parts):
            raise BackendError(f"the cases {cases} answer output '{name}' in different shapes: their rows cannot be put together", field="policy")
        dtype = np.result_type(*parts) if all(p.dtype.kind not in "OUS" for p in parts) else np.dtype(object)  # type: ignore[union-attr]
        out = np.empty((rows, *array.shape[1:]), dtype=dtype)
        for at, part in zip(where, parts, strict=True):
            out[at] = part
        outputs[name] = out
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
