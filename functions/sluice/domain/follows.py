"""A follow binding: a deployment that follows a model registry. When the followed alias moves
(MLflow `models:/NAME@ALIAS`, or `models:/NAME/latest` gains a version) or a package of the
followed group becomes Approved (SageMaker Model Registry), sluice pushes the new version and
starts a progressive rollout to it with the binding's plan. What became of each version the
registry offered (pushed and rolling out, completed, rolled back by a gate, refused at
conversion, rejected) is recorded on the binding with its reason.

Pure: what a binding is, how its source and rollout plan are read, and the record of what
happened. `sluice.services.follows` stores and records; `sluice.convert.follow` pushes.

A binding is written conditionally (`revision`): the poller or event handler that takes a
version writes its claim on the binding it read, so of two racing for the same version one
wins and the other lets go, and the same version is never pushed twice.

A claim is a lease: it says when it was taken and by whom, and one older than the lease
(`follow_lease_s`) is taken over by the next poll, on the same conditional write. That is safe
because a version that came from the same source is rolled out again, never pushed twice.

The last poll that failed (the tracking server unreachable, refusing the credentials, a 5xx)
is kept on the binding, without credentials, until a poll succeeds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sluice.domain.errors import Forbidden, InvalidRequest
from sluice.domain.follow_plans import Plan, parse_plan
from sluice.domain.locations import Root, confine
from sluice.domain.objects import now

Registry = Literal["mlflow", "sagemaker"]
ChangeMeaning = Literal["stale", "rejected", "withdrawn", "update", "superseded", "approved", "approved_again", "pending"]
# What a binding is doing: nothing new since the last version; pushing one (claimed); a
# rollout it started is running; the last version's story ended (completed) or did not (failed).
FollowState = Literal["waiting", "pushing", "rolling_out", "completed", "failed"]
# What became of one version the registry offered.
OUTCOMES = (
    "pushing", "rolling_out", "completed", "rolled_back", "aborted",
    "conversion_failed", "push_failed", "rejected", "rollout_refused", "withdrawn",
)  # fmt: skip
FAILED = frozenset({"rolled_back", "aborted", "conversion_failed", "push_failed", "rejected", "rollout_refused"})
TAKING = frozenset({"pushing", "rolling_out"})  # a version's story still being told
# What the registry said of a version, noted as it came: no longer approved (SageMaker's
# Rejected, or PendingManualApproval again for a version taken before).
NOTES = frozenset({"rejected", "withdrawn"})
MAX_HISTORY = 20
MAX_REASON = 1000

_MLFLOW = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/@]+)|/(?P<latest>latest))/?\Z")
MLFLOW_NAME_CHARS = 256  # MLflow's registered model name and alias columns
# A model package group's name, as SageMaker takes it; and the ARNs of a group and of a package.
GROUP_NAME = r"[A-Za-z0-9](?:-*[A-Za-z0-9]){0,62}"
_ARN_HEAD = r"^arn:(?P<partition>aws[a-z-]*):sagemaker:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
_GROUP = re.compile(rf"{_ARN_HEAD}model-package-group/(?P<group>{GROUP_NAME})\Z")
PACKAGE_ARN = re.compile(rf"{_ARN_HEAD}model-package/(?P<group>{GROUP_NAME})/(?P<version>\d+)\Z")
@dataclass(frozen=True, slots=True)
class Source:
    """What is followed, read from the text given: an MLflow alias or `latest`, or a SageMaker
    model package group (by ARN)."""

    registry: Registry
    uri: str
    name: str  # the registered model, or the package group
    alias: str | None = None  # MLflow: the alias; None for `latest`
    region: str | None = None  # SageMaker: the group's region

    @property
    def watch(self) -> str:
        """What an event or a poll names: `sagemaker:<group ARN>` (the group's name in lower
        case, as SageMaker spells it in its packages' ARNs), or `mlflow:<uri>`."""
        if self.registry == "sagemaker":
            return f"sagemaker:{group_watch(self.uri)}"
        return f"{self.registry}:{self.uri}"


def group_watch(group_arn: str) -> str:
    """A model package group's ARN with its name in lower case: SageMaker keeps a group's name
    as given in the group's ARN and the events' `ModelPackageGroupName`, and lower-cases it in
    its packages' ARNs, so a binding to `…/FraudModels` and an approval of
    `…/model-package/fraudmodels/3` meet on this spelling."""
    head, sep, name = group_arn.rpartition("/")
    return f"{head}{sep}{name.lower()}"


@dataclass(frozen=True, slots=True)
class BindingReads:
    """What one tenant's follow bindings may have sluice read on its behalf, as the operator
    lists it: the SageMaker model package groups it may follow, and where its versions' model
    data may lie (S3 prefixes). Checked when a binding is made, and again before each read,
    whatever registry named the location (a package's `ModelDataUrl`, MLflow's artifact URI)."""

    package_groups: frozenset[str] = frozenset()
    model_data: tuple[Root, ...] = ()
    group_arn_prefix: str = ""  # the stack's account and region (`arn:...:model-package-group/`); "": any

    def check_group(self, tenant: str, source: Source) -> None:
        if source.registry == "sagemaker" and self.group_arn_prefix and not source.uri.startswith(self.group_arn_prefix):
            home = self.group_arn_prefix.split(":")
            raise InvalidRequest(
                f"{source.uri} is a group of another account or region: bindings follow groups of account {home[4]} in "
                f"{home[3]}, whose approvals alone reach sluice ({self.group_arn_prefix}GROUP)",
                field="registry",
            )
        # Group names compare in any case, as the grants are made (ARNs may spell a name in lower case).
        if source.registry == "sagemaker" and source.name.lower() not in {g.lower() for g in self.package_groups}:
            raise Forbidden(
                f"model package group {source.name!r} is not among the groups tenant '{tenant}' may follow "
                "(the operator's follow_package_groups)",
                field="registry",
            )

    def model_data_uri(self, tenant: str, uri: str) -> str:
        """`uri` as it is read, once confined to the tenant's model data locations."""
        from sluice.domain.errors import SluiceError

        try:
            location = confine(uri, self.model_data, field="model_data")
            if location.is_prefix:
                raise Forbidden(f"{uri} names a prefix, not an object", field="model_data")
            return location.uri
        except SluiceError as exc:
            where = " or ".join(root.uri for root in self.model_data) or "nowhere"
            raise Forbidden(
                f"the model data {uri} is not read for tenant '{tenant}': its model data may lie in {where} (the "
                f"operator's model_data_locations)" + ("" if exc.message.startswith("model_data must lie") else f"; {exc.message}"),
                field="model_data",
            ) from None


def parse_source(text: str, *, field: str = "registry") -> Source:
    text = (text or "").strip()
    mlflow = _MLFLOW.match(text)
    if mlflow is not None:
        if any(len(part or "") > MLFLOW_NAME_CHARS for part in (mlflow["name"], mlflow["alias"])):
            raise InvalidRequest(f"an MLflow model's name and alias are at most {MLFLOW_NAME_CHARS} characters", field=field)
        return Source("mlflow", text.rstrip("/"), mlflow["name"], alias=mlflow["alias"])
    group = _GROUP.match(text)
    if group is not None:
        return Source("sagemaker", text, group["group"], region=group["region"])
    raise InvalidRequest(
        f"{text!r} is not something to follow: models:/NAME@ALIAS or models:/NAME/latest (MLflow), or "
        "arn:aws:sagemaker:REGION:ACCOUNT:model-package-group/GROUP (SageMaker Model Registry)",
        field=field,
    )


@dataclass(frozen=True, slots=True)
class FollowEvent:
    """What became of one version the registry offered."""

    version: str  # the registry's version (MLflow's number, the package's version)
    outcome: str  # one of OUTCOMES
    at: float
    reason: str = ""
    model_version: int | None = None  # the sluice version it was pushed as
    revision: int | None = None  # the deployment revision the rollout started in
    # When the registry made the change this answers (SageMaker: the event's `time`): the
    # approval a take is for, the rejection or withdrawal a note records; None when unknown.
    changed_at: float | None = None


# Why a poll failed, in one word (`PollError.kind`).
POLL_ERRORS = ("unreachable", "unauthorized", "server_error", "not_found", "refused")


@dataclass(frozen=True, slots=True)
class PollError:
    """The last poll of the binding's registry that failed; cleared by the next that succeeds."""

    kind: str  # one of POLL_ERRORS
    message: str  # the error, never with credentials
    at: float  # the last poll that failed
    since: float  # the first of the failing polls in a row, of this kind


def poll_error_kind(status: int, details: dict[str, Any]) -> str:
    """A poll's failure, classed: by the class its raiser named (`details["poll_error"]`), or
    the HTTP status the registry answered (`details["http_status"]`); an error with neither is
    `unreachable` when it is a 503 (no answer came), else by its own status."""
    if details.get("poll_error") in POLL_ERRORS:
        return str(details["poll_error"])
    http = details.get("http_status")
    if http is not None:
        if int(http) in (401, 403):
            return "unauthorized"
        if int(http) == 404:
            return "not_found"
        return "server_error" if int(http) >= 500 else "refused"
    return {503: "unreachable", 404: "not_found"}.get(status, "refused")


@dataclass(frozen=True, slots=True)
class Follow:
    tenant: str
    deployment: str
    source: str  # as `parse_source` reads it
    registry: Registry
    model: str  # the sluice model each version is pushed into
    plan: str  # as `parse_plan` reads it
    watch: str  # `Source.watch`: what finds the binding from an event
    tracking_uri: str | None = None  # MLflow: where to poll (never with credentials)
    tag_back: bool = False  # MLflow: tag the version with the deployment and revision serving it
    # Made by the machine's operator (the CLI), not by a tenant through the API: off AWS such a
    # binding is read with MLflow's own client and the operator's environment (any tracking URI,
    # the operator's credentials); a tenant's is read as on AWS, from admitted servers alone.
    operator: bool = False
    revision: int = 1  # each write adds one; a write names the revision it read
    state: FollowState = "waiting"
    seen: str | None = None  # the registry's version last taken (claimed)
    # When the registry made the change `seen` was taken for (SageMaker: the approval event's
    # time): an approval made before it, delivered after it, is superseded, not rolled out.
    seen_at: float | None = None
    claimed_at: float | None = None  # while `pushing`: when `seen` was claimed (the lease's start)
    claimed_by: str | None = None  # while `pushing`: the poller that claimed it
    error: PollError | None = None  # the last poll, if it failed
    history: tuple[FollowEvent, ...] = ()  # oldest first, at most MAX_HISTORY
    created_at: float = field(default_factory=now)
    created_by: str = ""
    updated_at: float | None = None

    @property
    def last(self) -> FollowEvent | None:
        return self.history[-1] if self.history else None

    def last_of(self, version: str) -> FollowEvent | None:
        """What became of `version` last, if the history still holds it."""
        return next((e for e in reversed(self.history) if e.version == version), None)

    def taking(self, version: str) -> bool:
        """Whether `version` is still being taken: claimed, or its rollout started, and neither
        rejected nor another version taken since."""
        last = self.last_of(version)
        return self.seen == version and last is not None and last.outcome in TAKING

    def parsed_source(self) -> Source:
        return parse_source(self.source)

    def parsed_plan(self) -> Plan:
        return parse_plan(self.plan)

    def claim_started(self) -> float | None:
        """When the claim of a binding `pushing` was taken (a binding stored before claims
        were timed: its `pushing` event's time); None when nothing is claimed."""
        if self.state != "pushing":
            return None
        if self.claimed_at is not None:
            return self.claimed_at
        last = self.last
        return last.at if last is not None and last.outcome == "pushing" else None


def recorded(follow: Follow, event: FollowEvent, *, seen: str | None = None) -> Follow:
    """The binding with `event` recorded as the latest: it replaces its version's claim or
    started rollout, or the note of the same registry change (said again, more fully)."""
    replaced = [
        e for e in follow.history
        if e.version == event.version
        and (e.outcome in TAKING or (event.outcome in NOTES and (e.outcome, e.changed_at) == (event.outcome, event.changed_at)))
    ]  # fmt: skip
    if event.outcome != "pushing" and replaced and replaced[-1].outcome == "pushing" and replaced[-1].reason:
        event = replace(event, reason=f"{replaced[-1].reason}; {event.reason}")  # a claim taken over says so to the end
    if event.changed_at is None and replaced:  # the approval a take is for, kept to the version's end
        event = replace(event, changed_at=replaced[-1].changed_at)
    event = replace(event, reason=event.reason[:MAX_REASON])
    kept = tuple(e for e in follow.history if e not in replaced)
    state = state_of(event.outcome)
    pushing = state == "pushing"
    return replace(
        follow,
        history=(*kept, event)[-MAX_HISTORY:],
        state=state,
        seen=follow.seen if seen is None else seen,
        updated_at=event.at,
        claimed_at=follow.claimed_at if pushing else None,
        claimed_by=follow.claimed_by if pushing else None,
    )


def state_of(outcome: str) -> FollowState:
    if outcome in FAILED:
        return "failed"
    return {"pushing": "pushing", "rolling_out": "rolling_out", "completed": "completed"}.get(outcome, "waiting")  # type: ignore[return-value]



@dataclass(frozen=True, slots=True)
class PackageStateChange:
    """EventBridge's "SageMaker Model Package State Change" event, typed: the package, its group
    (as the ARN a binding follows) and its approval status."""

    arn: str
    group: str
    group_arn: str
    version: int
    approval_status: str
    changed_at: float | None = None  # the event's `time`: when SageMaker made the change

    @property
    def watches(self) -> tuple[str, ...]:
        """What finds the bindings of the group: its spelling in lower case (`group_watch`), and
        as the event names it, which bindings stored before watches were spelled so carry."""
        return tuple(dict.fromkeys((f"sagemaker:{group_watch(self.group_arn)}", f"sagemaker:{self.group_arn}")))

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> PackageStateChange:
        detail = event.get("detail") if isinstance(event, dict) else None
        if event.get("detail-type") != "SageMaker Model Package State Change" or not isinstance(detail, dict):
            raise InvalidRequest("not a SageMaker Model Package State Change event", field="event")
        arn = str(detail.get("ModelPackageArn", ""))
        found = PACKAGE_ARN.match(arn)
        # The package's ARN spells the group's name in lower case; the event's group name keeps its case.
        group = str(detail.get("ModelPackageGroupName"))
        if found is None or group.lower() != found["group"].lower() or re.fullmatch(GROUP_NAME, group) is None:
            raise InvalidRequest(f"the event names no versioned model package ({arn!r})", field="event")
        group_arn = f"arn:{found['partition']}:sagemaker:{found['region']}:{found['account']}:model-package-group/{group}"
        status = str(detail.get("ModelApprovalStatus") or "PendingManualApproval")
        return cls(arn, group, group_arn, int(found["version"]), status, _event_time(event.get("time")))

    def _since(self, when: float | None) -> float:
        """This change's time less `when`: below 0 made before it, above 0 after; 0 where either
        time is unknown."""
        if self.changed_at is None or when is None:
            return 0.0
        return self.changed_at - when

    def meaning(self, follow: Follow) -> ChangeMeaning:
        """What this change is to `follow`, judged by the last change of its version the binding
        acted on (EventBridge keeps no order, delivers a change more than once, and retries one
        for up to an hour); the package's state now is the latest change made, not the latest
        delivered:

        - `stale`: made before that change, or that change again (a rejection the version's
          approval since undid; an approval a rejection since took back);
        - `rejected`: a new rejection; `withdrawn`: a version taken, whose story has ended,
          back to pending approval;
        - `update`: an approval of a version taken and neither rejected nor withdrawn since
          (SageMaker tells of any change to a package that stays approved);
        - `superseded`: an approval made before the one the binding took its current version for;
        - `approved`: a first approval; `approved_again`: one after a rejection or withdrawal;
        - `pending`: nothing to note (a version never taken, or one whose rollout runs)."""
        version = str(self.version)
        last = follow.last_of(version)
        known = last.changed_at if last is not None else None
        if known is None and follow.seen == version:
            known = follow.seen_at  # a binding stored before its events kept their change's time
        since = self._since(known)
        if since < 0:
            return "stale"
        if self.approval_status == "Rejected":
            return "stale" if last is not None and last.outcome == "rejected" and since == 0 else "rejected"
        if self.approval_status != "Approved":
            if last is None or last.outcome in TAKING or (last.outcome == "withdrawn" and since == 0):
                return "pending"
            return "withdrawn"
        if last is not None and last.outcome not in NOTES:
            return "update"
        if last is not None and since == 0:
            return "stale"
        if follow.seen != version and self._since(follow.seen_at) < 0:
            return "superseded"
        return "approved" if last is None else "approved_again"


def _event_time(text: object) -> float | None:
    """An EventBridge event's `time` (`2026-03-02T09:41:27Z`) as a timestamp; None if absent or unreadable."""
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


