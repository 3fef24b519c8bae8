"""The rollout controller: one look at a rollout (`tick`), or at every running one
(`run_once`). Stateless: each look reads the deployment and the counters of its current
revision and either holds (no write), advances, completes, or rolls back, through the
service's writes (`RolloutService.move`, `RolloutService.finish`), which are conditional on
the revision it read: a manual change in between wins and the look is taken again later.

Locally `sluice serve` runs it on a thread of its own (`sluice.services.rollout_watcher`); on
AWS EventBridge Scheduler invokes `sluice.handlers.rollouts` every minute. A rollout whose
endpoint weights wait for the endpoint is looked at until they are on it, and one whose
candidate's variant is being added begins its first step once the endpoint has it in service.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.domain import Principal
from sluice.domain.errors import Conflict, SluiceError
from sluice.domain.rollout_specs import QUALITY
from sluice.domain.rollouts import CANDIDATE, Decision, Rollout, endpoint_weights, evaluate
from sluice.services.rollout_alarms import foreign_alarms
from sluice.stats.verdicts import gate_metrics

if TYPE_CHECKING:
    from sluice.domain import Deployment
    from sluice.services.rollouts import RolloutService

log = logging.getLogger(__name__)
CONTROLLER = "rollout-controller"  # the subject the controller's changes are recorded under


class RolloutController:
    """The controller's looks, made with `service`'s registry, statistics, clock, alarms and
    endpoint weights, and written through its moves."""

    def __init__(self, service: RolloutService) -> None:
        self.service = service

    def _own(self, tenant: str, names: tuple[str, ...]) -> list[str]:
        """The rollout's alarms that are its tenant's, read now (`foreign_alarms`); another's,
        saved before the rule held, is never read (logged)."""
        foreign = foreign_alarms(self.service.registry, tenant, names)
        if foreign:
            log.warning("rollout alarms not the tenant's are not read", extra={"tenant": tenant, "alarms": foreign})
        return [name for name in names if name not in foreign]

    def tick(self, tenant: str, name: str) -> Decision | None:
        """One look at one deployment's rollout: a running one, or one whose endpoint weights
        still wait; None when there is nothing to look at."""
        from sluice.registry.scope import use_tenant

        service = self.service
        principal = Principal(tenant, frozenset({"admin"}), CONTROLLER)
        with use_tenant(tenant):
            dep = service.registry.get_deployment(tenant, name)
            rollout = dep.rollout
            if rollout is None:
                return None
            ep = rollout.endpoint
            if rollout.state != "running":
                if ep is not None and ep.pending and service.endpoints is not None:
                    return self._catch_up(principal, dep, rollout)
                return None
            now = service.clock()
            watched = self._own(tenant, rollout.alarms) if service.alarms is not None and rollout.alarms else []
            firing = service.alarms.firing(watched) if service.alarms is not None and watched else []
            if firing:
                numbers = {"step": rollout.step, "weight": rollout.weight, "alarms": firing}
                decision = Decision("rollback", f"alarm {', '.join(firing)} fired", numbers)
            elif rollout.waiting_for_endpoint and service.endpoints is not None:
                decision = self._await_variant(principal, dep, rollout, now)
                if decision.action != "rollback":
                    return decision
            else:
                decision = evaluate(rollout, self.metrics(dep, rollout), now)
            if (
                decision.action != "rollback"
                and ep is not None
                and ep.pending
                and service.endpoints is not None
            ):
                return self._catch_up(principal, dep, rollout)
            if decision.action == "hold":
                return decision
            if decision.action == "rollback":
                service.finish(
                    principal,
                    dep,
                    rollout,
                    "rolled_back",
                    f"rolled back: {decision.reason}",
                    decision.numbers,
                )
            elif decision.action == "complete":
                service.finish(
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
                service.move(principal, dep, moved, moved.step_policy(), note)
            return decision

    def metrics(self, dep: Deployment, rollout: Rollout) -> dict[str, Any]:
        """Every metric the rollout's gates read at the deployment's current revision: the
        counters' (`gate_metrics`), and drift and quality from monitoring where a gate names
        them. A look and the status (`RolloutService.status`) judge the same numbers."""
        service = self.service
        metrics = gate_metrics(service.deployments.read_stats(dep.tenant, dep.name, dep.revision))
        named = {g.metric for g in rollout.parsed_gates()}
        if service.monitor is not None and "drift" in named:
            metrics["drift"] = service.monitor().drift(dep.tenant, dep.name, dep.revision, CANDIDATE)
        if service.monitor is not None and named.intersection(QUALITY):
            metrics.update(service.monitor().quality_gate(dep.tenant, dep.name, dep.revision, CANDIDATE))
        return metrics

    def _await_variant(
        self, principal: Principal, dep: Deployment, rollout: Rollout, now: float
    ) -> Decision:
        """The candidate's variant is being added: hold while the endpoint is not InService;
        once it is, begin the first step (its weights on the endpoint, the split in the
        policy); roll back when the endpoint came back without the variant."""
        endpoints = self.service.endpoints
        assert rollout.endpoint is not None and endpoints is not None
        ep = rollout.endpoint
        numbers: dict[str, Any] = {"step": rollout.step, "weight": rollout.weight}
        live = endpoints.look(ep.name)
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
        self.service.move(principal, dep, begun, begun.step_policy(), note)
        return Decision("endpoint", reason, {**numbers, "waited_s": waited})

    def _catch_up(self, principal: Principal, dep: Deployment, rollout: Rollout) -> Decision:
        """Weights that wait for the endpoint: put them on it now if it is InService, and
        record that (a running step starts afresh then); else hold. A record refused for a
        change made in between puts the weights of the rollout as it is now back (`put_back`)."""
        service = self.service
        assert rollout.endpoint is not None and service.endpoints is not None
        ep = rollout.endpoint
        target = endpoint_weights(rollout) or {}
        now = service.clock()
        numbers: dict[str, Any] = {"step": rollout.step, "weight": rollout.weight}
        moved, status = service.endpoints.apply(ep.name, target)
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
        try:
            service.deployments.update(
                principal, dep.name, None, expected_revision=dep.revision, rollout=caught, note=note
            )
        except Conflict:  # changed meanwhile (an abort): the weights it stores go back on, as after a move
            if moved:
                service.put_back(principal, dep.name)
            raise
        return Decision("endpoint", reason, {**numbers, "waited_s": waited})

    def run_once(self) -> dict[tuple[str, str], str]:
        """One look at every running rollout; a failure on one never stops the others."""
        done: dict[tuple[str, str], str] = {}
        for tenant, name in self.service.registry.running_rollouts():
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
            except Exception:  # a fault of its own: logged whole, and the others still looked at
                log.exception("rollout look failed", extra={"tenant": tenant, "deployment": name})
                done[(tenant, name)] = "failed"
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
