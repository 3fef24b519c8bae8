"""Batch files on S3 (moto): Parquet read through ranged GETs, text by byte ranges, parts
written back; an input replaced mid-job fails its chunks rather than mixing two files."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import boto3
import pyarrow.parquet as pq
import pytest
from moto import mock_aws

from sluice.batch.files import Files
from sluice.batch.orchestrators import LocalOrchestrator
from sluice.batch.plan import JobSpec
from sluice.domain.errors import Conflict
from sluice.wiring import Container
from tests.integration.batch.inputs import iris_rows, write_input
from tests.support import fake_aws_credentials

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.settings import Settings

REGION = "eu-west-1"
BUCKET = "sluice-batch-test"


@pytest.fixture
def s3_batch(settings: Settings, acme: Principal, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Container, Any]]:
    from sluice.demo import install_demo
    from tests.conftest import MODELS

    fake_aws_credentials(monkeypatch, REGION)
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        local = Container.from_settings(settings.replace(batch_bucket=BUCKET))
        container = Container(local.settings, local.registry, local.store, local.runtimes, files=Files(s3_client=s3))
        install_demo(container, acme, MODELS)
        yield container, s3


def _put(s3: Any, tmp_path: Path, name: str, rows: list[dict[str, Any]]) -> str:
    path = write_input(tmp_path / name, rows, row_group_rows=400)
    s3.upload_file(str(path), BUCKET, f"inbox/acme/iris/{name}")
    return f"s3://{BUCKET}/inbox/acme/iris/{name}"


@pytest.mark.parametrize("name", ["day.parquet", "day.jsonl"])
def test_inputs_and_outputs_on_s3(s3_batch: tuple[Container, Any], acme: Principal, tmp_path: Path, name: str) -> None:
    container, s3 = s3_batch
    uri = _put(s3, tmp_path, name, iris_rows(3000))
    job = container.batch.submit(acme, deployment="iris", input_uri=uri, key_columns=["id"], output_format="parquet", start=False)
    LocalOrchestrator(container.batch_runner, concurrency=2).run(acme.tenant, job.id)
    done = container.registry.get_job(acme.tenant, job.id)
    assert done.status == "SUCCEEDED", done.error
    assert done.rows_out == 3000 and done.chunks_total is not None and done.chunks_total >= 2
    prefix = f"outbox/acme/{job.id}/"
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=prefix + "_manifest.json")["Body"].read())
    first = s3.get_object(Bucket=BUCKET, Key=prefix + "part-00000.parquet")["Body"].read()
    assert pq.read_table(io.BytesIO(first)).column("id")[0].as_py() == "r000000"
    assert sum(p["rows"] for p in manifest["parts"]) == 3000
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix=f"work/acme/{job.id}/chunks.json")["KeyCount"] == 1


def test_an_input_replaced_mid_job_fails_its_chunks(s3_batch: tuple[Container, Any], acme: Principal, tmp_path: Path) -> None:
    container, s3 = s3_batch
    uri = _put(s3, tmp_path, "day.csv", iris_rows(3000))
    job = container.batch.submit(acme, deployment="iris", input_uri=uri, start=False)
    runner = container.batch_runner
    planned = runner.plan(acme.tenant, job.id)
    _put(s3, tmp_path, "day.csv", iris_rows(3000, seed=99))  # a new upload under the same key
    with pytest.raises(Conflict, match="changed while the job ran"):
        runner.score(JobSpec.from_dict(planned["job"]), runner.chunks(planned)[0])


def test_the_first_error_rows_are_read_from_s3_by_range(s3_batch: tuple[Container, Any], acme: Principal, globex: Principal, tmp_path: Path) -> None:
    from sluice.domain.errors import NotFound

    container, s3 = s3_batch
    rows = iris_rows(2000)
    for i in range(0, 2000, 50):
        rows[i]["petal_width"] = "wide"
    uri = _put(s3, tmp_path, "bad.jsonl", rows)
    job = container.batch.submit(acme, deployment="iris", input_uri=uri, key_columns=["id"], start=False)
    LocalOrchestrator(container.batch_runner, concurrency=2).run(acme.tenant, job.id)
    assert container.registry.get_job(acme.tenant, job.id).rows_failed == 40
    ranges: list[str] = []
    s3.meta.events.register("provide-client-params.s3.GetObject", lambda params, **_: ranges.append(params.get("Range", "whole")))
    out = container.batch.error_rows(acme, job.id, limit=5)
    assert [r["row"] for r in out["rows"]] == [0, 50, 100, 150, 200] and out["truncated"] is True
    assert out["rows"][0]["reason"] == "'petal_width' is not a number: 'wide'" and out["rows"][0]["id"] == "r000000"
    assert out["files"][0].startswith(f"s3://{BUCKET}/outbox/acme/{job.id}/errors/part-")
    assert ranges and all(r.startswith("bytes=0-") for r in ranges)  # ranged reads, never the whole object
    with pytest.raises(NotFound):
        container.batch.error_rows(globex, job.id)


def test_a_prefix_of_objects_listed_page_by_page(s3_batch: tuple[Container, Any], acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    container, s3 = s3_batch
    sizes = [900, 10, 1500, 700]
    (tmp_path / "dt=2026-11-26").mkdir()
    for i, n in enumerate(sizes):
        _put(s3, tmp_path, f"dt=2026-11-26/part-{i:02d}.parquet", iris_rows(n, seed=i))
    for hidden in ("dt=2026-11-26/_SUCCESS", "dt=2026-11-26/.part-00.parquet.crc", "dt=2026-11-26/_temporary/x.parquet"):
        s3.put_object(Bucket=BUCKET, Key=f"inbox/acme/iris/{hidden}", Body=b"not data")
    paginator = s3.get_paginator
    monkeypatch.setattr(s3, "get_paginator", lambda name: _small_pages(paginator(name)))
    prefix = f"s3://{BUCKET}/inbox/acme/iris/dt=2026-11-26/"
    job = container.batch.submit(acme, deployment="iris", input_uri=prefix, start=False)
    LocalOrchestrator(container.batch_runner, concurrency=2).run(acme.tenant, job.id)
    done = container.registry.get_job(acme.tenant, job.id)
    assert done.status == "SUCCEEDED", done.error
    assert (done.rows_total, done.rows_in, done.rows_out, done.rows_failed) == (3110, 3110, 3110, 0)
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=f"outbox/acme/{job.id}/_manifest.json")["Body"].read())
    assert [(o["uri"], o["rows"]) for o in manifest["objects"]] == [(f"{prefix}part-{i:02d}.parquet", n) for i, n in enumerate(sizes)]
    assert len({p["uri"] for p in manifest["parts"]}) == done.chunks_total


def _small_pages(paginator: Any) -> Any:
    """A paginator that asks for two keys a page, so a listing takes several."""
    original = paginator.paginate
    paginator.paginate = lambda **kwargs: original(**kwargs, PaginationConfig={"PageSize": 2})
    return paginator


def test_an_object_of_a_prefix_replaced_mid_job_fails_its_chunks(s3_batch: tuple[Container, Any], acme: Principal, tmp_path: Path) -> None:
    container, s3 = s3_batch
    (tmp_path / "day").mkdir()
    for name in ("day/a.csv", "day/b.csv"):
        _put(s3, tmp_path, name, iris_rows(1000))
    job = container.batch.submit(acme, deployment="iris", input_uri=f"s3://{BUCKET}/inbox/acme/iris/day/", start=False)
    runner = container.batch_runner
    planned = runner.plan(acme.tenant, job.id)
    chunks = runner.chunks(planned)
    _put(s3, tmp_path, "day/b.csv", iris_rows(1000, seed=99))
    spec = JobSpec.from_dict(planned["job"])
    assert runner.score(spec, next(c for c in chunks if c.uri and c.uri.endswith("a.csv")))["rows_in"] > 0
    with pytest.raises(Conflict, match=r"b\.csv changed while the job ran"):
        runner.score(spec, next(c for c in chunks if c.uri and c.uri.endswith("b.csv")))


def test_a_manifest_on_s3_may_list_only_the_tenant_inbox(s3_batch: tuple[Container, Any], acme: Principal, tmp_path: Path) -> None:
    container, s3 = s3_batch
    inside = _put(s3, tmp_path, "mine.jsonl", iris_rows(300))
    s3.put_object(Bucket=BUCKET, Key="inbox/globex/iris/theirs.jsonl", Body=b'{"id": "x"}\n')
    runs = {}
    for name, listed in (("ok.json", [inside]), ("sneaky.json", [inside, f"s3://{BUCKET}/inbox/globex/iris/theirs.jsonl"])):
        s3.put_object(Bucket=BUCKET, Key=f"inbox/acme/iris/{name}", Body=json.dumps({"files": listed}).encode())
        job = container.batch.submit(acme, deployment="iris", input_uri=f"s3://{BUCKET}/inbox/acme/iris/{name}", start=False)
        LocalOrchestrator(container.batch_runner, concurrency=1).run(acme.tenant, job.id)
        runs[name] = container.registry.get_job(acme.tenant, job.id)
    assert runs["ok.json"].status == "SUCCEEDED" and runs["ok.json"].rows_out == 300
    assert runs["ok.json"].format == "jsonl"
    assert runs["sneaky.json"].status == "FAILED" and "outside your inbox" in (runs["sneaky.json"].error or "")
    assert "theirs.jsonl" in (runs["sneaky.json"].error or "")


def test_an_upload_gone_before_its_event_starts_nothing_and_the_others_start(s3_batch: tuple[Container, Any], acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import copy

    from sluice.handlers import batch as handlers
    from tests.conftest import EVENTS
    from tests.support import LambdaContext

    container, s3 = s3_batch
    monkeypatch.setattr(handlers, "_container", container)
    _put(s3, tmp_path, "later.csv", iris_rows(10))
    event = json.loads((EVENTS / "s3_put_inbox.json").read_text())
    gone = copy.deepcopy(event["Records"][0])
    gone["s3"]["bucket"]["name"], gone["s3"]["object"]["key"] = BUCKET, "inbox/acme/iris/gone.csv"
    kept = copy.deepcopy(gone)
    kept["s3"]["object"]["key"] = "inbox/acme/iris/later.csv"
    jobs = handlers.on_upload({"Records": [gone, kept]}, LambdaContext())["jobs"]
    assert jobs[0]["status"] == "NOT_STARTED" and "no object at" in jobs[0]["error"]
    assert jobs[1]["status"] == "PENDING"
    assert [j.input_uri for j in container.registry.list_jobs("acme", limit=10)] == [f"s3://{BUCKET}/inbox/acme/iris/later.csv"]


class Held:
    """Step Functions as the upload trigger sees it: each start recorded (the test runs the
    job), the first `refusals` of them throttled."""

    keeps_heartbeat = False

    def __init__(self, refusals: int = 0) -> None:
        self.refusals = refusals
        self.started: list[str] = []

    def start(self, job: Any) -> str:
        from sluice.domain.errors import Unavailable

        if self.refusals:
            self.refusals -= 1
            raise Unavailable("the batch workflow could not be started; try again")
        self.started.append(job.id)
        return f"arn:aws:states:{REGION}:123456789012:execution:sluice-batch:{job.id}"

    def cancel(self, job: Any) -> None:
        pass

    def ended(self, job: Any) -> None:
        return None


@pytest.fixture
def uploads(s3_batch: tuple[Container, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[Container, Any, Held]:
    """The S3 trigger's container, on `Held` Step Functions."""
    from sluice.handlers import batch as handlers

    wired, s3 = s3_batch
    held = Held()
    container = Container(wired.settings, wired.registry, wired.store, wired.runtimes, files=wired.batch_runner.files, orchestrator=held)
    monkeypatch.setattr(handlers, "_container", container)
    return container, s3, held


