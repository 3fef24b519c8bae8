"""Follow bindings: made, shown and removed (admin scope), and what happened to each version
the followed registry offered recorded on them.

Every write is conditional on the revision read (`FollowRegistry.update_follow`). Taking a new
version is a claim (`claim`): the binding moves to `pushing` with the version as `seen`, and of
two pollers (or two deliveries of one EventBridge event) that read the same revision only one
claim is stored; the other is refused and lets go. A claim refused because some other write
landed on the binding since it was read (another version's event, the poll keeping or
clearing its error, a rollout's end recorded) is not "taken elsewhere": `BindingChanged`
hands the caller the binding as it is now, to decide again (`sluice.convert.follow`). The pushing itself (pulling, converting,
starting the rollout) is `sluice.convert.follow`'s, which records each outcome here.

A claim is a lease of `lease_s` (`follow_lease_s`): a poller that died between claiming and
recording leaves the binding `pushing`, and once its claim is older than the lease the next
poll takes it over (`lapsed`), by the same conditional write, so of two pollers that find it
lapsed one wins. The last poll's error is kept on the binding until a poll succeeds (`note_error`).

The rollout a binding started is the deployment's; `settle` reads it and records how it ended
(completed, or rolled back with the gate that failed, or aborted), on every poll and whenever a
binding is shown.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.domain import Principal, check_name
from sluice.domain.errors import BadRequest, Conflict, InvalidRequest, NotFound, StaleRead
from sluice.domain.follows import (
    MAX_REASON,
    NOTES,
    BindingReads,
    Follow,
    FollowEvent,
    PollError,
    parse_plan,
    parse_source,
    poll_error_kind,
    recorded,
)
from sluice.domain.origins import split_url

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain.errors import SluiceError
    from sluice.domain.origins import Allowed
    from sluice.registry import Registry
    from sluice.services.rollouts import RolloutService

SETTLED = {"completed": "completed", "rolled_back": "rolled_back", "aborted": "aborted"}
_WRITE_TRIES = 3
DEFAULT_LEASE_S = 600.0
NO_READS = BindingReads()  # a tenant the operator lists nothing for


class BindingChanged(StaleRead):
    """A claim refused because the binding was written since it was read, and not by a claim
    of the same version: decide again on `now`, the binding as it is now."""

    def __init__(self, now: Follow) -> None:
        super().__init__(f"follow binding {now.tenant}/{now.deployment} changed while a version was claimed: try again")
        self.now = now


def poller_name() -> str:
    """Who claims, as the binding shows it: the Lambda execution environment (its log stream),
    or this host and process."""
    stream = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME")
    return f"lambda {stream}" if stream else f"{socket.gethostname()}:{os.getpid()}"


def acting_for(follow: Follow) -> Principal:
    """Who a binding's pushes and rollouts act as: an admin of its tenant, named by the binding."""
    return Principal(follow.tenant, frozenset({"admin"}), f"follow:{follow.deployment}")


