"""Running a `sequence`: steps one after another, each one's outputs the next one's inputs.

A sequence runs under the request's one deadline: a step that does not answer before it
fails the request naming the step, as does a step that fails. Its answer is the last step's,
with the outputs the node exposes (`step.output`) beside it, and a report per step (model,
version, latency). Statistics count each step (`step:<name>`; `step:<path>/<name>` for a
sequence nested in another node, `Call.path`): in a request's prediction,
in the one call that counts the deployment's own (`Call.samples`); elsewhere in one of their own.

What does not change from one request to the next is worked out once per parsed policy
(a new revision is parsed anew) and kept on the node (`Sequence.prepared`): a `_Plan` per
deployment, outputs asked for and path holds each step's kind, statistics key, the outputs it
answers and those the node exposes from it; and, per signature a step takes (the same object
request after request while the policy and its versions hold), a transform's compiled ops
and the signature it answers, a model's input names. A request pays the steps' own work,
their checks and little more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from sluice.caching import keep
from sluice.domain.errors import (
    Accepted,
    BackendError,
    DeadlineExceeded,
    InvalidInput,
    NotFinite,
    PayloadTooLarge,
    SluiceError,
    Unavailable,
)
from sluice.domain.policy_paths import subject_at
from sluice.domain.results import Answer, InferenceResult
from sluice.domain.signature import Signature
from sluice.domain.transform_specs import MAX_TRANSFORM_ELEMENTS, WIDEST, derive
from sluice.inference.graphs import input_signature
from sluice.millis import ms3
from sluice.routing.transforms import plan_of

if TYPE_CHECKING:
    from collections.abc import Sequence as Sequence_

    import numpy as np

    from sluice.domain.functions import Function
    from sluice.domain.lookups import Lookup
    from sluice.domain.policy import Sequence, Step
    from sluice.domain.transforms import Transform
    from sluice.inference.execution import Call, PolicyRunner
    from sluice.runtimes.lookup_reports import Looked

MAX_PREPARED = 64  # plans kept per sequence, and what a step works out per signature it takes
DEADLINE_SLACK_S = 0.001  # a timer may fire this early (the event loop's clock resolution, and more)
_REPORTED = ("variant", "case", "models", "members", "steps")  # what a model step's answer may add to its report


class _Step:
    """One step as a request runs it: what its policy says, worked out once."""

    __slots__ = ("exposes", "index", "kind", "name", "path", "single", "stat_key", "step", "taken", "target", "wanted")

    def __init__(
        self, index: int, step: Step, path: str, stat_key: tuple[Any, ...], wanted: Sequence_[str] | None, exposes: tuple[tuple[str, str], ...]
    ) -> None:
        self.index, self.step, self.name, self.target, self.path = index, step, step.name, step.target, path
        kind = step.target.kind
        self.kind = kind if kind in ("transform", "lookup", "function") else "model"
        self.single = kind == "single"  # a model step whose answer adds nothing to its report
        self.stat_key, self.wanted, self.exposes = stat_key, wanted, exposes
        self.taken: dict[Any, tuple[Any, Any]] = {}  # by the signature the step takes: (that signature, what it gives)

    def kept(self, key: Any, after: Signature | None) -> Any:
        found = self.taken.get(key)
        return found[1] if found is not None and found[0] is after else None

    def keep(self, key: Any, after: Signature | None, value: Any) -> Any:
        keep(self.taken, key, (after, value), MAX_PREPARED)  # whatever the signatures a step meets
        return value


class _Plan:
    __slots__ = ("exposes", "steps")

    def __init__(self, node: Sequence, tenant: str, deployment: str, revision: int, outputs: Sequence_[str] | None, path: str) -> None:
        wanted = set(node.expose or ()) & set(outputs) if outputs else set(node.expose or ())
        last = len(node.steps) - 1
        self.steps: tuple[_Step, ...] = tuple(
            _Step(
                i, step, subject_at(path, step.name), (tenant, deployment, revision, f"step:{subject_at(path, step.name)}"), outputs if i == last else None,
                tuple((name, name[len(step.name) + 1 :]) for name in sorted(wanted) if i < last and name.startswith(f"{step.name}.")),
            )
            for i, step in enumerate(node.steps)
        )  # fmt: skip
        self.exposes = bool(wanted) and any(s.exposes for s in self.steps)


def _plan(node: Sequence, call: Call) -> _Plan:
    """The node's plan for this deployment revision, the outputs the request asks for and the
    path the node runs at (`Call.path`)."""
    dep = call.deployment
    key = (dep.tenant, dep.name, dep.revision, tuple(call.outputs) if call.outputs else None, call.path)
    prepared = node.prepared
    plan = prepared.get(key)
    if plan is None:
        plan = keep(prepared, key, _Plan(node, *key), MAX_PREPARED)  # whatever the outputs requests ask for
    return plan


async def run_sequence(runner: PolicyRunner, node: Sequence, call: Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
    plan = _plan(node, call)
    report: list[dict[str, Any]] = []
    exposed: dict[str, tuple[np.ndarray, Any]] = {}
    samples: list[tuple[Any, float | None]] = []  # each step's statistics, recorded in one call
    answer: Answer | None = None  # the last model's answer (a transform after it reshapes it)
    given, given_signature = arrays, None  # the previous step's outputs, and their signature
    finite: frozenset[str] = frozenset()  # those a transform made finite by construction
    made_by: dict[str, _Step] = {}  # the tensors a function step answered (and transforms passed on): by that step
    step = plan.steps[0]
    clock = time.perf_counter
    answered = False
    try:
        for step in plan.steps:
            started = clock()
            kind = step.kind
            if kind == "model":
                feed, takes = (given, call.checked) if step.index == 0 else await _inputs_of(runner, node, step, given, call)
                try:
                    if step.index:  # inputs nobody checked yet: here, so a refusal names the step (NaN and
                        feed = runner.check(takes, feed, finite=finite)  # infinity looked for where a step may have made them)
                    answer = await runner.run(step.target, call.narrowed(step.wanted, takes, step.path), feed, depth + 1)
                except Accepted:
                    raise
                except NotFinite as exc:
                    name = (exc.field or "").removeprefix("inputs.")
                    theirs = _functions_fault(exc, made_by.get((step.step.map or {}).get(name, name)), step, samples, report, "NaN or infinite values, which")
                    if theirs is None:  # the caller's (or what its values made)
                        samples.append((step.stat_key, None))
                        raise _named(exc, step.name, report) from None
                    raise theirs from None
                except SluiceError as exc:
                    samples.append((step.stat_key, None))
                    raise _named(exc, step.name, report) from None
                ms = (clock() - started) * 1000
                report.append(_step_report(step, answer, ms))
                given, given_signature, finite = answer.result.outputs, answer.signature, frozenset()
                made_by = {}
            elif kind == "transform":
                try:
                    given_signature, given, finite = _transform(step, given_signature, given, call)
                except InvalidInput as exc:  # refusing a tensor a function answered (a cast of its NaN): the function's fault
                    theirs = _functions_fault(exc, made_by.get((exc.field or "").removeprefix("inputs.")), step, samples, report, "values")
                    if theirs is None:
                        raise
                    raise theirs from None
                if made_by:  # a function's tensor a transform passes on under its name is still the function's
                    made_by = {k: v for k, v in made_by.items() if k in given}
                ms = (clock() - started) * 1000
                report.append({"name": step.name, "kind": "transform", "latency_ms": ms3(ms)})
                if answer is not None:
                    _reshape(answer, given_signature, given)
            elif kind == "lookup":
                try:
                    given_signature, given, looked = await _lookup(runner, step, call, given, given_signature)
                except SluiceError as exc:
                    samples.append((step.stat_key, None))
                    raise _named(exc, step.name, report) from None
                if finite or made_by:  # what the store gives, a feature replacing a tensor of its name included,
                    gives = {spec.name for spec in step.target.gives}  # type: ignore[union-attr]
                    finite = finite.difference(gives)  # is looked through, and is the store's, not a function's
                    made_by = {k: v for k, v in made_by.items() if k not in gives}
                ms = (clock() - started) * 1000
                report.append(looked.report(step.name, ms))
                if looked.cache_hits is not None:  # rows from the feature cache, and rows whose entity was read
                    runner.stats.add(step.stat_key, {"cache_hits": looked.cache_hits, "cache_misses": looked.cache_misses})
                if answer is not None:
                    _reshape(answer, given_signature, given)
            else:  # a function
                feed = given if step.index == 0 else (await _inputs_of(runner, node, step, given, call))[0]
                try:
                    given_signature, given = await _function(runner, step, call, feed, given_signature)
                except SluiceError as exc:
                    samples.append((step.stat_key, None))
                    raise _named(exc, step.name, report) from None
                finite = frozenset()  # the tenant's code may answer NaN under a name a transform made finite
                made_by = dict.fromkeys(given, step)  # its tensors, the function's: a NaN in them is its failure
                ms = (clock() - started) * 1000
                report.append({"name": step.name, "kind": "function", "latency_ms": ms3(ms)})
                if answer is not None:
                    _reshape(answer, given_signature, given)
            samples.append((step.stat_key, ms))
            for name, output in step.exposes:
                if output in given:
                    exposed[name] = (given[output], given_signature.output(output) if given_signature else None)
        answered = True
    except asyncio.CancelledError:
        # The request's one deadline (`PredictionService.predict`, `run_node`) cancels whatever
        # step is running: the request fails naming it. Any other cancellation goes on as it is.
        if not call.out_of_time():
            raise
        samples.append((step.stat_key, None))
        raise DeadlineExceeded(f"step '{step.name}' gave no answer within the request's deadline", step=step.name, steps=report) from None
    finally:
        if samples:
            if answered and not depth and call.samples is not None:  # with the request's own, once it answers (`Call.samples`)
                call.samples.extend(samples)
            else:
                runner.stats.requests(samples)
    assert answer is not None  # a sequence runs at least one model (checked when parsed)
    if not exposed:
        answer.steps = report  # the answer is this request's own: set in place, not copied
        return answer
    outputs = {**answer.result.outputs, **{name: array for name, (array, _) in exposed.items()}}
    specs = [dataclasses.replace(spec, name=name, role="value") for name, (_, spec) in exposed.items() if spec is not None]
    signature = Signature(answer.signature.inputs, (*answer.signature.outputs, *specs), answer.signature.metadata)
    result = InferenceResult(outputs, answer.result.classes, answer.result.maps)
    return dataclasses.replace(answer, signature=signature, result=result, steps=report, exposed=answer.exposed.union(exposed))


def _transform(
    step: _Step, signature: Signature | None, given: dict[str, np.ndarray], call: Call
) -> tuple[Signature, dict[str, np.ndarray], frozenset[str]]:
    """A transform step's signature and outputs: it takes what it declares (a first step) or
    the previous step's outputs; and the outputs finite by construction. Its plan, the
    signature it answers and what it keeps are worked out once per signature it takes."""
    node: Transform = step.target  # type: ignore[assignment]
    first = step.index == 0 or signature is None
    takes = node.input_specs() if first else signature.outputs  # type: ignore[union-attr]
    checked = step.index == 0 and call.checked is not None and call.checked.inputs == takes  # the request's inputs, checked
    key = checked if first else id(signature)
    prepared = step.kept(key, signature)
    try:
        if prepared is None:
            specs, columns = derive(node, takes)
            plan = plan_of(node, columns)
            keep = frozenset(step.wanted) if step.wanted else None
            if keep is not None:
                specs = tuple(s for s in specs if s.name in keep)
            inputs = node.input_specs() if first else signature.inputs  # type: ignore[union-attr]
            answers = Signature(inputs, specs, signature.metadata if signature else {})
            prepared = step.keep(key, signature, (plan, answers, keep, plan.finite[checked], columns.get(WIDEST, [1])[0]))
        plan, answers, keep, finite, widest = prepared
        rows = next((len(a) for a in given.values() if a.ndim), 1)
        if rows * widest > MAX_TRANSFORM_ELEMENTS:  # refused before a tensor of them is made
            raise PayloadTooLarge(
                f"this transform makes a tensor of {widest} columns: {rows} rows would be {rows * widest} values, "
                f"past the {MAX_TRANSFORM_ELEMENTS} one may hold; send fewer rows a request",
                field="inputs",
            )
        outputs = plan.run(given)
    except SluiceError as exc:
        raise _named(exc, step.name, []) from None
    if keep is not None:
        outputs = {k: v for k, v in outputs.items() if k in keep}
    return answers, outputs, finite


async def _function(
    runner: PolicyRunner, step: _Step, call: Call, feed: dict[str, np.ndarray], before: Signature | None
) -> tuple[Signature, dict[str, np.ndarray]]:
    """A function step's signature and its answer, checked against what it declares
    (`sluice.runtimes.functions`), within its own timeout (the request's deadline is the
    sequence's). As a later step the signature keeps the sequence's inputs (`before`'s), as
    a transform's does."""
    node: Function = step.target  # type: ignore[assignment]
    if runner.functions is None:
        raise Unavailable("function steps are not served here", field="policy")
    outputs = await runner.functions.call(node, call.tenant, feed, timeout_s=node.timeout_s)
    wanted = step.wanted
    key = ("function", id(before))
    answers = step.kept(key, before)
    if answers is None:
        specs = tuple(s for s in node.signature.outputs if s.name in wanted) if wanted else node.signature.outputs
        answers = step.keep(key, before, Signature(before.inputs if before else node.signature.inputs, specs, before.metadata if before else {}))
    if wanted:
        outputs = {k: v for k, v in outputs.items() if k in wanted}
    return answers, outputs


async def _lookup(
    runner: PolicyRunner, step: _Step, call: Call, given: dict[str, np.ndarray], before: Signature | None
) -> tuple[Signature, dict[str, np.ndarray], Looked]:
    """A lookup step's signature, what it gives and what it did, within the request's deadline (`sluice.runtimes.lookups`)."""
    node: Lookup = step.target  # type: ignore[assignment]
    if runner.lookup_steps is None:
        raise Unavailable("lookup steps are not served here", field="policy")
    looked = await runner.lookup_steps.lookup(node, call.tenant, given, timeout_s=max(call.deadline - time.monotonic(), 0.0), reports=call.looked)
    key = ("lookup", id(before))
    answers = step.kept(key, before)
    if answers is None:  # worked out once per signature before it, as a function step's
        first = step.index == 0 or before is None
        takes = node.input_specs() if first else before.outputs  # type: ignore[union-attr]
        answers = step.keep(key, before, Signature(takes if first else before.inputs, node.derive(takes), before.metadata if before else {}))  # type: ignore[union-attr]
    return answers, looked.outputs, looked


def _reshape(answer: Answer, signature: Signature, outputs: dict[str, np.ndarray]) -> None:
    """A model's answer (this request's own) made what a transform after it left."""
    result = answer.result
    classes = {k: v for k, v in result.classes.items() if k in outputs} if result.classes else {}
    maps = {k: v for k, v in result.maps.items() if k in outputs and outputs[k] is result.outputs.get(k)} if result.maps else {}
    answer.signature, answer.result = signature, InferenceResult(outputs, classes, maps)
    if answer.exposed:  # a nested sequence's exposed outputs went into the step: so may any of these
        answer.exposed = frozenset(outputs)


async def _inputs_of(
    runner: PolicyRunner, sequence: Sequence, step: _Step, given: dict[str, np.ndarray], call: Call
) -> tuple[dict[str, np.ndarray], Signature]:
    """The step's inputs: the previous step's outputs of the same names, or those its map
    names (worked out once per signature); and the signature they are checked against."""
    target = step.target
    version = runner.lookups.cached_version(call.tenant, target.model, target.version) if target.kind == "single" else None  # type: ignore[union-attr]
    signature = version.signature if version is not None else await input_signature(runner, target, call.tenant)
    key = id(signature)
    sources = step.kept(key, signature)
    if sources is None:
        renamed = step.step.map or {}
        sources = step.keep(key, signature, tuple((spec.name, renamed.get(spec.name, spec.name)) for spec in signature.inputs))
    feed: dict[str, np.ndarray] = {}
    for name, source in sources:
        if (array := given.get(source)) is None:
            before = sequence.steps[step.index - 1].name
            raise BackendError(f"step '{step.name}' takes input '{name}' from output '{source}' of step '{before}', which gave {sorted(given)}", field="policy", step=step.name)
        feed[name] = array
    return feed, signature


def _functions_fault(
    exc: InvalidInput, maker: _Step | None, step: _Step, samples: list[tuple[Any, float | None]], report: list[dict[str, Any]], what: str
) -> SluiceError | None:
    """A step's refusal of a tensor a function step answered (`maker`; None: the caller's, or
    what its values made) as that function's failure, not the caller's bad input: a 502 naming
    the function's step, its sample counted as failed. None where the tensor is not a function's."""
    if maker is None:
        return None
    samples[:] = [(maker.stat_key, None) if key == maker.stat_key else (key, ms) for key, ms in samples]
    message = exc.message.removeprefix(f"step '{step.name}': ")
    error = BackendError(f"function {maker.target.function} answered {what} step '{step.name}' cannot take ({message})", field="policy")  # type: ignore[union-attr]
    return _named(error, maker.name, report)


def _named(exc: SluiceError, step: str, report: list[dict[str, Any]]) -> SluiceError:
    """The step's error, its message naming the step, the steps that answered before it in its details."""
    exc.message = f"step '{step}': {exc.message}"
    exc.args = (exc.message,)
    exc.details = {**exc.details, "step": step, "steps": report}
    return exc


def _step_report(step: _Step, answer: Answer, ms: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": step.name, "model": answer.version.model, "version": answer.version.version, "latency_ms": ms3(ms)}
    if not step.single:  # a split, an ensemble, a switch or a sequence inside says more
        for key in _REPORTED:
            value = getattr(answer, key)
            if value is not None:
                entry[key] = value
    return entry