def _on_upload(key: str, head: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the bucket's notification sends for `key` (HEAD's answer gives its ETag and version)."""
    from urllib.parse import quote_plus

    from sluice.handlers import batch as handlers
    from tests.conftest import EVENTS
    from tests.support import LambdaContext

    record = json.loads((EVENTS / "s3_put_inbox.json").read_text())["Records"][0]
    record["s3"]["bucket"]["name"], record["s3"]["object"]["key"] = BUCKET, quote_plus(key, safe="/")
    if head is not None:
        record["s3"]["object"]["eTag"] = head["ETag"].strip('"')
        if "VersionId" in head:
            record["s3"]["object"]["versionId"] = head["VersionId"]
    (job,) = handlers.on_upload({"Records": [record]}, LambdaContext())["jobs"]
    return job


def test_each_upload_to_a_versioned_key_scores_its_own_version(uploads: tuple[Container, Any, Held], tmp_path: Path) -> None:
    container, s3, _ = uploads
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    heads = []
    for rows in (30, 10):  # a second upload lands before the first one's job runs
        _put(s3, tmp_path, "day.csv", iris_rows(rows, seed=rows))
        heads.append(s3.head_object(Bucket=BUCKET, Key="inbox/acme/iris/day.csv"))
    for head, rows in zip(heads, (30, 10), strict=True):
        job = _on_upload("inbox/acme/iris/day.csv", head)
        LocalOrchestrator(container.batch_runner, concurrency=2).run("acme", job["job_id"])
        done = container.registry.get_job("acme", job["job_id"])
        assert (done.status, done.rows_in, done.rows_out) == ("SUCCEEDED", rows, rows), done.error


def test_an_upload_replaced_before_its_job_ran_fails_saying_so(uploads: tuple[Container, Any, Held], tmp_path: Path) -> None:
    container, s3, _ = uploads
    _put(s3, tmp_path, "day.csv", iris_rows(30))
    job = _on_upload("inbox/acme/iris/day.csv", s3.head_object(Bucket=BUCKET, Key="inbox/acme/iris/day.csv"))
    _put(s3, tmp_path, "day.csv", iris_rows(10, seed=2))  # no versions kept: the first upload is gone
    LocalOrchestrator(container.batch_runner, concurrency=2).run("acme", job["job_id"])
    done = container.registry.get_job("acme", job["job_id"])
    assert done.status == "FAILED" and done.rows_in == 0
    assert "changed since its upload" in (done.error or "")


def test_an_upload_whose_invoker_died_before_starting_it_is_started_by_the_events_retry(uploads: tuple[Container, Any, Held], tmp_path: Path) -> None:
    """The invocation killed between making the job and starting its execution (a timeout, out
    of memory): no error recorded, nothing running it. The event's retry starts it, once."""

    class Died(BaseException):  # the runtime ending the invocation: no handler of sluice's runs
        pass

    container, s3, held = uploads
    start = held.start
    held.start = lambda job: (_ for _ in ()).throw(Died())  # type: ignore[method-assign]
    _put(s3, tmp_path, "day.csv", iris_rows(20))
    head = s3.head_object(Bucket=BUCKET, Key="inbox/acme/iris/day.csv")
    with pytest.raises(Died):
        _on_upload("inbox/acme/iris/day.csv", head)
    (waiting,) = container.registry.list_jobs("acme")
    assert waiting.status == "PENDING" and waiting.error is None and waiting.execution is None
    held.start = start  # type: ignore[method-assign]
    assert _on_upload("inbox/acme/iris/day.csv", head)["job_id"] == waiting.id and held.started == [waiting.id]
    assert _on_upload("inbox/acme/iris/day.csv", head)["job_id"] == waiting.id and held.started == [waiting.id]  # started once
    assert container.registry.get_job("acme", waiting.id).execution is not None


