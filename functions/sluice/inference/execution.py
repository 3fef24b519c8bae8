"""Running a policy tree: a single version on its runtime, a split's choice, a shadow's
primary (its mirrors become jobs for later), an ensemble's members concurrently; a sequence's
steps in `sluice.inference.sequences`, a switch's cases in `sluice.inference.graphs`.

Registry reads on the way (a referenced deployment, a version, a bandit's rewards) go
through `Lookups`, which answers from its caches or reads in a thread: the
event loop that serves requests never waits on the registry.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from sluice.domain.errors import Accepted, BackendError, DeadlineExceeded, SluiceError, Unavailable
from sluice.domain.objects import MIRROR
from sluice.domain.policy_paths import subject_at, within_deployment
from sluice.domain.results import Answer, with_classes
from sluice.inference.graphs import run_switch
from sluice.inference.outcomes import refused_input
from sluice.inference.precomputed import run_precomputed
from sluice.inference.sequences import DEADLINE_SLACK_S, run_sequence
from sluice.inference.shadow_jobs import ShadowJob
from sluice.inline import in_task, resumed, timeout
from sluice.millis import ms3
from sluice.routing.aggregators import Answer as MemberAnswer
from sluice.routing.aggregators import aggregate
from sluice.routing.choose import bandit_pick, sampled, sticky_pick, weighted_pick

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence

    import numpy as np

    from sluice.domain import Deployment, ModelVersion
    from sluice.domain.lookups import Lookup
    from sluice.domain.policy import Ensemble, Node, Ref, Shadow, Single, Split
    from sluice.domain.requests import PredictionRequest
    from sluice.domain.signature import Signature
    from sluice.inference.batching import Batcher
    from sluice.inference.precomputed import PrecomputedReader
    from sluice.runtimes import Runtime
    from sluice.runtimes.functions import FunctionSteps
    from sluice.runtimes.lookup_reports import Looked
    from sluice.runtimes.lookups import LookupSteps
    from sluice.stats.recorder import Sample, StatsRecorder

MAX_REF_DEPTH = 8
# A `first_success` member still running when another answered: stopped, listed with this error.
CANCELLED = "cancelled"


class Lookups(Protocol):
    async def node_of(self, tenant: str, deployment: str) -> Node: ...
    def cached_version(self, tenant: str, model: str, number: int) -> ModelVersion | None: ...
    async def version_of(self, tenant: str, model: str, number: int) -> ModelVersion: ...
    async def rewards_of(self, dep: Deployment) -> dict[str, tuple[int, float]]: ...




@dataclass(slots=True)
class Call:
    """One walk of the tree for one request."""

    deployment: Deployment
    deadline: float
    routing: Callable[[str], str | None]
    variant: str | None = None
    request_id: str = ""
    outputs: Sequence[str] | None = None
    checked: Signature | None = None  # the signature the request's inputs were checked against
    spawn_mirrors: bool = True
    mirrors: list[ShadowJob] = field(default_factory=list)
    request: PredictionRequest | None = None  # what a switch's conditions read (None outside a request)
    # The statistics of the steps of the sequence a request runs (its policy, not one inside),
    # recorded with the deployment's own in one call once it answers (`PredictionService.predict`);
    # None, or where it fails: the sequence records them itself.
    samples: list[Sample] | None = None
    # The lookup steps the request ran, reported in its prediction line rather than a line each
    # (`LookupSteps.lookup`); None outside a request (a batch chunk's, a mirror's): a line each.
    looked: list[tuple[Lookup, Looked]] | None = None
    # The ONNX sessions the request's calls found loaded and loaded ([hits, misses]), reported
    # on its prediction line; None outside a request.
    sessions: list[int] | None = None
    # Where in the deployment's policy the walk is: the variants chosen, the ensemble members,
    # switch cases and sequence steps entered on the way and the references followed (`@name`),
    # joined by "/" (`sluice.domain.policy_paths.subject_at`, `walk_paths`). Variants, mirrors, cases
    # and steps are counted by it (`subject`), and a bandit's choice named by it, so one nested
    # in another or reached through a reference (whose deployment changes on its own) is never
    # counted as a variant of the same name at the top, nor with another branch's: a rollout's
    # gates read the top's.
    path: str = ""
    # The bandit choices made on the walk (each the chosen variant's path), written as the
    # request's assignment once it ends (`PredictionService.predict`), so feedback for the
    # request reaches every bandit that chose; None outside a request with an id.
    chosen: list[str] | None = None
    # The references followed to here: bounded as the policy's checks bound them when it is
    # saved (deployments deep, whatever nodes lie between), so whatever saves, answers.
    refs: int = 0

    @property
    def tenant(self) -> str:
        return self.deployment.tenant

    def out_of_time(self) -> bool:
        """The request's one deadline has passed (`PredictionService.predict`, `run_node`): a
        cancellation now is that deadline's, the error of the part it stopped, and not, say, an
        ensemble's other members stopped once one answered."""
        return time.monotonic() >= self.deadline - DEADLINE_SLACK_S

    def narrowed(self, outputs: Sequence[str] | None, checked: Signature | None, path: str) -> Call:
        """This call for one step of a graph, at the step's `path` (`dataclasses.replace`,
        without its cost per request)."""
        return Call(
            self.deployment, self.deadline, self.routing, self.variant, self.request_id, outputs, checked,
            self.spawn_mirrors, self.mirrors, self.request, self.samples, self.looked, self.sessions, path, self.chosen, self.refs,
        )  # fmt: skip

    def subject(self, name: str) -> str:
        """`name` (a variant's, a mirror's, a member's, a case's, a step's, a reference's) at
        this point of the walk."""
        return subject_at(self.path, name)

    def under(self, path: str) -> Call:
        """This call further down the policy, at `path` (a copy: an ensemble's members walk
        their branches concurrently with one call)."""
        return Call(
            self.deployment, self.deadline, self.routing, self.variant, self.request_id, self.outputs, self.checked,
            self.spawn_mirrors, self.mirrors, self.request, self.samples, self.looked, self.sessions, path, self.chosen, self.refs,
        )  # fmt: skip


