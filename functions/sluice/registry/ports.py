"""The registry's ports, one per aggregate, and `Registry`, which is all of them.

Every method is scoped by tenant except the API key lookup, which is what establishes the
tenant in the first place. Missing and duplicate records raise the domain's NotFound and
Conflict, naming the field. A service types its dependency as the narrowest port it uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from sluice.domain import ApiKey, Deployment, DeploymentChange, Model, ModelVersion
    from sluice.domain.follows import Follow
    from sluice.domain.jobs import BatchJob, ChunkResult, JobStatus
    from sluice.domain.optimize_jobs import OptimizeJob, OptimizeStatus
    from sluice.domain.schedules import Schedule
    from sluice.domain.stat_numbers import StatNumbers
    from sluice.registry.guards import Catalog


class ModelRegistry(Protocol):
    """Models and their versions. Names are unique per tenant."""

    def create_model(self, model: Model) -> Model: ...
    def get_model(self, tenant: str, name: str) -> Model: ...
    def list_models(self, tenant: str) -> list[Model]: ...
    def delete_model(self, tenant: str, name: str, *, catalog: Catalog | None = None) -> None:
        """Delete a model and all of its versions; given `catalog` (the tenant's counters read
        before the caller's checks, `DeploymentRegistry.catalog_read`), only if no deployment
        was written since (StaleRead otherwise: `sluice.registry.guards`)."""
        ...

    def add_version(self, version: ModelVersion) -> ModelVersion:
        """Store `version` under the next number, assigned atomically (the one given is ignored).
        Numbers are never reused, even after a delete."""
        ...

    def get_version(self, tenant: str, model: str, version: int) -> ModelVersion: ...
    def latest_version(self, tenant: str, model: str) -> ModelVersion: ...
    def list_versions(self, tenant: str, model: str) -> list[ModelVersion]: ...
    def delete_version(self, tenant: str, model: str, version: int, *, catalog: Catalog | None = None) -> None:
        """Delete one version; `catalog` as `delete_model`'s."""
        ...

    def replace_version(self, version: ModelVersion) -> ModelVersion:
        """Store `version` over the existing version of the same number and artifact (its tuned
        session options change; nothing else a caller sees should). NotFound if it is not there,
        or if that number now names another artifact (its model deleted and made again)."""
        ...

    def uses_runtime(self, runtime: str) -> bool:
        """Whether any version, of any tenant, runs on `runtime`: a process about to serve
        imports that runtime's client first only where one does (`sluice serve`'s workers)."""
        ...


class DeploymentRegistry(Protocol):
    """Deployments and the history of their changes. Updates are optimistic: they name the
    revision they replace. A create or an update may also rest on other deployments the
    caller read to decide it (`refs_read`: a policy's references, followed to refuse a cycle):
    it is stored only if each of them is still stored as it was read (same revision, same
    `updated_at`; one deleted and created again is not the one read), checked in the same
    atomic write. Otherwise nothing is stored and StaleRead (a Conflict, 409, naming `policy`)
    says to decide again from a fresh read. At most `guards.MAX_REFS_READ` of them. A write
    that names the tenant's counters it read before its checks (`catalog`) is stored only if
    no version, model or deployment was deleted since, and a delete that names them only if no
    deployment was written since (`sluice.registry.guards`: a version or a deployment in use is
    never deleted)."""

    def catalog_read(self, tenant: str) -> Catalog:
        """The tenant's counters of deployment writes and of deletes, now."""
        ...

    def create_deployment(self, deployment: Deployment, *, refs_read: Iterable[Deployment] = (), catalog: Catalog | None = None) -> Deployment: ...
    def get_deployment(self, tenant: str, name: str) -> Deployment: ...
    def list_deployments(self, tenant: str) -> list[Deployment]: ...
    def update_deployment(
        self,
        deployment: Deployment,
        *,
        expected_revision: int,
        note: dict[str, Any] | None = None,
        refs_read: Iterable[Deployment] = (),
        catalog: Catalog | None = None,
    ) -> Deployment:
        """Store `deployment` as revision `expected_revision + 1` and record the change (with
        `note`, why it was made, when a rollout made it)."""
        ...

    def delete_deployment(self, tenant: str, name: str, *, by: str = "", catalog: Catalog | None = None) -> None: ...
    def deployment_history(self, tenant: str, name: str) -> list[DeploymentChange]:
        """Every change of the name, oldest first, across deletes and re-creates."""
        ...

    def running_rollouts(self) -> list[tuple[str, str]]:
        """(tenant, deployment) of every deployment whose rollout is running, or whose
        rollout's endpoint weights wait (`rollout.endpoint.pending`), in every tenant: for the
        rollout controller alone, which acts for each tenant in turn."""
        ...


class KeyRegistry(Protocol):
    """API keys. Only the hash of a key is stored; ids are unique across tenants."""

    def put_api_key(self, key: ApiKey) -> ApiKey: ...
    def get_api_key(self, key_id: str) -> ApiKey | None: ...
    def list_api_keys(self, tenant: str) -> list[ApiKey]: ...
    def revoke_api_key(self, tenant: str, key_id: str, *, keep_an_admin: bool = False) -> ApiKey:
        """Revoke a key (again: a no-op returning the revoked key). With `keep_an_admin`, a
        revoke that would leave the tenant no active admin key is refused (Conflict naming
        `key_id`), decided in the same atomic write as the revoke: of two admin keys revoking
        each other at once, one revoke is refused."""
        ...


class JobRegistry(Protocol):
    """Batch jobs and their scored chunks. Status moves are checked (`sluice.domain.jobs.MOVES`);
    a terminal job refuses every change with Conflict. Lists come newest first.

    One job per output folder: a job that is not finished holds its `output_uri` (per tenant),
    from its creation (in the same atomic write) to its last move (which lets go of it)."""

    def create_job(self, job: BatchJob, *, replacing: str | None = None) -> BatchJob:
        """Store a new job (Conflict naming `id` if its id is taken) and, unless it is finished
        already, the hold on its output folder. A folder another job holds refuses it with
        OutputInUse (a Conflict naming `output_uri`, whose `holder` is that job's id), unless
        that job is `replacing`: one the caller found finished, or dead and now FAILED, whose
        hold passes to this job. Of two creates racing for one folder, one is refused."""
        ...

    def output_holder(self, tenant: str, output_uri: str) -> str | None:
        """The id of the job that holds the output folder, or None."""
        ...

    def get_job(self, tenant: str, job_id: str) -> BatchJob: ...
    def list_jobs(self, tenant: str, *, limit: int = 100, schedule: str | None = None) -> list[BatchJob]:
        """The tenant's newest jobs; with `schedule`, only those that name that schedule (its
        runs, however many other jobs the tenant made since)."""
        ...

    def update_job(
        self, tenant: str, job_id: str, *, status: JobStatus | None = None, **fields: object
    ) -> BatchJob:
        """Set `fields` (names in `sluice.domain.jobs.UPDATABLE`) and move to `status`; a move
        to a terminal status lets go of the job's output folder."""
        ...

    def record_chunk(self, tenant: str, job_id: str, result: ChunkResult) -> bool:
        """Add a scored chunk to the job's progress and counts, atomically and once: True the
        first time, False when it was recorded before or the job is no longer RUNNING."""
        ...

    def list_chunks(self, tenant: str, job_id: str) -> list[ChunkResult]: ...
    def get_chunk(self, tenant: str, job_id: str, index: int) -> ChunkResult | None:
        """The chunk as recorded, or None when it was not."""
        ...


class OptimizeJobRegistry(Protocol):
    """Optimize jobs, kept where every worker reads them. Status moves are checked
    (`sluice.domain.optimize_jobs.check_optimize_move`); a finished job refuses every change
    with Conflict. Lists come newest first."""

    def create_optimize_job(self, job: OptimizeJob) -> OptimizeJob: ...
    def get_optimize_job(self, tenant: str, job_id: str) -> OptimizeJob: ...
    def list_optimize_jobs(self, tenant: str, *, limit: int = 100) -> list[OptimizeJob]: ...
    def update_optimize_job(
        self, tenant: str, job_id: str, *, status: OptimizeStatus | None = None, **fields: object
    ) -> OptimizeJob:
        """Set `fields` (names in `sluice.domain.optimize_jobs.UPDATABLE`) and move to `status`."""
        ...


class StatsRegistry(Protocol):
    """Statistics: additive counters (and running maxima) per deployment revision and subject
    (`variant:<name>`, `mirror:<name>`, `member:<name>`), merged from many containers; and
    which variant answered a request, kept for bandit feedback.

    `stat_numbers`: the values a statistic may have here (`sluice.domain.stat_numbers`); the
    stats recorder, which every count goes through, holds none outside it."""

    stat_numbers: StatNumbers

    def merge_stats(
        self, tenant: str, deployment: str, revision: int, subject: str,
        sums: dict[str, float], maxes: dict[str, float],
    ) -> None: ...  # fmt: skip
    def read_stats(self, tenant: str, deployment: str, revision: int) -> dict[str, dict[str, float]]: ...
    def put_assignment(self, tenant: str, deployment: str, request_id: str, variants: Sequence[str], *, revision: int) -> None:
        """The variants the request's bandit splits chose (each by its path in the policy:
        `a` at the top, `m1/a` in ensemble member `m1`), at the deployment's `revision`, over
        any assignment of the request before."""
        ...

    def get_assignment(self, tenant: str, deployment: str, request_id: str) -> tuple[tuple[str, ...], int | None] | None:
        """(variants, revision) of the request's assignment (revision None: kept before revisions
        were), or None."""
        ...

    def claim_reward(self, tenant: str, deployment: str, request_id: str, *, made: int) -> bool:
        """Record that feedback was given for a request to the deployment made at revision
        `made` (`made_at_revision`): True the first time only. A claim of an earlier deployment
        of the name (deleted since) is taken over; one kept before claims had `made`, kept."""
        ...


class MonitorRegistry(Protocol):
    """Model monitoring: one baseline per deployment (a profile of the data it was trained on,
    with the revision it was taken at), and the profiles of its traffic, one record per
    flush of a process (revision, variant, the window's start in epoch seconds), merged when
    read. Profiles are JSON-able documents (`sluice.monitor.sketches.Profile.to_dict`). For
    ground truth, predictions kept by request id for a while, each labelled row claimed once,
    and the labelled rows' counts appended per window like profiles."""

    def put_baseline(self, tenant: str, deployment: str, baseline: dict[str, Any]) -> None:
        """Store the deployment's baseline over any it had."""
        ...

    def get_baseline(self, tenant: str, deployment: str) -> dict[str, Any] | None: ...
    def delete_baseline(self, tenant: str, deployment: str) -> None:
        """Forget the deployment's baseline (it was deleted); none: nothing to do."""
        ...

    def add_profile(self, tenant: str, deployment: str, revision: int, variant: str, window: int, profile: dict[str, Any]) -> None: ...
    def read_profiles(self, tenant: str, deployment: str, revision: int, *, since: int = 0) -> list[tuple[str, int, dict[str, Any]]]:
        """(variant, window, profile) of every record of the revision whose window starts at
        `since` or later, oldest window first."""
        ...

    def has_baseline(self, tenant: str, deployment: str) -> bool: ...
    def monitored(self) -> list[tuple[str, str]]:
        """(tenant, deployment) of every deployment with a baseline, in every tenant (the
        scheduled check's list; on DynamoDB a scan that reads the keys alone)."""
        ...


    # Ground truth: predictions kept by request id, and the labelled ones' counts per window.
    def keep_predictions(self, tenant: str, deployment: str, records: list[dict[str, Any]], *, expires_at: float) -> list[str]:
        """Store each record (`request_id`, `revision`, `variant`, `window`, what it predicted:
        `sluice.monitor.kept`) under its request id, over any kept before, until `expires_at`.
        The request ids of records too large to store ever are answered, the others stored."""
        ...

    def find_predictions(self, tenant: str, deployment: str, request_ids: list[str], *, now: float) -> dict[str, dict[str, Any]]:
        """The records kept for those request ids that have not expired at `now`, by id."""
        ...

    def claim_labels(self, tenant: str, deployment: str, rows: list[tuple[str, int]], *, expires_at: float, made: int) -> list[bool]:
        """Record that (request id, row) of the deployment made at revision `made` was labelled:
        True for each the first time only, as `claim_reward` (an earlier deployment's claim is
        taken over). A call that fails claims none of its rows."""
        ...

    def release_labels(self, tenant: str, deployment: str, rows: list[tuple[str, int]]) -> None:
        """Forget that those rows were labelled (their counts could not be written): posting
        their labels again counts them."""
        ...

    def add_outcomes(self, tenant: str, deployment: str, revision: int, window: int, outcomes: dict[str, Any]) -> None:
        """Append one record of labelled counts (`{variant: Outcomes.to_dict()}`) to a window."""
        ...

    def read_outcomes(self, tenant: str, deployment: str, revision: int) -> list[tuple[int, dict[str, Any]]]:
        """(window, outcomes) of every record of the revision, oldest window first."""
        ...


class AnswerRegistry(Protocol):
    """The prediction cache's shared tier: answers (opaque bytes) by deployment and key,
    each until `expires_at` (epoch seconds). A read at `now` past it finds nothing, whether or
    not the store has removed the record yet."""

    def get_cached_answer(self, tenant: str, deployment: str, key: str, *, now: float) -> bytes | None: ...
    def put_cached_answer(self, tenant: str, deployment: str, key: str, body: bytes, *, expires_at: float) -> None: ...


@dataclass(frozen=True, slots=True)
class MessageWindow:
    """One fixed window of a connection's rate: its name (such as `1s#1764160000`), the
    messages it holds, and when its count may be removed (epoch seconds)."""

    name: str
    limit: int
    expires_at: float


class ConnectionRegistry(Protocol):
    """Messages counted per WebSocket connection in fixed windows, shared by every container
    that answers the connection (a Lambda keeps no count between invocations)."""

    def count_message(self, tenant: str, connection: str, windows: Sequence[MessageWindow]) -> int | None:
        """Count one message of `connection` in every one of `windows` (each named once), or
        in none: None when each held fewer than its limit (now counted); else the index of a
        full one, and the message is counted nowhere (a refused message costs nothing)."""
        ...


class ScheduleRegistry(Protocol):
    """Batch schedules, by tenant and name."""

    def create_schedule(self, schedule: Schedule) -> Schedule: ...
    def get_schedule(self, tenant: str, name: str) -> Schedule: ...
    def list_schedules(self, tenant: str) -> list[Schedule]: ...
    def update_schedule(
        self, tenant: str, name: str, *, expect: Mapping[str, object] | None = None, **fields: object
    ) -> Schedule:
        """Set some of `SCHEDULE_UPDATABLE`; NotFound if there is no such schedule. With
        `expect` (fields of `SCHEDULE_UPDATABLE` as they were read; None: not set), only while
        each still holds that value, else StaleRead and nothing is written: of two schedulers
        recording the same thing, one write is made."""
        ...

    def delete_schedule(self, tenant: str, name: str) -> None: ...


class FollowRegistry(Protocol):
    """Follow bindings: at most one per deployment. Writes are conditional on the binding's
    `revision`: an update names the revision it read, and is refused (Conflict naming
    `revision`) when another writer got there first, so two pollers never both take a version."""

    def create_follow(self, follow: Follow) -> Follow:
        """Store a new binding at revision 1; Conflict naming `deployment` if it has one."""
        ...

    def get_follow(self, tenant: str, deployment: str) -> Follow: ...
    def list_follows(self, tenant: str) -> list[Follow]: ...
    def update_follow(self, follow: Follow, *, expected_revision: int) -> Follow:
        """Store `follow` as revision `expected_revision + 1` if the stored one is at
        `expected_revision`; NotFound if it is gone, Conflict naming `revision` if it moved."""
        ...

    def delete_follow(self, tenant: str, deployment: str) -> None: ...
    def followers(self, watch: str | None = None) -> list[tuple[str, str]]:
        """(tenant, deployment) of every binding in every tenant (of `watch` alone when given):
        for the poller and the registry event handler, which act for each tenant in turn."""
        ...


class Registry(ModelRegistry, DeploymentRegistry, KeyRegistry, JobRegistry, OptimizeJobRegistry, ScheduleRegistry, StatsRegistry, MonitorRegistry, FollowRegistry, AnswerRegistry, ConnectionRegistry, Protocol):
    """Everything sluice stores: what `container.registry` is."""
