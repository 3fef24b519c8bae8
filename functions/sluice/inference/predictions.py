"""The one prediction call. `PredictionService.predict(principal, request)` is the whole
prediction: resolve the deployment, decode the inputs, check them against the signature,
route, infer, aggregate, and hand shadow jobs to the mirror. The HTTP API (simple JSON and
the Open Inference Protocol), the CLI, batch scoring and every Lambda handler call it and
only present what it returns.

Inputs may be an upload (`UploadInputs`): found for the caller's tenant, then either handed
as it lies to a runtime that queues it (a SageMaker asynchronous endpoint: `Accepted`), or
read and decoded as the body of the route that named it, and predicted from as any request
(`sluice.inference.uploads.request_from_upload`). Inputs become arrays in
`sluice.inference.inputs`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from sluice.caching import TTLCache
from sluice.domain.errors import (
    Accepted,
    BadRequest,
    DeadlineExceeded,
    NotFound,
    SluiceError,
    Unavailable,
    UnknownDeployment,
    UnknownVersion,
)
from sluice.domain.policy import MAX_DEPTH, Single, first_branch, walk
from sluice.domain.requests import UploadInputs
from sluice.domain.results import Prediction, Resolved, rows_of
from sluice.domain.signature import Signature
from sluice.inference.bandit_feedback import BanditFeedback
from sluice.inference.batching import Batcher
from sluice.inference.cached_answers import count_hit, keep, look_up
from sluice.inference.deployment_reads import DeploymentReads
from sluice.inference.execution import MAX_REF_DEPTH, MIRROR, Call, PolicyRunner, no_routing, within
from sluice.inference.graphs import answer_signature, input_signature
from sluice.inference.inputs import decode_inputs
from sluice.inference.outcomes import CANCELLED, Outcomes, mark
from sluice.inference.parsed import ParsedPolicies
from sluice.inference.references import deleted_at, pin, pin_refs, referenced, unpin, walk_through
from sluice.inference.reports import Reports
from sluice.inference.revisions import Revisions
from sluice.inline import timeout
from sluice.millis import ms3
from sluice.observability import get_logger
from sluice.settings import in_lambda
from sluice.stats.recorder import StatsRecorder
from sluice.validation import check_inputs

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import numpy as np

    from sluice.capture.capturer import Capturer
    from sluice.domain import Deployment, ModelVersion, Principal
    from sluice.domain.policy import Node
    from sluice.domain.requests import PredictionRequest
    from sluice.domain.results import Answer
    from sluice.inference.cached_answers import Lookup
    from sluice.inference.mirror import Mirror
    from sluice.inference.precomputed import PrecomputedReader
    from sluice.inference.prediction_cache import PredictionCache
    from sluice.inference.uploads import UploadService
    from sluice.monitor.kept import PredictionKeeper
    from sluice.monitor.profiler import ProfileRecorder
    from sluice.observability import Telemetry
    from sluice.registry import Registry
    from sluice.runtimes import Runtime
    from sluice.runtimes.functions import FunctionSteps
    from sluice.runtimes.lookups import LookupSteps
    from sluice.settings import PredictionSettings


class PredictionService:
    def __init__(
        self,
        registry: Registry,
        runtimes: Mapping[str, Runtime],
        settings: PredictionSettings,
        telemetry: Telemetry,
        stats: StatsRecorder | None = None,
        mirror: Mirror | None = None,
        cache: PredictionCache | None = None,
        functions: FunctionSteps | None = None,
        lookup_steps: LookupSteps | None = None,
        precomputed: PrecomputedReader | None = None,
    ) -> None:
        self.parsed = ParsedPolicies()  # a re-read of the same record keeps its parsed policy (and its plans)
        self.reads = DeploymentReads(registry, self.parsed, settings.deployment_cache_ttl_s)
        self.runtimes = runtimes
        self.settings = settings
        self.telemetry = telemetry
        self.stats = stats or StatsRecorder(registry, flush_every_s=settings.stats_flush_s, on_drop=telemetry.stats_dropped)
        self.mirror = mirror  # set by the wiring once built (a local mirror runs through this service)
        self.cache = cache  # answers of deployments that turned caching on; None: never cached
        self.capture: Capturer | None = None  # set by the wiring: data capture of deployments that turn it on
        self.profiles: ProfileRecorder | None = None  # set by the wiring: monitoring profiles of the traffic served
        self.kept: PredictionKeeper | None = None  # set by the wiring: predictions kept for ground truth
        self.uploads: Callable[[], UploadService] | None = None  # set by the wiring: inputs that are uploads
        self._deployments = self.reads.cache
        # What a composite policy takes and answers, derived once per parsed policy (see `resolve`).
        self._resolved: TTLCache[tuple[str, str], Resolved] = TTLCache(settings.deployment_cache_ttl_s)
        self.revisions = Revisions(registry, settings.deployment_cache_ttl_s)  # as a request pinned to one reads them (`resolve`)
        self.bandits = BanditFeedback(registry, self.parsed)
        # Batching joins requests one process serves at once; a Lambda environment serves one.
        self.batcher = Batcher(enabled=not in_lambda())
        self.outcomes = Outcomes(telemetry, self.stats, self.deployment_of, self.reads.cached)
        self.runner = PolicyRunner(self, runtimes, self.stats, self._check, self.batcher, functions, lookup_steps, precomputed)
        self.reports = Reports(telemetry, self.outcomes, lambda: self.runner.lookup_steps)

    @property
    def registry(self) -> Registry:
        """The registry this service reads (a test may put another in its place)."""
        return self.reads.registry

    @registry.setter
    def registry(self, registry: Registry) -> None:
        self.reads.registry = registry

    # The call -----------------------------------------------------------------------------
    async def predict(self, principal: Principal, request: PredictionRequest) -> Prediction:
        """The prediction; whatever fails in it is counted once (`sluice.inference.outcomes`).
        A request whose references are pinned (`refs`: a batch job's) follows them there."""
        pinned = pin(request.refs)
        try:
            return await self._predict(principal, request)
        except SluiceError as error:
            await self.outcomes.failed(principal.tenant, request.deployment, error, fields=request.log_fields)
            raise
        except asyncio.CancelledError as cancelled:  # its client left (a gRPC call's, an HTTP request's): a request all the same
            await self.outcomes.failed(principal.tenant, request.deployment, cancelled, status=CANCELLED, code="cancelled", fields=request.log_fields)
            raise
        finally:
            unpin(pinned)

    async def _predict(self, principal: Principal, request: PredictionRequest) -> Prediction:
        started = time.perf_counter()
        resolved = await self.resolve(principal, request.deployment, version=request.version, revision=request.revision)
        if isinstance(request.inputs, UploadInputs):
            from sluice.inference.uploads import (
                request_from_upload,  # an upload's request only: not at cold start
            )

            uploads = self.uploads() if self.uploads is not None else None
            request = await request_from_upload(uploads, self.runtimes, principal, resolved, request, request.inputs)
        signature = resolved.version.signature
        arrays = self.decode(signature, request, answers=resolved.answers)
        dep = resolved.deployment
        fields = {**request.log_fields, "deployment": dep.name}
        call = Call(
            deployment=dep,
            deadline=time.monotonic() + self.settings.request_timeout_s,
            routing=request.routing_value,
            variant=request.variant,
            request_id=request.request_id,
            outputs=request.outputs,
            checked=signature,
            spawn_mirrors=request.mirrors,
            request=request,
            samples=[],
            looked=[],
            sessions=[0, 0],
            chosen=[] if request.request_id else None,
        )
        if request.variant is not None:
            self._check_variant(resolved.node, request.variant)
        lookup = None
        if dep.cache is not None and self.cache is not None:
            lookup = await look_up(self, self.cache, dep, resolved.node, call, request.outputs, arrays)
            if lookup is not None and lookup.hit is not None:
                return self._hit(resolved, lookup, started, fields, arrays, request.request_id, batch=request.as_batch)
        stat_key = (dep.tenant, dep.name, dep.revision, "deployment")
        try:
            answer = await within(self.runner.run(resolved.node, call, arrays), self.settings.request_timeout_s)
        except TimeoutError:
            error = DeadlineExceeded(f"no answer within {self.settings.request_timeout_s:g} s")
            self.reports.runtime_failed(dep, fields, error, call)
            raise error from None
        except Accepted:
            self.reports.unreported(call)
            raise  # queued for asynchronous inference: neither an answer nor a failure
        except SluiceError as error:
            self.reports.runtime_failed(dep, fields, error, call)
            raise
        finally:
            if call.chosen:  # answered, failed or queued alike: feedback may reward a failure
                await self.bandits.assign(call)
        latency_ms = ms3((time.perf_counter() - started) * 1000)
        rows = rows_of(arrays)
        cached, sources = None, None
        if lookup is not None and self.cache is not None:  # kept before the request is counted: a cancel waiting on it counts it once, cancelled
            await keep(self.cache, self.stats, dep, lookup, answer)
            cached = False
        self.stats.request(stat_key, latency_ms, ok=True, rows=rows, steps=call.samples)  # a sequence's steps' too: one lock
        if self.profiles is not None:  # held as they are; folded into sketches off the request
            out = answer.result
            self.profiles.observe((dep.tenant, dep.name, dep.revision, answer.variant or ""), signature, arrays, out.outputs, out.classes, rows)
        self._keep(dep, answer, request.request_id, rows)
        fields.update(model=answer.version.model, version=answer.version.version)
        if answer.variant:
            fields["variant"] = answer.variant
        if cached is None and answer.source is not None:  # a precomputed node's rows, by where they came from
            precomputed = answer.source.count("precomputed") if isinstance(answer.source, list) else rows * (answer.source == "precomputed")
            sources = (precomputed, rows - precomputed)
        self.reports.answered(fields, latency_ms, rows, cached, sources, call)
        if call.mirrors and self.mirror is not None:
            try:
                await self._hand_off(call, latency_ms)
            except asyncio.CancelledError as cancelled:  # answered and counted: not counted again, cancelled
                mark(cancelled)
                raise
        if dep.capture is not None and self.capture is not None:  # sampled and queued, never waited on
            if request.record_ids is None:
                self.capture.offer(dep, request.request_id, answer, arrays, latency_ms, signature.inputs)
            else:
                self.capture.offer_records(dep, request.record_ids, request.record_offsets, answer, arrays, latency_ms, signature.inputs)
        return Prediction(resolved, answer, latency_ms, len(call.mirrors), batch=request.as_batch)

    def _keep(self, dep: Deployment, answer: Answer, request_id: str | None, rows: int) -> None:
        """The answer kept by request id for its ground truth (held; written by the flush),
        computed or from the cache alike: a label is for what the caller was told."""
        if self.kept is not None:
            self.kept.observe((dep.tenant, dep.name, dep.revision, answer.variant or ""), answer.signature, answer.result, request_id, rows)

    def _hit(
        self, resolved: Resolved, lookup: Lookup, started: float, fields: dict[str, Any], arrays: dict[str, np.ndarray],
        request_id: str | None, *, batch: bool,
    ) -> Prediction:  # fmt: skip
        """A kept answer: no inference, no shadow jobs, no profile and no latency sample (those
        are of live computations); telemetry counts the request and the hit, the deployment's
        statistics an answered request and a cache hit (`cached_answers.count_hit`), and the
        answer is kept for its ground truth."""
        answer = lookup.hit
        assert answer is not None
        latency_ms = ms3((time.perf_counter() - started) * 1000)
        fields.update(model=answer.version.model, version=answer.version.version)
        if answer.variant:
            fields["variant"] = answer.variant
        rows = rows_of(arrays)
        count_hit(self.stats, resolved.deployment, lookup, latency_ms)
        self.reports.answered(fields, latency_ms, rows, True, None, None)
        self._keep(resolved.deployment, answer, request_id, rows)
        return Prediction(resolved, answer, latency_ms, 0, cached=True, batch=batch)

    def decode(self, signature: Signature, request: PredictionRequest, *, answers: Signature | None = None) -> dict[str, np.ndarray]:
        """The request's inputs as arrays, checked against `signature` (`sluice.inference.inputs`)."""
        return decode_inputs(signature, request, self._check, answers=answers)

    async def _hand_off(self, call: Call, latency_ms: float) -> None:
        """Shadow jobs go to the mirror before the response: locally a thread of its own, in
        Lambda a quick asynchronous invoke. A mirror never touches the primary's answer."""
        if not call.mirrors or self.mirror is None:
            return
        for job in call.mirrors:
            job.primary_latency_ms = latency_ms
            try:
                await self.mirror.submit(job)
            except Exception:  # a mirror must not fail the primary
                get_logger().exception("shadow hand-off failed", extra={"deployment": job.deployment, "mirror": job.mirror})

    async def run_node(self, tenant: str, node: Node, arrays: dict[str, np.ndarray], *, budget_s: float) -> Answer:
        """Run a policy node outside a request (a shadow mirror): no mirrors of its own."""
        from sluice.domain import Deployment

        call = Call(
            deployment=Deployment(tenant, MIRROR, {}),
            deadline=time.monotonic() + budget_s,
            routing=no_routing,
            spawn_mirrors=False,
        )
        async with timeout(budget_s):
            return await self.runner.run(node, call, arrays)

    # Resolving, cached briefly per container; a miss reads in a thread ---------------------
    async def resolve(
        self, principal: Principal, deployment: str, *, version: int | None = None, revision: int | None = None,
        refs: Mapping[str, int] | None = None,
    ) -> Resolved:  # fmt: skip
        """`revision`: the deployment's policy as it stood at that revision, whatever it is now
        (a batch job's, pinned when it started: one job is scored by one policy); NotFound
        when that revision can no longer be read, never another policy in its place. `refs`:
        the deployments it references, followed at those revisions (`sluice.inference.references`)."""
        pinned = pin(refs)
        try:
            return await self._resolve(principal, deployment, version, revision)
        finally:
            unpin(pinned)

    async def _resolve(self, principal: Principal, deployment: str, version: int | None, revision: int | None) -> Resolved:
        principal.require("predict")
        tenant = principal.tenant
        # Cache hits stay synchronous: an `await` costs even when nothing waits.
        found = self._deployments.get((tenant, deployment))
        try:
            dep, node = found if found is not None else await self.deployment_of(tenant, deployment)
        except UnknownDeployment:
            if revision is None:
                raise
            raise deleted_at(deployment, revision) from None
        current = revision is None or dep.revision == revision
        if revision is not None and not current:
            dep, node = await self.revisions.at(dep, revision)
        if version is None and current and node.kind != "single":
            kept = self._resolved.get((tenant, deployment))
            if kept is not None and kept.node is node and kept.deployment is dep:  # the same read: what it derives holds
                return kept
        first = node if node.kind == "single" else await self._primary(tenant, node)
        if version is not None:
            # A pinned version of the primary model answers alone.
            node = first = Single(model=first.model, version=version)
        answering = self.cached_version(tenant, first.model, first.version)  # type: ignore[union-attr]
        if answering is None:
            try:
                answering = await self.version_of(tenant, first.model, first.version)  # type: ignore[union-attr]
            except NotFound as exc:  # a version the request names: said of the deployment too (the protocol's model)
                if version is None or exc.field != "version":
                    raise
                raise UnknownVersion(deployment, version, exc.message) from None
        if node.kind == "single":
            return Resolved(dep, node, answering)
        takes = await input_signature(self.runner, node, tenant)
        if takes.inputs != answering.signature.inputs:  # a leading transform: the caller sends what it declares
            answering = dataclasses.replace(answering, signature=Signature(takes.inputs, answering.signature.outputs, answering.signature.metadata))
        resolved = Resolved(dep, node, answering, await answer_signature(self.runner, node, tenant))
        if version is None and current and not any(n.kind == "ref" for n in walk(node)):  # a reference can change on its own
            self._resolved.put((tenant, deployment), resolved)
        return resolved

    async def _primary(self, tenant: str, node: Node) -> Single:
        """The version whose signature describes the input: the first branch all the way
        down (a split's first variant, a shadow's primary, an ensemble's first member),
        through references."""
        for _ in range(MAX_REF_DEPTH * MAX_DEPTH):
            if node.kind == "single":
                return node  # type: ignore[return-value]
            node = await self.node_of(tenant, node.deployment) if node.kind == "ref" else first_branch(node)
        raise Unavailable("deployment references nest too deep to find a model version", field="deployment")

    def forget(self, tenant: str, name: str) -> None:
        """Drop a cached deployment (and its kept answers) so this process sees a change at once:
        a read of it in flight is neither joined by a later request nor kept (`DeploymentReads`)."""
        self.reads.forget(tenant, name)  # the deployment, and the versions deployments name
        self._resolved.pop((tenant, name))
        self.revisions.clear()
        if self.cache is not None:
            self.cache.drop(tenant, name)

    async def deployment_of(self, tenant: str, name: str) -> tuple[Deployment, Node]:
        """The deployment and its parsed policy, read at most once per `deployment_cache_ttl_s`
        (`sluice.inference.deployment_reads`)."""
        return await self.reads.of(tenant, name)

    async def node_of(self, tenant: str, deployment: str) -> Node:
        """The policy of the deployment a `ref` names (`referenced`)."""
        return (await self.referenced(tenant, deployment))[1]

    async def referenced(self, tenant: str, name: str) -> tuple[Deployment, Node]:
        """The deployment a `ref` names, as the call follows it (`sluice.inference.references`)."""
        return await referenced(self.deployment_of, self.revisions, tenant, name)

    async def walk_through(self, tenant: str, node: Node, *, mirrors: bool = True, refs: Mapping[str, int] | None = None) -> list[Node]:
        """Every node of `node` and of what it references (`sluice.inference.references.walk_through`)."""
        return await walk_through(self.referenced, tenant, node, mirrors=mirrors, refs=refs)

    async def pin_refs(self, tenant: str, node: Node) -> dict[str, int]:
        """What a batch job pins with its own revision (`sluice.inference.references.pin_refs`)."""
        return await pin_refs(self.referenced, tenant, node)

    def cached_version(self, tenant: str, model: str, number: int) -> ModelVersion | None:
        return self.reads.versions.get((tenant, model, number))

    async def version_of(self, tenant: str, model: str, number: int) -> ModelVersion:
        return await self.reads.version_of(tenant, model, number)

    async def rewards_of(self, dep: Deployment) -> dict[str, tuple[int, float]]:
        return await self.bandits.rewards_of(dep)  # what a bandit's choices read (`PolicyRunner`)

    # Checks ------------------------------------------------------------------------------
    def _check(self, signature: Signature, arrays: dict[str, np.ndarray], **kw: Any) -> dict[str, np.ndarray]:
        return check_inputs(signature, arrays, max_elements=self.settings.max_tensor_elements, **kw)

    def _check_variant(self, node: Node, variant: str) -> None:
        # The variants a request can be answered by: a mirror's split never answers it.
        names = {v.name for n in walk(node, mirrors=False) if n.kind == "split" for v in n.variants}  # type: ignore[union-attr]
        if type(variant) is not str:  # a v2 parameter can be any JSON value
            raise BadRequest(f"variant names one of the deployment's variants ({sorted(names) or 'it has none'}): a string, not {type(variant).__name__}", field="variant")
        if variant not in names:
            raise BadRequest(
                f"no variant '{variant}' in this deployment; it has {sorted(names) or 'none'}", field="variant"
            )

    def stats_due(self) -> bool:  # statistics, monitoring profiles or kept predictions
        for held in (self.stats, self.profiles, self.kept):  # a plain loop: asked every request
            if held is not None and held.due():
                return True
        return False

    def flush_stats_if_due(self) -> None:
        for held in (self.stats, self.profiles, self.kept):
            if held is not None and held.due():
                held.flush()

