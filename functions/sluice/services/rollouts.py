"""Progressive rollouts: start, status, pause, resume, abort, and the controller's tick.

A rollout lives with its deployment (`Deployment.rollout`, one at a time) and moves only by
deployment changes: starting it, every step, a pause, a resume, the rollback and the end are
each a new revision recorded in the deployment's history with a `note` holding the decision
and the numbers that decided it. Because statistics are kept per revision, every step is
judged on its own traffic.

The controller (`tick`, `run_once`) is stateless: each look reads the deployment and the
counters of its current revision and either holds (no write), advances, completes, or rolls
back. Locally `sluice serve` runs it on a thread of its own (`RolloutWatcher`); on AWS an
EventBridge rule invokes `sluice.handlers.rollouts` every minute. Its writes are conditional
on the revision it read, so a manual change in between wins and the look is taken again later.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from sluice.domain import Principal
from sluice.domain.errors import Conflict, InvalidRequest, SluiceError
from sluice.domain.policy import NAME_PATTERN
from sluice.domain.rollouts import (
    CANDIDATE,
    MAX_MIN_REQUESTS,
    STABLE,
    Rollout,
    check_alarms,
    parse_duration,
    parse_gates,
    parse_steps,
)
from sluice.services.models import require_found
from sluice.stats.verdicts import comparison, traffic, wilson

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sluice.domain import Deployment
    from sluice.registry import Registry
    from sluice.services.deployments import DeploymentService

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
    action: str  # hold, advance, complete, rollback
    reason: str
    numbers: dict[str, Any]


def parse_target(value: str, *, field: str = "to") -> tuple[str, int]:
    """`MODEL:VERSION`."""
    import re

    model, sep, number = str(value).partition(":")
    if (
        not sep
        or not re.match(NAME_PATTERN, model)
        or not (number.isascii() and number.isdigit())
        or int(number) < 1
    ):
        raise InvalidRequest(f"{value!r} is not MODEL:VERSION (such as iris:2)", field=field)
    return model, int(number)


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
    }


class RolloutService:
    def __init__(
        self,
        registry: Registry,
        deployments: DeploymentService,
        *,
        clock: Callable[[], float] = time.time,
        alarms: Alarms | None = None,
    ) -> None:
        self.registry = registry
        self.deployments = deployments
        self.clock = clock
        self.alarms = alarms  # None: alarms are not checked here (locally)

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
        )
        note = {"rollout": "start", "to": f"{model}:{number}", "step": 0, "weight": rollout.weight}
        return self.deployments.update(
            principal,
            name,
            rollout.step_policy(),
            expected_revision=dep.revision,
            rollout=rollout,
            note=note,
        )

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
                "next": decision.action if running else "paused",
                "reason": decision.reason,
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
        return self.deployments.update(
            principal,
            name,
            resumed.step_policy(),
            expected_revision=dep.revision,
            rollout=resumed,
            note=note,
        )

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
        return self.deployments.update(
            principal, dep.name, policy, expected_revision=dep.revision, rollout=done, note=note
        )

    # The controller -------------------------------------------------------------------------
    def tick(self, tenant: str, name: str) -> Decision | None:
        """One look at one deployment's running rollout; None when there is none to look at."""
        from sluice.registry.scope import use_tenant

        principal = Principal(tenant, frozenset({"admin"}), CONTROLLER)
        with use_tenant(tenant):
            dep = self.registry.get_deployment(tenant, name)
            rollout = dep.rollout
            if rollout is None or rollout.state != "running":
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
            else:
                decision = evaluate(
                    rollout, measure(self.deployments.read_stats(tenant, name, dep.revision)), now
                )
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
                self.deployments.update(
                    principal,
                    name,
                    moved.step_policy(),
                    expected_revision=dep.revision,
                    rollout=moved,
                    note=note,
                )
            return decision

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
