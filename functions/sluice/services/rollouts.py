"""Progressive rollouts: start, status, pause, resume, abort, and the controller's tick.

A rollout lives with its deployment (`Deployment.rollout`, one at a time) and moves only by
deployment changes: starting it, every step, a pause, a resume, the rollback and the end are
each a new revision recorded in the deployment's history with a `note` holding the decision
and the numbers that decided it. Because statistics are kept per revision, every step is
judged on its own traffic.

The controller (`tick`, `run_once`) is stateless: each look reads the deployment and the
counters of its current revision and either holds (no write), advances, completes, or rolls
back. Locally `sluice serve` runs it on a thread of its own (`RolloutWatcher`); on AWS
EventBridge Scheduler invokes `sluice.handlers.rollouts` every minute. Its writes are
conditional on the revision it read, so a manual change in between wins and the look is taken
again later.

A deployment bound to its SageMaker endpoint (or the local twin's) has the endpoint's
production-variant weights moved with every start, step, resume, rollback, abort and
completion (`sluice.services.rollout_endpoints`): before the change is written, and only
while the endpoint is InService. When it is not, the change is written all the same (sluice's
own routing never waits; its note says the weights wait) and the rollout's endpoint weights
are pending: each later look tries again, and the look that moves them records it as a change
of its own, from which a running step's clock and counts start afresh. Until then a running
rollout does not advance (it still rolls back). A rollout whose candidate had no variant on
the endpoint adds one at start and begins its first step once the endpoint is InService with
it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from sluice.domain import Principal
from sluice.domain.errors import Conflict, InvalidRequest, SluiceError
from sluice.domain.rollouts import (
    CANDIDATE,
    MAX_MIN_REQUESTS,
    STABLE,
    Rollout,
    check_alarms,
    endpoint_weights,
    parse_duration,
    parse_gates,
    parse_steps,
)
from sluice.domain.values import parse_model_version
from sluice.services.models import require_found
from sluice.stats.verdicts import comparison, traffic, wilson

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sluice.domain import Deployment
    from sluice.endpoints.control import EndpointControl
    from sluice.registry import Registry
    from sluice.services.deployments import DeploymentService
    from sluice.services.rollout_endpoints import RolloutEndpoints

log = logging.getLogger(__name__)
CONTROLLER = "rollout-controller"  # the subject the controller's changes are recorded under
DEFAULT_MIN_REQUESTS = 100
WATCH_INTERVAL_S = 10.0


class Alarms(Protocol):
    def firing(self, names: Sequence[str]) -> list[str]:
        """The named alarms now in the ALARM state."""
        ...


class CloudWatchAlarms:
    """Alarms by name, one `DescribeAlarms` call a look (metric and composite alarms)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def firing(self, names: Sequence[str]) -> list[str]:
        if not names:
            return []
        found = self.client.describe_alarms(
            AlarmNames=list(names), AlarmTypes=["MetricAlarm", "CompositeAlarm"]
        )
        alarms = [*found.get("MetricAlarms", []), *found.get("CompositeAlarms", [])]
        return sorted(a["AlarmName"] for a in alarms if a.get("StateValue") == "ALARM")


@dataclass(frozen=True, slots=True)
class Decision:
    action: str  # hold, advance, complete, rollback; endpoint: the endpoint caught up
    reason: str
    numbers: dict[str, Any]


def parse_target(value: Any, *, field: str = "to") -> tuple[str, int]:
    """`MODEL:VERSION`, as every door reads it (`sluice.domain.values`)."""
    return parse_model_version(value, field=field)


