"""Batch jobs on the local orchestrator: every format, bad rows, empty and large files,
retries, cancellation, and the same answers as real-time predictions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.batch.orchestrators import LocalOrchestrator
from sluice.batch.plan import Chunk, JobSpec
from sluice.batch.runner import JobNotRunning
from sluice.batch.score import ChunkScorer
from sluice.batch.uris import local_path
from sluice.domain.errors import Unavailable
from sluice.inference.loop import run
from tests.integration.batch.inputs import FEATURES, iris_rows, write_input
from tests.integration.batch.jobs import read_errors, read_parts, run_job
from tests.support import fail_chunks

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.domain.jobs import BatchJob
    from sluice.wiring import Container

FORMATS = ("csv", "jsonl", "parquet")


def online_labels(container: Container, principal: Principal, rows: list[dict[str, Any]]) -> list[str]:
    from sluice.domain.requests import ArrayInputs, PredictionRequest

    matrix = np.array([[r[f] for f in FEATURES] for r in rows], dtype=np.float32)
    answer = run(container.predictions.predict(principal, PredictionRequest("iris", ArrayInputs({"input": matrix})))).answer
    return [str(v) for v in answer.result.outputs["output_label"]]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_scores_into_the_same_format_with_its_keys(batch: Container, acme: Principal, tmp_path: Path, fmt: str) -> None:
    rows = iris_rows(3000)
    job = run_job(batch, acme, write_input(tmp_path / f"in.{fmt}", rows), deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED", job.error
    assert (job.rows_in, job.rows_out, job.rows_failed, job.rows_total) == (3000, 3000, 0, 3000)
    assert job.chunks_total is not None and job.chunks_total >= 2 and job.chunks_done == job.chunks_total
    out = read_parts(job)
    assert out.column_names == ["id", "prediction", "probability_setosa", "probability_versicolor", "probability_virginica", "confidence"]
    assert out.column("id").to_pylist() == [r["id"] for r in rows]
    assert out.column("prediction").to_pylist() == online_labels(batch, acme, rows)
    assert all(p.name.endswith(f".{fmt}") for p in local_path(job.output_uri).glob("part-*"))
    manifest = json.loads((local_path(job.output_uri) / "_manifest.json").read_text())
    assert manifest["status"] == "SUCCEEDED" and manifest["versions"] == {"iris:1": 3000}
    assert manifest["counts"]["rows_in"] == 3000 and (local_path(job.output_uri) / "_SUCCESS").exists()


@pytest.mark.parametrize("fmt", ("csv", "jsonl"))
def test_parquet_out_on_request_with_row_numbers_when_no_key_is_named(batch: Container, acme: Principal, tmp_path: Path, fmt: str) -> None:
    rows = iris_rows(1500)
    job = run_job(batch, acme, write_input(tmp_path / f"in.{fmt}", rows), deployment="iris", output_format="parquet")
    assert job.status == "SUCCEEDED" and job.output_format == "parquet"
    out = read_parts(job)
    assert out.column("row").to_pylist() == list(range(1500))
    assert all(p.suffix == ".parquet" for p in local_path(job.output_uri).glob("part-*"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_bad_rows_land_in_the_error_file_and_every_row_is_accounted_for(batch: Container, acme: Principal, tmp_path: Path, fmt: str) -> None:
    rows: list[dict[str, Any]] = iris_rows(2000)
    rows[3]["sepal_length"] = None  # missing
    rows[700]["petal_width"] = float("nan") if fmt == "parquet" else "nan"
    rows[1999]["sepal_width"] = "wide"
    del rows[1200]["petal_length"]
    path = write_input(tmp_path / f"in.{fmt}", rows) if fmt != "parquet" else _parquet_with_text(tmp_path, rows)
    if fmt == "csv":
        with path.open("a") as fh:
            fh.write("r-short,1.0,2.0\n")  # too few fields
    if fmt == "jsonl":
        with path.open("a") as fh:
            fh.write("{not json\n\n")  # broken, then blank
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED", job.error
    errors = read_errors(job)
    expected = {3: "missing value for 'sepal_length'", 700: "'petal_width' is NaN",
                1200: "missing value for 'petal_length'", 1999: "'sepal_width' is not a number: 'wide'"}  # fmt: skip
    if fmt == "csv":
        expected[2000] = "expected 5 fields"
    if fmt == "jsonl":
        expected |= {2000: "not valid JSON", 2001: "blank line"}
    assert {e["row"]: e["reason"] for e in errors} == expected
    assert [e["id"] for e in errors[:2]] == ["r000003", "r000700"]
    assert job.rows_in == len(expected) + 1996 and job.rows_out == 1996 and job.rows_failed == len(expected)
    scored = set(read_parts(job).column("id").to_pylist())
    assert "r000003" not in scored and "r000004" in scored and len(scored) == 1996


def _parquet_with_text(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    """A Parquet file whose sepal_width column is text (so a row can hold a word)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {c: [r.get(c) for r in rows] for c in ("id", *FEATURES)}
    columns["sepal_width"] = [None if v is None else str(v) for v in columns["sepal_width"]]
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table(columns), path, row_group_size=900)
    return path