class FollowService:
    def __init__(
        self, registry: Registry, rollouts: RolloutService, *, clock: Callable[[], float] = time.time,
        tracking_servers: tuple[Allowed, ...] = (), reads: Callable[[str], BindingReads] = lambda tenant: NO_READS,
        operator_trusted: bool = False, lease_s: float = DEFAULT_LEASE_S, poller: str | None = None,
    ) -> None:  # fmt: skip
        self.registry = registry
        self.rollouts = rollouts
        self.clock = clock
        self.lease_s = lease_s  # how long a claim holds before the next poll may take it over
        self.poller = poller or poller_name()
        # What a tenant's binding may have sluice read on its behalf: the MLflow servers it may
        # name (`mlflow_tracking_servers`: the tracking URI is a URL the tenant supplies, called by
        # sluice's poller), and per tenant the SageMaker package groups it may follow and where its
        # versions' model data may lie (`reads`). Checked when the binding is made and before every
        # read. Off AWS the operator's own bindings (the CLI) are not held to them (`operator_trusted`).
        self.tracking_servers = tracking_servers
        self.reads = reads
        self.operator_trusted = operator_trusted

    # Commands -------------------------------------------------------------------------
    def follow(
        self, principal: Principal, deployment: str, *, source: str, rollout: str, model: str | None = None,
        tracking_uri: str | None = None, tag_back: bool = False, operator: bool = False,
    ) -> Follow:  # fmt: skip
        """A binding of `deployment` to `source`. `operator`: made by the machine's operator
        (the CLI), never by a tenant through the API."""
        principal.require("admin")
        parsed = parse_source(source)
        plan = parse_plan(rollout)
        checked = not (operator and self.operator_trusted)
        if parsed.registry == "mlflow":
            tracking_uri = _tracking(tracking_uri)
            if checked:
                from sluice.domain.origins import check_origin

                check_origin(tracking_uri, self.tracking_servers, field="tracking_uri")
        elif tracking_uri:
            raise InvalidRequest("a tracking URI is for MLflow; SageMaker Model Registry is reached by the ARN", field="tracking_uri")
        if tag_back and parsed.registry != "mlflow":
            raise InvalidRequest("tagging back is for MLflow model versions", field="tag_back")
        if checked:
            self.reads(principal.tenant).check_group(principal.tenant, parsed)
        dep = self.registry.get_deployment(principal.tenant, deployment)
        if model is None:
            if dep.policy.get("kind") != "single":
                raise InvalidRequest(
                    f"deployment '{deployment}' routes by a {dep.policy.get('kind')} policy: name the model each new version "
                    "is pushed into (--model)",
                    field="model",
                )
            model = str(dep.policy["model"])
        check_name(model, field="model")  # as a push takes it: refused now, not at every version
        return self.registry.create_follow(
            Follow(
                principal.tenant, deployment, parsed.uri, parsed.registry, model, str(plan), parsed.watch,
                tracking_uri=tracking_uri, tag_back=tag_back, operator=operator, created_by=principal.subject,
                created_at=self.clock(),
            )
        )  # fmt: skip

    def may_read(self, follow: Follow) -> BindingReads | None:
        """What `follow` may have sluice read for its tenant; None for the operator's own
        binding off AWS, which is read with the operator's tools and rights."""
        return None if follow.operator and self.operator_trusted else self.reads(follow.tenant)

    def get(self, principal: Principal, deployment: str) -> Follow:
        principal.require("admin")
        return self.settle(principal.tenant, deployment)

    def list(self, principal: Principal) -> list[Follow]:
        principal.require("admin")
        return [self.settle(principal.tenant, f.deployment, f) for f in self.registry.list_follows(principal.tenant)]

    def unfollow(self, principal: Principal, deployment: str) -> None:
        principal.require("admin")
        self.registry.delete_follow(principal.tenant, deployment)

    # What the follower records --------------------------------------------------------
    def lapsed(self, follow: Follow) -> bool:
        """Whether the binding is `pushing` on a claim older than the lease: its poller died
        (or is far slower than the lease allows), and the next poll may take it over."""
        started = follow.claim_started()
        return started is not None and self.clock() - started > self.lease_s

    def claim(self, follow: Follow, version: str, *, changed_at: float | None = None, again: bool = False) -> Follow | None:
        """Take `version` for pushing: stored only if the binding is still as it was read and
        has not taken this version already (unless that claim lapsed: taken over, or `again`:
        approved again after a rejection); None when it had, or another poller took it since
        (the binding read again has it as `seen`, with what became of it since), or the binding
        is gone. A write since the read that changed nothing a decision to take reads (the
        poll's error kept or cleared) is claimed over again; any other raises `BindingChanged`:
        decide again on the binding as it is now."""
        for _ in range(_WRITE_TRIES):
            lapsed = follow.seen == version and self.lapsed(follow)
            if follow.seen == version and not lapsed and not again:
                return None
            at = self.clock()
            reason = ""
            if lapsed:
                reason = (
                    f"taken over from {follow.claimed_by or 'a poller'}, whose claim of {at - (follow.claim_started() or at):.0f} s "
                    f"ago outlived the lease ({self.lease_s:g} s)"
                )
            claimed = recorded(follow, FollowEvent(version, "pushing", at, reason, changed_at=changed_at), seen=version)
            claimed = replace(claimed, claimed_at=at, claimed_by=self.poller, seen_at=changed_at if changed_at is not None else follow.seen_at)
            try:
                return self.registry.update_follow(claimed, expected_revision=follow.revision)
            except NotFound:
                return None
            except Conflict:
                pass
            try:
                now = self.registry.get_follow(follow.tenant, follow.deployment)
            except NotFound:
                return None
            last = now.last_of(version)
            if now.seen == version and last is not None and last.outcome not in NOTES and last != follow.last_of(version):
                return None  # claimed by another since the read (and perhaps done with): taken elsewhere
            if replace(now, revision=follow.revision, error=follow.error, updated_at=follow.updated_at) != follow:
                raise BindingChanged(now)
            follow = now
        raise BindingChanged(follow)

    def record(self, tenant: str, deployment: str, event: FollowEvent) -> Follow | None:
        """Record what became of `event.version`, on a fresh read of the binding. An outcome of
        taking it is dropped when the binding is gone, has taken another version since (that
        version's story goes on), or the version was rejected meanwhile (the rejection stands)."""
        for _ in range(_WRITE_TRIES):
            try:
                now = self.registry.get_follow(tenant, deployment)
                if event.outcome not in NOTES and not now.taking(event.version):
                    return None
                written = recorded(now, event)
                if now.seen != event.version or event.outcome == "withdrawn":  # noted, nothing else changes
                    written = replace(written, state=now.state, claimed_at=now.claimed_at, claimed_by=now.claimed_by)
                return self.registry.update_follow(written, expected_revision=now.revision)
            except NotFound:
                return None
            except Conflict:
                continue
        return None

    def note_error(self, tenant: str, deployment: str, exc: SluiceError | None) -> None:
        """Keep the poll's error on the binding (`exc`), or clear the one kept (None), on a
        fresh read; a binding gone meanwhile is left alone."""
        for _ in range(_WRITE_TRIES):
            try:
                now = self.registry.get_follow(tenant, deployment)
                if exc is None:
                    if now.error is None:
                        return
                    written = replace(now, error=None)
                else:
                    kind, at = poll_error_kind(exc.status, exc.details), self.clock()
                    since = now.error.since if now.error is not None and now.error.kind == kind else at
                    written = replace(now, error=PollError(kind, exc.message[:MAX_REASON], at, since))
                self.registry.update_follow(written, expected_revision=now.revision)
                return
            except NotFound:
                return
            except Conflict:
                continue

    def settle(self, tenant: str, deployment: str, follow: Follow | None = None) -> Follow:
        """The binding, with the end of the rollout it started recorded once it has ended."""
        follow = follow or self.registry.get_follow(tenant, deployment)
        last = follow.last_of(follow.seen) if follow.seen is not None else None  # notes of other versions may follow it
        if follow.state != "rolling_out" or last is None or last.model_version is None:
            return follow
        try:
            dep = self.registry.get_deployment(tenant, deployment)
        except NotFound:
            return self._write(follow, FollowEvent(last.version, "aborted", self.clock(), "the deployment was deleted", last.model_version))
        rollout = dep.rollout
        if rollout is not None and (rollout.model, rollout.version) == (follow.model, last.model_version):
            if rollout.active:
                return follow
            ended = FollowEvent(last.version, SETTLED.get(rollout.state, "aborted"), self.clock(), rollout.reason, last.model_version, dep.revision)
        else:
            now = f"{rollout.model}:{rollout.version}" if rollout is not None else "none"
            ended = FollowEvent(
                last.version, "aborted", self.clock(), f"the deployment's rollout was replaced (rollout now: {now})", last.model_version
            )  # fmt: skip
        return self._write(follow, ended)

    def _write(self, follow: Follow, event: FollowEvent) -> Follow:
        try:
            return self.registry.update_follow(recorded(follow, event), expected_revision=follow.revision)
        except Conflict:  # another reader settled it first
            return self.registry.get_follow(follow.tenant, follow.deployment)

    def start_rollout(self, follow: Follow, model_version: int) -> Any:
        """The binding's plan, started on its deployment towards `model_version`."""
        plan = follow.parsed_plan()
        return self.rollouts.start(
            acting_for(follow), follow.deployment, to=f"{follow.model}:{model_version}", steps=list(plan.steps),
            every=plan.every, gates=plan.gates, min_requests=plan.min_requests,
        )  # fmt: skip


def _tracking(uri: str | None) -> str:
    if not uri:
        raise InvalidRequest("following MLflow needs its tracking URI (--tracking-uri, or MLFLOW_TRACKING_URI)", field="tracking_uri")
    try:
        parts = split_url(uri, field="tracking_uri")  # never Python's words: they quote the credentials
    except BadRequest as exc:  # a binding's fields are refused as 422s
        raise InvalidRequest(exc.message, field=exc.field) from None
    if parts.username or parts.password or parts.query:
        raise InvalidRequest(
            "a followed tracking URI is stored: give it without credentials, and give the poller MLflow's own "
            "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN",
            field="tracking_uri",
        )
    return uri
