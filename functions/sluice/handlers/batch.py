"""The batch Lambdas: the S3 trigger and the state machine's four tasks.

- `on_upload` (S3 ObjectCreated under `inbox/`): a key `inbox/<tenant>/<deployment>/<name>`
  starts a job on that tenant's deployment, once per object version (powertools
  idempotency on the registry table, and a job id derived from the object).
- `create_job` (an execution started with a job specification: `{"spec": <the execution
  input>, "execution": <its ARN>}`) -> `{"job_id", "tenant"}`, the same job for every call
  of the same execution; for a schedule's run, `{"skipped": {…}}` when it does not happen
  (paused, or its previous run is still going and `overlap` is `skip`), or the spec back
  with `queued_behind` (`overlap: queue`), which the state machine waits on and sends again
- `plan` (execution input `{"job_id", "tenant"}`) -> `{"job": <spec>, "chunks": {"bucket", "key", …}}`
- `score` (`{"job": <spec>, "chunk": <one item of the chunk list>}`) -> the chunk's counts
- `finalize` (the whole state) -> the job's summary, or raises JobIncomplete; a job that
  names `catalog` is then added as a partition of that Glue table (`catalog` in the summary)
- `mark_failed` (the whole state, with `error: {Error, Cause}`) -> the job's summary
- `execution_ended` (EventBridge: "Step Functions Execution Status Change" of the state machine,
  once an execution has ended) -> the job it ran, FAILED saying why if the execution left it
  unfinished (the whole execution timed out or was stopped from outside, or MarkFailed could
  not record the failure), so no job stays RUNNING after its execution ended

Which tenant an upload acts for comes from its key: writing under `inbox/<tenant>/` is what
IAM grants a tenant's pipeline, and the deployment is looked up in that tenant only, so an
upload can never reach another tenant's deployment.
"""

from __future__ import annotations

from sluice.startup import pause_in_lambda, started

pause_in_lambda()  # in Lambda, the collector off until this module has loaded (`sluice.startup`)

from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

from aws_lambda_powertools.utilities.data_classes import S3Event
from pydantic import BaseModel, ConfigDict, Field

from sluice.batch.plan import Chunk, JobSpec
from sluice.domain.errors import SluiceError
from sluice.observability import get_logger, get_metrics

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.s3_event import S3EventRecord

    from sluice.wiring import Container

logger = get_logger()
metrics = get_metrics()
_container: Container | None = None
_start_once: Any = None
IDEMPOTENCY_KEY = "IDEMPOTENCY#batch-upload"
IDEMPOTENCY_TTL_S = 7 * 24 * 3600


def container() -> Container:
    global _container
    if _container is None:
        from sluice.wiring import get_container

        _container = get_container()
    return _container


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore")


class JobEvent(_Event):
    """Plan's, Finalize's and MarkFailed's input: the execution input, plus the state so far."""

    job_id: str
    tenant: str
    error: dict[str, Any] | None = None


class CreateJobEvent(_Event):
    """CreateJob's input: the execution input (a job specification) and the execution's ARN."""

    spec: Any
    execution: str


class ChunkEvent(_Event):
    job: dict[str, Any]
    chunk: dict[str, Any]


class ExecutionStatusChange(_Event):
    """The `detail` of EventBridge's "Step Functions Execution Status Change": what
    DescribeExecution says of the execution (its input absent when too large to include)."""

    execution_arn: str = Field(alias="executionArn")
    status: str
    input: str | None = None
    error: str | None = None
    cause: str | None = None