@pytest.mark.parametrize("content", ["csv-header", "parquet-empty"])
def test_an_input_with_its_columns_and_no_rows_succeeds_with_no_rows(batch: Container, acme: Principal, tmp_path: Path, content: str) -> None:
    fmt = content.split("-")[0]
    path = tmp_path / f"in.{fmt}"
    if content == "csv-header":
        path.write_text("id," + ",".join(FEATURES) + "\n")
    else:
        write_input(path, [])
    job = run_job(batch, acme, path, deployment="iris")
    assert job.status == "SUCCEEDED", job.error
    assert (job.chunks_total, job.rows_in, job.rows_out, job.rows_failed) == (0, 0, 0, 0)
    manifest = json.loads((local_path(job.output_uri) / "_manifest.json").read_text())
    assert manifest["parts"] == [] and manifest["counts"]["rows_in"] == 0


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_0_byte_input_fails_saying_it_is_empty(batch: Container, acme: Principal, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(b"")
    job = run_job(batch, acme, path, deployment="iris")
    assert job.status == "FAILED" and "is empty (0 bytes)" in (job.error or ""), job.error
    assert job.chunks_total is None and not (local_path(job.output_uri) / "_SUCCESS").exists()


@pytest.mark.parametrize("fmt", ("csv", "parquet"))
def test_a_file_far_larger_than_a_chunk_keeps_every_row_in_order(batch: Container, acme: Principal, tmp_path: Path, fmt: str) -> None:
    rows = iris_rows(40_000, seed=3)
    job = run_job(batch, acme, write_input(tmp_path / f"in.{fmt}", rows, row_group_rows=600), deployment="iris")
    assert job.status == "SUCCEEDED", job.error
    assert job.chunks_total is not None and job.chunks_total >= 15
    out = read_parts(job)
    assert out.column("row").to_pylist() == list(range(40_000))
    sample = [rows[i] for i in range(0, 40_000, 997)]
    assert [out.column("prediction")[i].as_py() for i in range(0, 40_000, 997)] == online_labels(batch, acme, sample)


def test_a_chunk_failing_once_is_retried_and_counted_once(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = ChunkScorer.score
    calls: list[int] = []

    def flaky(self: ChunkScorer, spec: JobSpec, chunk: Chunk, **kw: Any) -> Any:
        calls.append(chunk.index)
        if chunk.index == 1 and calls.count(1) == 1:
            raise Unavailable("the model server went away")
        return real(self, spec, chunk, **kw)

    monkeypatch.setattr(ChunkScorer, "score", flaky)
    job = run_job(batch, acme, write_input(tmp_path / "in.csv", iris_rows(8000)), deployment="iris")
    assert job.status == "SUCCEEDED", job.error
    assert calls.count(1) == 2 and job.rows_in == 8000 and job.chunks_done == job.chunks_total


def test_a_chunk_that_keeps_failing_fails_the_job_naming_it(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fail_chunks(monkeypatch, Unavailable, "the model server went away", chunks={2})
    job = run_job(batch, acme, write_input(tmp_path / "in.csv", iris_rows(8000)), deployment="iris")
    assert job.status == "FAILED"
    assert "chunk 2 failed after 3 attempts: the model server went away" in (job.error or "")
    assert "not scored: " in (job.error or "") and "2" in (job.error or "").split("not scored: ")[1]
    manifest = json.loads((local_path(job.output_uri) / "_manifest.json").read_text())
    assert manifest["status"] == "FAILED" and not (local_path(job.output_uri) / "_SUCCESS").exists()


def test_scoring_a_chunk_again_overwrites_its_part_and_counts_once(batch: Container, acme: Principal, tmp_path: Path) -> None:
    path = write_input(tmp_path / "in.jsonl", iris_rows(1000))
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, start=False, output_uri=str(tmp_path / "out"))
    runner = batch.batch_runner
    planned = runner.plan(acme.tenant, job.id)
    spec, first = JobSpec.from_dict(planned["job"]), runner.chunks(planned)[0]
    assert runner.score(spec, first)["recorded"] is True
    part = tmp_path / "out" / "part-00000.jsonl"
    before = part.read_bytes()
    assert runner.score(spec, first)["recorded"] is False
    assert part.read_bytes() == before
    assert batch.registry.get_job(acme.tenant, job.id).rows_in == first.rows


def test_a_cancelled_job_stops_scoring_and_stays_cancelled(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_input(tmp_path / "in.csv", iris_rows(3000))
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, start=False, output_uri=str(tmp_path / "out"))
    real = ChunkScorer.score

    def cancel_after_first(self: ChunkScorer, spec: JobSpec, chunk: Chunk, **kw: Any) -> Any:
        result = real(self, spec, chunk, **kw)
        if chunk.index == 0:
            batch.batch.cancel(acme, job.id)
        return result

    monkeypatch.setattr(ChunkScorer, "score", cancel_after_first)
    LocalOrchestrator(batch.batch_runner, concurrency=1).run(acme.tenant, job.id)
    done = batch.batch.get(acme, job.id)
    assert done.status == "CANCELLED" and done.finished_at is not None
    assert done.chunks_done == 0 and done.chunks_total is not None and done.chunks_total > 1
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    with pytest.raises(JobNotRunning):
        batch.batch_runner.plan(acme.tenant, job.id)


def test_a_split_deployment_names_the_variant_of_every_row(batch: Container, acme: Principal, tmp_path: Path) -> None:
    batch.models.push(acme, "iris", (Path(__file__).parents[3] / "models" / "iris_forest.onnx").read_bytes())
    batch.deployments.create(acme, "iris-ab", {"kind": "split", "variants": [
        {"name": "a", "weight": 50, "target": {"kind": "single", "model": "iris", "version": 1}},
        {"name": "b", "weight": 50, "target": {"kind": "single", "model": "iris", "version": 2}},
    ]})  # fmt: skip
    job = run_job(batch, acme, write_input(tmp_path / "in.parquet", iris_rows(4000)), deployment="iris-ab")
    assert job.status == "SUCCEEDED", job.error
    variants = set(read_parts(job).column("variant").to_pylist())
    assert variants <= {"a", "b"} and variants
    manifest = json.loads((local_path(job.output_uri) / "_manifest.json").read_text())
    assert sum(manifest["versions"].values()) == 4000 and set(manifest["versions"]) <= {"iris:1", "iris:2"}
    # Through a reference to it: the same column (it had none: the split stood in another policy).
    batch.deployments.create(acme, "front", {"kind": "ref", "deployment": "iris-ab"})
    job = run_job(batch, acme, write_input(tmp_path / "in2.parquet", iris_rows(400)), deployment="front")
    assert job.status == "SUCCEEDED", job.error
    variants = set(read_parts(job).column("variant").to_pylist())
    assert variants <= {"a", "b"} and variants


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("no-deployment", "deployment 'iris' not found"),
        ("no-columns", "the input has no column 'petal_length', 'petal_width'"),
        ("no-key", "the input has no key column 'customer'"),
    ],
)
def test_a_job_that_cannot_start_fails_with_its_reason(batch: Container, acme: Principal, tmp_path: Path, setup: str, reason: str) -> None:
    path = tmp_path / "in.csv"
    path.write_text("sepal_length,sepal_width\n1,2\n" if setup == "no-columns" else "id," + ",".join(FEATURES) + "\nx,1,2,3,4\n")
    options: dict[str, Any] = {"deployment": "iris"}
    if setup == "no-key":
        options["key_columns"] = ["customer"]
    if setup == "no-deployment":
        job = batch.batch.submit(acme, input_uri=str(path), operator=True, start=False, **options)
        batch.deployments.delete(acme, "iris")  # gone after the job was accepted
        LocalOrchestrator(batch.batch_runner, concurrency=1).run(acme.tenant, job.id)
        job = batch.registry.get_job(acme.tenant, job.id)
    else:
        job = run_job(batch, acme, path, **options)
    assert job.status == "FAILED" and reason in (job.error or ""), job.error


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077], ids=["000", "022", "077"])
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_results_are_owner_only_whatever_the_umask(batch: Container, acme: Principal, tmp_path: Path, umask: int, fmt: str) -> None:
    """Parts, error files, the manifest and the chunk list are written aside (pyarrow copies a
    part from a private temporary folder) and renamed into place: files 0600 and folders 0700
    whatever the umask, not only under the `sluice` command's."""
    import os

    rows: list[dict[str, Any]] = iris_rows(1500)
    rows[3]["sepal_length"] = None
    path = write_input(tmp_path / "in.csv", rows)
    previous = os.umask(umask)
    try:
        job = run_job(batch, acme, path, deployment="iris", output_format=fmt)
    finally:
        os.umask(previous)
    assert job.status == "SUCCEEDED" and job.rows_failed == 1, job.error
    out = local_path(job.output_uri)
    written = {p.relative_to(out).as_posix(): p.stat().st_mode & 0o777 for p in out.rglob("*") if p.is_file()}
    assert {"_manifest.json", "_SUCCESS", f"part-00000.{fmt}", "errors/part-00000.jsonl"} <= set(written)
    assert set(written.values()) == {0o600}, written
    work = local_path(batch.batch.paths.root) / "work"  # the chunk list
    folders = {p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777 for p in [out, *out.rglob("*"), work, *work.rglob("*")] if p.is_dir()}
    assert {"in-out", "in-out/errors", f"home/batch/work/{acme.tenant}/{job.id}"} <= set(folders)
    assert set(folders.values()) == {0o700}, folders
    assert (work / acme.tenant / job.id / "chunks.json").stat().st_mode & 0o777 == 0o600


