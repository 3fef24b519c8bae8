"""Progressive rollouts: start, status, pause, resume, abort, and the controller's looks.

A rollout lives with its deployment (`Deployment.rollout`, one at a time) and moves only by
deployment changes: starting it, every step, a pause, a resume, the rollback and the end are
each a new revision recorded in the deployment's history with a `note` holding the decision
and the numbers that decided it. Because statistics are kept per revision, every step is
judged on its own traffic. What a rollout is and what each look decides is pure
(`sluice.domain.rollouts`); the looks themselves are the controller's
(`sluice.services.rollout_controller`), which this service runs (`tick`, `run_once`).

A deployment bound to its SageMaker endpoint (or the local twin's) has the endpoint's
production-variant weights moved with every start, step, resume, rollback, abort and
completion (`sluice.services.rollout_endpoints`): before the change is written (put back to
the stored state's where that write is refused), and only while the endpoint is InService.
When it is not, the change is written all the same (sluice's own routing never waits; its
note says the weights wait) and the rollout's endpoint weights are pending: each later look
tries again, and the look that moves them records it as a change of its own, from which a
running step's clock and counts start afresh. Until then a running rollout does not advance
(it still rolls back). A rollout whose candidate had no variant on
the endpoint adds one at start and begins its first step once the endpoint is InService with
it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import Conflict, InvalidRequest, StaleRead, Unprocessable
from sluice.domain.rollout_specs import (
    MAX_MIN_REQUESTS,
    check_alarms,
    parse_duration,
    parse_gates,
    parse_steps,
)
from sluice.domain.rollouts import (
    Decision,
    Rollout,
    endpoint_weights,
    evaluate,
    paused,
    waiting_reason,
)
from sluice.domain.values import parse_model_version
from sluice.registry.guards import decided_again
from sluice.services.models import require_found
from sluice.services.rollout_alarms import foreign_alarms
from sluice.services.rollout_controller import RolloutController

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sluice.domain import Deployment, Principal
    from sluice.endpoints.control import EndpointControl
    from sluice.registry import Registry
    from sluice.services.deployments import DeploymentService
    from sluice.services.monitoring import MonitorService
    from sluice.services.rollout_endpoints import RolloutEndpoints
    from sluice.stats.alarms import Alarms

DEFAULT_MIN_REQUESTS = 100


class RolloutService:
    def __init__(
        self,
        registry: Registry,
        deployments: DeploymentService,
        *,
        clock: Callable[[], float] = time.time,
        alarms: Alarms | None = None,
        endpoints: Callable[[], EndpointControl] | None = None,
        monitor: Callable[[], MonitorService] | None = None,
    ) -> None:
        self.registry = registry
        self.monitor = monitor  # the `drift` gate's checks, built on first use; None: that gate has no value
        self.deployments = deployments
        self.clock = clock
        deployments.clock = clock  # the times it writes into a rollout (a pause, a step started again) are this clock's
        self.alarms = alarms  # None: alarms are not checked here (locally)
        # The endpoint control plane, built on first use; None: endpoint weights are not moved.
        self.endpoints: RolloutEndpoints | None = None
        if endpoints is not None:
            from sluice.services.rollout_endpoints import RolloutEndpoints

            self.endpoints = RolloutEndpoints(registry, deployments, endpoints)
        self.controller = RolloutController(self)

    def own_alarms(self, tenant: str, names: tuple[str, ...]) -> tuple[str, ...]:
        """`names`, each of them `tenant`'s (`foreign_alarms`); else a 422 naming one."""
        foreign = foreign_alarms(self.registry, tenant, names)
        if foreign:
            raise Unprocessable(
                f"alarm {foreign[0]!r} is not one of tenant {tenant!r}'s: name an alarm '{tenant}/…', "
                "or the one sluice made for one of your deployments' endpoints",
                field="alarms",
            )
        return names

    # Commands -----------------------------------------------------------------------------
    def start(self, principal: Principal, name: str, **spec: Any) -> Deployment:
        """Start a rollout of `name` to `spec["to"]` (`_start`), decided again where another write
        of the deployment got in between its read and its write (`_commanded`)."""
        return _commanded(lambda: self._start(principal, name, **spec))

    def pause(self, principal: Principal, name: str) -> Deployment:
        return _commanded(lambda: self._pause(principal, name))

    def resume(self, principal: Principal, name: str) -> Deployment:
        return _commanded(lambda: self._resume(principal, name))

    def abort(self, principal: Principal, name: str) -> Deployment:
        return _commanded(lambda: self._abort(principal, name))

    def _start(
        self,
        principal: Principal,
        name: str,
        *,
        to: str,
        steps: Any,
        every: Any,
        gates: Any,
        min_requests: int = DEFAULT_MIN_REQUESTS,
        alarms: Sequence[str] = (),
        routing_key: str | None = None,
        mirror_percent: float = 100.0,
    ) -> Deployment:
        principal.require("admin")
        dep = self.registry.get_deployment(principal.tenant, name)
        if dep.rollout is not None and dep.rollout.active:
            raise Conflict(
                f"deployment '{name}' already has a {dep.rollout.state} rollout to {dep.rollout.model}:{dep.rollout.version}; "
                "abort it first",
                field="deployment",
            )
        model, number = parse_model_version(to, field="to")
        version = require_found(
            self.registry.get_version, principal.tenant, model, number, field="to"
        )
        parsed_steps = parse_steps(steps)
        if parsed_steps[0] >= 100:
            raise InvalidRequest("give at least one step below 100 before the last", field="steps")
        parsed_gates = parse_gates(gates)
        every_s = parse_duration(every)
        if (
            isinstance(min_requests, bool)
            or not isinstance(min_requests, int)
            or not 1 <= min_requests <= MAX_MIN_REQUESTS
        ):
            raise InvalidRequest(
                f"min_requests must be a whole number from 1 to {MAX_MIN_REQUESTS}",
                field="min_requests",
            )
        if (
            isinstance(mirror_percent, bool)
            or not isinstance(mirror_percent, int | float)
            or not 0 < mirror_percent <= 100
        ):
            raise InvalidRequest(
                "mirror_percent must be above 0 and at most 100", field="mirror_percent"
            )
        if routing_key is not None and not 1 <= len(routing_key) <= 64:
            raise InvalidRequest("routing_key must be 1 to 64 characters", field="routing_key")
        for g in parsed_gates:
            if g.metric == "agreement" and version.signature.output_with_role("label") is None:
                raise InvalidRequest(
                    f"{model}:{number} gives no label to agree on; gate on mean_abs_diff instead",
                    field="gate",
                )
        _refuse_names_of_its_own(dep.policy)
        candidate = {"kind": "single", "model": model, "version": number}
        if dep.policy == candidate:
            raise InvalidRequest(
                f"deployment '{name}' already routes everything to {model}:{number}", field="to"
            )
        planned = (
            self.endpoints.plan(principal, dep, version) if self.endpoints is not None else None
        )
        if planned is not None and dep.policy == {**candidate, "version": planned.candidate_version}:
            raise InvalidRequest(
                f"deployment '{name}' already routes everything to {model}:{number} "
                f"(on variant {planned.candidate} of endpoint {planned.name})",
                field="to",
            )
        when = self.clock()
        rollout = Rollout(
            model=model,
            version=number,
            stable=dep.policy,
            steps=parsed_steps,
            every_s=every_s,
            gates=",".join(str(g) for g in parsed_gates),
            min_requests=min_requests,
            alarms=self.own_alarms(principal.tenant, check_alarms(tuple(alarms))),
            routing_key=routing_key,
            mirror_percent=float(mirror_percent),
            started_at=when,
            started_by=principal.subject,
            step_started_at=when,
            updated_at=when,
            reason=f"started at {parsed_steps[0]:g}%",
            endpoint=planned,
        )
        note: dict[str, Any] = {
            "rollout": "start",
            "to": f"{model}:{number}",
            "step": 0,
            "weight": rollout.weight,
        }
        if dep.cache is not None:  # the split's routing_key is the rollout's: named as such
            from sluice.domain.policy import parse_policy, uncacheable

            found = uncacheable(parse_policy(rollout.step_policy()))
            if found is not None and found[0] == "policy.routing_key":
                raise Unprocessable(found[1], field="routing_key")
        waiting = waiting_reason(rollout)
        if waiting is not None:
            rollout = replace(rollout, reason=f"started: {waiting}")
            note["reason"] = rollout.reason
        if planned is not None and planned.added:
            note["added_variant"] = planned.candidate
        return self.move(principal, dep, rollout, rollout.step_policy(), note)

    def status(self, principal: Principal, name: str) -> tuple[Deployment, dict[str, Any] | None]:
        """The deployment, and while its rollout is running or paused the numbers now and what
        the controller's next look would do with them (`sluice.api.presenters.rollout_status_out`
        shows both)."""
        principal.require("admin")
        dep = self.registry.get_deployment(principal.tenant, name)
        if dep.rollout is None or not dep.rollout.active:
            return dep, None
        now = self.clock()
        metrics = self.controller.metrics(dep, dep.rollout)
        decision = evaluate(dep.rollout, metrics, now)
        results = decision.numbers["gates"]
        running = dep.rollout.state == "running"
        waiting = waiting_reason(dep.rollout)
        step_ends_at = dep.rollout.step_started_at + dep.rollout.every_s
        return dep, {
            "metrics": metrics,
            "gates": results,
            "checks": [
                {
                    "gate": str(g),
                    "metric": g.metric,
                    "op": g.op,
                    "threshold": g.threshold,
                    "value": results[str(g)]["value"],
                    "passes": results[str(g)]["passes"],
                }
                for g in dep.rollout.parsed_gates()
            ],
            "next": ("hold" if waiting and decision.action != "rollback" else decision.action)
            if running
            else "paused",
            "reason": waiting if waiting and decision.action != "rollback" else decision.reason,
            "at": now,
            "step_ends_at": step_ends_at,
            # The earliest the controller may move the rollout on (advance or complete):
            # when the step's time is up, or now; a failing gate rolls back at any look.
            "next_decision_at": max(step_ends_at, now) if running else None,
            "alarms_checked": self.alarms is not None,
        }

    def _pause(self, principal: Principal, name: str) -> Deployment:
        dep, rollout = self._active(principal, name, "pause", ("running",))
        held, note = paused(rollout, f"paused by {principal.subject}", self.clock())
        return self.deployments.update(
            principal, name, None, expected_revision=dep.revision, rollout=held, note=note
        )

    def _resume(self, principal: Principal, name: str) -> Deployment:
        """The step's split again (a manual change in between is replaced), its clock and its
        counts started afresh."""
        dep, rollout = self._active(principal, name, "resume", ("paused",))
        when = self.clock()
        reason = f"resumed by {principal.subject} at {rollout.weight:g}%"
        resumed = replace(
            rollout,
            state="running",
            step_started_at=when,
            updated_at=when,
            reason=reason,
            decided={},
        )
        note = {
            "rollout": "resumed",
            "reason": reason,
            "step": rollout.step,
            "weight": rollout.weight,
        }
        return self.move(principal, dep, resumed, resumed.step_policy(), note)

    def _abort(self, principal: Principal, name: str) -> Deployment:
        dep, rollout = self._active(principal, name, "abort", ("running", "paused"))
        reason = f"aborted by {principal.subject}: back to the stable policy"
        return self.finish(principal, dep, rollout, "aborted", reason, {})

    def _active(
        self, principal: Principal, name: str, verb: str, states: tuple[str, ...]
    ) -> tuple[Deployment, Rollout]:
        principal.require("admin")
        dep = self.registry.get_deployment(principal.tenant, name)
        rollout = dep.rollout
        if rollout is None or rollout.state not in states:
            now_state = "no rollout" if rollout is None else f"a {rollout.state} rollout"
            raise Conflict(
                f"cannot {verb}: deployment '{name}' has {now_state}", field="deployment"
            )
        return dep, rollout

    # Writes: every move of a rollout, the commands' and the controller's --------------------
    def finish(
        self,
        principal: Principal,
        dep: Deployment,
        rollout: Rollout,
        state: str,
        reason: str,
        numbers: dict[str, Any],
    ) -> Deployment:
        """End the rollout in `state`: completed, on the candidate's policy; else back on the
        stable one."""
        policy = rollout.candidate if state == "completed" else rollout.stable
        done = replace(
            rollout, state=state, reason=reason, decided=numbers, updated_at=self.clock()
        )
        note = {"rollout": state, "reason": reason, **numbers}
        return self.move(principal, dep, done, policy, note)

    def move(
        self,
        principal: Principal,
        dep: Deployment,
        rollout: Rollout,
        policy: dict[str, Any],
        note: dict[str, Any],
    ) -> Deployment:
        """Write a move of the rollout, the endpoint's weights moved first where it has them
        (the note says whether they moved, or wait for the endpoint). A write refused for a
        change made in between puts the weights of the rollout as it is now back."""
        ep = rollout.endpoint
        target = endpoint_weights(rollout)
        moved = False
        if ep is not None and self.endpoints is not None and target is not None:
            moved, status = self.endpoints.apply(ep.name, target)
            waits = not moved and status != "gone"
            ep = replace(
                ep,
                pending=waits,
                weights=target if moved else ep.weights,
                waiting_since=(ep.waiting_since or self.clock()) if waits else None,
            )
            rollout = replace(rollout, endpoint=ep)
            note = {
                **note,
                "endpoint": {"name": ep.name, "weights": target, "moved": moved, "status": status},
            }
        try:
            return self.deployments.update(
                principal, dep.name, policy, expected_revision=dep.revision, rollout=rollout, note=note
            )
        except Conflict:
            if moved:
                self.put_back(principal, dep.name)
            raise

    def put_back(self, principal: Principal, name: str) -> None:
        """The endpoint weights of the rollout as stored, on the endpoint again after a move (or
        the controller's catch-up) whose write was refused; where the endpoint does not take
        them now, they are marked pending, so that the controller's looks put them on (a paused
        rollout's too)."""
        assert self.endpoints is not None
        stored = self.registry.get_deployment(principal.tenant, name)
        rollout = stored.rollout
        target = endpoint_weights(rollout) if rollout is not None else None
        if rollout is None or rollout.endpoint is None or target is None:
            return
        ep = rollout.endpoint
        moved, status = self.endpoints.apply(ep.name, target)
        if moved or status == "gone" or ep.pending:
            return
        waiting = replace(ep, pending=True, waiting_since=self.clock())
        note = {
            "rollout": "endpoint",
            "reason": f"endpoint {ep.name} ({status}) is to get the weights of this state back",
            "endpoint": {"name": ep.name, "weights": target, "moved": False, "status": status},
        }
        with contextlib.suppress(Conflict):  # changed yet again: the next look reads that
            self.deployments.update(
                principal, name, None, expected_revision=stored.revision,
                rollout=replace(rollout, endpoint=waiting), note=note,
            )  # fmt: skip

    # The controller's looks (`sluice.services.rollout_controller`) --------------------------
    def tick(self, tenant: str, name: str) -> Decision | None:
        return self.controller.tick(tenant, name)

    def run_once(self) -> dict[tuple[str, str], str]:
        return self.controller.run_once()