@logger.inject_lambda_context(clear_state=True)
def create_job(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Create (once) the job an execution started with a job specification runs. A spec that
    names an unknown tenant or deployment, or an input outside the tenant's inbox, raises:
    the execution fails with that error (BadRequest, NotFound, Forbidden) and its message."""
    from sluice.batch.executions import RunQueued, RunSkipped
    from sluice.domain.errors import NotFound

    task = CreateJobEvent.model_validate(event)
    try:
        job = container().batch.create_for_execution(task.spec, execution=task.execution)
    except RunSkipped as skipped:  # the execution ends here, successfully, saying why
        logger.info("scheduled run skipped", extra={"schedule": skipped.schedule, "reason": skipped.reason})
        return {"skipped": {"status": "SKIPPED", "schedule": skipped.schedule, "reason": skipped.reason,
                            "running": skipped.running}}  # fmt: skip
    except RunQueued as queued:  # the state machine waits, then asks again
        return {**task.spec, "queued_behind": queued.running}
    except NotFound as refused:  # the execution's error is the public kind, whichever class said it
        raise NotFound(refused.message, field=refused.field) from None
    logger.append_keys(job=job.id, tenant=job.tenant)
    logger.info("batch job for an execution", extra={"execution": task.execution, "status": job.status})
    return {"job_id": job.id, "tenant": job.tenant}


@logger.inject_lambda_context(clear_state=True)
def plan(event: dict[str, Any], context: Any) -> dict[str, Any]:
    job = JobEvent.model_validate(event)
    logger.append_keys(job=job.job_id, tenant=job.tenant)
    return container().batch_runner.plan(job.tenant, job.job_id)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def score(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = ChunkEvent.model_validate(event)
    spec, chunk = JobSpec.from_dict(task.job), Chunk.from_dict(task.chunk)
    logger.append_keys(job=spec.job_id, tenant=spec.tenant, chunk=chunk.index)
    try:
        done = container().batch_runner.score(spec, chunk)
    except SluiceError as exc:
        raise transient_by_name(exc) from exc
    logger.info("chunk scored", extra=done)
    if "rows_in" in done and done.get("recorded", True):  # not skipped, nor a try again of a chunk already counted
        from aws_lambda_powertools.metrics import MetricUnit

        metrics.add_dimension(name="tenant", value=spec.tenant)  # two tenants' deployments of one name are two series
        metrics.add_dimension(name="deployment", value=spec.deployment)
        metrics.add_metric(name="BatchRows", unit=MetricUnit.Count, value=done["rows_in"])
        metrics.add_metric(name="BatchRowsFailed", unit=MetricUnit.Count, value=done["rows_failed"])
    return done


def transient_by_name(exc: SluiceError) -> SluiceError:
    """A failure the local orchestrator tries again (status 500 and up), raised under the name
    Step Functions' retry matches (`TRANSIENT_ERRORS`, by class name, subclasses not
    included): a throttled endpoint (`Throttled`), one scaling from zero (`NoCapacity`), a
    runtime refusing for now (`Overloaded`) were the chunk's and the job's end on AWS."""
    from sluice.batch.orchestrators import TRANSIENT_ERRORS
    from sluice.domain.errors import BackendError, DeadlineExceeded

    if exc.status < 500 or type(exc).__name__ in TRANSIENT_ERRORS:
        return exc
    named = next((c for c in type(exc).__mro__ if c.__name__ in TRANSIENT_ERRORS), None)
    if named is None:
        named = DeadlineExceeded if exc.status == 504 else BackendError
    return named(exc.message, field=exc.field)


@logger.inject_lambda_context(clear_state=True)
def finalize(event: dict[str, Any], context: Any) -> dict[str, Any]:
    job = JobEvent.model_validate(event)
    logger.append_keys(job=job.job_id, tenant=job.tenant)
    summary = container().batch_runner.finalize(job.tenant, job.job_id)
    if summary.get("status") == "SUCCEEDED":
        summary = _publish(job.tenant, job.job_id, summary)
    return summary


def _publish(tenant: str, job_id: str, summary: dict[str, Any]) -> dict[str, Any]:
    """A job that names a catalog table becomes a partition of it, once it has SUCCEEDED.
    The job stays SUCCEEDED if the catalog refuses (its files are all there): the summary,
    the execution's output, says what went wrong, and publishing again is harmless."""
    c = container()
    record = c.registry.get_job(tenant, job_id)
    if record.catalog is None:
        return summary
    from sluice.domain.errors import SluiceError

    parts = [chunk.part for chunk in c.registry.list_chunks(tenant, job_id) if chunk.part]
    try:
        published = c.catalog.publish(record, sorted(parts))
    except (SluiceError, ImportError) as exc:
        logger.warning("batch output not published", extra={"error": str(exc)})
        return summary | {"catalog": {"error": str(exc)}}
    except Exception as exc:  # the catalog's own refusal (botocore ClientError)
        logger.exception("batch output not published")
        return summary | {"catalog": {"error": f"{type(exc).__name__}: {exc}"}}
    logger.info("batch output published", extra=published)
    return summary | {"catalog": published}


@logger.inject_lambda_context(clear_state=True)
def mark_failed(event: dict[str, Any], context: Any) -> dict[str, Any]:
    job = JobEvent.model_validate(event)
    error = job.error or {}
    logger.append_keys(job=job.job_id, tenant=job.tenant)
    logger.warning("batch job failed", extra={"error": error.get("Error")})
    return container().batch_runner.mark_failed(
        job.tenant, job.job_id, error=str(error.get("Error") or "Failed"), cause=str(error.get("Cause") or "")
    )