def test_a_switch_counts_each_row_under_the_version_that_answered_it(batch: Container, acme: Principal, tmp_path: Path) -> None:
    batch.models.push(acme, "iris", (Path(__file__).parents[3] / "models" / "iris_forest.onnx").read_bytes())
    short = {"field": "inputs.input", "column": "petal_length", "op": "<", "value": 2.5}
    batch.deployments.create(acme, "petals", {"kind": "switch", "cases": [{"name": "short", "when": short, "target": {"kind": "single", "model": "iris", "version": 1}}],
                                              "default": {"kind": "single", "model": "iris", "version": 2}})  # fmt: skip
    rows = iris_rows(200)
    job = run_job(batch, acme, write_input(tmp_path / "in.parquet", rows), deployment="petals")
    assert job.status == "SUCCEEDED", job.error
    manifest = json.loads((local_path(job.output_uri) / "_manifest.json").read_text())
    shorts = sum(r["petal_length"] < 2.5 for r in rows)
    assert 0 < shorts < len(rows) and manifest["versions"] == {"iris:1": shorts, "iris:2": len(rows) - shorts}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_scalar_model_scores_each_row_by_a_call_of_its_own(batch: Container, acme: Principal, tmp_path: Path, fmt: str) -> None:
    """docs/batch.md: a model whose input is a scalar (shape []) takes one row per call, its
    value as a scalar: every good row is scored with its own answer, a row that cannot be fed
    fails alone in the error file, and every row is accounted for."""
    from tests.models import relu_model

    batch.models.push(acme, "scalar", relu_model([]))
    batch.deployments.create(acme, "scalar", {"kind": "single", "model": "scalar", "version": 1})
    shapes: list[tuple[int, ...]] = []
    scoring = batch.batch_runner.scorer.predictions  # the batch's own prediction service
    predict = scoring.predict

    async def spying(principal: Principal, request: Any) -> Any:
        shapes.append(request.inputs.arrays["x"].shape)
        return await predict(principal, request)

    scoring.predict = spying  # type: ignore[method-assign]
    values: list[Any] = [float(v) for v in np.linspace(-3, 3, 40)]
    values[7], values[30] = None, "wide"
    rows = [{"id": f"r{i}", "x": v} for i, v in enumerate(values)]
    path = tmp_path / f"in.{fmt}"
    if fmt == "csv":
        path.write_text("id,x\n" + "".join(f"{r['id']},{'' if r['x'] is None else r['x']}\n" for r in rows))
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"id": [r["id"] for r in rows], "x": [None if v is None else str(v) for v in values]}), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = run_job(batch, acme, path, deployment="scalar", key_columns=["id"])
    assert job.status == "SUCCEEDED", job.error
    assert (job.rows_in, job.rows_out, job.rows_failed) == (40, 38, 2)
    out = read_parts(job)
    good = [(r["id"], max(float(r["x"]), 0.0)) for r in rows if r["x"] not in (None, "wide")]
    assert out.column("id").to_pylist() == [i for i, _ in good]
    np.testing.assert_allclose(out.column("prediction").to_pylist(), [y for _, y in good], rtol=1e-6)
    assert [e["id"] for e in read_errors(job)] == ["r7", "r30"]
    assert shapes == [()] * 38  # one call per row, its value a scalar


