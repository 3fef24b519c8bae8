"""The batch Lambda handlers fed the sample events in events/: each typed at the edge, each
step one call, the shapes the state machine passes between them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sluice.domain.jobs import BatchJob
from sluice.handlers import batch as handlers
from tests.conftest import EVENTS
from tests.integration.batch.inputs import iris_rows, write_input
from tests.support import LambdaContext

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container


def event(name: str, **changes: Any) -> dict[str, Any]:
    return json.loads((EVENTS / f"{name}.json").read_text()) | changes


def test_the_sample_events_are_what_the_handlers_read() -> None:
    from aws_lambda_powertools.utilities.data_classes import S3Event

    from sluice.batch.plan import Chunk, JobSpec

    upload = next(iter(S3Event(event("s3_put_inbox")).records))
    assert handlers.inbox_target(upload.s3.get_object.key) == ("acme", "iris")
    assert handlers.JobEvent.model_validate(event("batch_plan")).tenant == "acme"
    score = handlers.ChunkEvent.model_validate(event("batch_score"))
    assert JobSpec.from_dict(score.job).key_columns == ("id",) and Chunk.from_dict(score.chunk).start == 50
    finalize = event("batch_finalize")
    assert handlers.JobEvent.model_validate(finalize).job_id == finalize["plan"]["job"]["job_id"]
    assert handlers.JobEvent.model_validate(event("batch_mark_failed")).error == {
        "Error": "States.ExceedToleratedFailureThreshold",
        "Cause": "The specified tolerance threshold was exceeded",
    }


@pytest.mark.parametrize(
    ("key", "target"),
    [
        ("inbox/acme/iris/a.csv", ("acme", "iris")),
        ("inbox/acme/iris/2026/11/a.csv", ("acme", "iris")),
        ("inbox/acme/a.csv", None),
        ("inbox/acme/iris/", None),
        ("outbox/acme/iris/a.csv", None),
        ("inbox//iris/a.csv", None),
        ("inbox/acme/iris/_SUCCESS", None),
        ("inbox/acme/iris/_staged/a.csv", None),
        ("inbox/acme/iris/dt=1/.a.csv.crc", None),
        ("inbox/acme/iris/dt=1/a_b.csv", ("acme", "iris")),
    ],
)
def test_only_keys_naming_a_tenant_and_a_deployment_start_jobs(key: str, target: tuple[str, str] | None) -> None:
    assert handlers.inbox_target(key) == target


def test_plan_score_finalize_through_the_handlers(wired: Container, acme: Principal, tmp_path: Path) -> None:
    path = write_input(tmp_path / "in.csv", iris_rows(2500))
    job = wired.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, start=False, key_columns=["id"], output_uri=str(tmp_path / "out"))
    start = event("batch_plan", job_id=job.id)
    planned = handlers.plan(start, LambdaContext())
    assert set(planned) == {"job", "chunks"} and planned["chunks"]["count"] >= 2
    items = json.loads((tmp_path / "home" / "batch" / "work" / "acme" / job.id / "chunks.json").read_text())
    for item in items:  # what the Map's ItemSelector hands each Score
        done = handlers.score({"job": planned["job"], "chunk": item}, LambdaContext())
        assert done["recorded"] and done["rows_in"] == item["rows"]
    state = event("batch_finalize", job_id=job.id, plan=planned)
    summary = handlers.finalize(state, LambdaContext())
    assert summary["status"] == "SUCCEEDED" and summary["rows_out"] == 2500
    assert handlers.finalize(state, LambdaContext()) == summary  # a retried Finalize


def test_every_score_task_scores_with_the_revision_plan_pinned(wired: Container, acme: Principal, tmp_path: Path) -> None:
    """A deployment updated between two Score tasks of one execution (a new version, a rollout's
    step): the later chunks are scored by the policy the job started with, as the first was."""
    wired.models.push(acme, "iris", (Path(__file__).parents[3] / "models" / "iris_forest.onnx").read_bytes())
    path = write_input(tmp_path / "in.csv", iris_rows(2500))
    job = wired.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, start=False, output_uri=str(tmp_path / "out"))
    planned = handlers.plan(event("batch_plan", job_id=job.id), LambdaContext())
    pinned = wired.deployments.get(acme, "iris").revision
    assert planned["job"]["revision"] == pinned and wired.batch.get(acme, job.id).revision == pinned
    assert planned["job"]["refs"] == {} == wired.batch.get(acme, job.id).refs  # a policy that references none
    items = json.loads((tmp_path / "home" / "batch" / "work" / "acme" / job.id / "chunks.json").read_text())
    assert len(items) >= 2
    for item in items:
        handlers.score({"job": planned["job"], "chunk": item}, LambdaContext())
        if item["index"] == 0:
            wired.deployments.update(acme, "iris", {"kind": "single", "model": "iris", "version": 2})
    summary = handlers.finalize(event("batch_finalize", job_id=job.id, plan=planned), LambdaContext())
    assert summary["status"] == "SUCCEEDED" and summary["rows_out"] == 2500
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["versions"] == {"iris:1": 2500} and manifest["revision"] == pinned


def test_mark_failed_records_the_error_the_state_machine_caught(wired: Container) -> None:
    failure = event("batch_mark_failed")
    wired.registry.create_job(BatchJob(
        id=failure["job_id"], tenant="acme", deployment="iris", input_uri="file:///in.csv",
        output_uri=f"file://{wired.settings.home_path}/out/", format="csv", output_format="csv",
    ))  # fmt: skip
    summary = handlers.mark_failed(failure, LambdaContext())
    assert summary["status"] == "FAILED"
    assert summary["error"] == "States.ExceedToleratedFailureThreshold: The specified tolerance threshold was exceeded"
    assert handlers.mark_failed(failure, LambdaContext()) == summary  # a finished job stays as it is


# The end of an execution, as EventBridge reports it ----------------------------------------
def running_job(container: Container, job_id: str, *, execution: str | None = None) -> BatchJob:
    """A job its execution had started: RUNNING, holding its output folder, one chunk of
    three scored."""
    out = f"file://{container.settings.home_path}/batch/outbox/acme/{job_id}/"
    container.registry.create_job(BatchJob(
        id=job_id, tenant="acme", deployment="iris", input_uri="file:///in.csv", output_uri=out,
        format="csv", output_format="csv", status="RUNNING", execution=execution, chunks_total=3,
    ))  # fmt: skip
    return container.registry.get_job("acme", job_id)


def test_the_execution_events_are_what_the_handler_reads() -> None:
    for name, status in [("batch_execution_timed_out", "TIMED_OUT"), ("batch_execution_aborted", "ABORTED"), ("batch_execution_failed", "FAILED")]:
        change = handlers.ExecutionStatusChange.model_validate(event(name)["detail"])
        assert change.status == status and change.execution_arn.startswith("arn:aws:states:eu-west-1:123456789012:execution:sluice-batch:")
        assert json.loads(change.input or "")["tenant"] == "acme"


def test_an_execution_that_timed_out_leaves_its_job_failed_saying_so(wired: Container) -> None:
    timed_out = event("batch_execution_timed_out")
    job = running_job(wired, "up-3f1c9a0d2b7e4c5a6f8e", execution=timed_out["detail"]["executionArn"])
    assert handlers.execution_ended(timed_out, LambdaContext()) == {"job_id": job.id, "tenant": "acme", "status": "FAILED"}
    failed = wired.registry.get_job("acme", job.id)
    assert failed.error == (
        "its process stopped: its Step Functions execution ended (TIMED_OUT: States.Timeout) without recording "
        "the job's outcome (3 of 3 chunks not scored: 0, 1, 2)"
    ), failed.error
    assert failed.finished_at is not None and wired.registry.output_holder("acme", job.output_uri) is None
    from sluice.batch.uris import local_path

    manifest = json.loads((local_path(job.output_uri) / "_manifest.json").read_text())
    assert manifest["status"] == "FAILED" and manifest["error"] == failed.error
    assert handlers.execution_ended(timed_out, LambdaContext())["status"] == "FAILED"  # delivered twice: no harm


def test_a_failed_execution_says_the_error_message_never_its_stack_trace(wired: Container) -> None:
    failure = event("batch_execution_failed")
    job = running_job(wired, "up-3f1c9a0d2b7e4c5a6f8e", execution=failure["detail"]["executionArn"])
    handlers.execution_ended(failure, LambdaContext())
    error = wired.registry.get_job("acme", job.id).error or ""
    assert error.startswith("its process stopped: its Step Functions execution ended (FAILED: Unavailable)")
    assert ": the registry could not be reached; try again" in error and "stackTrace" not in error and "/var/task" not in error


def test_a_stopped_scheduled_run_is_found_by_the_job_its_execution_created(wired: Container) -> None:
    from sluice.batch.executions import execution_job_id
    from sluice.batch.specs import ExecutionSpec
    from sluice.domain.schedules import Schedule

    aborted = event("batch_execution_aborted")
    execution = aborted["detail"]["executionArn"]
    spec = json.loads(aborted["detail"]["input"])
    wired.registry.create_schedule(Schedule("acme", "nightly", "iris", spec["input_uri"], "rate(1 day)"))
    job = running_job(wired, execution_job_id(ExecutionSpec.parse(spec), execution), execution=execution)  # the schedule's and the time's
    assert handlers.execution_ended(aborted, LambdaContext())["status"] == "FAILED"
    assert "execution ended (ABORTED: Operator)" in (wired.registry.get_job("acme", job.id).error or "")


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", "CANCELLED"])
def test_a_job_its_execution_recorded_stays_as_recorded(wired: Container, status: str) -> None:
    aborted = event("batch_execution_timed_out")
    job = running_job(wired, "up-3f1c9a0d2b7e4c5a6f8e", execution=aborted["detail"]["executionArn"])
    wired.registry.update_job("acme", job.id, status=status, error=None if status == "SUCCEEDED" else "as recorded")
    assert handlers.execution_ended(aborted, LambdaContext())["status"] == status
    assert wired.registry.get_job("acme", job.id).error == (None if status == "SUCCEEDED" else "as recorded")


def test_an_execution_without_a_job_of_its_own_changes_nothing(wired: Container) -> None:
    timed_out = event("batch_execution_timed_out")
    # Another execution runs the job now (the job id given again to a new execution).
    job = running_job(wired, "up-3f1c9a0d2b7e4c5a6f8e", execution=timed_out["detail"]["executionArn"] + "-again")
    assert handlers.execution_ended(timed_out, LambdaContext())["status"] == "RUNNING"
    assert wired.registry.get_job("acme", job.id).status == "RUNNING"
    # A specification refused or a scheduled run skipped: no job; a Map Run's child: no tenant.
    for given in ({"tenant": "acme", "deployment": "iris", "input_uri": "s3://b/inbox/acme/iris/x.csv"}, {"job": {}, "chunk": {}}):
        skipped = event("batch_execution_aborted")
        skipped["detail"]["input"] = json.dumps(given)
        assert handlers.execution_ended(skipped, LambdaContext()) == {}
    unseen = event("batch_execution_aborted")
    unseen["detail"].update(input=None, inputDetails={"included": False})  # too large to include
    assert handlers.execution_ended(unseen, LambdaContext()) == {}


def test_a_failure_tried_again_locally_is_raised_under_a_name_step_functions_retries() -> None:
    """Step Functions' retry matches the error's class name, not its bases: a throttled
    endpoint, one scaling from zero and a runtime refusing for now were each the job's end."""
    from infra.constructs.batch_workflow import SCORE_TRANSIENT_ERRORS

    from sluice.batch.orchestrators import _retried
    from sluice.domain.errors import BadRequest, Overloaded, SluiceError
    from sluice.runtimes.sagemaker_errors import NoCapacity, Throttled

    for error in (Throttled("throttled"), NoCapacity("scaling from zero"), Overloaded("busy", retry_after_s=1), SluiceError("x")):
        raised = handlers.transient_by_name(error)
        assert _retried(error) and type(raised).__name__ in SCORE_TRANSIENT_ERRORS and raised.message == error.message, (error, raised)
    refused = BadRequest("no", field="input_uri")
    assert handlers.transient_by_name(refused) is refused and not _retried(refused)