def measure(counters: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The gate metrics (module docstring of `sluice.domain.rollouts`) from one revision's
    counters, with the counts behind them."""
    candidate = traffic(counters.get(f"variant:{CANDIDATE}", {}))
    stable = traffic(counters.get(f"variant:{STABLE}", {}))
    mirror_counters = counters.get(f"mirror:{CANDIDATE}", {})
    compared = comparison(mirror_counters)
    c99, s99 = candidate["latency_ms"]["p99"], stable["latency_ms"]["p99"]
    labelled = mirror_counters.get("labelled", 0)
    return {
        "candidate_requests": candidate["requests"],
        "candidate_errors": candidate["errors"],
        "stable_requests": stable["requests"],
        "compared": compared["compared"],
        "labelled_rows": int(labelled),
        "agreement": compared["agreement"],
        "agreement_ci95": list(wilson(mirror_counters.get("agree", 0), labelled) or []) or None,
        "mean_abs_diff": compared["mean_abs_diff"],
        "error_rate": candidate["error_rate"],
        "candidate_p99_ms": c99,
        "stable_p99_ms": s99,
        "p99_ratio": round(c99 / s99, 4) if c99 is not None and s99 else None,
    }


def evaluate(rollout: Rollout, metrics: dict[str, Any], now: float) -> Decision:
    """What the controller does with these numbers: pure, so every path is tested directly."""
    gates = rollout.parsed_gates()
    results = {
        str(g): {
            "value": metrics.get(g.metric),
            "passes": None if metrics.get(g.metric) is None else g.passes(metrics[g.metric]),
        }
        for g in gates
    }
    numbers = {
        "step": rollout.step,
        "weight": rollout.weight,
        "metrics": metrics,
        "gates": results,
        "min_requests": rollout.min_requests,
    }
    need = rollout.min_requests
    n = metrics["candidate_requests"]
    errors = metrics["candidate_errors"]
    for g in gates:
        # Failing beyond doubt before the count is reached: more errors than the gate allows
        # even if every request still to come up to the minimum succeeded.
        if (
            g.metric == "error_rate"
            and g.op in ("<=", "<")
            and n < need
            and not g.passes(errors / need)
        ):
            results[str(g)]["passes"] = False
            return Decision(
                "rollback",
                f"gate {g} fails: {errors} errors already over the {need} requests a step needs",
                numbers,
            )
    compared_needed = any(g.metric in ("agreement", "mean_abs_diff") for g in gates)
    if n < need or (compared_needed and metrics["compared"] < need):
        have = f"{n} of {need} candidate requests" + (
            f", {metrics['compared']} of {need} comparisons" if compared_needed else ""
        )
        return Decision("hold", f"waiting for traffic: {have}", numbers)
    failed = [name for name, r in results.items() if r["passes"] is False]
    if failed:
        return Decision("rollback", f"gate {', '.join(failed)} fails", numbers)
    undecided = [name for name, r in results.items() if r["passes"] is None]
    if undecided:
        return Decision("hold", f"gate {', '.join(undecided)} has no value yet", numbers)
    left = rollout.every_s - (now - rollout.step_started_at)
    if left > 0:
        return Decision("hold", f"gates pass; the step lasts {left:.0f} s more", numbers)
    if rollout.step + 1 >= len(rollout.steps) or rollout.steps[rollout.step + 1] >= 100:
        return Decision(
            "complete",
            f"gates pass at {rollout.weight:g}%: the candidate takes all traffic",
            numbers,
        )
    return Decision(
        "advance",
        f"gates pass at {rollout.weight:g}%: on to {rollout.steps[rollout.step + 1]:g}%",
        numbers,
    )


def paused_by_change(rollout: Rollout, subject: str) -> tuple[Rollout, dict[str, Any]]:
    """A policy change by someone else pauses a running rollout, in the same revision."""
    when = time.time()
    reason = f"paused: the policy was changed by {subject}"
    paused = replace(rollout, state="paused", reason=reason, decided={}, updated_at=when)
    return paused, {
        "rollout": "paused",
        "reason": reason,
        "step": rollout.step,
        "weight": rollout.weight,
    }


def endpoint_out(rollout: Rollout) -> dict[str, Any] | None:
    ep = rollout.endpoint
    if ep is None:
        return None
    return {
        "name": ep.name,
        "candidate_variant": ep.candidate,
        "candidate_version": ep.candidate_version,
        "stable_variants": ep.stable,
        "added": ep.added,
        "ready": ep.ready,
        "weights": endpoint_weights(rollout),
        "pending": ep.pending,
        "waiting_since": ep.waiting_since,
        "applied": ep.weights,
        "before": ep.before,
    }


def waiting_reason(rollout: Rollout) -> str | None:
    """Why a look holds for the endpoint, or None."""
    ep = rollout.endpoint
    if ep is None:
        return None
    if not ep.ready:
        return f"waiting for endpoint {ep.name} to put variant {ep.candidate} in service"
    if ep.pending:
        return f"waiting for endpoint {ep.name} to be InService to take the weights"
    return None


def rollout_out(rollout: Rollout) -> dict[str, Any]:
    return {
        "state": rollout.state,
        "to": f"{rollout.model}:{rollout.version}",
        "steps": list(rollout.steps),
        "step": rollout.step,
        "weight": rollout.weight,
        "every_s": rollout.every_s,
        "gates": rollout.gates,
        "min_requests": rollout.min_requests,
        "alarms": list(rollout.alarms),
        "routing_key": rollout.routing_key,
        "mirror_percent": rollout.mirror_percent,
        "stable": rollout.stable,
        "started_at": rollout.started_at,
        "started_by": rollout.started_by,
        "step_started_at": rollout.step_started_at,
        "updated_at": rollout.updated_at,
        "reason": rollout.reason,
        "decided": rollout.decided,
        "endpoint": endpoint_out(rollout),
    }


class RolloutService:
    def __init__(
        self,
        registry: Registry,
        deployments: DeploymentService,
        *,
        clock: Callable[[], float] = time.time,
        alarms: Alarms | None = None,
        endpoints: Callable[[], EndpointControl] | None = None,
    ) -> None:
        self.registry = registry
        self.deployments = deployments
        self.clock = clock
        self.alarms = alarms  # None: alarms are not checked here (locally)
        # The endpoint control plane, built on first use; None: endpoint weights are not moved.
        self.endpoints: RolloutEndpoints | None = None
        if endpoints is not None:
            from sluice.services.rollout_endpoints import RolloutEndpoints

            self.endpoints = RolloutEndpoints(registry, deployments, endpoints)

    # Commands -----------------------------------------------------------------------------
    def start(
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
        model, number = parse_target(to)
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
            alarms=check_alarms(tuple(alarms)),
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
        waiting = waiting_reason(rollout)
        if waiting is not None:
            rollout = replace(rollout, reason=f"started: {waiting}")
            note["reason"] = rollout.reason
        if planned is not None and planned.added:
            note["added_variant"] = planned.candidate
        return self._move(principal, dep, rollout, rollout.step_policy(), note)

    def status(self, principal: Principal, name: str) -> dict[str, Any]:
        principal.require("admin")
        dep = self.registry.get_deployment(principal.tenant, name)
        out: dict[str, Any] = {"deployment": name, "revision": dep.revision, "rollout": None}
        if dep.rollout is None:
            return out
        out["rollout"] = rollout_out(dep.rollout)
        if dep.rollout.active:
            now = self.clock()
            metrics = measure(self.deployments.read_stats(principal.tenant, name, dep.revision))
            decision = evaluate(dep.rollout, metrics, now)
            results = decision.numbers["gates"]
            running = dep.rollout.state == "running"
            waiting = waiting_reason(dep.rollout)
            step_ends_at = dep.rollout.step_started_at + dep.rollout.every_s
            out["now"] = {
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
        return out

    def pause(self, principal: Principal, name: str) -> Deployment:
        dep, rollout = self._active(principal, name, "pause", ("running",))
        reason = f"paused by {principal.subject}"
        paused = replace(
            rollout, state="paused", reason=reason, decided={}, updated_at=self.clock()
        )
        note = {
            "rollout": "paused",
            "reason": reason,
            "step": rollout.step,
            "weight": rollout.weight,
        }
        return self.deployments.update(
            principal, name, None, expected_revision=dep.revision, rollout=paused, note=note
        )

    def resume(self, principal: Principal, name: str) -> Deployment:
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
        return self._move(principal, dep, resumed, resumed.step_policy(), note)

    def abort(self, principal: Principal, name: str) -> Deployment:
        dep, rollout = self._active(principal, name, "abort", ("running", "paused"))
        reason = f"aborted by {principal.subject}: back to the stable policy"
        return self._finish(principal, dep, rollout, "aborted", reason, {})

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

    def _finish(
        self,
        principal: Principal,
        dep: Deployment,
        rollout: Rollout,
        state: str,
        reason: str,
        numbers: dict[str, Any],
    ) -> Deployment:
        policy = rollout.candidate if state == "completed" else rollout.stable
        done = replace(
            rollout, state=state, reason=reason, decided=numbers, updated_at=self.clock()
        )
        note = {"rollout": state, "reason": reason, **numbers}
        return self._move(principal, dep, done, policy, note)

    def _move(
        self,
        principal: Principal,
        dep: Deployment,
        rollout: Rollout,
        policy: dict[str, Any],
        note: dict[str, Any],
    ) -> Deployment:
        """Write a move of the rollout, the endpoint's weights moved first where it has them
        (the note says whether they moved, or wait for the endpoint)."""
        ep = rollout.endpoint
        target = endpoint_weights(rollout)
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
        return self.deployments.update(
            principal, dep.name, policy, expected_revision=dep.revision, rollout=rollout, note=note
        )

    # The controller -------------------------------------------------------------------------
    def tick(self, tenant: str, name: str) -> Decision | None:
        """One look at one deployment's rollout: a running one, or one whose endpoint weights
        still wait; None when there is nothing to look at."""
        from sluice.registry.scope import use_tenant

        principal = Principal(tenant, frozenset({"admin"}), CONTROLLER)
        with use_tenant(tenant):
            dep = self.registry.get_deployment(tenant, name)
            rollout = dep.rollout
            if rollout is None:
                return None
            ep = rollout.endpoint
            if rollout.state != "running":
                if ep is not None and ep.pending and self.endpoints is not None:
                    return self._catch_up(principal, dep, rollout)
                return None
            now = self.clock()
            firing = (
                self.alarms.firing(rollout.alarms)
                if self.alarms is not None and rollout.alarms
                else []
            )
            if firing:
                numbers = {"step": rollout.step, "weight": rollout.weight, "alarms": firing}
                decision = Decision("rollback", f"alarm {', '.join(firing)} fired", numbers)
            elif rollout.waiting_for_endpoint and self.endpoints is not None:
                decision = self._await_variant(principal, dep, rollout, now)
                if decision.action != "rollback":
                    return decision
            else:
                decision = evaluate(
                    rollout, measure(self.deployments.read_stats(tenant, name, dep.revision)), now
                )
            if (
                decision.action != "rollback"
                and ep is not None
                and ep.pending
                and self.endpoints is not None
            ):
                return self._catch_up(principal, dep, rollout)
            if decision.action == "hold":
                return decision
            if decision.action == "rollback":
                self._finish(
                    principal,
                    dep,
                    rollout,
                    "rolled_back",
                    f"rolled back: {decision.reason}",
                    decision.numbers,
                )
            elif decision.action == "complete":
                self._finish(
                    principal,
                    dep,
                    rollout,
                    "completed",
                    f"completed: {decision.reason}",
                    decision.numbers,
                )
            else:
                moved = replace(
                    rollout,
                    step=rollout.step + 1,
                    step_started_at=now,
                    updated_at=now,
                    reason=decision.reason,
                    decided=decision.numbers,
                )
                note = {
                    "rollout": "advance",
                    "reason": decision.reason,
                    "to_weight": moved.weight,
                    **decision.numbers,
                }
                self._move(principal, dep, moved, moved.step_policy(), note)
            return decision

    def _await_variant(
        self, principal: Principal, dep: Deployment, rollout: Rollout, now: float
    ) -> Decision:
        """The candidate's variant is being added: hold while the endpoint is not InService;
        once it is, begin the first step (its weights on the endpoint, the split in the
        policy); roll back when the endpoint came back without the variant."""
        assert rollout.endpoint is not None and self.endpoints is not None
        ep = rollout.endpoint
        numbers: dict[str, Any] = {"step": rollout.step, "weight": rollout.weight}
        live = self.endpoints.look(ep.name)
        if live is None:
            return Decision("rollback", f"endpoint {ep.name} is gone", numbers)
        numbers["endpoint"] = {"name": ep.name, "status": live.status}
        if live.status in ("Failed", "Deleting", "UpdateRollbackFailed") or (
            live.status == "InService" and ep.candidate not in live.weights
        ):
            why = live.failure_reason or "its update did not take"
            return Decision(
                "rollback",
                f"endpoint {ep.name} is {live.status} without variant {ep.candidate}: {why}",
                numbers,
            )
        if live.status != "InService":
            return Decision(
                "hold", f"waiting for endpoint {ep.name} ({live.status}) to add variant {ep.candidate}", numbers
            )
        waited = round(now - rollout.started_at, 3)
        reason = f"endpoint {ep.name} has variant {ep.candidate} in service: {rollout.weight:g}% now"
        begun = replace(
            rollout,
            endpoint=replace(ep, ready=True),
            step_started_at=now,
            updated_at=now,
            reason=reason,
            decided={},
        )
        note = {"rollout": "endpoint", "reason": reason, "waited_s": waited, **numbers}
        self._move(principal, dep, begun, begun.step_policy(), note)
        return Decision("endpoint", reason, {**numbers, "waited_s": waited})

    def _catch_up(self, principal: Principal, dep: Deployment, rollout: Rollout) -> Decision:
        """Weights that wait for the endpoint: put them on it now if it is InService, and
        record that (a running step starts afresh then); else hold."""
        assert rollout.endpoint is not None and self.endpoints is not None
        ep = rollout.endpoint
        target = endpoint_weights(rollout) or {}
        now = self.clock()
        numbers: dict[str, Any] = {"step": rollout.step, "weight": rollout.weight}
        moved, status = self.endpoints.apply(ep.name, target)
        numbers["endpoint"] = {"name": ep.name, "weights": target, "moved": moved, "status": status}
        if not moved and status != "gone":
            return Decision("hold", f"waiting for endpoint {ep.name} ({status}) to take the weights", numbers)
        waited = round(now - (ep.waiting_since or now), 3)
        if moved:
            reason = f"endpoint {ep.name} took the weights after waiting {waited:g} s"
        else:
            reason = f"endpoint {ep.name} is gone: its weights are left as they are"
        caught = replace(
            rollout,
            endpoint=replace(ep, pending=False, waiting_since=None, weights=target if moved else ep.weights),
            updated_at=now,
        )
        if rollout.state == "running":  # the step is judged on traffic from here
            caught = replace(caught, step_started_at=now)
        note = {"rollout": "endpoint", "reason": reason, "waited_s": waited, **numbers}
        self.deployments.update(
            principal, dep.name, None, expected_revision=dep.revision, rollout=caught, note=note
        )
        return Decision("endpoint", reason, {**numbers, "waited_s": waited})

    def run_once(self) -> dict[tuple[str, str], str]:
        """One look at every running rollout; a failure on one never stops the others."""
        done: dict[tuple[str, str], str] = {}
        for tenant, name in self.registry.running_rollouts():
            try:
                decision = self.tick(tenant, name)
            except Conflict:
                done[(tenant, name)] = "changed meanwhile"  # looked at again next time
                continue
            except SluiceError as exc:
                log.warning(
                    "rollout look failed",
                    extra={"tenant": tenant, "deployment": name, "error": exc.message},
                )
                done[(tenant, name)] = f"failed: {exc.message}"
                continue
            if decision is not None:
                done[(tenant, name)] = decision.action
                if decision.action != "hold":
                    log.info(
                        "rollout %s",
                        decision.action,
                        extra={"tenant": tenant, "deployment": name, "reason": decision.reason},
                    )
        return done


class RolloutWatcher:
    """`sluice serve`'s controller: `run_once` on a thread of its own, every `interval_s`."""

    def __init__(self, service: RolloutService, *, interval_s: float = WATCH_INTERVAL_S) -> None:
        self.service = service
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> RolloutWatcher:
        self._thread = threading.Thread(target=self._loop, name="sluice-rollouts", daemon=True)
        self._thread.start()
        return self

    def stop_starting(self) -> None:
        """No look starts from now on (it only sets a flag)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.service.run_once()
            except Exception:  # a bad look must not end the thread
                log.exception("rollout controller look failed")
