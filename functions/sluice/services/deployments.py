"""Deployments: the names clients call, each routing by a policy validated when saved.

A policy's checks (references resolve, no cycle, inputs agree, a cached route is
deterministic) read the deployments it reaches; the write then rests on them
(`refs_read`): the registry stores it only if each is still as it was read, in the same
atomic write. When one changed meanwhile the write is checked again on what is stored now,
so of two updates closing a cycle at once (p -> q, q -> p) one is stored and the other is
refused as the cycle it makes (422 naming `policy`), never stored.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.domain import Deployment, check_batching, check_cache, check_name, now
from sluice.domain.capture import check_capture
from sluice.domain.errors import BadRequest, Conflict, NotFound, StaleRead
from sluice.domain.objects import check_description, made_at_revision
from sluice.domain.policy import (
    Mirror,
    Shadow,
    parse_policy,
    policy_dict,
    referenced_deployments,
    single_policy,
)
from sluice.domain.policy_paths import legacy_bandit_subject
from sluice.domain.rollouts import paused_by_change, restarted_by_change
from sluice.registry.guards import decided_again
from sluice.registry.refusals import not_at_revision
from sluice.services.deployment_stats import deployment_stats
from sluice.services.models import require_found
from sluice.services.policy_checks import PolicyChecks

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import DeploymentChange, Principal
    from sluice.domain.policy import Node
    from sluice.registry import Registry
    from sluice.registry.precomputed import PrecomputedStore
    from sluice.runtimes.functions import FunctionSteps
    from sluice.runtimes.lookups import LookupSteps
    from sluice.stats.recorder import StatsRecorder

KEEP: Any = object()  # `update(cache=KEEP)`: the deployment's cache setting stays as it is


class DeploymentService:
    def __init__(
        self,
        registry: Registry,
        on_change: Callable[[str, str], None] | None = None,
        before_delete: Callable[[str, str], None] | None = None,
        recorder: StatsRecorder | None = None,
        before_stats: Callable[[], None] | None = None,
        functions: FunctionSteps | None = None,
        lookup_steps: LookupSteps | None = None,
        precomputed: PrecomputedStore | None = None,
    ) -> None:
        self.registry = registry
        self.functions = functions  # who may run which function step (None: none here)
        self.lookup_steps = lookup_steps  # who may read which store (None: none here)
        self.precomputed = precomputed  # tables precomputed nodes read, checked against their live nodes
        self._on_change = on_change or (lambda tenant, name: None)
        self._before_delete = before_delete or (lambda tenant, name: None)
        self.recorder = recorder
        self._before_stats = before_stats or (lambda: None)
        self.clock: Callable[[], float] = time.time  # a rollout's times (the rollout service sets its own)

    # Validation (`sluice.services.policy_checks`) ------------------------------------------
    def _checks(self) -> PolicyChecks:
        """The policy checks, on what this service holds now."""
        return PolicyChecks(self.registry, self.functions, self.lookup_steps, self.precomputed)

    def resolve_shorthand(self, principal: Principal, model: str, version: int | None) -> dict[str, Any]:
        """`model` (+ optional `version`, default latest) as a single-version policy."""
        if version is None:
            latest = require_found(self.registry.latest_version, principal.tenant, model, field="model")
            version = latest.version
        return single_policy(model, version)

    # Changes -------------------------------------------------------------------------------
    def _written(self, tenant: str, name: str, change: Callable[[], Deployment]) -> Deployment:
        """Run `change` (read, check, write) again while its write is refused because a
        deployment its checks read changed meanwhile: checked on what is stored now, it is
        written or refused for what it is (a cycle: 422). After RECHECKS such refusals the
        StaleRead itself (409 naming `policy`) tells the caller to try again. Once it is
        written, whoever follows deployments is told (`on_change`)."""
        stored = decided_again(change)
        self._on_change(tenant, name)
        return stored

    def create(
        self,
        principal: Principal,
        name: str,
        policy: dict[str, Any],
        *,
        description: str = "",
        cache: Any = None,
        capture: Any = None,
        batching: Any = None,
    ) -> Deployment:
        """`cache`: `{"ttl_s", "max_entries"}` (or CacheSettings) to cache answers, None for none;
        `capture`: `{"sample_percent", "include", "redact"}` to capture requests, None for none;
        `batching`: `{"max_batch_size", "max_delay_us"}` (or BatchingSettings) to join
        concurrent requests into one runtime call, None for none."""
        principal.require("admin")
        check_name(name, field="name")
        check_description(description)
        settings = check_cache(cache)
        captured = check_capture(capture)
        joined = check_batching(batching)

        def create() -> Deployment:
            catalog = self.registry.catalog_read(principal.tenant)  # before the checks: a version in use is never deleted
            checked, read = self._checks().validated(principal.tenant, name, policy, settings, captured)
            deployment = Deployment(
                tenant=principal.tenant,
                name=name,
                policy=checked,
                cache=settings,
                batching=joined,
                description=description,
                updated_by=principal.subject,
                capture=captured,
            )
            return self.registry.create_deployment(deployment, refs_read=read, catalog=catalog)

        return self._written(principal.tenant, name, create)

    def update(
        self,
        principal: Principal,
        name: str,
        policy: dict[str, Any] | None,
        *,
        expected_revision: int | None = None,
        cache: Any = KEEP,
        capture: Any = KEEP,
        batching: Any = KEEP,
        rollout: Any = KEEP,
        note: dict[str, Any] | None = None,
    ) -> Deployment:
        """A new revision: `policy` (None keeps the current one) and `cache` (KEEP, the
        default, keeps the current setting; None turns the cache off), `capture` and `batching`
        likewise. `rollout` and `note` are the rollout controller's: a change of the policy by
        anyone else pauses a running rollout, in the same revision. A write refused because
        a deployment the policy reaches changed meanwhile is decided again from a fresh read
        (`_written`)."""
        principal.require("admin")
        changes = {"cache": cache, "capture": capture, "batching": batching, "rollout": rollout, "note": note}
        return self._written(principal.tenant, name, lambda: self._update(principal, name, policy, expected_revision, **changes))

    def _update(
        self,
        principal: Principal,
        name: str,
        policy: dict[str, Any] | None,
        expected_revision: int | None,
        *,
        cache: Any,
        capture: Any,
        batching: Any,
        rollout: Any,
        note: dict[str, Any] | None,
    ) -> Deployment:
        catalog = self.registry.catalog_read(principal.tenant)  # before the checks: a version in use is never deleted
        current = self.registry.get_deployment(principal.tenant, name)
        if expected_revision is not None and expected_revision != current.revision:
            raise not_at_revision(name, current.revision, expected_revision)
        settings = current.cache if cache is KEEP else check_cache(cache)
        if rollout is KEEP:
            rollout = current.rollout
            if rollout is not None and rollout.state == "running":
                if policy is not None:
                    rollout, note = paused_by_change(rollout, principal.subject, self.clock())
                else:  # a new revision, whose counts start from nothing: so does the step's time, or it
                    rollout, note = restarted_by_change(rollout, principal.subject, self.clock(), note)  # could move on after seconds of them
        joined = current.batching if batching is KEEP else check_batching(batching)
        captured = current.capture if capture is KEEP else check_capture(capture)
        kept_with = current.policy if capture is KEEP else None
        checked, read = self._checks().validated(principal.tenant, name, current.policy if policy is None else policy, settings, captured, kept_with, stored=current.policy)
        if policy is not None:
            self._checks().check_dependents(principal.tenant, replace(current, policy=checked))
        updated = replace(
            current,
            policy=checked,
            cache=settings,
            batching=joined,
            updated_at=now(),
            updated_by=principal.subject,
            rollout=rollout,
            capture=captured,
        )
        try:
            return self.registry.update_deployment(updated, expected_revision=current.revision, note=note, refs_read=read, catalog=catalog)
        except Conflict as exc:
            if expected_revision is not None or exc.field != "revision" or isinstance(exc, StaleRead):
                raise
            # The caller gave no revision (last writer wins): another write got in after this
            # one's read, so it is decided again on what is stored now (`_written`), rather than
            # refused naming a revision the caller never sent.
            raise StaleRead(f"deployment '{name}' changed while this update was checked; try again", field="policy") from None

    def promote(self, principal: Principal, name: str, mirror: str) -> Deployment:
        """Make a shadow mirror the primary. Other mirrors stay; the old primary goes."""
        current = self.registry.get_deployment(principal.tenant, name)
        node = parse_policy(current.policy)
        if not isinstance(node, Shadow):
            raise BadRequest(f"deployment '{name}' has no shadow mirrors to promote", field="mirror")
        chosen = next((m for m in node.mirrors if m.name == mirror), None)
        if chosen is None:
            raise BadRequest(
                f"no mirror '{mirror}'; deployment '{name}' has {[m.name for m in node.mirrors]}", field="mirror"
            )
        rest = tuple(m for m in node.mirrors if m.name != mirror)
        promoted: Node = Shadow(primary=chosen.target, mirrors=rest) if rest else chosen.target
        return self.update(principal, name, policy_dict(promoted), expected_revision=current.revision)

    def add_mirror(self, principal: Principal, name: str, mirror: str, target: dict[str, Any]) -> Deployment:
        """Mirror `target` from the deployment: its policy becomes (or stays) a shadow whose
        primary still answers; a mirror of the same name is replaced."""
        current, policy = self._mirrored(principal, name, mirror, target)
        return self.update(principal, name, policy, expected_revision=current.revision)

    def check_mirror(self, principal: Principal, name: str, mirror: str, target: dict[str, Any]) -> None:
        """What `add_mirror` would refuse (the deployment not there, a target taking other
        inputs), refused with nothing written."""
        principal.require("admin")
        current, policy = self._mirrored(principal, name, mirror, target)
        self._checks().validated(principal.tenant, name, policy, current.cache, current.capture, current.policy, stored=current.policy)

    def _mirrored(self, principal: Principal, name: str, mirror: str, target: dict[str, Any]) -> tuple[Deployment, dict[str, Any]]:
        current = self.registry.get_deployment(principal.tenant, name)
        node = parse_policy(current.policy)
        added = Mirror(name=mirror, target=parse_policy(target))
        if isinstance(node, Shadow):
            policy: Node = Shadow(primary=node.primary, mirrors=(*(m for m in node.mirrors if m.name != mirror), added))
        else:
            policy = Shadow(primary=node, mirrors=(added,))
        return current, policy_dict(policy)

    def get(self, principal: Principal, name: str) -> Deployment:
        return self.registry.get_deployment(principal.tenant, name)

    def list(self, principal: Principal) -> list[Deployment]:
        return self.registry.list_deployments(principal.tenant)

    def delete(self, principal: Principal, name: str) -> None:
        """The deployment and what is bound to it (its follow binding, its monitoring
        baseline) go; its history stays. A deployment created again under its name starts
        with none of them (and from revisions of its own: `Deployment.revision`). Refused
        (Conflict) while another deployment or an active rollout's stable policy refers to it,
        and (`before_delete`) while it has an endpoint: that is undeployed first. The delete
        rests on the tenant's catalog counters read before those checks, as a version's does: a
        deployment written meanwhile (one referring to it) refuses it, and it is decided again."""
        principal.require("admin")
        self.registry.get_deployment(principal.tenant, name)  # this tenant's, or 404 before anything else is asked

        def delete() -> None:
            catalog = self.registry.catalog_read(principal.tenant)  # before the checks: nothing is left referring to it
            dependents = [d.name for d in self._checks().dependents(principal.tenant, name)]
            if dependents:
                raise Conflict(f"deployment '{name}' is referenced by {dependents}; point them elsewhere first", field="deployment")
            for other in self.registry.list_deployments(principal.tenant):  # what a rollback restores, as for versions
                rollout = other.rollout
                if rollout is not None and rollout.active and name in referenced_deployments(parse_policy(rollout.stable)):
                    raise Conflict(f"deployment '{name}' is held by the {rollout.state} rollout of deployment '{other.name}'; finish or abort it first", field="deployment")
            self._before_delete(principal.tenant, name)
            self.registry.delete_deployment(principal.tenant, name, by=principal.subject, catalog=catalog)

        decided_again(delete)
        self._on_change(principal.tenant, name)
        with contextlib.suppress(NotFound):
            self.registry.delete_follow(principal.tenant, name)
        self.registry.delete_baseline(principal.tenant, name)

    def history(self, principal: Principal, name: str) -> list[DeploymentChange]:
        changes = self.registry.deployment_history(principal.tenant, name)
        if not changes:
            self.registry.get_deployment(principal.tenant, name)
        return changes

    # Verdicts and feedback -------------------------------------------------------------------
    def _read_stats(self, tenant: str, name: str, revision: int) -> dict[str, dict[str, float]]:
        self._before_stats()  # mirrors this process handed off, so their comparisons count
        if self.recorder is not None:
            self.recorder.flush()
        return self.registry.read_stats(tenant, name, revision)

    def read_stats(self, tenant: str, name: str, revision: int) -> dict[str, dict[str, float]]:
        """Every subject's counters at `revision`, with what this process holds merged first."""
        return self._read_stats(tenant, name, revision)

    def counters(self, principal: Principal, dep: Deployment) -> dict[str, float]:
        """The deployment's own counters (every request it answered or failed) at its current revision."""
        return self._read_stats(principal.tenant, dep.name, dep.revision).get("deployment", {})

    def stats(self, principal: Principal, name: str, *, revision: int | None = None) -> dict[str, Any]:
        dep = self.registry.get_deployment(principal.tenant, name)
        rev = revision or dep.revision
        if not 1 <= rev <= dep.revision:  # a revision not made yet: zeros under its number read as no traffic
            raise NotFound(f"deployment '{name}' is at revision {dep.revision}: it has no revision {rev}", field="revision")
        counters = self._read_stats(principal.tenant, name, rev)
        history = [] if rev == dep.revision else self.registry.deployment_history(principal.tenant, name)
        return deployment_stats(name, rev, counters, parse_policy(_policy_at(dep, history, rev)))

    def feedback(self, principal: Principal, name: str, request_id: str, reward: float) -> tuple[str, ...]:
        """Credit `reward` (0..1) to each variant the request's bandit splits chose (one per
        bandit it passed: a split at the top, or one in each ensemble member, case or step
        that held one), in the statistics of the revision that answered it; returns their paths (`sluice.domain.policy_paths.subject_at`). A request
        answered by an earlier deployment of the name (deleted before this one was made) is not
        this one's, nor is feedback given for it."""
        principal.require("predict")
        dep = self.registry.get_deployment(principal.tenant, name)
        if not 0 <= reward <= 1:
            raise BadRequest("reward must be between 0 and 1", field="reward")
        assigned = self.registry.get_assignment(principal.tenant, name, request_id)
        history = self.registry.deployment_history(principal.tenant, name)
        made = made_at_revision(history)
        if assigned is None or (assigned[1] is not None and assigned[1] < made):  # None: kept before revisions were
            raise BadRequest(
                f"no bandit assignment for request '{request_id}' on deployment '{name}'", field="request_id"
            )
        variants, answered_at = assigned
        # The revision that answered the request: its statistics and its bandit's rewards,
        # not a later policy's (which may not hold the variant). An assignment kept before
        # assignments had their revision: the current one, as it always was.
        revision = answered_at if answered_at is not None else dep.revision
        if not self.registry.claim_reward(principal.tenant, name, request_id, made=made):
            raise Conflict(f"feedback for request '{request_id}' was already given", field="request_id")
        if len(variants) == 1:  # one bare name: perhaps a nested bandit's, kept by a release before paths
            variants = (legacy_bandit_subject(parse_policy(_policy_at(dep, history, revision)), variants[0]) or variants[0],)
        if self.recorder is not None:
            for variant in variants:
                self.recorder.add((principal.tenant, name, revision, f"variant:{variant}"), {"reward_n": 1, "reward_sum": reward})
            self.recorder.flush()
        return variants


def _policy_at(dep: Deployment, history: list[DeploymentChange], revision: int) -> dict[str, Any]:
    """The policy `dep`'s name held at `revision`: its own at its revision, else the last one
    its history wrote at or before it (its own where the history does not reach back)."""
    if revision == dep.revision:
        return dep.policy
    return next((c.new_policy for c in reversed(history) if c.revision <= revision and c.new_policy is not None), dep.policy)
