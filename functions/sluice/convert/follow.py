"""What a follow binding does when its registry offers a new version: claim it on the binding
(conditionally: never twice), pull it (the ONNX model as it is, or converted and checked),
push it into the binding's model, start the binding's rollout on its deployment, and record
each outcome, with its reason, on the binding (`sluice.services.follows`).

- MLflow: `poll_once` asks the tracking server where each followed alias (or `latest`) points
  now, through an `MlflowSource`: MLflow's own client on the user's machine (`sluice registries
  poll` once, `sluice serve` on a thread, `follow_poll_s`), MLflow's REST API on AWS
  (`sluice.convert.mlflow_rest`, the registry event function on a schedule).
- Both: a claim refused because something else wrote the binding between its read and the
  claim (`BindingChanged`: an event about another package, the poll noting its error) is
  decided again on the binding as it is now, up to `CLAIM_TRIES` times; only a claim of the
  same version made meanwhile makes it "taken elsewhere". A binding written by others at each
  try (`Contended`) takes nothing now: the poll's next look decides again; an event fails
  (`DeliverAgain`, once every other binding of it was told), so that Lambda delivers it again.
- SageMaker Model Registry: `on_package_event` takes EventBridge's Model Package State Change
  event (`sluice.handlers.registry_events` on AWS): an Approved package of a followed group is
  pushed; a Rejected one is recorded (and the rollout of it, if one runs, aborted, whenever it
  started); one taken before and back to pending approval is noted, so that approving it again
  is told from an update of a package that stays approved (`PackageStateChange.meaning`).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sluice.domain.errors import BackendError, Conflict, SluiceError
from sluice.domain.follows import NOTES, FollowEvent, PackageStateChange, group_watch
from sluice.polling import Poller
from sluice.services.follows import BindingChanged, acting_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.clients import AwsClients
    from sluice.convert.registry_pull import Pulled
    from sluice.domain.follows import Follow
    from sluice.services.follows import FollowService
    from sluice.services.models import ModelService

logger = logging.getLogger(__name__)
APPROVED = "Approved"
CLAIM_TRIES = 5  # decisions on a fresh read, while other writes keep landing between a read and its claim
NEXT_POLL = "the next poll decides again"
DELIVERED_AGAIN = (
    "the event's invocation fails, so that Lambda delivers it again (twice, within minutes; then it is "
    "kept in the function's dead-letter queue, to be redriven)"
)


class Contended(Conflict):
    """A version not claimed because others wrote the binding between each read and claim."""


class DeliverAgain(Exception):  # what the caller is to do, not a failure of sluice
    """A package event whose version some binding could not claim (`Contended`): the event's
    handler fails, for the event to be delivered again. `done`: what each binding made of it."""

    def __init__(self, done: dict[str, str]) -> None:
        super().__init__(f"follow bindings contended, the event to be delivered again: {done}")
        self.done = done


class MlflowSource(Protocol):
    """Where a binding's MLflow registry is read: the version its alias (or `latest`) names
    now, that version's model as ONNX, and tags set on it."""

    def current_version(self, follow: Follow) -> int: ...

    def pull(self, follow: Follow, version: int, tmp: Path) -> Pulled: ...

    def set_tags(self, follow: Follow, version: int, tags: dict[str, str]) -> None: ...


class MlflowClientSource:
    """MLflow's own client (`sluice[mlflow]`), with the tracking URI's credentials from
    MLflow's environment variables; any flavor the converters take is converted."""

    def current_version(self, follow: Follow) -> int:
        from sluice.convert.mlflow_models import current_version

        return current_version(follow.source, follow.tracking_uri or "")[0]

    def pull(self, follow: Follow, version: int, tmp: Path) -> Pulled:
        from dataclasses import replace

        from sluice.convert.registry_pull import from_mlflow

        source = follow.parsed_source()
        pulled = from_mlflow(f"models:/{source.name}/{version}", follow.tracking_uri, tmp)
        return replace(pulled, source={**pulled.source, "uri": follow.source, "alias": source.alias})

    def set_tags(self, follow: Follow, version: int, tags: dict[str, str]) -> None:
        from sluice.convert.mlflow_models import set_tags

        set_tags(follow.tracking_uri or "", follow.parsed_source().name, version, tags)


