"""A prediction: resolve the deployment's policy, check the input, run the chosen versions
within the request's budget, aggregate, and hand mirrors their copy for after the response."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sluice.caching import TTLCache
from sluice.domain.errors import (
    BackendError,
    BadRequest,
    DeadlineExceeded,
    SluiceError,
    Unavailable,
)
from sluice.routing import Ensemble, Ref, Shadow, Single, Split, parse_policy, primary_single, walk
from sluice.routing.aggregators import Answer as MemberAnswer
from sluice.routing.aggregators import aggregate
from sluice.routing.choose import bandit_pick, sampled, sticky_pick, weighted_pick
from sluice.shadow.jobs import ShadowJob
from sluice.stats.recorder import StatsRecorder
from sluice.validation import check_inputs

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import numpy as np

    from sluice.domain import Deployment, ModelVersion, Principal
    from sluice.domain.signature import Signature
    from sluice.observability import Telemetry
    from sluice.registry import Registry
    from sluice.routing.policy import Node
    from sluice.runtimes import InferenceResult, Runtime
    from sluice.settings import Settings

MAX_REF_DEPTH = 8


@dataclass(frozen=True, slots=True)
class Resolved:
    """The deployment a request named, its policy, and the version whose signature
    describes the input (the primary path's version)."""

    deployment: Deployment
    node: Node
    version: ModelVersion


@dataclass(slots=True)
class Answer:
    """What a policy node produced."""

    signature: Signature
    result: InferenceResult
    version: ModelVersion  # the version that answered (an ensemble: its first member that did)
    variant: str | None = None  # split choices on the way, outermost first: "canary/b"
    members: list[dict[str, Any]] | None = None  # an ensemble's report per member


@dataclass(slots=True)
class Prediction:
    resolved: Resolved
    answer: Answer
    latency_ms: float
    mirrors: list[ShadowJob] = field(default_factory=list)

    @property
    def result(self) -> InferenceResult:
        return self.answer.result


@dataclass(slots=True)
class _Call:
    tenant: str
    deployment: Deployment
    deadline: float
    routing: Callable[[str], str | None]
    variant: str | None
    request_id: str
    outputs: Sequence[str] | None
    checked: Signature | None = None  # the signature the request's inputs were checked against
    mirrors: list[ShadowJob] = field(default_factory=list)
    spawn_mirrors: bool = True


def _no_routing(_: str) -> None:
    return None


class PredictionService:
    def __init__(
        self,
        registry: Registry,
        runtimes: Mapping[str, Runtime],
        settings: Settings,
        telemetry: Telemetry,
        stats: StatsRecorder | None = None,
    ) -> None:
        self.registry = registry
        self.runtimes = runtimes
        self.settings = settings
        self.telemetry = telemetry
        self.stats = stats or StatsRecorder(registry)
        self._deployments: TTLCache[tuple[str, str], tuple[Deployment, Node]] = TTLCache(settings.deployment_cache_ttl_s)
        self._versions: TTLCache[tuple[str, str, int], ModelVersion] = TTLCache(60.0)
        self._rewards: TTLCache[tuple[str, str, int], dict[str, tuple[int, float]]] = TTLCache(2.0)

    # Reading, cached briefly per container ------------------------------------------------
    def forget(self, tenant: str, name: str) -> None:
        """Drop a cached deployment so this process sees a change at once."""
        self._deployments.pop((tenant, name))

    def policy(self, tenant: str, name: str) -> tuple[Deployment, Node]:
        key = (tenant, name)
        found = self._deployments.get(key)
        if found is None:
            dep = self.registry.get_deployment(tenant, name)
            found = self._deployments.put(key, (dep, parse_policy(dep.policy)))
        return found

    def version(self, tenant: str, model: str, number: int) -> ModelVersion:
        key = (tenant, model, number)
        found = self._versions.get(key)
        return found if found is not None else self._versions.put(key, self.registry.get_version(tenant, model, number))

    def _ref(self, tenant: str) -> Callable[[str], Node]:
        return lambda name: self.policy(tenant, name)[1]

    def resolve(self, principal: Principal, deployment: str, *, version: int | None = None) -> Resolved:
        principal.require("predict")
        dep, node = self.policy(principal.tenant, deployment)
        first = primary_single(node, self._ref(principal.tenant))
        if first is None:
            raise Unavailable(f"deployment '{deployment}' has no model version to answer", field="deployment")
        if version is not None:
            # A pinned version of the primary model answers alone.
            node = Single(first.model, version)
            first = node
        return Resolved(dep, node, self.version(principal.tenant, first.model, first.version))

    def check(
        self,
        resolved: Resolved,
        arrays: dict[str, np.ndarray],
        *,
        datatypes: dict[str, str] | None = None,
        field: str = "inputs",
    ) -> dict[str, np.ndarray]:
        return self._check(resolved.version.signature, arrays, datatypes=datatypes, field=field)

    def _check(self, signature: Signature, arrays: dict[str, np.ndarray], **kw: Any) -> dict[str, np.ndarray]:
        return check_inputs(signature, arrays, max_elements=self.settings.max_tensor_elements, **kw)

    # Running -----------------------------------------------------------------------------
    async def infer(
        self,
        resolved: Resolved,
        arrays: dict[str, np.ndarray],
        *,
        outputs: Sequence[str] | None = None,
        routing: Callable[[str], str | None] | None = None,
        variant: str | None = None,
        request_id: str = "",
        log_fields: dict[str, Any] | None = None,
    ) -> Prediction:
        started = time.perf_counter()
        dep = resolved.deployment
        call = _Call(
            tenant=dep.tenant,
            deployment=dep,
            deadline=time.monotonic() + self.settings.request_timeout_s,
            routing=routing or _no_routing,
            variant=variant,
            request_id=request_id,
            outputs=outputs,
            checked=resolved.version.signature,
        )
        if variant is not None:
            self._check_variant(resolved.node, variant)
        fields = {**(log_fields or {}), "deployment": dep.name}
        try:
            async with asyncio.timeout(self.settings.request_timeout_s):
                answer = await self._execute(resolved.node, call, arrays, depth=0)
        except TimeoutError:
            error = DeadlineExceeded(f"no answer within {self.settings.request_timeout_s:g} s")
            self._failed(fields, error)
            raise error from None
        except SluiceError as error:
            self._failed(fields, error)
            raise
        latency_ms = round((time.perf_counter() - started) * 1000, 3)
        self.stats.request((dep.tenant, dep.name, dep.revision, "deployment"), latency_ms, ok=True)
        for job in call.mirrors:
            job.primary_latency_ms = latency_ms
        rows = next(iter(arrays.values())).shape[0] if arrays else 0
        fields.update(model=answer.version.model, version=answer.version.version)
        if answer.variant:
            fields["variant"] = answer.variant
        self.telemetry.prediction(fields=fields, latency_ms=latency_ms, rows=rows)
        return Prediction(resolved, answer, latency_ms, call.mirrors)

    async def execute_node(self, tenant: str, node: Node, arrays: dict[str, np.ndarray], *, budget_s: float) -> Answer:
        """Run a policy node outside a request (a shadow mirror): no mirrors of its own."""
        from sluice.domain import Deployment

        call = _Call(
            tenant=tenant,
            deployment=Deployment(tenant, "(mirror)", {}),
            deadline=time.monotonic() + budget_s,
            routing=_no_routing,
            variant=None,
            request_id="",
            outputs=None,
            spawn_mirrors=False,
        )
        async with asyncio.timeout(budget_s):
            return await self._execute(node, call, arrays, depth=0)

    def flush_stats_if_due(self) -> None:
        if self.stats.due():
            self.stats.flush()

    def _failed(self, fields: dict[str, Any], error: SluiceError) -> None:
        self.telemetry.failure(fields=fields, status=error.status, code=error.code)

    def _check_variant(self, node: Node, variant: str) -> None:
        names = {v.name for n in walk(node) if isinstance(n, Split) for v in n.variants}
        if variant not in names:
            raise BadRequest(
                f"no variant '{variant}' in this deployment; it has {sorted(names) or 'none'}", field="variant"
            )

    async def _execute(self, node: Node, call: _Call, arrays: dict[str, np.ndarray], *, depth: int) -> Answer:
        if isinstance(node, Single):
            return await self._run_single(node, call, arrays)
        if isinstance(node, Ref):
            if depth >= MAX_REF_DEPTH:
                raise BackendError("deployment references nest too deep", field="policy")
            return await self._execute(self.policy(call.tenant, node.deployment)[1], call, arrays, depth=depth + 1)
        if isinstance(node, Split):
            return await self._run_split(node, call, arrays, depth)
        if isinstance(node, Shadow):
            answer = await self._execute(node.primary, call, arrays, depth=depth + 1)
            if call.spawn_mirrors:
                for mirror in node.mirrors:
                    if sampled(mirror.sample_percent):
                        call.mirrors.append(self._shadow_job(call, mirror.name, mirror.node.to_dict(), arrays, answer))
            return answer
        return await self._run_ensemble(node, call, arrays, depth)

    async def _run_single(self, node: Single, call: _Call, arrays: dict[str, np.ndarray]) -> Answer:
        version = self.version(call.tenant, node.model, node.version)
        runtime = self.runtimes.get(version.runtime)
        if runtime is None:
            raise Unavailable(f"runtime '{version.runtime}' is not configured here", field="runtime")
        signature = version.signature
        if call.checked is None or signature.inputs != call.checked.inputs:
            arrays = self._check(signature, arrays)
        wanted = [o for o in call.outputs if signature.output(o) is not None] if call.outputs else None
        result = await runtime.infer(version, arrays, wanted or None)
        return Answer(signature, result, version)

    async def _run_split(self, node: Split, call: _Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
        dep = call.deployment
        chosen = next((v for v in node.variants if v.name == call.variant), None)
        if chosen is None:
            if node.bandit is not None:
                chosen = bandit_pick(node.variants, node.bandit, self.rewards(dep.tenant, dep.name, dep.revision))
                if call.request_id:
                    self.registry.put_assignment(dep.tenant, dep.name, call.request_id, chosen.name)
            else:
                key = call.routing(node.routing_key) if node.routing_key else None
                chosen = sticky_pick(node.variants, key) if key else weighted_pick(node.variants)
        stat_key = (dep.tenant, dep.name, dep.revision, f"variant:{chosen.name}")
        started = time.perf_counter()
        try:
            answer = await self._execute(chosen.node, call, arrays, depth=depth + 1)
        except SluiceError:
            self.stats.request(stat_key, 0.0, ok=False)
            raise
        self.stats.request(stat_key, (time.perf_counter() - started) * 1000, ok=True)
        answer.variant = chosen.name if answer.variant is None else f"{chosen.name}/{answer.variant}"
        return answer

    async def _run_ensemble(self, node: Ensemble, call: _Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
        async def member_call(index: int) -> tuple[int, Answer | None, SluiceError | None, float]:
            member = node.members[index]
            started = time.perf_counter()
            limit = max(call.deadline - time.monotonic(), 0.0)
            if member.timeout_ms is not None:
                limit = min(limit, member.timeout_ms / 1000)
            try:
                async with asyncio.timeout(limit):
                    answer = await self._execute(member.node, call, arrays, depth=depth + 1)
                return index, answer, None, (time.perf_counter() - started) * 1000
            except TimeoutError:
                error: SluiceError = DeadlineExceeded(f"member '{member.name}' gave no answer within {limit * 1000:.0f} ms")
            except SluiceError as exc:
                error = exc
            return index, None, error, (time.perf_counter() - started) * 1000

        tasks = [asyncio.ensure_future(member_call(i)) for i in range(len(node.members))]
        done: list[tuple[int, Answer | None, SluiceError | None, float]] = []
        try:
            if node.aggregator == "first_success":
                for next_done in asyncio.as_completed(tasks):
                    outcome = await next_done
                    done.append(outcome)
                    if outcome[1] is not None:
                        break
            else:
                done = list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()
        report = [
            {
                "name": node.members[i].name,
                "ok": answer is not None,
                "latency_ms": round(ms, 3),
                **({"model": answer.version.model, "version": answer.version.version} if answer else {}),
                **({"error": error.code} if error else {}),
            }
            for i, answer, error, ms in sorted(done, key=lambda item: item[0])
        ]
        answers = [(i, a) for i, a, _, _ in sorted(done, key=lambda item: item[0]) if a is not None]
        if node.aggregator == "first_success":
            winner = next((a for _, a, _, _ in done if a is not None), None)  # in order of arrival
            if winner is None:
                raise BackendError("no ensemble member answered", members=report)
            return replace(winner, members=report)
        need = node.min_members or len(node.members)
        if len(answers) < need:
            timed_out = all(e is not None and e.status == 504 for _, a, e, _ in done if a is None)
            cls = DeadlineExceeded if timed_out else BackendError
            raise cls(f"{len(answers)} of {len(node.members)} ensemble members answered; {need} needed", members=report)
        combined = aggregate(
            node.aggregator,
            [MemberAnswer(node.members[i].name, node.members[i].weight, a.signature, a.result) for i, a in answers],
        )
        first_answer = answers[0][1]
        return Answer(first_answer.signature, combined, first_answer.version, members=report)

    # Bandits and shadows -------------------------------------------------------------------
    def rewards(self, tenant: str, deployment: str, revision: int) -> dict[str, tuple[int, float]]:
        key = (tenant, deployment, revision)
        found = self._rewards.get(key)
        if found is None:
            stats = self.registry.read_stats(tenant, deployment, revision)
            found = {
                subject.removeprefix("variant:"): (int(c.get("reward_n", 0)), float(c.get("reward_sum", 0.0)))
                for subject, c in stats.items()
                if subject.startswith("variant:")
            }
            self._rewards.put(key, found)
        return found

    def _shadow_job(self, call: _Call, name: str, node: dict[str, Any], arrays: dict[str, np.ndarray], answer: Answer) -> ShadowJob:
        dep = call.deployment
        return ShadowJob(
            tenant=dep.tenant,
            deployment=dep.name,
            revision=dep.revision,
            mirror=name,
            node=node,
            inputs=arrays,
            primary_outputs=answer.result.outputs,
            primary_classes=answer.result.classes,
            primary_signature=answer.signature,
            primary_latency_ms=0.0,
            request_id=call.request_id,
        )
