"""The steps of a batch job, whoever runs them: Step Functions (through `handlers/batch.py`)
or the local thread pool. Each step is safe to repeat.

- plan: the job's chunk list, written to the work area, and the deployment's revision it
  scores with (its policy as it stands now, for every chunk); the job goes RUNNING.
- score: one chunk, recorded once in the job's progress, with the size and version of the
  part and error file it wrote; a chunk recorded before is not scored again (its files stand
  as recorded), and a chunk whose job stopped, or lost its folder, meanwhile writes nothing.
- plan also removes what an earlier job left in the output folder (its parts, error files,
  manifest and `_SUCCESS`), so the folder only ever holds one job's results. It does so only
  for the job that holds the folder (`JobRegistry.create_job`): a second job into a folder
  in use is refused when it is created, and never gets here.
- finalize: every chunk accounted for and rows in = rows out + rows failed, at least one
  row scored when there were rows, and every part and error file still the one its chunk
  wrote (there, with the size and version Score recorded), then `_manifest.json` and
  `_SUCCESS`, and SUCCEEDED; otherwise FAILED, saying why.
- mark_failed: FAILED with the error that stopped the job, and a manifest of what was done.
- cancelled: the manifest of a job cancelled while it ran (what was recorded before).

A job that ends without success after Finalize published its answers (a later step of
Finalize failed, it was cancelled or found dead meanwhile) is withdrawn from its table
(`withdraw_job`): every step that fails a job does so, and repeating it does so again.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sluice.batch.manifest import (
    MANIFEST,
    RESULT_NAMES,
    SUCCESS,
    failure_message,
    manifest,
    objects_of,
    problems,
)
from sluice.batch.output_folder import input_of, refuse_clearing_input
from sluice.batch.paths import BatchPaths
from sluice.batch.plan import Chunk, JobSpec, plan_job
from sluice.batch.publishing import (
    check_publish,
    drop_keys,
    publish_job,
    repeated_keys,
    retire_replaced,
    withdraw_job,
)
from sluice.batch.score import ChunkScorer
from sluice.batch.uris import bucket_and_key, join
from sluice.batch.wire import chunk_scored, job_summary
from sluice.batch.written import as_written, is_as_written, not_as_written
from sluice.domain import Principal, now
from sluice.domain.errors import Conflict, SluiceError
from sluice.domain.jobs import ERROR_CHARS, BatchJob, OutputInUse
from sluice.domain.locations import Root
from sluice.inference.bulk import check_answers_in_place
from sluice.inference.loop import run
from sluice.observability import Telemetry
from sluice.stats.recorder import Key, Sample, StatsRecorder

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.batch.filestore import FileStore
    from sluice.domain.jobs import ChunkResult
    from sluice.inference.predictions import PredictionService
    from sluice.registry import JobRegistry
    from sluice.registry.precomputed import PrecomputedStore
    from sluice.settings import BatchSettings

class OfflineStats(StatsRecorder):
    """Statistics that batch scoring keeps to itself: a deployment's live latency, error and
    shadow verdicts describe the requests its callers make, not a file scored overnight."""

    def request(self, key: Key, latency_ms: float, ok: bool, rows: int = 0, invalid: bool = False, steps: Sequence[Sample] = ()) -> None:
        return None

    def requests(self, samples: Sequence[Sample]) -> None:
        return None

    def add(self, key: Key, sums: dict[str, float], maxes: dict[str, float] | None = None) -> None:
        return None


class BatchTelemetry(Telemetry):
    """Per-call prediction logs are for requests; a chunk makes hundreds of calls, and its
    handler logs the chunk once. Failures are still logged as they happen. For Prometheus a
    chunk is counted once (`chunk`), its calls not as requests."""

    counts_requests = False

    def prediction(self, **_: Any) -> bool:
        """No line (the call's lookups write their own)."""
        self.predictions += 1
        return False


class JobIncomplete(Conflict):
    """Finalize found chunks or rows unaccounted for: the job failed (and says which)."""

    code = "job_incomplete"


class JobNotRunning(Conflict):
    """A step was asked to work on a job that is not running (cancelled, or finished)."""

    code = "job_not_running"


def _stopped(job: BatchJob) -> str | None:
    """Why a try of the job's chunks may write nothing more: the job is no longer RUNNING (its
    status), or Finalize has begun (`FINALIZING`); None while it runs."""
    if job.status != "RUNNING":
        return job.status
    return "FINALIZING" if job.finalizing_at is not None else None


class JobStopped(Exception):
    """A chunk's job stopped running while the chunk was scored: it writes nothing."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


@dataclass(eq=False)  # no slots: tests stand in for a step of a running job
class BatchRunner:
    registry: JobRegistry
    predictions: PredictionService
    files: FileStore
    settings: BatchSettings
    paths: BatchPaths
    precomputed: PrecomputedStore | None = None  # tables of precomputed answers jobs publish into
    scorer: ChunkScorer = field(init=False)

    def __post_init__(self) -> None:
        self.scorer = ChunkScorer(
            self.predictions,
            self.files,
            infer_rows=self.settings.batch_infer_rows,
            read_rows=max(self.settings.batch_infer_rows, 65_536),
            max_request_bytes=self.settings.batch_max_request_bytes,
            precomputed=self.precomputed,
        )

    def _confined_to(self, job: BatchJob) -> Root | None:
        return self.paths.input_root(job)

    # Plan ---------------------------------------------------------------------------------
    def plan(self, tenant: str, job_id: str) -> dict[str, Any]:
        """Returns `{"job": <spec>, "chunks": {"bucket", "key", "uri", "count"}}`."""
        job = self.registry.get_job(tenant, job_id)
        if job.terminal:
            raise JobNotRunning(f"batch job '{job_id}' is {job.status}", field="status")
        principal = Principal(tenant, frozenset({"predict"}), f"batch:{job_id}")
        holder = self.registry.output_holder(tenant, job.output_uri)
        if holder not in (None, job.id):  # taken over: this job was found dead
            raise OutputInUse(f"batch job '{holder}' now writes to this job's output folder", holder=holder)
        if not self.registry.list_chunks(tenant, job_id):
            self._clear_results(job)
        # The deployment's policy is pinned here, as it stands when the job starts: every chunk
        # is scored by that revision (`JobSpec.revision`), and follows the deployments it
        # references at theirs (`JobSpec.refs`), whatever the deployments become meanwhile. A
        # Plan repeated keeps what it pinned.
        resolved = run(self.predictions.resolve(principal, job.deployment, revision=job.revision, refs=job.refs))
        refs = job.refs if job.refs is not None else run(self.predictions.pin_refs(tenant, resolved.node))
        job = replace(job, revision=resolved.deployment.revision, refs=refs)
        run(check_answers_in_place(self.predictions, tenant, resolved.node, what="a batch job", refs=refs))  # as pinned
        plan = plan_job(
            job,
            resolved.version.signature,
            self.files,
            chunk_rows=self.settings.batch_chunk_rows,
            chunk_bytes=self.settings.batch_chunk_bytes,
            allowed=self._confined_to(job),
        )
        check_publish(job, self.precomputed, plan.spec.columns, plan.spec.format)
        uri = self.paths.chunk_list(tenant, job_id)
        body = json.dumps([c.to_dict() for c in plan.chunks], separators=(",", ":")).encode()
        self.files.write_bytes(uri, body, content_type="application/json")
        found = {"format": plan.spec.format} if plan.spec.format != job.format else {}  # many objects: their format
        self.registry.update_job(
            tenant, job_id, status="RUNNING", chunks_total=len(plan.chunks),
            rows_total=plan.rows_total, started_at=job.started_at or now(), revision=job.revision, refs=job.refs, **found,
        )  # fmt: skip
        bucket, key = bucket_and_key(uri)
        chunks: dict[str, Any] = {"uri": uri, "count": len(plan.chunks)}
        if bucket is not None:
            chunks |= {"bucket": bucket, "key": key}
        return {"job": plan.spec.to_dict(), "chunks": chunks}

    def _clear_results(self, job: BatchJob) -> None:
        """Remove an earlier job's results from the output folder (only the names a job
        writes: anything else there is left alone), `_SUCCESS` first."""
        stale = [n for n in self.files.names(job.output_uri, depth=1) if RESULT_NAMES.fullmatch(n)]  # its names: in it and in errors/
        if stale:
            refuse_clearing_input(self.files, job, stale)
        for name in sorted(stale, key=lambda n: n != SUCCESS):
            self.files.delete(join(job.output_uri, name))

    def chunks(self, planned: dict[str, Any]) -> list[Chunk]:
        return [Chunk.from_dict(c) for c in json.loads(self.files.read_bytes(planned["chunks"]["uri"]))]

    # Score --------------------------------------------------------------------------------
    def score(self, spec: JobSpec, chunk: Chunk, *, threads: int = 1) -> dict[str, Any]:
        """Score one chunk (its inference calls on `threads` threads) unless the job stopped
        running; returns a small summary."""
        job = self.registry.get_job(spec.tenant, spec.job_id)
        if (stopped := _stopped(job)) is not None:
            return {"index": chunk.index, "skipped": stopped}
        done = self.registry.get_chunk(spec.tenant, spec.job_id, chunk.index)
        if done is not None:  # scored before (a step repeated): its files stand as recorded
            return chunk_scored(done, recorded=False)
        try:
            scored = self.scorer.score(spec, chunk, threads=threads, before_writing=lambda: self._may_write(spec, chunk.index))
        except JobStopped as stopped:  # stopped (or found dead) while the chunk was scored: nothing written
            return {"index": chunk.index, "skipped": stopped.status}
        result = as_written(self.files, scored)
        recorded = self.registry.record_chunk(spec.tenant, spec.job_id, result)
        if recorded:  # a repeated step scored nothing new for the job
            self.predictions.telemetry.chunk(
                tenant=spec.tenant, deployment=spec.deployment, seconds=result.seconds, versions=result.versions
            )
            return chunk_scored(result, recorded=True)
        job = self.registry.get_job(spec.tenant, spec.job_id)
        if job.status != "RUNNING" and chunk.index not in {c.index for c in self.registry.list_chunks(spec.tenant, spec.job_id)}:
            # Stopped while this chunk was scored: its files are not the job's, take them back
            # (those still as it wrote them: a job that took the folder since writes these names too).
            for uri, version in ((result.part, result.part_version), (result.errors, result.errors_version)):
                if uri and version and is_as_written(self.files, uri, version):
                    self.files.delete(uri)
            return {"index": chunk.index, "skipped": job.status}
        return chunk_scored(result, recorded=False)

    # Finalize -----------------------------------------------------------------------------
    def finalize(self, tenant: str, job_id: str) -> dict[str, Any]:
        job = self.registry.get_job(tenant, job_id)
        if job.terminal:
            if job.status == "FAILED":
                raise JobIncomplete(job.error or f"batch job '{job_id}' failed", field="job")
            return job_summary(job)
        if job.finalizing_at is None:
            # Sealed first: a try of a chunk still running (a step tried again while its first
            # try ran on) writes no more pieces, part or keys from here on (`_may_write`), so
            # what is checked below and published is what the recorded chunks wrote.
            try:
                job = self.registry.update_job(tenant, job_id, finalizing_at=now())
            except Conflict:  # it ended meanwhile (cancelled, found dead): as it ended
                return self.finalize(tenant, job_id)
        chunks = self.registry.list_chunks(tenant, job_id)
        problems_found = problems(job, chunks) + not_as_written(self.files, job, chunks)
        if not problems_found:  # a key on two rows: no table can say which row's answer is the entity's
            problems_found = repeated_keys(self.files, job, chunks)
        drop_keys(self.files, job, chunks)  # read, or not needed: the job fails
        written = self._manifest(job, chunks, "FAILED" if problems_found else "SUCCEEDED", "; ".join(problems_found) or None)
        self.files.write_bytes(join(job.output_uri, MANIFEST), written, content_type="application/json")
        if problems_found:
            error = "; ".join(problems_found)[:ERROR_CHARS]
            self._fail(job, error)
            raise JobIncomplete(error, field="job")
        try:  # the table serves the job's answers from now on (a failure fails the job: nothing published)
            published = publish_job(self.precomputed, job)
        except SluiceError as exc:
            self._fail(job, f"its answers could not be published: {exc.message}")
            raise JobIncomplete(f"its answers could not be published: {exc.message}", field="publish") from None
        self.files.write_bytes(join(job.output_uri, SUCCESS), b"")
        try:
            done = self.registry.update_job(tenant, job_id, status="SUCCEEDED", finished_at=now())
        except Conflict:
            # Cancelled, or found dead, meanwhile: that stands, the table must not serve it, and
            # the folder must not say otherwise.
            done = self.registry.get_job(tenant, job_id)
            if done.status == "SUCCEEDED":  # a repeat of this step (a retried Finalize) finished it first: it stands
                return job_summary(done)
            withdraw_job(self.precomputed, done)
            if self._folder_is_its(done):
                with contextlib.suppress(SluiceError):
                    self.files.delete(join(job.output_uri, SUCCESS))
                    self.files.write_bytes(
                        join(job.output_uri, MANIFEST), self._manifest(done, chunks, done.status, done.error),
                        content_type="application/json",
                    )  # fmt: skip
        else:
            if published is not None and self.precomputed is not None:
                with contextlib.suppress(SluiceError):  # else the replaced answers expire with their time to live
                    retire_replaced(self.precomputed, job, published)
        return job_summary(done)

    # Mark failed --------------------------------------------------------------------------
    def mark_failed(self, tenant: str, job_id: str, *, error: str, cause: str = "", may_not_withdraw: bool = False) -> dict[str, Any]:
        """FAILED, and withdrawn from its table; `may_not_withdraw`: a process that may not write
        the table (the API on AWS reads it only) leaves that to the execution's end
        (`sluice.batch.executions`), as `BatchService.cancel` does."""
        job = self.registry.get_job(tenant, job_id)
        if job.terminal:  # repeated (its withdrawal failed before), or it ended meanwhile
            self._withdraw(job, may_not_withdraw)
            return job_summary(job)
        message = failure_message(job, self.registry.list_chunks(tenant, job_id), error, cause)
        try:
            done = self._fail(job, message, may_not_withdraw)
        finally:  # FAILED first: a chunk recorded after it is refused, so what is listed now stays listed
            with contextlib.suppress(SluiceError):  # the registry down: MarkFailed's own error is what is raised
                failed = self.registry.get_job(tenant, job_id)
                if failed.status == "FAILED" and self._folder_is_its(failed):
                    self._unfinished(failed, self.registry.list_chunks(tenant, job_id), "FAILED", failed.error or message)
        return job_summary(done)

    # Cancelled ----------------------------------------------------------------------------
    def cancelled(self, tenant: str, job_id: str) -> dict[str, Any]:
        """The manifest of a job cancelled while it ran: what was recorded before the cancel
        (chunks that finished after it took their files back, see `score`)."""
        job = self.registry.get_job(tenant, job_id)
        if job.status == "CANCELLED" and self._folder_is_its(job):
            self._unfinished(job, self.registry.list_chunks(tenant, job_id), "CANCELLED", "the job was cancelled")
        return job_summary(job)

    def _unfinished(self, job: BatchJob, chunks: list[ChunkResult], status: str, error: str) -> None:
        """The folder of a job that did not succeed: no `_SUCCESS`, no part or error file its
        recorded chunks do not list (a try whose recording failed, never tried again once the
        job stopped), and a manifest that says so. The record in the registry is what counts;
        the manifest is a courtesy."""
        listed = {uri for c in chunks for uri in (c.part, c.errors) if uri}
        stale: list[str] = []
        try:
            names = self.files.names(job.output_uri, depth=1)  # its names: in it and in errors/
            found = [join(job.output_uri, n) for n in names if RESULT_NAMES.fullmatch(n) and n not in (SUCCESS, MANIFEST)]
            found = [uri for uri in found if uri not in listed]
            # Past Plan (its chunks counted), the folder was found to hold none of its input.
            if found and any(map(input_of(self.files, job, vetted=job.chunks_total is not None), found)):  # the folder holds its input (refused by Plan): not the job's to touch
                return
            stale = found
        except SluiceError:  # not listed, or its input not read: nothing taken back
            stale = []
        with contextlib.suppress(SluiceError):
            self.files.delete(join(job.output_uri, SUCCESS))
        with contextlib.suppress(SluiceError):
            for uri in stale:
                self.files.delete(uri)
        with contextlib.suppress(SluiceError):
            self.files.write_bytes(
                join(job.output_uri, MANIFEST), self._manifest(job, chunks, status, error),
                content_type="application/json",
            )  # fmt: skip

    def _may_write(self, spec: JobSpec, index: int) -> None:
        """Raise JobStopped unless the job still runs, unsealed, and holds its folder, and chunk
        `index` is not recorded yet: a job found dead while a chunk was scored (its process too
        busy to beat) must not write over the files of the job that took the folder since, and
        a try of a chunk another try has recorded (a step tried again while its first try ran
        on) must not write over the files that stand for it."""
        job = self.registry.get_job(spec.tenant, spec.job_id)
        holder = self.registry.output_holder(spec.tenant, job.output_uri)
        if (stopped := _stopped(job)) is not None or holder not in (None, job.id):  # None: a job from before holds
            raise JobStopped(stopped or job.status)
        if self.registry.get_chunk(spec.tenant, spec.job_id, index) is not None:
            raise JobStopped("RECORDED")

    def _folder_is_its(self, job: BatchJob) -> bool:
        """No other job writes the job's output folder now, nor has finished there since: the
        job holds it, or no job does and the manifest there, if any, is not another job's.
        Only then may the job still write its manifest or remove `_SUCCESS` there."""
        holder = self.registry.output_holder(job.tenant, job.output_uri)
        if holder is not None:
            return holder == job.id
        try:
            there = json.loads(self.files.read_bytes(join(job.output_uri, MANIFEST)))
        except (SluiceError, OSError, ValueError):
            return True  # no manifest (or none readable): nothing of another job's to spoil
        return not isinstance(there, dict) or there.get("job") in (None, job.id)

    def _fail(self, job: BatchJob, message: str, may_not_withdraw: bool = False) -> BatchJob:
        """FAILED, saying why (a job that ended meanwhile stays as it ended), and withdrawn
        from its table unless it succeeded."""
        try:
            done = self.registry.update_job(
                job.tenant, job.id, status="FAILED", error=message[:ERROR_CHARS], finished_at=now()
            )
        except Conflict:
            done = self.registry.get_job(job.tenant, job.id)
        self._withdraw(done, may_not_withdraw)
        return done

    def _withdraw(self, job: BatchJob, may_fail: bool) -> None:
        if may_fail:
            with contextlib.suppress(SluiceError):
                withdraw_job(self.precomputed, job)
        else:
            withdraw_job(self.precomputed, job)

    def _manifest(self, job: BatchJob, chunks: list[ChunkResult], status: str, error: str | None) -> bytes:
        try:  # an input of many objects: the manifest lists them, from the chunk list
            planned = json.loads(self.files.read_bytes(self.paths.chunk_list(job.tenant, job.id)))
        except (SluiceError, OSError, ValueError):
            planned = []  # none written
        return manifest(job, chunks, status, error, objects_of(planned))