def _refuse_names_of_its_own(policy: dict[str, Any]) -> None:
    """A rollout judges the traffic of the variants and the mirror it names `stable` and
    `candidate` (`sluice.stats.verdicts.gate_metrics`): a policy already holding a variant or
    a mirror of one of those names would have its traffic judged as the rollout's own (another
    version promoted on it). Refused, naming it."""
    from sluice.domain.policy import Shadow, Split, parse_policy, walk
    from sluice.domain.rollouts import CANDIDATE, STABLE

    for node in walk(parse_policy(policy)):
        names = [v.name for v in node.variants] if isinstance(node, Split) else [m.name for m in node.mirrors] if isinstance(node, Shadow) else []
        taken = sorted({STABLE, CANDIDATE} & set(names))
        if taken:
            raise Conflict(
                f"the deployment's policy has a variant or mirror named {taken}, which a rollout names its own: rename it first",
                field="deployment",
            )


def _commanded(change: Callable[[], Deployment]) -> Deployment:
    """A rollout command (start, pause, resume, abort: read, decide, write at the revision it
    read) decided again on what is stored where another write of the deployment got in after
    its read (`decided_again`): its caller gave no revision, so a 409 naming one was no answer;
    decided again, a second start finds the first's rollout (409 naming `deployment`), an abort
    the rollout a PUT paused."""

    def attempt() -> Deployment:
        try:
            return change()
        except Conflict as exc:
            if exc.field != "revision" or isinstance(exc, StaleRead):
                raise
            raise StaleRead("the deployment changed while this was decided; try again", field="deployment") from None

    return decided_again(attempt)