def _update_after_first_chunk(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Batch scoring calls `change()` once its first chunk is scored (chunks one at a time)."""
    real = ChunkScorer.score

    def scoring(self: ChunkScorer, spec: JobSpec, chunk: Chunk, **kw: Any) -> Any:
        result = real(self, spec, chunk, **kw)
        if chunk.index == 0:
            change()
        return result

    monkeypatch.setattr(ChunkScorer, "score", scoring)


def _run_changing(
    batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deployment: str, change: Any
) -> tuple[Path, BatchJob]:
    """A job of 3,000 iris rows on `deployment` into `tmp_path/out`, run to its end with
    `change` made once its first chunk is scored: the input and the job as it ended."""
    path = write_input(tmp_path / "in.csv", iris_rows(3000))
    job = batch.batch.submit(acme, deployment=deployment, input_uri=str(path), operator=True, start=False, output_uri=str(tmp_path / "out"))
    _update_after_first_chunk(monkeypatch, change)
    LocalOrchestrator(batch.batch_runner, concurrency=1).run(acme.tenant, job.id)
    return path, batch.batch.get(acme, job.id)


def test_a_job_scores_every_chunk_with_the_deployment_as_it_stood_when_it_started(
    batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/batch.md: a deployment updated while a job runs (a new version, a rollout's step)
    is for the jobs after it. Every chunk of this one is scored by the policy it started with,
    and its record and manifest name that revision."""
    batch.models.push(acme, "iris", (Path(__file__).parents[3] / "models" / "iris_forest.onnx").read_bytes())
    started = batch.deployments.get(acme, "iris").revision
    path, done = _run_changing(batch, acme, tmp_path, monkeypatch, "iris", lambda: batch.deployments.update(acme, "iris", {"kind": "single", "model": "iris", "version": 2}))
    assert done.status == "SUCCEEDED" and done.chunks_total is not None and done.chunks_total > 1, done.error
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["versions"] == {"iris:1": 3000}
    updated = batch.deployments.get(acme, "iris").revision
    assert done.revision == manifest["revision"] == started < updated
    monkeypatch.undo()
    later = run_job(batch, acme, path, deployment="iris", output_uri=str(tmp_path / "later"))  # the next job: the new version
    assert later.revision == updated
    assert json.loads((tmp_path / "later" / "_manifest.json").read_text())["versions"] == {"iris:2": 3000}


def test_a_job_follows_the_deployments_its_policy_references_as_they_stood_when_it_started(
    batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/batch.md: a policy that references another deployment (`ref`), through another,
    follows each at the revision it stood at when the job started: one updated while the job
    runs is for the jobs after it, as the job's own deployment is. The record and the manifest
    name those revisions."""
    batch.models.push(acme, "iris", (Path(__file__).parents[3] / "models" / "iris_forest.onnx").read_bytes())
    batch.deployments.create(acme, "middle", {"kind": "ref", "deployment": "iris"})
    batch.deployments.create(acme, "front", {"kind": "ref", "deployment": "middle"})
    pinned = {"iris": batch.deployments.get(acme, "iris").revision, "middle": batch.deployments.get(acme, "middle").revision}
    path, done = _run_changing(batch, acme, tmp_path, monkeypatch, "front", lambda: batch.deployments.update(acme, "iris", {"kind": "single", "model": "iris", "version": 2}))
    assert done.status == "SUCCEEDED" and done.chunks_total is not None and done.chunks_total > 1, done.error
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["versions"] == {"iris:1": 3000}
    assert done.refs == manifest["refs"] == pinned and batch.deployments.get(acme, "iris").revision > pinned["iris"]
    monkeypatch.undo()
    later = run_job(batch, acme, path, deployment="front", output_uri=str(tmp_path / "later"))  # the next job: the new version
    assert later.refs == {**pinned, "iris": batch.deployments.get(acme, "iris").revision}
    assert json.loads((tmp_path / "later" / "_manifest.json").read_text())["versions"] == {"iris:2": 3000}


def test_a_job_whose_referenced_deployment_was_made_again_meanwhile_fails_saying_so(
    batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A referenced deployment's pinned revision that can no longer be read fails the chunks
    left, as the job's own: never scored by another policy."""
    batch.models.push(acme, "iris", (Path(__file__).parents[3] / "models" / "iris_forest.onnx").read_bytes())
    batch.deployments.create(acme, "front", {"kind": "ref", "deployment": "iris"})
    started = batch.deployments.get(acme, "iris").revision
    path = write_input(tmp_path / "in.csv", iris_rows(3000))
    job = batch.batch.submit(acme, deployment="front", input_uri=str(path), operator=True, start=False, output_uri=str(tmp_path / "out"))

    def made_again() -> None:  # the job's own deployment stays (its history holds the revision pinned)
        batch.deployments.update(acme, "front", {"kind": "single", "model": "iris", "version": 1})  # no longer referencing it,
        batch.deployments.delete(acme, "iris")  # so it may be deleted
        batch.deployments.create(acme, "iris", {"kind": "single", "model": "iris", "version": 2})
        batch.deployments.update(acme, "front", {"kind": "ref", "deployment": "iris"})

    _update_after_first_chunk(monkeypatch, made_again)
    LocalOrchestrator(batch.batch_runner, concurrency=1).run(acme.tenant, job.id)
    done = batch.batch.get(acme, job.id)
    assert done.status == "FAILED" and done.chunks_done == 1, done.error
    assert f"revision {started} of deployment 'iris' can no longer be read: the deployment was deleted" in (done.error or ""), done.error
    assert set(json.loads((tmp_path / "out" / "_manifest.json").read_text())["versions"]) == {"iris:1"}
    assert done.refs == {"iris": started}


def test_a_job_whose_referenced_deployment_was_deleted_meanwhile_fails_naming_its_pinned_revision(
    batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleted (not made again): the chunks left fail naming the revision pinned, as for the
    job's own deployment, not with a bare 'not found'."""
    batch.models.push(acme, "iris", (Path(__file__).parents[3] / "models" / "iris_forest.onnx").read_bytes())
    batch.deployments.create(acme, "front", {"kind": "ref", "deployment": "iris"})
    started = batch.deployments.get(acme, "iris").revision
    path = write_input(tmp_path / "in.csv", iris_rows(3000))
    job = batch.batch.submit(acme, deployment="front", input_uri=str(path), operator=True, start=False, output_uri=str(tmp_path / "out"))

    def deleted() -> None:
        batch.deployments.update(acme, "front", {"kind": "single", "model": "iris", "version": 1})  # no longer referencing it,
        batch.deployments.delete(acme, "iris")  # so it may be deleted

    _update_after_first_chunk(monkeypatch, deleted)
    LocalOrchestrator(batch.batch_runner, concurrency=1).run(acme.tenant, job.id)
    done = batch.batch.get(acme, job.id)
    assert done.status == "FAILED" and done.chunks_done == 1, done.error
    assert f"revision {started} of deployment 'iris' can no longer be read: the deployment was deleted" in (done.error or ""), done.error


def test_a_job_whose_deployment_was_deleted_meanwhile_fails_saying_so(
    batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's revision that can no longer be read (its deployment deleted, perhaps made again
    under the same name) fails the chunks left: never scored by another policy."""
    batch.models.push(acme, "iris", (Path(__file__).parents[3] / "models" / "iris_forest.onnx").read_bytes())
    started = batch.deployments.get(acme, "iris").revision
    path = write_input(tmp_path / "in.csv", iris_rows(3000))
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, start=False, output_uri=str(tmp_path / "out"))

    def made_again() -> None:
        batch.deployments.delete(acme, "iris")
        batch.deployments.create(acme, "iris", {"kind": "single", "model": "iris", "version": 2})

    _update_after_first_chunk(monkeypatch, made_again)
    LocalOrchestrator(batch.batch_runner, concurrency=1).run(acme.tenant, job.id)
    done = batch.batch.get(acme, job.id)
    assert done.status == "FAILED" and done.chunks_done == 1, done.error
    assert f"revision {started} of deployment 'iris' can no longer be read: the deployment was deleted" in (done.error or "")
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert set(manifest["versions"]) == {"iris:1"}
