"""Who runs a job's steps: Step Functions on AWS, a thread pool on this machine.

`SLUICE_ORCHESTRATOR=stepfunctions://<state machine ARN>` starts one execution per job,
named after the job, so starting a job twice is harmless. `local` (the default outside AWS)
runs Plan, then the chunks on a thread pool (each retried a few times, as the state
machine's Map retries them), then Finalize, or MarkFailed when something gave out.

Who runs a job answers for its liveness. Locally, the process running a job names itself on
the job and writes its heartbeat every `HEARTBEAT_S` while it runs (`sluice.domain.liveness`),
so that any reader can tell when that process is gone. On AWS, Step Functions does:
`ended` describes the job's execution, which MarkFailed may not have outlived (an execution
that timed out or was stopped skips it).

Locally, `concurrency` threads score a job. Text chunks (CSV, JSON Lines) are scored that
many at a time, one thread each: parsing text is most of their work. Parquet chunks (whole
row groups, decoded once) are scored one at a time, their inference calls on `concurrency`
threads: the same threads for a file of any size, so memory follows one row group. With
two threads or more, when every chunk of a Parquet job is read as one piece (small row
groups, or a folder of small files), two chunks are in flight, their calls on the same
threads: one is read and written while the other's calls run, as the pieces of one large
chunk are, and in the same memory (two pieces).

When `sluice serve` stops, `shutdown` stops the local jobs: they start no more chunks, the
chunks in flight finish and are recorded (within a grace period), and each job is recorded
FAILED, saying the service stopped: none is left RUNNING with no thread to run it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sluice.clients import lazy_client
from sluice.domain.errors import Conflict, SluiceError, Unavailable
from sluice.domain.liveness import HEARTBEAT_S, execution_ended, this_worker
from sluice.domain.objects import now
from sluice.registry.scope import use_tenant

if TYPE_CHECKING:
    from typing import Unpack

    from mypy_boto3_stepfunctions import SFNClient

    from sluice.batch.plan import Chunk, JobSpec
    from sluice.batch.runner import BatchRunner
    from sluice.clients import AwsArgs, AwsSource
    from sluice.domain.jobs import BatchJob

log = logging.getLogger(__name__)


# What Score raises when a chunk may well succeed if tried again (the Lambda `errorType`s a
# state machine's Retry on Score should name): unreadable bytes, an unavailable backend or
# store, a backend error, a timeout. Anything else (the input gone or replaced, access
# denied, a chunk whose bytes are malformed: ChunkMalformed) fails the chunk at once.
TRANSIENT_ERRORS = ("ChunkUnreadable", "Unavailable", "BackendError", "DeadlineExceeded")
SERVICE_STOPPED = "ServiceStopped"  # the error of a local job the service stopped
STOPPING = "stopping"  # a chunk left unscored as the service stops


class Orchestrator(Protocol):
    keeps_heartbeat: bool  # a process of this machine runs the job, and beats for it

    def start(self, job: BatchJob) -> str | None:
        """Start running the job; returns the execution's id where there is one."""
        ...

    def cancel(self, job: BatchJob) -> None:
        """Stop what still runs of a job (its record is already CANCELLED)."""
        ...

    def ended(self, job: BatchJob) -> str | None:
        """Why the execution running an unfinished job has ended without recording its
        outcome, or None while it runs (or when that cannot be told)."""
        ...


@dataclass(frozen=True, slots=True)
class Progress:
    chunks_done: int
    chunks_total: int
    rows_done: int
    rows_total: int
    failed_chunks: int = 0


ProgressCallback = Callable[[Progress], None]