class Follower:
    """`mlflow`: where tenants' MLflow bindings are read (the admitted servers alone);
    `operator_mlflow`: where the operator's own are (`Follow.operator`), if elsewhere."""

    def __init__(
        self, follows: FollowService, models: ModelService, *, mlflow: MlflowSource, clients: AwsClients | None = None,
        operator_mlflow: MlflowSource | None = None,
    ) -> None:  # fmt: skip
        self.follows = follows
        self.models = models
        self._clients = clients
        self.mlflow = mlflow
        self.operator_mlflow = operator_mlflow or mlflow

    def source(self, follow: Follow) -> MlflowSource:
        """Where `follow` is read: as its maker may read (a tenant's binding never with the
        operator's client, environment or credentials)."""
        return self.operator_mlflow if follow.operator else self.mlflow

    @property
    def clients(self) -> AwsClients:
        if self._clients is None:
            from sluice.clients import AwsClients

            self._clients = AwsClients()
        return self._clients

    # MLflow -----------------------------------------------------------------------------
    def poll_once(self) -> dict[str, str]:
        """One look at every binding in every tenant: each rollout a binding started that has
        ended is recorded; each MLflow alias (or `latest`) that moved is pushed and rolled out;
        a claim whose lease lapsed (its poller died) is taken over. What happened, by
        `tenant/deployment`; a failure is kept on the binding until a poll succeeds."""
        done: dict[str, str] = {}
        for tenant, deployment in self.follows.registry.followers():
            name = f"{tenant}/{deployment}"
            try:
                follow, done[name] = self._decided(tenant, deployment, self._look, then=NEXT_POLL)
                if follow.error is not None:
                    self.follows.note_error(tenant, deployment, None)
            except Exception as exc:  # MLflow not reachable, the binding gone meanwhile: the next poll tries again
                done[name] = self._failed(tenant, deployment, exc)
        return done

    def _failed(self, tenant: str, deployment: str, exc: Exception) -> str:
        """A binding's look that failed, kept on it; whatever failed, the look goes on to the
        other bindings (a server's answer nobody foresaw, `{}` for a version, stopped every
        tenant's poll behind it)."""
        name = f"{tenant}/{deployment}"
        if not isinstance(exc, SluiceError):
            logger.exception("follow binding %s: %s", name, type(exc).__name__)
            exc = BackendError(f"the source answered what sluice could not read ({type(exc).__name__}); the next look tries again", poll_error="server_error")
        else:
            logger.warning("follow binding %s: %s", name, exc.message)
        try:
            self.follows.note_error(tenant, deployment, exc)
        except Exception:
            logger.exception("follow binding %s: its error could not be kept", name)
        return f"error: {exc.message}"

    def _look(self, follow: Follow) -> str:
        if follow.registry == "mlflow":
            return self._poll(follow)
        return self._retake_package(follow) if self.follows.lapsed(follow) else follow.state

    def _poll(self, follow: Follow) -> str:
        from sluice.convert.mlflow_models import without_credentials

        mlflow = self.source(follow)
        version = mlflow.current_version(follow)
        if str(version) == follow.seen and not self.follows.lapsed(follow):
            return follow.state
        name = follow.parsed_source().name
        match = {"registry": "mlflow", "name": name, "version": version, "tracking_uri": without_credentials(follow.tracking_uri or "")}
        return self.take(follow, str(version), lambda tmp: mlflow.pull(follow, version, tmp), match)

    # SageMaker Model Registry -------------------------------------------------------------
    def on_package_event(self, event: dict[str, Any]) -> dict[str, str]:
        """The bindings that follow the event's package group, each told of it."""
        change = PackageStateChange.from_event(event)
        done: dict[str, str] = {}
        bindings = dict.fromkeys(b for watch in change.watches for b in self.follows.registry.followers(watch))
        contended = False
        for tenant, deployment in bindings:
            name = f"{tenant}/{deployment}"
            try:
                done[name] = self._decided(tenant, deployment, lambda follow: self._package(follow, change), then=DELIVERED_AGAIN)[1]
            except Exception as exc:  # the group not admitted for its tenant, the binding gone meanwhile
                done[name] = self._failed(tenant, deployment, exc)
                contended = contended or isinstance(exc, Contended)
        if contended:  # a success is never delivered again: this approval would be lost
            raise DeliverAgain(done)
        return done

    def _package(self, follow: Follow, change: PackageStateChange) -> str:
        version = str(change.version)
        lapsed = follow.seen == version and change.approval_status == APPROVED and self.follows.lapsed(follow)
        meaning = "approved" if lapsed else change.meaning(follow)
        if meaning == "rejected":
            return self._rejected(follow, version, change)
        if meaning == "withdrawn":
            reason = f"{change.arn} is {change.approval_status} in SageMaker Model Registry: approved again, it is taken again"
            event = FollowEvent(version, "withdrawn", self.follows.clock(), reason, changed_at=change.changed_at)
            self.follows.record(follow.tenant, follow.deployment, event)
            return "withdrawn"
        if meaning == "superseded":
            logger.info("follow binding %s/%s: %s approved before version %s, taken already", follow.tenant, follow.deployment, change.arn, follow.seen)
            return f"superseded by version {follow.seen}"
        if meaning not in ("approved", "approved_again"):
            return follow.state  # the same change again, one made before the last acted on, an update, pending approval
        reads = self.follows.may_read(follow)
        if reads is not None:  # a tenant's binding: its group, and later its model data, as the operator lists them
            reads.check_group(follow.tenant, follow.parsed_source())
        model_data = None if reads is None else (lambda uri: reads.model_data_uri(follow.tenant, uri))

        def pull(tmp: Path) -> Pulled:
            from sluice.convert.registry_pull import from_package

            # Approved only, as DescribeModelPackage says now
            return from_package(change.arn, self.clients, tmp, model_data=model_data)

        def approved_now() -> None:
            from sluice.convert.sagemaker_packages import describe

            describe(change.arn, self.clients)  # refused unless Approved now

        return self.take(
            follow, version, pull, {"registry": "sagemaker", "arn": change.arn}, changed_at=change.changed_at,
            again=meaning == "approved_again", recheck=approved_now,
        )  # fmt: skip

    def _retake_package(self, follow: Follow) -> str:
        """A lapsed claim of a package: taken over as its approval would be (the package read
        again: one no longer Approved is recorded so)."""
        group = follow.source  # the package's ARN spells the group's name in lower case, as SageMaker does
        arn = f"{group_watch(group).replace(':model-package-group/', ':model-package/', 1)}/{follow.seen}"
        name = follow.parsed_source().name
        return self._package(follow, PackageStateChange(arn, name, group, int(follow.seen or 0), APPROVED))

    def _rejected(self, follow: Follow, version: str, change: PackageStateChange) -> str:
        """Recorded, and a rollout of the package aborted: one running now, or one a push of it
        started meanwhile (that push finds the rejection too when it records, and aborts)."""
        number = self._existing(follow, {"registry": "sagemaker", "arn": change.arn})
        reason = f"{change.arn} is Rejected in SageMaker Model Registry"

        def note(said: str) -> None:
            event = FollowEvent(version, "rejected", self.follows.clock(), said, number, changed_at=change.changed_at)
            self.follows.record(follow.tenant, follow.deployment, event)

        reason += self._abort(follow, number)
        note(reason)
        late = self._abort(follow, number)
        if late:
            note(reason + late)  # the same rejection, said more fully
        return "rejected"

    def _abort(self, follow: Follow, number: int | None) -> str:
        """The deployment's running rollout to `follow.model:number` aborted; what to add to the
        reason ("" when none runs)."""
        if number is None:
            return ""
        try:
            running = self.follows.registry.get_deployment(follow.tenant, follow.deployment).rollout
        except SluiceError:  # the deployment gone: nothing runs
            return ""
        if running is None or not running.active or (running.model, running.version) != (follow.model, number):
            return ""
        try:
            self.follows.rollouts.abort(acting_for(follow), follow.deployment)
        except SluiceError as exc:
            return f"; its rollout could not be aborted: {exc.message}"
        return "; its rollout was aborted: back to the stable policy"

    def _overtaken(self, follow: Follow, version: str) -> FollowEvent | None:
        """The rejection of `version` recorded while it was being taken, if one was: it stands."""
        try:
            last = self.follows.registry.get_follow(follow.tenant, follow.deployment).last_of(version)
        except SluiceError:  # the binding gone meanwhile
            return None
        return last if last is not None and last.outcome in NOTES else None

    # Both -------------------------------------------------------------------------------
    def _decided(self, tenant: str, deployment: str, act: Callable[[Follow], str], *, then: str) -> tuple[Follow, str]:
        """What `act` made of the binding (settled), and the binding it acted on: acted on again,
        on the binding as it is now, while its claim finds another write landed since the read;
        `Contended` (saying `then`, what comes of it) once that happened at each of `CLAIM_TRIES`."""
        follow = self.follows.settle(tenant, deployment)
        for _ in range(CLAIM_TRIES):
            try:
                return follow, act(follow)
            except BindingChanged as changed:
                follow = self.follows.settle(tenant, deployment, changed.now)
        raise Contended(
            f"follow binding {tenant}/{deployment} was written by others at each of {CLAIM_TRIES} tries to claim a version: "
            f"nothing was taken; {then}"
        )

    def take(
        self, follow: Follow, version: str, pull: Callable[[Path], Pulled], match: dict[str, Any], *,
        changed_at: float | None = None, again: bool = False, recheck: Callable[[], None] | None = None,
    ) -> str:  # fmt: skip
        """Claim `version`, pull it, push it and start the rollout; each outcome recorded. A
        version of the binding's model that came from the same place (`match`, on its
        source) is rolled out again rather than pushed twice, once `recheck` (the registry
        asked again: still approved?) passes; one the deployment serves already is recorded as
        completed. A rejection recorded meanwhile stands: no rollout is started, and one just
        started is aborted."""
        claimed = self.follows.claim(follow, version, changed_at=changed_at, again=again)
        if claimed is None:
            return "taken elsewhere"
        where = (follow.tenant, follow.deployment)

        def note(outcome: str, reason: str, model_version: int | None = None, revision: int | None = None) -> str:
            self.follows.record(*where, FollowEvent(version, outcome, self.follows.clock(), reason, model_version, revision))
            return outcome

        def refused(exc: SluiceError) -> str:
            return note("rejected" if exc.code == "package_not_approved" else "conversion_failed", exc.message)

        pulled, number = None, self._existing(follow, match)
        if number is None:
            try:
                with tempfile.TemporaryDirectory(prefix="sluice-follow-") as tmp:
                    pulled = pull(Path(tmp))
            except SluiceError as exc:
                return refused(exc)
            except Exception as exc:  # an answer nobody foresaw: recorded, so the claim ends
                logger.exception("follow binding %s/%s: pulling version %s", *where, version)
                return note("conversion_failed", f"version {version} could not be read from its source ({type(exc).__name__})")
            try:
                number = self.models.push(
                    acting_for(follow), follow.model, pulled.data, feature_names=pulled.feature_names, source=pulled.source,
                    description=f"followed from {follow.source} (version {version})",
                ).version  # fmt: skip
            except SluiceError as exc:
                return note("push_failed", exc.message)
        elif recheck is not None:
            try:
                recheck()
            except SluiceError as exc:
                return refused(exc)
        said = f"{'pushed as' if pulled is not None else 'already pushed as'} {follow.model}:{number}"
        serving = self.follows.registry.get_deployment(follow.tenant, follow.deployment)
        if serving.policy == {"kind": "single", "model": follow.model, "version": number}:
            return note("completed", f"{said}, which the deployment serves already", number, serving.revision)
        running = serving.rollout
        if running is not None and running.active and (running.model, running.version) == (follow.model, number):
            # A lapsed claim whose poller died after starting the rollout: it goes on.
            return note("rolling_out", f"{said}; its rollout was running already", number, serving.revision)
        overtaken = self._overtaken(follow, version)
        if overtaken is not None:
            return overtaken.outcome
        try:
            dep = self.follows.start_rollout(claimed, number)
        except SluiceError as exc:
            return note("rollout_refused", f"{said}; the rollout was refused: {exc.message}", number)
        reason = f"{said}; rollout started ({dep.rollout.reason if dep.rollout else ''})"
        if follow.tag_back and match.get("registry") == "mlflow":
            reason += self._tag_back(follow, match, dep.revision)
        outcome = note("rolling_out", reason, number, dep.revision)
        overtaken = self._overtaken(follow, version)
        if overtaken is not None:  # rejected while its rollout was being started
            self._abort(follow, number)
            return overtaken.outcome
        return outcome

    def _existing(self, follow: Follow, match: dict[str, Any]) -> int | None:
        """The newest version of the binding's model whose source matches, if any."""
        try:
            versions = self.models.registry.list_versions(follow.tenant, follow.model)
        except SluiceError:  # no such model yet: the first push makes it
            return None
        for v in reversed(versions):
            if v.source and all(v.source.get(k) == value for k, value in match.items()):
                return v.version
        return None

    def _tag_back(self, follow: Follow, match: dict[str, Any], revision: int) -> str:
        """MLflow's model version tagged with what serves it; a failure is said, not raised."""
        tags = {"sluice.deployment": follow.deployment, "sluice.revision": str(revision)}
        try:
            self.source(follow).set_tags(follow, int(match["version"]), tags)
        except SluiceError as exc:
            return f"; tagging back failed: {exc.message}"
        return f"; tagged {match['name']} version {match['version']} in MLflow"

class FollowPoller(Poller):
    """`sluice serve`'s poller of followed MLflow registries: `poll_once` every `interval_s`."""

    thread_name = "sluice-follows"
    what = "follow bindings' poll"

    def __init__(self, follower: Follower, *, interval_s: float) -> None:
        super().__init__(interval_s=interval_s)
        self.follower = follower

    def look(self) -> object:
        return self.follower.poll_once()