def test_an_upload_whose_start_was_throttled_is_started_by_the_events_retry(uploads: tuple[Container, Any, Held], tmp_path: Path) -> None:
    from sluice.domain.errors import Unavailable

    container, s3, held = uploads
    held.refusals = 1
    _put(s3, tmp_path, "day.csv", iris_rows(20))
    head = s3.head_object(Bucket=BUCKET, Key="inbox/acme/iris/day.csv")
    with pytest.raises(Unavailable):  # Lambda retries the event
        _on_upload("inbox/acme/iris/day.csv", head)
    (waiting,) = container.registry.list_jobs("acme")
    assert waiting.status == "PENDING" and "could not be started" in (waiting.error or "")
    job = _on_upload("inbox/acme/iris/day.csv", head)
    assert job["job_id"] == waiting.id and held.started == [waiting.id]
    assert _on_upload("inbox/acme/iris/day.csv", head)["job_id"] == waiting.id and held.started == [waiting.id]
    LocalOrchestrator(container.batch_runner, concurrency=2).run("acme", waiting.id)
    done = container.registry.get_job("acme", waiting.id)
    assert (done.status, done.rows_out, done.error) == ("SUCCEEDED", 20, None)


@pytest.mark.parametrize("name", ["report#1.csv", "what?.csv", "50%.csv"])
def test_an_upload_whose_name_could_be_read_as_another_object_gets_a_failed_job_saying_why(
    uploads: tuple[Container, Any, Held], acme: Principal, tmp_path: Path, name: str
) -> None:
    container, s3, held = uploads
    _put(s3, tmp_path, name, iris_rows(5))
    job = _on_upload(f"inbox/acme/iris/{name}")
    assert job["status"] == "FAILED" and held.started == []
    (failed,) = [j for j in container.batch.list(acme) if j.id == job["job_id"]]
    assert failed.input_uri == f"s3://{BUCKET}/inbox/acme/iris/{name}"
    assert name in (failed.error or "") and "rename it" in (failed.error or "")


