"""Batch jobs as callers see them: submit, read, list, cancel. Every call is scoped to the
principal's tenant; another tenant's job is NotFound, as anything else of theirs is.

Where inputs may come from: through the API, only from the tenant's own inbox
(`<root>inbox/<tenant>/…`, see `BatchPaths`), so no caller can make the batch functions read
what another tenant uploaded. An input may be a prefix or a manifest (`objects.py`): a prefix
in the inbox lists only what is in it, and Plan holds each object a manifest lists to the
same inbox unless the operator started the job. Results always go to `<root>outbox/<tenant>/<job>/`. The CLI
acts as the operator of the machine it runs on and may name any input and output.

An upload (an S3 event, or a file dropped in the local inbox) starts a job whose id derives
from the object's identity (bucket, key, version or ETag; or path, size, mtime): the same
upload seen twice names the same job, which then starts once.

One job per output folder: a job is created holding its output folder (see
`JobRegistry.create_job`), and a second job into a folder whose job has not finished is
refused, naming that job. A job whose process is gone is found when it is read (`settled`):
one run on a machine by its heartbeat (or its process, on this host, being gone), one run by
Step Functions by its execution having ended; it is then marked FAILED, saying why, and its
folder may be taken.
"""

from __future__ import annotations

import contextlib
from dataclasses import InitVar, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sluice.batch.catalog import table_root
from sluice.batch.error_files import ERROR_ROWS_DEFAULT, ERROR_ROWS_MAX, first_error_rows
from sluice.batch.executions import job_for_execution
from sluice.batch.liveness import JobLiveness
from sluice.batch.objects import is_manifest, is_many
from sluice.batch.uris import as_uri, format_of, holds_input, is_s3, split_s3
from sluice.domain import Principal, check_name, now
from sluice.domain.errors import BadRequest, Conflict, Forbidden, NotFound, SluiceError, Unavailable
from sluice.domain.jobs import (
    BatchJob,
    CatalogTarget,
    OutputInUse,
    PublishTarget,
    check_format,
    check_key_columns,
    derived_job_id,
    new_job_id,
    require_publisher,
)
from sluice.domain.liveness import this_worker
from sluice.domain.locations import Location, confine, unsafe_s3_key

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy as np

    from sluice.batch.filestore import FileStore
    from sluice.batch.orchestrators import Orchestrator
    from sluice.batch.paths import BatchPaths
    from sluice.batch.runner import BatchRunner
    from sluice.domain.signature import Signature
    from sluice.registry import Registry
    from sluice.registry.precomputed import PrecomputedStore