@dataclass(eq=False, slots=True)
class PolicyRunner:
    lookups: Lookups
    runtimes: Mapping[str, Runtime]
    stats: StatsRecorder
    check: Callable[..., dict[str, np.ndarray]]  # (signature, arrays, finite=names made finite) -> arrays checked
    batcher: Batcher | None = None  # for deployments that turned batching on
    functions: FunctionSteps | None = None  # a sequence's function steps (None: not served here)
    lookup_steps: LookupSteps | None = None  # a sequence's lookup steps (None: not served here)
    precomputed: PrecomputedReader | None = None  # tables of precomputed answers (None: every row answered live)
    _by_kind: dict[str, Callable[..., Awaitable[Answer]]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_kind = {
            "single": self._single,
            "ref": self._ref,
            "split": self._split,
            "shadow": self._shadow,
            "ensemble": self._ensemble,
            "sequence": partial(run_sequence, self),
            "switch": partial(run_switch, self),
            "precomputed": partial(run_precomputed, self),
        }

    def run(self, node: Node, call: Call, arrays: dict[str, np.ndarray], depth: int = 0) -> Coroutine[Any, Any, Answer]:
        """The node's run, to await: its kind's coroutine itself, not one more around it (a
        frame per node of every request)."""
        return self._by_kind[node.kind](node, call, arrays, depth)  # type: ignore[operator,return-value]

    async def _single(self, node: Single, call: Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
        version = self.lookups.cached_version(call.tenant, node.model, node.version)
        if version is None:
            version = await self.lookups.version_of(call.tenant, node.model, node.version)
        runtime = self.runtimes.get(version.runtime)
        if runtime is None:
            raise Unavailable(f"runtime '{version.runtime}' is not configured here", field="runtime")
        signature = version.signature
        if call.checked is None or signature.inputs != call.checked.inputs:
            arrays = self.check(signature, arrays)
        wanted = [o for o in call.outputs if signature.output(o) is not None] if call.outputs else None
        remote = not getattr(runtime, "runs_in_line", False)
        if remote:  # a client of its own may need a task (`sluice.inline`)
            await in_task()
        batching = call.deployment.batching
        try:
            if batching is not None and self.batcher is not None:  # joined with concurrent requests for this version
                result = await self.batcher.infer(runtime, version, arrays, wanted or None, batching)
            else:
                result = await runtime.infer(version, arrays, wanted or None)
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
            if not remote:  # this process's own model: a fault of sluice's, as it is
                raise
            # What a server answered and its decoding could not take (a shape that is not its
            # data's, slices that do not join): the server's fault, not a 500 of sluice's.
            raise BackendError(f"the model server's answer does not read as the model's outputs ({type(exc).__name__})") from None
        if result.loaded is not None and call.sessions is not None:
            call.sessions[result.loaded] += 1  # [hits, misses]
        return Answer(signature, with_classes(signature, result), version)

    async def _ref(self, node: Ref, call: Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
        if call.refs >= MAX_REF_DEPTH:  # a chain a policy's checks refuse (or a cycle two writes made at once)
            raise BackendError("deployment references nest too deep", field="policy")
        node_of = await self.lookups.node_of(call.tenant, node.deployment)
        sub = call.under(call.subject(f"@{node.deployment}"))
        sub.refs = call.refs + 1
        return await self.run(node_of, sub, arrays, depth + 1)

    async def _shadow(self, node: Shadow, call: Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
        answer = await self.run(node.primary, call, arrays, depth + 1)
        if call.spawn_mirrors:
            for mirror in node.mirrors:
                if sampled(mirror.sample_percent):
                    call.mirrors.append(_shadow_job(call, call.subject(mirror.name), mirror.target, arrays, answer))
        return answer

    async def _split(self, node: Split, call: Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
        dep = call.deployment
        chosen = next((v for v in node.variants if v.name == call.variant), None)
        if chosen is None:
            if node.bandit is not None:
                rewards = await self.lookups.rewards_of(dep) if dep.name != MIRROR else {}  # a mirror's: by its prior alone
                if call.path:  # a nested split's rewards are its variants' paths'
                    rewards = {k.removeprefix(f"{call.path}/"): r for k, r in rewards.items() if k.startswith(f"{call.path}/")}
                chosen = bandit_pick(node.variants, node.bandit, rewards)
                if call.chosen is not None:
                    call.chosen.append(call.subject(chosen.name))
            else:
                key = call.routing(node.routing_key) if node.routing_key else None
                chosen = sticky_pick(node.variants, key, salt=within_deployment(call.path)) if key else weighted_pick(node.variants)
        path = call.subject(chosen.name)
        answer = await self.run_counted(chosen.target, call.under(path), arrays, depth + 1, f"variant:{path}", invalid=True)
        answer.variant = chosen.name if answer.variant is None else f"{chosen.name}/{answer.variant}"
        return answer

    async def run_counted(
        self, node: Node, call: Call, arrays: dict[str, np.ndarray], depth: int, subject: str, *, rows: int = 0, invalid: bool = False
    ) -> Answer:
        """`run`, its outcome counted under the deployment's `subject` (a split's variant, a
        switch's case; what rollout gates read): its latency (and `rows`) when it answers; an
        error when it fails, or when the request's budget runs out in it; neither when it is
        queued for asynchronous inference (a request above its endpoint's limit). `invalid`:
        a refusal of the inputs counts as such (`refused_input`)."""
        dep = call.deployment
        stat_key = (dep.tenant, dep.name, dep.revision, subject)
        started = time.perf_counter()
        try:
            answer = await self.run(node, call, arrays, depth)
        except Accepted:
            raise
        except SluiceError as error:
            self.stats.request(stat_key, 0.0, ok=False, invalid=invalid and refused_input(error.code))
            raise
        except asyncio.CancelledError:
            if call.out_of_time():
                self.stats.request(stat_key, 0.0, ok=False)
            raise
        self.stats.request(stat_key, (time.perf_counter() - started) * 1000, ok=True, rows=rows)
        return answer

    async def _ensemble(self, node: Ensemble, call: Call, arrays: dict[str, np.ndarray], depth: int) -> Answer:
        # Each member's bandit choices (`Call.chosen`) are its own until the ensemble ends: then
        # the request's are every member's, or where one member's answer is the ensemble's
        # (`first_success`), that member's alone. A member stopped when another answered may
        # still choose on its way out (a nested hedge's read coming back): into its own list.
        own: list[list[str] | None] = [None if call.chosen is None else [] for _ in node.members]

        async def member_call(index: int) -> tuple[int, Answer | None, SluiceError | None, float]:
            member = node.members[index]
            started = time.perf_counter()
            limit = max(call.deadline - time.monotonic(), 0.0)
            if member.timeout_ms is not None:
                limit = min(limit, member.timeout_ms / 1000)
            # Each member gives every output its aggregator may need: the outputs the request
            # asks for are picked from the combined answer (`first_success` passes them on).
            sub = call.narrowed(call.outputs if node.aggregator == "first_success" else None, call.checked, call.subject(member.name))
            sub.chosen = own[index]
            try:
                async with timeout(limit):
                    answer = await self.run(member.target, sub, arrays, depth + 1)
                return index, answer, None, (time.perf_counter() - started) * 1000
            except TimeoutError:
                error: SluiceError = DeadlineExceeded(f"member '{member.name}' gave no answer within {limit * 1000:.0f} ms")
            except SluiceError as exc:
                error = exc
            return index, None, error, (time.perf_counter() - started) * 1000

        won: int | None = None  # the member whose answer is the ensemble's, where one is
        try:
            answer, won = await self._members(node, member_call, call.outputs)
            return answer
        finally:
            if call.chosen is not None:
                for i, choices in enumerate(own):
                    if choices and (won is None or i == won):
                        call.chosen.extend(choices)

    async def _members(
        self, node: Ensemble, member_call: Callable[[int], Awaitable[tuple[int, Answer | None, SluiceError | None, float]]],
        outputs: Sequence[str] | None,
    ) -> tuple[Answer, int | None]:  # fmt: skip
        """The members run, and the ensemble's answer (of `outputs`, where the request names
        them); with the member whose answer it is alone (`first_success`), else None."""
        started = time.perf_counter()
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
        in_order = sorted(done, key=lambda item: item[0])
        # Every member, in the policy's order: one still running when a `first_success`
        # member answered was stopped then, and says so.
        stopped_ms = (time.perf_counter() - started) * 1000
        finished = {i: (answer, error, ms) for i, answer, error, ms in done}
        report = [_member_report(member.name, *finished.get(i, (None, None, stopped_ms))) for i, member in enumerate(node.members)]
        answers = [(i, a) for i, a, _, _ in in_order if a is not None]
        # Too few answered: a 504 where every member that failed ran out of time, else a 502.
        short_of = DeadlineExceeded if all(e is not None and e.status == 504 for _, a, e, _ in done if a is None) else BackendError
        # A member refusing the request itself (`_the_requests`): the request is refused, as it
        # is where no ensemble stands; a hedge that another member answered first answers.
        the_request = next((e for _, a, e, _ in in_order if e is not None and _the_requests(e)), None)
        if node.aggregator == "first_success":
            won = next(((i, a) for i, a, _, _ in done if a is not None), None)  # in order of arrival
            if won is None:
                raise the_request or short_of("no ensemble member answered", members=report)
            return replace(won[1], members=report), won[0]  # its alone: feedback on it rewards no other member's bandit
        if the_request is not None:
            raise the_request
        need = node.min_members or len(node.members)
        if len(answers) < need:
            raise short_of(f"{len(answers)} of {len(node.members)} ensemble members answered; {need} needed", members=report)
        combined = aggregate(
            node.aggregator,
            [MemberAnswer(node.members[i].name, node.members[i].weight, a.signature, a.result) for i, a in answers],
            outputs=outputs,
        )
        first_answer = answers[0][1]
        exposed = frozenset().union(*(a.exposed for _, a in answers)).intersection(combined.outputs)  # a value may be one
        return Answer(first_answer.signature, combined, first_answer.version, members=report, exposed=exposed), None


_REQUEST_PARTS = frozenset(("headers", "parameters", "routing_key"))


def _the_requests(exc: SluiceError) -> bool:
    """Whether an error blames a part of the request every member reads alike (a header, a
    parameter, the routing key: a sticky split's key past its length, say): the request is
    refused, as it is where no ensemble stands, not counted as one member failing."""
    return exc.status < 500 and exc.field is not None and exc.field.partition(".")[0] in _REQUEST_PARTS


def _member_report(name: str, answer: Answer | None, error: SluiceError | None, ms: float) -> dict[str, Any]:
    """An ensemble member's entry in the answer: whether it answered, how fast, and who (or
    its error; `cancelled`: stopped when another `first_success` member answered first)."""
    return {
        "name": name,
        "ok": answer is not None,
        "latency_ms": ms3(ms),
        **({"model": answer.version.model, "version": answer.version.version} if answer else {}),
        **({"error": error.code} if error else {} if answer else {"error": CANCELLED}),
    }


def _shadow_job(call: Call, name: str, node: Node, arrays: dict[str, np.ndarray], answer: Answer) -> ShadowJob:
    from sluice.domain.policy import policy_dict

    dep = call.deployment
    return ShadowJob(
        tenant=dep.tenant,
        deployment=dep.name,
        revision=dep.revision,
        mirror=name,
        node=policy_dict(node),
        inputs=arrays,
        primary_outputs=answer.result.outputs,
        primary_classes=answer.result.classes,
        primary_signature=answer.signature,
        primary_latency_ms=0.0,
        request_id=call.request_id,
    )


def no_routing(_: str) -> Any:
    return None


async def within(coro: Coroutine[Any, Any, Any], seconds: float) -> Any:
    """`async with asyncio.timeout(seconds): return await coro`, with the timer set only once
    `coro` first waits: a timeout fires at a wait, so a run that never waits (a model called
    in line) ends as it would under the timer, without scheduling and cancelling one. The
    timer, when set, ends where it would have: `seconds` after this call."""
    when = asyncio.get_running_loop().time() + seconds
    try:
        waits_on = coro.send(None)
    except StopIteration as done:
        return done.value
    async with timeout(at=when):
        return await resumed(coro, waits_on)
