"""The batch Lambda handlers fed the sample events in events/: each typed at the edge, each
step one call, the shapes the state machine passes between them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from sluice.domain.jobs import BatchJob
from sluice.handlers import batch as handlers
from tests.conftest import EVENTS
from tests.integration.batch.inputs import iris_rows, write_input
from tests.support import LambdaContext

if TYPE_CHECKING:
    from pathlib import Path

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