@dataclass(eq=False)
class BatchService:
    registry: Registry
    orchestrator: Orchestrator | None
    paths: BatchPaths
    files: FileStore | None = None
    runner: InitVar[BatchRunner | Callable[[], BatchRunner] | None] = None  # or what builds it, when a job is found dead
    precomputed: PrecomputedStore | None = None  # where a job cancelled after it published is withdrawn
    liveness: JobLiveness = field(init=False)

    def __post_init__(self, runner: BatchRunner | Callable[[], BatchRunner] | None) -> None:
        self.liveness = JobLiveness(self.registry, self.orchestrator, runner)

    # What callers do ---------------------------------------------------------------------
    def submit(
        self,
        principal: Principal,
        *,
        deployment: str,
        input_uri: str,
        format: str | None = None,
        output_format: str | None = None,
        key_columns: Sequence[str] = (),
        output_uri: str | None = None,
        operator: bool = False,
        source: str = "api",
        job_id: str | None = None,
        start: bool = True,
        execution: str | None = None,
        schedule: str | None = None,
        scheduled_for: float | None = None,
        catalog: CatalogTarget | dict[str, str] | None = None,
        publish: PublishTarget | dict[str, Any] | None = None,
        runs_here: bool = False,
        input_version: str | None = None,
        retried: bool = False,
    ) -> BatchJob:
        """Create a job and (unless `start` is False: the caller runs it) start it.
        `operator` (the CLI) may read and write anywhere. `runs_here`: this process runs the
        job (with `start` False), and names itself on it from the start. `input_version`: the
        version an upload's event named, which Plan reads (`as_uploaded`). `retried`: a failed
        start leaves the job PENDING for the caller's retry (`_start`). A job into an output
        folder that an unfinished job holds is refused (OutputInUse, naming `output_uri`)."""
        principal.require("predict")
        if publish is not None:
            require_publisher(principal)
        check_name(deployment, field="deployment")
        self.registry.get_deployment(principal.tenant, deployment)  # NotFound across tenants
        uri = as_uri(input_uri) if operator else self.input_location(principal.tenant, input_uri).uri
        if not operator and output_uri is not None:
            raise BadRequest("results go to the tenant's outbox; output_uri is for the CLI", field="output_uri")
        keys = check_key_columns(key_columns, stored=source == "schedule")  # a schedule's run: its stored columns
        fmt = input_format(uri, format, source=source)
        default_out = "parquet" if catalog is not None else fmt  # a catalog table is Parquet
        out_fmt = check_format(output_format, field="output_format") if output_format else default_out
        job_id = job_id or new_job_id()
        target = CatalogTarget.parse(catalog)
        if target is not None:
            if out_fmt != "parquet":
                raise BadRequest("a job published to the catalog writes parquet (output_format)", field="output_format")
            if output_uri is None:  # Hive-style: the table's folder, one `job=<id>/` per job
                output_uri = table_root(self.paths.root, principal.tenant, target.table) + f"job={job_id}/"
        job = BatchJob(
            id=job_id,
            tenant=principal.tenant,
            deployment=deployment,
            input_uri=uri,
            output_uri=(as_uri(output_uri, field="output_uri") if output_uri else self.paths.outbox(principal.tenant, job_id)).rstrip("/") + "/",
            format=fmt,  # type: ignore[arg-type]
            output_format=out_fmt,  # type: ignore[arg-type]
            key_columns=keys,
            input_version=input_version,
            source=source,
            created_by=principal.subject,
            execution=execution,
            schedule=schedule,
            scheduled_for=scheduled_for,
            catalog=target,
            publish=PublishTarget.parse(publish),
            operator=operator and source not in ("upload", "inbox"),
        )
        if holds_input(job.output_uri, job.input_uri):  # its Plan clears an earlier job's parts there: the input's own files
            raise BadRequest(
                f"the output folder {job.output_uri} holds the input {job.input_uri}: a job's results replace the part files "
                "an earlier job left in its output folder, which would be its input; give another output folder",
                field="output_uri",
            )
        if operator and output_uri is not None and self.files is not None:  # a folder the CLI names
            self.files.check_folder(job.output_uri)
        if runs_here or (start and getattr(self.orchestrator, "keeps_heartbeat", False)):
            job = replace(job, worker=this_worker(), heartbeat_at=now())  # a process of this machine runs it
        job = self._create(job)
        return self._start(job, retried=retried) if start else job

    def get(self, principal: Principal, job_id: str) -> BatchJob:
        principal.require("predict")
        return self.settled(self.registry.get_job(principal.tenant, job_id), ask=True)

    def input_rows(self, principal: Principal, job_id: str, signature: Signature, *, limit: int) -> tuple[BatchJob, dict[str, np.ndarray]]:
        """The job and up to `limit` rows of its input that `signature` takes, read as its
        Plan reads them, confined where its Plan confines them (a model's baseline)."""
        from sluice.batch.sample import job_rows

        job = self.get(principal, job_id)
        assert self.files is not None
        return job, job_rows(job, signature, self.files, limit=limit, allowed=self.paths.input_root(job), field="job")

    def list(self, principal: Principal, *, limit: int = 100) -> list[BatchJob]:
        principal.require("predict")
        return [self.settled(j) for j in self.registry.list_jobs(principal.tenant, limit=limit)]

    def settled(self, job: BatchJob, *, ask: bool = False) -> BatchJob:
        """`job`, or `job` marked FAILED when what runs it is gone (see `JobLiveness`)."""
        return self.liveness.settled(job, ask=ask)

    def _create(self, job: BatchJob) -> BatchJob:
        """Store the job with the hold on its output folder; a folder held by a job found
        finished or dead (and so marked FAILED) is taken over from it."""
        try:
            return self.registry.create_job(job)
        except OutputInUse as taken:
            holder = self._holder(job.tenant, taken.holder)
            if holder is not None and not holder.terminal:
                raise self._in_use(job, holder) from None
            replacing = taken.holder
        try:
            return self.registry.create_job(job, replacing=replacing)
        except OutputInUse as again:  # another job took it meanwhile
            raise self._in_use(job, self._holder(job.tenant, again.holder)) from None

    def _holder(self, tenant: str, job_id: str) -> BatchJob | None:
        try:
            return self.settled(self.registry.get_job(tenant, job_id), ask=True)
        except NotFound:
            return None

    def _in_use(self, job: BatchJob, holder: BatchJob | None) -> OutputInUse:
        where = job.output_uri if job.operator else self._shown(job.output_uri)
        if holder is None:
            return OutputInUse(f"the output folder {where} is held by another batch job; try again", holder="")
        how = f"sluice batch cancel {holder.id}" if job.operator else f"POST /api/v1/batch-jobs/{holder.id}/cancel"
        return OutputInUse(
            f"the output folder {where} is being written by batch job {holder.id} ({holder.status}): "
            f"wait for it to finish, cancel it ({how}), or choose another output folder",
            holder=holder.id,
        )

    def _shown(self, uri: str) -> str:
        """A location of the batch root as a tenant sees it (`outbox/acme/job-…/`)."""
        return uri[len(self.paths.root) :] if uri.startswith(self.paths.root) else "of this job"

    def error_rows(self, principal: Principal, job_id: str, *, limit: int = ERROR_ROWS_DEFAULT) -> dict[str, Any]:
        """The first `limit` rows of the job's error files (see `error_files.first_error_rows`)."""
        principal.require("predict")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= ERROR_ROWS_MAX:
            raise BadRequest(f"limit must be a whole number from 1 to {ERROR_ROWS_MAX}", field="limit")
        job = self.registry.get_job(principal.tenant, job_id)  # NotFound across tenants
        return first_error_rows(self.files, job, limit)

    def cancel(self, principal: Principal, job_id: str) -> BatchJob:
        """A job that publishes (`publish`) is cancelled with the scope publishing needs: its
        cancel may withdraw a publication every caller of the tenant is served (admin)."""
        principal.require("predict")
        if self.registry.get_job(principal.tenant, job_id).publish is not None:  # NotFound across tenants
            require_publisher(principal)
        job = self.registry.update_job(principal.tenant, job_id, status="CANCELLED", finished_at=now())
        if self.orchestrator is not None:
            self.orchestrator.cancel(job)
        # Its Finalize may have published already. Where this process may not write the table
        # (the API on AWS reads it only), the execution's end withdraws it (`record_execution_end`).
        # NumPy and the codecs, imported here: not for a plain command
        from sluice.batch.publishing import withdraw_job

        with contextlib.suppress(SluiceError):
            withdraw_job(self.precomputed, job)
        return job

    # Uploads -------------------------------------------------------------------------------
    def start_upload(
        self,
        tenant: str,
        deployment: str,
        input_uri: str,
        *,
        identity: Sequence[str],
        source: str,
        options: dict[str, str] | None = None,
        version: str | None = None,
    ) -> BatchJob:
        """Start (once) the job for an uploaded file. A file that cannot become a job still
        gets one, FAILED with the reason, so the uploader can see what happened; one whose
        start failed (the workflow unavailable) is started by the next call, the upload event's
        retry. `options` are the upload's own settings (S3 metadata `sluice-key-columns`,
        comma-separated, and `sluice-output-format`); `version`, the one its event named."""
        options = options or {}
        job_id = derived_job_id("up" if source == "upload" else "in", *identity)
        try:
            found = self.registry.get_job(tenant, job_id)
        except NotFound:
            pass
        else:
            return self._start(found, retried=True) if _still_to_start(found, self.orchestrator) else found
        principal = _uploader(tenant)
        try:
            check_name(tenant, field="tenant")
            if is_s3(input_uri) and unsafe_s3_key(key := split_s3(input_uri)[1]):
                raise BadRequest(
                    f"the object's name {key!r} is not one sluice reads: a '?', '#', '%', backslash or control "
                    "character, or an empty, '.' or '..' segment, could be read as another object; rename it",
                    field="input_uri",
                )
            return self.submit(
                principal, deployment=deployment, input_uri=input_uri, operator=True, source=source,
                job_id=job_id, output_uri=self.paths.outbox(tenant, job_id),
                key_columns=options.get("sluice-key-columns", "").split(","),
                output_format=options.get("sluice-output-format") or None, input_version=version,
                retried=True,
            )  # fmt: skip
        except Conflict:
            return self.registry.get_job(tenant, job_id)  # the same upload, seen twice at once
        except SluiceError as exc:
            if exc.status >= 500:
                raise
            return self.refused(tenant, job_id, deployment=deployment, input_uri=input_uri, source=source,
                                created_by=principal.subject, error=exc.message)  # fmt: skip

    def refused(
        self,
        tenant: str,
        job_id: str,
        *,
        deployment: str,
        input_uri: str,
        source: str,
        created_by: str,
        error: str,
    ) -> BatchJob:
        """Record an upload's job that could not be made (no caller to answer), FAILED with why,
        so whoever waits for it sees what happened; its id is taken once, and a second call
        finds the first's record. (A schedule's run refused makes no job: `refused_runs`.)"""
        rejected = BatchJob(
            id=job_id, tenant=tenant, deployment=deployment[:63], input_uri=input_uri,
            output_uri=self.paths.outbox(tenant, job_id), format="csv", output_format="csv",
            status="FAILED", source=source, created_by=created_by, finished_at=now(), error=error,
        )  # fmt: skip
        try:
            return self.registry.create_job(rejected)
        except Conflict:
            return self.registry.get_job(tenant, job_id)

    # Executions started with a job specification ----------------------------------------
    def create_for_execution(self, spec: dict[str, Any], *, execution: str) -> BatchJob:
        """The job an execution started with a job specification runs (see `executions`)."""
        return job_for_execution(self, spec, execution=execution)

    # Helpers -------------------------------------------------------------------------------
    def _start(self, job: BatchJob, *, retried: bool = False) -> BatchJob:
        """Start `job`. One that could not be started is FAILED (it must not stay PENDING,
        holding its folder), unless its caller is `retried` with the same job (an upload's
        event): it stays PENDING, saying why, for that retry to start it (a second start of the
        execution named after the job is harmless)."""
        if self.orchestrator is None:
            self.registry.update_job(job.tenant, job.id, status="FAILED", finished_at=now(),
                                     error="batch jobs cannot run here: no orchestrator is configured")  # fmt: skip
            raise Unavailable("batch jobs cannot run here: SLUICE_ORCHESTRATOR is not set", field="orchestrator")
        try:
            execution = self.orchestrator.start(job)
        except SluiceError as exc:
            with contextlib.suppress(Conflict):
                if retried:
                    self.registry.update_job(job.tenant, job.id, error=exc.message)
                else:
                    self.registry.update_job(job.tenant, job.id, status="FAILED", finished_at=now(), error=exc.message)
            raise
        if execution is not None or job.error is not None:  # the error of a start that failed before goes
            job = self.registry.update_job(job.tenant, job.id, execution=execution, error=None)
        return job

    def input_location(self, tenant: str, uri: str, *, field: str = "input_uri") -> Location:
        """A batch input a tenant names, parsed once and confined to its inbox (see
        `sluice.domain.locations`): a prefix there holds only what is there; a manifest's
        objects are confined by Plan, each in turn."""
        inbox = self.paths.inbox_root(tenant)
        try:
            return confine(uri, (inbox,), field=field)
        except Forbidden:
            shown = inbox.uri if inbox.is_s3 else f"inbox/<path>, which names <path> in inbox/{tenant}/ of the server's batch folder"
            raise Forbidden(
                f"batch inputs must lie in your inbox ({shown}); upload the file there first", field=field
            ) from None