class LocalOrchestrator:
    """Runs jobs in this process. `start` returns at once (the job runs on a background
    thread); `run` runs one job to its end on the calling thread, reporting progress, while
    another thread keeps the job's heartbeat."""

    keeps_heartbeat = True

    def __init__(
        self,
        runner: BatchRunner | Callable[[], BatchRunner],
        *,
        concurrency: int,
        attempts: int = 3,
        backoff_s: float = 0.5,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self._runner = runner  # or what builds it, on the first job (`sluice batch list` runs none)
        self._building = threading.Lock()
        self.concurrency = max(1, concurrency)
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.heartbeat_s = heartbeat_s
        self._threads: dict[str, threading.Thread] = {}
        self._tenants: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()  # the service is stopping: no new job, no new chunk
        self._hurry = threading.Event()  # and it will not wait for the chunks in flight
        self.stopped: list[str] = []  # the jobs recorded FAILED because the service stopped

    @property
    def runner(self) -> BatchRunner:
        if callable(self._runner):
            with self._building:  # two jobs starting at once share one
                if callable(self._runner):
                    self._runner = self._runner()
        return self._runner

    def start(self, job: BatchJob) -> str | None:
        with self._lock:
            if self._stopping.is_set():
                self._stop_job(job.tenant, job.id, "the service stopped before the job started")
                raise Unavailable("the service is stopping: the job was not started; submit it again", field="status")
            running = self._threads.get(job.id)
            if running is not None and running.is_alive():
                return None
            thread = threading.Thread(
                target=self._run_quietly, args=(job.tenant, job.id), name=f"batch-{job.id}", daemon=True
            )
            self._threads[job.id] = thread
            self._tenants[job.id] = job.tenant
        thread.start()
        return None

    def stop_starting(self) -> None:
        """Start no job and no chunk from now on (safe from any thread; returns at once)."""
        self._stopping.set()

    def shutdown(self, grace_s: float) -> list[str]:
        """Stop the jobs running here: no new chunk starts, the chunks in flight finish and are
        recorded, and each job ends FAILED with the reason "the service stopped". A job still
        scoring after `grace_s` (or after `hurry`) is recorded so at once. Returns the ids of
        the jobs stopped so. Calling it again does no harm."""
        self._stopping.set()
        with self._lock:
            running = {job_id: t for job_id, t in self._threads.items() if t.is_alive()}
        deadline = time.monotonic() + grace_s
        for thread in running.values():
            while thread.is_alive() and not self._hurry.is_set() and (left := deadline - time.monotonic()) > 0:
                thread.join(min(left, 0.2))  # short waits: a second signal may cut the grace short
        for job_id, thread in running.items():
            if thread.is_alive():  # its chunk took too long: what it scores from now on is not counted
                self._stop_job(
                    self._tenants[job_id], job_id, f"the service stopped while a chunk was still being scored after {grace_s:g} s"
                )
        return list(self.stopped)

    def _stop_job(self, tenant: str, job_id: str, why: str) -> dict[str, Any]:
        if job_id not in self.stopped:
            self.stopped.append(job_id)
        return self.runner.mark_failed(tenant, job_id, error=SERVICE_STOPPED, cause=why)

    def hurry(self) -> None:
        """Cut `shutdown`'s grace short (a second signal)."""
        self._stopping.set()
        self._hurry.set()

    def cancel(self, job: BatchJob) -> None:
        """Chunks check the job's status before they start; nothing else to stop."""

    def ended(self, job: BatchJob) -> str | None:
        return None  # the job's heartbeat says (BatchJob.stopped)

    def wait(self, job_id: str, timeout: float | None = None) -> None:
        thread = self._threads.get(job_id)
        if thread is not None:
            thread.join(timeout)

    def _run_quietly(self, tenant: str, job_id: str) -> None:
        try:
            self.run(tenant, job_id)
        except Exception:  # a background job must not take the process with it
            log.exception("batch job failed", extra={"job": job_id})

    def run(self, tenant: str, job_id: str, progress: ProgressCallback | None = None) -> dict[str, Any]:
        with self._beating(tenant, job_id):
            return self._run(tenant, job_id, progress)

    @contextlib.contextmanager
    def _beating(self, tenant: str, job_id: str) -> Iterator[None]:
        """This process named on the job, and its heartbeat written every `heartbeat_s` on a
        thread of its own, until the job's steps return (or the job has finished)."""
        registry = self.runner.registry
        with use_tenant(tenant), contextlib.suppress(Conflict):  # finished: Plan says so
            registry.update_job(tenant, job_id, worker=this_worker(), heartbeat_at=now())
        done = threading.Event()

        def beat() -> None:
            with use_tenant(tenant):  # a thread does not inherit the binding
                while not done.wait(self.heartbeat_s):
                    try:
                        registry.update_job(tenant, job_id, heartbeat_at=now())
                    except Conflict:  # finished, or found dead: nothing left to keep alive
                        return
                    except Exception:  # a registry hiccup; the next beat tries again
                        log.warning("batch job heartbeat failed", exc_info=True, extra={"job": job_id})

        beating = threading.Thread(target=beat, name=f"batch-{job_id}-beat", daemon=True)
        beating.start()
        try:
            yield
        finally:
            done.set()
            beating.join()

    def _run(self, tenant: str, job_id: str, progress: ProgressCallback | None) -> dict[str, Any]:
        runner = self.runner
        if self._stopping.is_set():
            return self._stop_job(tenant, job_id, "the service stopped before the job started")
        try:
            planned = runner.plan(tenant, job_id)
        except SluiceError as exc:
            return runner.mark_failed(tenant, job_id, error=type(exc).__name__, cause=exc.message)
        from sluice.batch.plan import JobSpec

        spec = JobSpec.from_dict(planned["job"])
        chunks = runner.chunks(planned)
        failures, left = self._score_all(spec, chunks, progress)
        if runner.registry.get_job(tenant, job_id).status == "CANCELLED":
            return runner.cancelled(tenant, job_id)
        if failures:
            index, error = failures[0]
            tried = f"after {self.attempts} attempts" if _retried(error) and self.attempts > 1 else "(not retried)"
            return runner.mark_failed(
                tenant, job_id, error=type(error).__name__, cause=f"chunk {index} failed {tried}: {_message(error)}",
            )  # fmt: skip
        if left:  # the service is stopping: the chunks recorded stand, the job does not finish
            return self._stop_job(tenant, job_id, "the service stopped before the job finished")
        try:
            return runner.finalize(tenant, job_id)
        except SluiceError as exc:
            return runner.mark_failed(tenant, job_id, error=type(exc).__name__, cause=exc.message)

    def _score_all(
        self, spec: JobSpec, chunks: list[Chunk], progress: ProgressCallback | None
    ) -> tuple[list[tuple[int, BaseException]], int]:
        """The chunks that failed, and how many were never scored because the service is stopping."""
        total_rows = sum(c.rows for c in chunks)
        done_chunks = done_rows = 0
        failures: list[tuple[int, BaseException]] = []
        if progress:
            progress(Progress(0, len(chunks), 0, total_rows))
        # A bounded window of chunks in flight: memory follows the pool, not the chunk count.
        pending: dict[Future[dict[str, Any]], Chunk] = {}
        queue = list(reversed(chunks))
        stopped = False  # the job stopped running (cancelled): start no more chunks
        left = 0  # chunks left unscored because the service is stopping
        slots, threads = (1, self.concurrency) if spec.format == "parquet" else (self.concurrency, 1)
        if threads > 1 and len(chunks) > 1 and all(c.rows <= self.runner.scorer.read_rows for c in chunks):
            slots = 2  # small Parquet chunks: one read and written while the other's calls run
        with ThreadPoolExecutor(slots, thread_name_prefix=f"score-{spec.job_id}") as pool:
            while queue or pending:
                while queue and len(pending) < slots and not failures and not stopped and not self._stopping.is_set():
                    chunk = queue.pop()
                    pending[pool.submit(self._score_with_retries, spec, chunk, threads)] = chunk
                if not pending:
                    break
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    chunk = pending.pop(future)
                    error = future.exception()
                    if error is not None:
                        failures.append((chunk.index, error))
                        continue
                    skipped = future.result().get("skipped")
                    if skipped == STOPPING:
                        left += 1
                        continue
                    if skipped:  # not the job's: not progress
                        stopped = True
                        continue
                    done_chunks += 1
                    done_rows += chunk.rows
                    if progress:
                        progress(Progress(done_chunks, len(chunks), done_rows, total_rows, len(failures)))
        if self._stopping.is_set() and not stopped:
            left += len(queue)
        return failures, left

    def _score_with_retries(self, spec: JobSpec, chunk: Chunk, threads: int = 1) -> dict[str, Any]:
        for attempt in range(1, self.attempts + 1):
            try:
                return self.runner.score(spec, chunk, threads=threads)
            except Exception as exc:
                if not _retried(exc) or attempt == self.attempts:
                    raise
            if self._stopping.wait(self.backoff_s * 2 ** (attempt - 1)):
                break  # no more tries: the chunk is left unscored, as the service stops
        return {"index": chunk.index, "skipped": STOPPING}


def _retried(error: BaseException) -> bool:
    """Whether a chunk that failed so is tried again: not when the request itself is refused
    (a malformed chunk, a missing deployment: the same bytes would fail again)."""
    return not (isinstance(error, SluiceError) and error.status < 500)


def _message(error: BaseException) -> str:
    return error.message if isinstance(error, SluiceError) else type(error).__name__


class StepFunctionsOrchestrator:
    """Starts the batch state machine; the execution is named after the job."""

    keeps_heartbeat = False

    def __init__(self, state_machine_arn: str, **aws: Unpack[AwsArgs]) -> None:
        if ":stateMachine:" not in state_machine_arn:
            raise ValueError(f"not a state machine ARN: {state_machine_arn!r}")
        self.state_machine_arn = state_machine_arn
        self.region = aws.get("region") or state_machine_arn.split(":")[3] or None
        self._sfn = lazy_client("stepfunctions", aws, region=self.region)

    @classmethod
    def from_url(cls, url: str, **aws: Unpack[AwsSource]) -> StepFunctionsOrchestrator:
        return cls(url[len("stepfunctions://") :], **aws)

    @property
    def client(self) -> SFNClient:
        return self._sfn()  # type: ignore[no-any-return]

    def execution_arn(self, job: BatchJob) -> str:
        return self.state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{job.id}"

    def start(self, job: BatchJob) -> str | None:
        import json

        from botocore.exceptions import BotoCoreError, ClientError

        body = json.dumps({"job_id": job.id, "tenant": job.tenant})
        try:
            started = self.client.start_execution(stateMachineArn=self.state_machine_arn, name=job.id, input=body)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
                return self.execution_arn(job)  # started before: this start is a repeat
            raise Unavailable("the batch workflow could not be started; try again") from exc
        except BotoCoreError as exc:
            raise Unavailable("the batch workflow could not be started; try again") from exc
        return str(started["executionArn"])

    def cancel(self, job: BatchJob) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.stop_execution(
                executionArn=job.execution or self.execution_arn(job), error="Cancelled",
                cause="the batch job was cancelled",
            )  # fmt: skip
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
                raise Unavailable("the batch workflow could not be stopped; try again") from exc
        except BotoCoreError as exc:
            raise Unavailable("the batch workflow could not be stopped; try again") from exc

    def ended(self, job: BatchJob) -> str | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            execution = self.client.describe_execution(executionArn=job.execution or self.execution_arn(job))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
                return "its Step Functions execution does not exist"
            return None  # cannot tell (denied, throttled): the job stays as it is
        except BotoCoreError:
            return None
        status = execution.get("status", "RUNNING")
        if status in ("RUNNING", "PENDING_REDRIVE"):
            return None
        return execution_ended(status, execution.get("error"))