def test_a_chunk_scored_again_counts_its_rows_once_in_the_tenants_own_series(
    s3_batch: tuple[Container, Any], acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step Functions repeats a Score whose answer was lost: it records nothing new, and its
    rows are not counted again; the metrics name the tenant, as two tenants' `iris` are two."""
    from sluice.handlers import batch as handlers
    from tests.support import LambdaContext

    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    container, s3 = s3_batch
    monkeypatch.setattr(handlers, "_container", container)
    monkeypatch.setattr(container.batch.orchestrator, "start", lambda job: None)  # Step Functions' part: the steps below
    job = container.batch.submit(acme, deployment="iris", input_uri=_put(s3, tmp_path, "day.parquet", iris_rows(50)))
    planned = handlers.plan({"job_id": job.id, "tenant": "acme"}, LambdaContext())
    (chunk,) = json.loads(container.batch_runner.files.read_bytes(planned["chunks"]["uri"]))
    capsys.readouterr()
    first = handlers.score({"job": planned["job"], "chunk": chunk}, LambdaContext())
    again = handlers.score({"job": planned["job"], "chunk": chunk}, LambdaContext())
    assert first["recorded"] and not again["recorded"]
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{") and "BatchRows" in line]
    assert [line["BatchRows"] for line in lines] in ([50], [[50]], [50.0], [[50.0]]), lines
    assert lines[0]["tenant"] == "acme" and "tenant" in lines[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