def _still_to_start(job: BatchJob, orchestrator: Any) -> bool:
    """An upload's job still to be started: PENDING with no execution, where its start failed
    (`_start` said why), or where the orchestrator names each execution after its job (Step
    Functions: a second start is a repeat, harmless), so that one whose invoker died between
    making it and starting it (a timeout, memory) is started by the event's retry rather than
    left PENDING with nothing to run it. A local orchestrator's job queued to run is not."""
    if job.status != "PENDING" or job.execution is not None:
        return False
    return job.error is not None or (orchestrator is not None and not orchestrator.keeps_heartbeat)


def _uploader(tenant: str) -> Principal:
    return Principal(tenant, frozenset({"predict"}), "upload")


def input_format(uri: str, format: str | None, *, source: str | None = None) -> str:
    """The format a job reads `uri` in, or a 400 naming why no job can (a compressed file, a
    name that says none, a format given for a prefix): what a job is refused for when it is
    submitted, and a schedule when it is made, on a rendering of its template."""
    if is_many(uri):
        # A prefix or a manifest: Plan finds the format from its objects' names.
        if source in ("upload", "inbox") and not is_manifest(uri):
            raise BadRequest("an upload is one object or a manifest (.json), not a folder", field="input_uri")
        if format:
            raise BadRequest(
                "the format of a prefix or manifest comes from its objects' names; leave format out",
                field="format",
            )
        return "parquet"  # until Plan records the objects' format; results default to Parquet
    return check_format(format, field="format") if format else format_of(uri)