@logger.inject_lambda_context(clear_state=True)
def execution_ended(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent

    from sluice.batch.executions import record_execution_end

    change = ExecutionStatusChange.model_validate(EventBridgeEvent(event).detail)
    logger.append_keys(execution=change.execution_arn, status=change.status)
    job = record_execution_end(
        container().batch, execution=change.execution_arn, status=change.status, input=change.input,
        error=change.error, cause=change.cause,
    )  # fmt: skip
    if job is None:
        logger.info("batch execution ended without a job of its own")
        return {}
    logger.append_keys(job=job.id, tenant=job.tenant)
    logger.info("batch execution ended", extra={"job_status": job.status})
    return {"job_id": job.id, "tenant": job.tenant, "status": job.status}


@logger.inject_lambda_context(clear_state=True)
def on_upload(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from sluice.domain.errors import SluiceError

    uploads = S3Event(event)
    start = _idempotent_start(context)
    jobs = []
    for record in uploads.records:
        upload = _upload_of(record)
        if upload is None:
            continue
        try:
            jobs.append(start(upload=upload))
        except SluiceError as exc:  # an upload no job can be made for (gone since, a tenant no name can be): the others go on
            if exc.status >= 500:
                raise  # a store or the registry failing: the invocation is retried
            logger.warning("upload not started", extra={"key": upload["key"], "error": exc.message, "code": exc.code})
            jobs.append({"key": upload["key"], "status": "NOT_STARTED", "error": exc.message})
    return {"jobs": jobs}


def inbox_target(key: str) -> tuple[str, str] | None:
    """`inbox/<tenant>/<deployment>/<name…>` -> (tenant, deployment); None for other keys, and
    for hidden names below the deployment (a part starting with `.` or `_`: `_SUCCESS`, or
    objects staged under `_staged/` for a manifest to list), which batch readers skip too."""
    parts = key.split("/")
    if len(parts) < 4 or parts[0] != "inbox" or not all(parts[1:]):
        return None
    if any(part.startswith((".", "_")) for part in parts[3:]):
        return None
    return parts[1], parts[2]


def _upload_of(record: S3EventRecord) -> dict[str, str] | None:
    bucket = record.s3.bucket.name
    key = unquote_plus(record.s3.get_object.key)
    target = inbox_target(key)
    expected = container().settings.jobs.batch_bucket
    created = record.event_name.startswith("ObjectCreated:")
    if target is None or not created or (expected and bucket != expected):
        logger.info("ignored upload outside the inbox", extra={"bucket": bucket, "key": key})
        return None
    obj = record.s3.get_object
    return {
        "bucket": bucket,
        "key": key,
        "version": obj.version_id or obj.etag,
        # What the job reads: this version id, or this ETag (quoted, as S3 answers it) where the bucket keeps no versions.
        "read": obj.version_id or f'"{obj.etag}"',
        "tenant": target[0],
        "deployment": target[1],
    }


def start_upload(upload: dict[str, str]) -> dict[str, Any]:
    """Start the job for one uploaded object (idempotent by itself: the job id derives
    from bucket, key and version), which scores that version of it. The object's metadata
    may name key columns (`x-amz-meta-sluice-key-columns: id,region`) and the output format."""
    c = container()
    uri = f"s3://{upload['bucket']}/{upload['key']}"
    job = c.batch.start_upload(
        upload["tenant"],
        upload["deployment"],
        uri,
        identity=(upload["bucket"], upload["key"], upload["version"]),
        source="upload",
        options=c.batch_runner.files.metadata(uri, upload["read"]),
        version=upload["read"],
    )
    logger.info("batch job for upload", extra={"job": job.id, "status": job.status, "key": upload["key"]})
    return {"job_id": job.id, "tenant": job.tenant, "deployment": job.deployment, "status": job.status}


def _idempotent_start(context: Any) -> Any:
    """`start_upload` behind powertools idempotency (records in the registry table, expiring
    through its `expires_at` time-to-live), built once per container."""
    global _start_once
    from sluice.registry.dynamodb import DynamoRegistry

    registry = container().registry
    if not isinstance(registry, DynamoRegistry):
        return start_upload  # the local twin: derived job ids alone keep starts single
    if _start_once is None or _start_once[0] is not registry:
        from aws_lambda_powertools.utilities.idempotency import idempotent_function

        from sluice.handlers.adapters import upload_idempotency

        persistence, config = upload_idempotency(registry, key=IDEMPOTENCY_KEY, expires_after_s=IDEMPOTENCY_TTL_S)
        _start_once = (
            registry,
            idempotent_function(data_keyword_argument="upload", persistence_store=persistence, config=config)(
                start_upload
            ),
            config,
        )
    _, start, config = _start_once
    config.register_lambda_context(context)
    return start


started()  # the function's start-up is over: the collector back on (`sluice.startup`)
