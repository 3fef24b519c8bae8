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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.batch.objects import is_manifest, is_many
from sluice.batch.plan import format_of
from sluice.batch.uris import as_uri, is_s3
from sluice.domain import Principal, check_name, now
from sluice.domain.errors import BadRequest, Conflict, Forbidden, NotFound, SluiceError, Unavailable
from sluice.domain.jobs import BatchJob, check_format, derived_job_id, new_job_id

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.batch.orchestrators import Orchestrator
    from sluice.batch.runner import BatchPaths
    from sluice.registry import Registry


class BatchService:
    def __init__(self, registry: Registry, orchestrator: Orchestrator | None, paths: BatchPaths) -> None:
        self.registry = registry
        self.orchestrator = orchestrator
        self.paths = paths

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
    ) -> BatchJob:
        """Create a job and (unless `start` is False: the caller runs it) start it.
        `operator` (the CLI) may read and write anywhere."""
        principal.require("predict")
        check_name(deployment, field="deployment")
        self.registry.get_deployment(principal.tenant, deployment)  # NotFound across tenants
        uri = as_uri(input_uri) if operator else input_uri
        if not operator:
            self._check_inbox(principal.tenant, uri)
            if output_uri is not None:
                raise BadRequest("results go to the tenant's outbox; output_uri is for the CLI", field="output_uri")
        if is_many(uri):
            # A prefix or a manifest: Plan finds the format from its objects' names.
            if source in ("upload", "inbox") and not is_manifest(uri):
                raise BadRequest("an upload is one object or a manifest (.json), not a folder", field="input_uri")
            if format:
                raise BadRequest(
                    "the format of a prefix or manifest comes from its objects' names; leave format out",
                    field="format",
                )
            fmt = "parquet"  # until Plan records the objects' format; results default to Parquet
        else:
            fmt = check_format(format, field="format") if format else format_of(uri)
        out_fmt = check_format(output_format, field="output_format") if output_format else fmt
        keys = tuple(dict.fromkeys(k.strip() for k in key_columns if k.strip()))
        job_id = job_id or new_job_id()
        job = BatchJob(
            id=job_id,
            tenant=principal.tenant,
            deployment=deployment,
            input_uri=uri,
            output_uri=(as_uri(output_uri) if output_uri else self.paths.outbox(principal.tenant, job_id)).rstrip("/") + "/",
            format=fmt,  # type: ignore[arg-type]
            output_format=out_fmt,  # type: ignore[arg-type]
            key_columns=keys,
            source=source,
            created_by=principal.subject,
        )
        job = self.registry.create_job(job)
        return self._start(job) if start else job

    def get(self, principal: Principal, job_id: str) -> BatchJob:
        principal.require("predict")
        return self.registry.get_job(principal.tenant, job_id)

    def list(self, principal: Principal, *, limit: int = 100) -> list[BatchJob]:
        principal.require("predict")
        return self.registry.list_jobs(principal.tenant, limit=limit)

    def cancel(self, principal: Principal, job_id: str) -> BatchJob:
        principal.require("predict")
        job = self.registry.update_job(principal.tenant, job_id, status="CANCELLED", finished_at=now())
        if self.orchestrator is not None:
            self.orchestrator.cancel(job)
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
    ) -> BatchJob:
        """Start (once) the job for an uploaded file. A file that cannot become a job still
        gets one, FAILED with the reason, so the uploader can see what happened. `options`
        are the upload's own settings (S3 metadata `sluice-key-columns`, comma-separated, and
        `sluice-output-format`)."""
        options = options or {}
        job_id = derived_job_id("up" if source == "upload" else "in", *identity)
        try:
            return self.registry.get_job(tenant, job_id)
        except NotFound:
            pass
        principal = _uploader(tenant)
        try:
            check_name(tenant, field="tenant")
            return self.submit(
                principal, deployment=deployment, input_uri=input_uri, operator=True, source=source,
                job_id=job_id, output_uri=self.paths.outbox(tenant, job_id),
                key_columns=options.get("sluice-key-columns", "").split(","),
                output_format=options.get("sluice-output-format") or None,
            )  # fmt: skip
        except Conflict:
            return self.registry.get_job(tenant, job_id)  # the same upload, seen twice at once
        except SluiceError as exc:
            if exc.status >= 500:
                raise
            rejected = BatchJob(
                id=job_id, tenant=tenant, deployment=deployment[:63], input_uri=input_uri,
                output_uri=self.paths.outbox(tenant, job_id), format="csv", output_format="csv",
                status="FAILED", source=source, created_by=principal.subject,
                finished_at=now(), error=exc.message,
            )  # fmt: skip
            try:
                return self.registry.create_job(rejected)
            except Conflict:
                return self.registry.get_job(tenant, job_id)

    # Helpers -------------------------------------------------------------------------------
    def _start(self, job: BatchJob) -> BatchJob:
        if self.orchestrator is None:
            self.registry.update_job(job.tenant, job.id, status="FAILED", finished_at=now(),
                                     error="batch jobs cannot run here: no orchestrator is configured")  # fmt: skip
            raise Unavailable("batch jobs cannot run here: SLUICE_ORCHESTRATOR is not set", field="orchestrator")
        execution = self.orchestrator.start(job)
        if execution is not None:
            job = self.registry.update_job(job.tenant, job.id, execution=execution)
        return job

    def _check_inbox(self, tenant: str, uri: str) -> None:
        inbox = self.paths.inbox(tenant)
        if is_s3(inbox) != is_s3(uri) or not uri.startswith(inbox) or "/../" in uri or "/./" in uri:
            # A local inbox is a server folder: named relative to the batch folder, not by path.
            shown = inbox if is_s3(inbox) else f"inbox/{tenant}/ in the server's batch folder"
            raise Forbidden(
                f"batch inputs must lie in your inbox ({shown}); upload the file there first",
                field="input_uri",
            )  # a prefix there holds only what is there; a manifest's objects are checked by Plan


def _uploader(tenant: str) -> Principal:
    return Principal(tenant, frozenset({"predict"}), "upload")
