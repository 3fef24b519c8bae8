"""Batch results that never lie: quoted line breaks across chunks, an output folder used
twice, cancelling mid-chunk, decimal and empty inputs, a job where no row scored, and one
number grammar for CSV and JSON Lines."""

from __future__ import annotations

import json
import os
import random
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.batch.orchestrators import TRANSIENT_ERRORS, LocalOrchestrator, Progress
from sluice.batch.pieces import ChunkMalformed
from sluice.batch.plan import Chunk, JobSpec
from sluice.batch.runner import JobIncomplete
from sluice.batch.score import ChunkScorer
from sluice.batch.uris import local_path
from tests.integration.batch.inputs import FEATURES, iris_rows, write_input
from tests.integration.batch.jobs import read_errors, read_parts, run_job

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.domain.jobs import BatchJob
    from sluice.wiring import Container


def _folder(job: BatchJob) -> set[str]:
    root = local_path(job.output_uri)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _manifest(job: BatchJob) -> dict[str, Any]:
    return json.loads((local_path(job.output_uri) / "_manifest.json").read_text())


def _listed(job: BatchJob) -> set[str]:
    manifest = _manifest(job)
    root = local_path(job.output_uri)
    return {str(local_path(e["uri"]).relative_to(root)) for e in manifest["parts"] + manifest["errors"]}


# 1. Quoted fields with line breaks ------------------------------------------------------------
def _csv_with_notes(path: Path, rows: list[dict[str, Any]], seed: int = 5) -> Path:
    """Iris rows with a quoted `note` holding line breaks, commas and doubled quotes."""
    rng = random.Random(seed)
    notes = ['"' + "a long note,\n" * 40 + '"', '"line one\nline two"', '"a, b\n\nc ""quoted""\n"', "plain", '""', '"x\r\ny"', '"5\'10"" tall\nok"']
    lines = ["id," + ",".join(FEATURES) + ",note"]
    for r in rows:
        lines.append(",".join([r["id"], *(str(r[f]) for f in FEATURES), rng.choice(notes)]))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_quoted_line_breaks_across_chunk_boundaries_are_one_row_each(batch: Container, acme: Principal, tmp_path: Path) -> None:
    rows = iris_rows(3048)
    path = _csv_with_notes(tmp_path / "notes.csv", rows)
    data = path.read_bytes()
    chunk_bytes = batch.settings.batch.batch_chunk_bytes
    assert len(data) > 4 * chunk_bytes and data.count(b"\n") > 3048 + 1000
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED", job.error
    assert (job.rows_total, job.rows_in, job.rows_out, job.rows_failed) == (3048, 3048, 3048, 0)
    assert read_parts(job).column("id").to_pylist() == [r["id"] for r in rows]
    # Some chunk boundary fell inside a quoted field (else this test proves nothing).
    planned = json.loads(batch.batch_runner.files.read_bytes(batch.batch_runner.paths.chunk_list(acme.tenant, job.id)))
    assert any(c.get("quoted") for c in planned)


def test_a_csv_that_ends_inside_a_quoted_field_fails_at_planning(batch: Container, acme: Principal, tmp_path: Path) -> None:
    path = write_input(tmp_path / "in.csv", iris_rows(2000))
    with path.open("a") as fh:
        fh.write('r-open,1,2,3,"4\n')
    job = run_job(batch, acme, path, deployment="iris")
    assert job.status == "FAILED" and "ends inside a quoted field" in (job.error or ""), job.error
    assert job.chunks_done == 0


def test_a_malformed_chunk_is_not_retried(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = ChunkScorer.score

    def malformed(self: ChunkScorer, spec: JobSpec, chunk: Chunk, **kw: Any) -> Any:
        calls.append(chunk.index)
        if chunk.index == 1:
            raise ChunkMalformed("chunk 1: the CSV parser read 3 records where 2 were counted")
        return real(self, spec, chunk, **kw)

    monkeypatch.setattr(ChunkScorer, "score", malformed)
    job = run_job(batch, acme, write_input(tmp_path / "in.csv", iris_rows(8000)), deployment="iris")
    assert job.status == "FAILED" and "records where 2 were counted" in (job.error or "")
    assert calls.count(1) == 1 and "chunk 1 failed (not retried): chunk 1: the CSV parser" in (job.error or ""), job.error
    assert "ChunkMalformed" not in TRANSIENT_ERRORS


# 2. An output folder used twice --------------------------------------------------------------
def test_a_second_job_into_the_same_folder_leaves_only_its_own_results(batch: Container, acme: Principal, tmp_path: Path) -> None:
    out = tmp_path / "out"
    big = write_input(tmp_path / "big.parquet", iris_rows(4000), row_group_rows=700)
    first = run_job(batch, acme, big, deployment="iris", output_uri=str(out))
    assert first.status == "SUCCEEDED" and first.chunks_total == 6
    (out / "notes.txt").write_text("mine")  # not a result: stays
    rows = iris_rows(500)
    rows[3]["sepal_length"] = None
    second = run_job(batch, acme, write_input(tmp_path / "small.parquet", rows), deployment="iris", output_uri=str(out))
    assert second.status == "SUCCEEDED" and second.chunks_total == 1
    assert _folder(second) == _listed(second) | {"_manifest.json", "_SUCCESS", "notes.txt"}
    assert read_parts(second).num_rows == 499 and len(read_errors(second)) == 1

    failing = tmp_path / "no-columns.csv"
    failing.write_text("sepal_length,sepal_width\n1,2\n")
    third = run_job(batch, acme, failing, deployment="iris", output_uri=str(out))
    assert third.status == "FAILED"
    assert _folder(third) == {"_manifest.json", "notes.txt"} and _manifest(third)["status"] == "FAILED"


def _scored_not_finalized(batch: Container, acme: Principal, tmp_path: Path) -> BatchJob:
    """A job of 4 Parquet chunks, planned and every chunk scored through the runner's steps
    (as Step Functions calls them), Finalize not called yet."""
    path = write_input(tmp_path / "in.parquet", iris_rows(2800), row_group_rows=700)
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, start=False, output_uri=str(tmp_path / "out"))
    runner = batch.batch_runner
    planned = runner.plan(acme.tenant, job.id)
    spec = JobSpec.from_dict(planned["job"])
    for chunk in runner.chunks(planned):
        assert runner.score(spec, chunk)["recorded"]
    return batch.registry.get_job(acme.tenant, job.id)


def test_finalize_fails_a_job_whose_part_was_removed_after_it_was_scored(batch: Container, acme: Principal, tmp_path: Path) -> None:
    job = _scored_not_finalized(batch, acme, tmp_path)
    assert job.chunks_done == job.chunks_total == 4
    (tmp_path / "out" / "part-00001.parquet").unlink()  # another writer's cleanup, say
    with pytest.raises(JobIncomplete) as failed:
        batch.batch_runner.finalize(acme.tenant, job.id)
    assert "part-00001.parquet (chunk 1, 700 rows) is missing" in failed.value.message
    done = batch.batch.get(acme, job.id)
    assert done.status == "FAILED" and "1 of 4 files are not as their chunks wrote them" in (done.error or ""), done.error
    assert not (tmp_path / "out" / "_SUCCESS").exists() and _manifest(done)["status"] == "FAILED"


def test_a_chunk_scored_again_after_it_was_recorded_leaves_its_files_as_finalize_expects(batch: Container, acme: Principal, tmp_path: Path) -> None:
    """A step repeated (Step Functions retrying a Score whose answer was lost) writes nothing
    over the files its chunk recorded: Finalize finds them as they were."""
    job = _scored_not_finalized(batch, acme, tmp_path)
    runner = batch.batch_runner
    planned = json.loads(runner.files.read_bytes(runner.paths.chunk_list(acme.tenant, job.id)))
    again = runner.score(JobSpec.from_dict(runner.plan(acme.tenant, job.id)["job"]), Chunk.from_dict(planned[2]))
    assert again["recorded"] is False and again["rows_in"] == 700
    assert runner.finalize(acme.tenant, job.id)["status"] == "SUCCEEDED"


@pytest.mark.parametrize("again", ["scores every row", "refuses every row"])
def test_a_chunk_tried_again_leaves_only_that_trys_files(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, again: str) -> None:
    """A chunk whose files were written but whose recording failed is scored again, and its
    rows may end otherwise (a split's variants refuse different rows): the first try's part or
    error file does not stay beside the second's, so the folder, the errors API and the
    manifest say the same."""
    from sluice.domain.errors import InvalidInput, Unavailable

    rows = iris_rows(1400)  # two chunks of 700; chunk 0's rows told apart by a sepal length past 10
    for row in rows[:700]:
        row["sepal_length"] += 10.0
    rows[3]["sepal_length"] = 19.99  # the row the first try's variant refuses
    path = write_input(tmp_path / "in.parquet", rows, row_group_rows=700)
    predictions, registry = batch.batch_runner.predictions, batch.registry
    real_predict, real_record, tries = predictions.predict, registry.record_chunk, {"chunk 0": 0}

    async def predict(principal: Any, request: Any) -> Any:
        lengths = next(iter(request.inputs.arrays.values()))[:, 0]
        if (lengths > 10).all():  # a call of chunk 0's rows
            if tries["chunk 0"] == 0 and (abs(lengths - 19.99) < 1e-3).any():
                raise InvalidInput("the first try's variant refuses sepal lengths of 19.99")
            if tries["chunk 0"] == 1 and again == "refuses every row":
                raise InvalidInput("the second try's variant refuses every row")
        return await real_predict(principal, request)

    def record_chunk(tenant: str, job_id: str, result: Any) -> bool:
        if result.index == 0 and tries["chunk 0"] == 0:
            tries["chunk 0"] += 1  # files written, the registry throttled: the chunk is tried again
            raise Unavailable("the registry is throttled")
        return real_record(tenant, job_id, result)

    monkeypatch.setattr(predictions, "predict", predict)
    monkeypatch.setattr(registry, "record_chunk", record_chunk)
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"], output_uri=str(tmp_path / "out"))
    assert job.status == "SUCCEEDED" and tries["chunk 0"] == 1, job.error
    failed = 700 if again == "refuses every row" else 0
    assert (job.rows_in, job.rows_out, job.rows_failed) == (1400, 1400 - failed, failed)
    scored = [i for p in sorted((tmp_path / "out").glob("part-*.parquet")) for i in pq.read_table(p).column("id").to_pylist()]
    assert len(scored) == 1400 - failed and sorted(scored) == sorted(read_parts(job).column("id").to_pylist())
    errors = sorted(p.name for p in (tmp_path / "out").glob("errors/*"))
    assert errors == (["part-00000.jsonl"] if failed else [])
    api = batch.batch.error_rows(acme, job.id, limit=100)
    assert [r["row"] for r in api["rows"]] == [r["row"] for r in read_errors(job)][:100]
    assert _folder(job) == _listed(job) | {"_SUCCESS", "_manifest.json"}, _folder(job)


def _second_chunk_written_not_recorded(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[BatchJob, list[Any]]:
    """A job of two chunks: the first scored and recorded, the second's files written and its
    record refused (the registry throttled); the job, and that record as it was to be made."""
    from sluice.domain.errors import Unavailable

    path = write_input(tmp_path / "in.parquet", iris_rows(1400), row_group_rows=700)
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, start=False, output_uri=str(tmp_path / "out"))
    runner, registry = batch.batch_runner, batch.registry
    planned = runner.plan(acme.tenant, job.id)
    spec, chunks = JobSpec.from_dict(planned["job"]), runner.chunks(planned)
    assert runner.score(spec, chunks[0])["recorded"]
    held: list[Any] = []

    def throttled(tenant: str, job_id: str, result: Any) -> bool:
        held.append((tenant, job_id, result))
        raise Unavailable("the registry is throttled")

    with monkeypatch.context() as patched:
        patched.setattr(registry, "record_chunk", throttled)
        with pytest.raises(Unavailable):
            runner.score(spec, chunks[1])
    assert "part-00001.parquet" in _folder(registry.get_job(acme.tenant, job.id))
    return job, [spec, chunks[1], held[0]]


@pytest.mark.parametrize("ended", ["cancelled", "failed"])
def test_a_try_never_recorded_leaves_no_file_once_its_job_has_stopped(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ended: str) -> None:
    """A chunk's files written, its recording refused, and the job stopped before the chunk was
    tried again: the folder keeps only what the manifest lists (no part its chunks do not)."""
    job, (spec, chunk, _) = _second_chunk_written_not_recorded(batch, acme, tmp_path, monkeypatch)
    runner, registry = batch.batch_runner, batch.registry
    if ended == "cancelled":
        batch.batch.cancel(acme, job.id)
        assert runner.score(spec, chunk)["skipped"] == "CANCELLED"  # the try again
        runner.cancelled(acme.tenant, job.id)
    else:
        runner.mark_failed(acme.tenant, job.id, error="States.TaskFailed", cause="chunk 1 failed")
    done = registry.get_job(acme.tenant, job.id)
    assert done.status == ended.upper() and _folder(done) == _listed(done) | {"_manifest.json"}, sorted(_folder(done))


def test_a_chunk_whose_record_lands_as_its_job_is_marked_failed_is_refused_not_listed_without_its_part(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MarkFailed writes FAILED before it clears the folder: a chunk's record on its way then is
    refused (its job no longer runs), so no chunk is listed whose part the clearing took."""
    job, (_, _, record) = _second_chunk_written_not_recorded(batch, acme, tmp_path, monkeypatch)
    runner, registry = batch.batch_runner, batch.registry
    clearing = runner._unfinished

    def then_the_record_lands(*args: Any, **kwargs: Any) -> None:
        clearing(*args, **kwargs)
        registry.record_chunk(*record)

    monkeypatch.setattr(runner, "_unfinished", then_the_record_lands)
    runner.mark_failed(acme.tenant, job.id, error="States.TaskFailed", cause="chunk 2 failed")
    for listed in registry.list_chunks(acme.tenant, job.id):
        assert listed.part is None or local_path(listed.part).exists(), f"chunk {listed.index} listed, its part gone"
    assert registry.get_job(acme.tenant, job.id).status == "FAILED"


def test_finalize_fails_a_job_whose_part_was_replaced_after_it_was_scored(batch: Container, acme: Principal, tmp_path: Path) -> None:
    job = _scored_not_finalized(batch, acme, tmp_path)
    out = tmp_path / "out"
    pq.write_table(pq.read_table(out / "part-00002.parquet").slice(0, 10), out / "part-00002.parquet")  # fewer rows
    with pytest.raises(JobIncomplete) as failed:
        batch.batch_runner.finalize(acme.tenant, job.id)
    assert "part-00002.parquet (chunk 2, 700 rows) is " in failed.value.message and "bytes where" in failed.value.message
    assert batch.batch.get(acme, job.id).status == "FAILED" and not (out / "_SUCCESS").exists()


def test_finalize_checks_the_version_as_well_as_the_size(batch: Container, acme: Principal, tmp_path: Path) -> None:
    job = _scored_not_finalized(batch, acme, tmp_path)
    part = tmp_path / "out" / "part-00003.parquet"
    data = part.read_bytes()
    part.write_bytes(data)  # the same size, written again: another file as far as anyone can tell
    os.utime(part, ns=(part.stat().st_atime_ns, part.stat().st_mtime_ns + 1_000_000))
    with pytest.raises(JobIncomplete) as failed:
        batch.batch_runner.finalize(acme.tenant, job.id)
    assert "part-00003.parquet (chunk 3, 700 rows) was replaced after it was written" in failed.value.message


def test_a_job_cancelled_while_finalize_writes_success_leaves_no_success(batch: Container, acme: Principal, tmp_path: Path) -> None:
    job = _scored_not_finalized(batch, acme, tmp_path)
    runner = batch.batch_runner
    write = runner.files.write_bytes

    def cancel_meanwhile(uri: str, data: bytes, **kw: Any) -> None:
        write(uri, data, **kw)
        if uri.endswith("/_SUCCESS"):  # the moment between the marker and the status
            batch.batch.cancel(acme, job.id)

    runner.files.write_bytes = cancel_meanwhile  # type: ignore[method-assign]
    summary = runner.finalize(acme.tenant, job.id)
    assert summary["status"] == "CANCELLED"
    assert not (tmp_path / "out" / "_SUCCESS").exists() and _manifest(job)["status"] == "CANCELLED"


# 3. The default output folder -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "folder"),
    [("a.v1.parquet", "a.v1-scored"), ("2026.11.21.csv", "2026.11.21-scored"), ("flowers.csv", "flowers-scored"), ("plain", "plain-scored")],
)
def test_the_default_output_folder_keeps_every_dot_of_the_name(tmp_path: Path, name: str, folder: str) -> None:
    from sluice.cli.batch import default_out

    assert default_out(tmp_path / name) == tmp_path / folder


# 4. Cancelling while a chunk is scored --------------------------------------------------------
def test_cancelling_mid_chunk_keeps_that_chunks_part_out_and_writes_a_manifest(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_input(tmp_path / "in.parquet", iris_rows(3000), row_group_rows=700)
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, start=False, output_uri=str(tmp_path / "out"))
    real = ChunkScorer.score

    def cancel_during_second(self: ChunkScorer, spec: JobSpec, chunk: Chunk, **kw: Any) -> Any:
        result = real(self, spec, chunk, **kw)  # its part is written
        if chunk.index == 1:
            batch.batch.cancel(acme, job.id)
        return result

    monkeypatch.setattr(ChunkScorer, "score", cancel_during_second)
    seen: list[Progress] = []
    LocalOrchestrator(batch.batch_runner, concurrency=1).run(acme.tenant, job.id, progress=seen.append)
    done = batch.batch.get(acme, job.id)
    assert done.status == "CANCELLED" and done.chunks_done == 1 and done.rows_in == 700
    manifest = _manifest(done)
    assert manifest["status"] == "CANCELLED" and manifest["counts"]["rows_out"] == 700
    assert _folder(done) == _listed(done) | {"_manifest.json"} and "part-00001.parquet" not in _folder(done)
    assert seen[-1].rows_done == 700 and seen[-1].rows_done < seen[-1].rows_total


# 5. Decimals, empty files, a job where nothing scored -----------------------------------------
def test_decimal_features_are_numbers(batch: Container, acme: Principal, tmp_path: Path) -> None:
    rows = iris_rows(5)
    columns: dict[str, Any] = {"id": [r["id"] for r in rows]}
    for f in FEATURES:
        columns[f] = pa.array([Decimal(str(r[f])) for r in rows], type=pa.decimal128(6, 2))
    path = tmp_path / "decimals.parquet"
    pq.write_table(pa.table(columns), path)
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED", job.error
    assert (job.rows_out, job.rows_failed) == (5, 0)
    plain = run_job(batch, acme, write_input(tmp_path / "floats.parquet", rows), deployment="iris", key_columns=["id"])
    assert read_parts(job).column("prediction").to_pylist() == read_parts(plain).column("prediction").to_pylist()


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_job_where_no_row_scored_fails_saying_so(batch: Container, acme: Principal, tmp_path: Path, fmt: str) -> None:
    rows = iris_rows(5)
    for r in rows:
        r["sepal_length"] = None
    job = run_job(batch, acme, write_input(tmp_path / f"in.{fmt}", rows), deployment="iris")
    assert job.status == "FAILED" and "none of the 5 rows could be scored" in (job.error or ""), job.error
    assert (job.rows_in, job.rows_failed) == (5, 5) and len(read_errors(job)) == 5
    assert not (local_path(job.output_uri) / "_SUCCESS").exists() and _manifest(job)["status"] == "FAILED"


def test_a_json_lines_file_of_blank_lines_fails_as_blank_lines(batch: Container, acme: Principal, tmp_path: Path) -> None:
    path = tmp_path / "blank.jsonl"
    path.write_text("\n\n  \n")
    job = run_job(batch, acme, path, deployment="iris")
    assert job.status == "FAILED" and "none of the 3 rows could be scored" in (job.error or ""), job.error
    assert [e["reason"] for e in read_errors(job)] == ["blank line"] * 3


# 6. Keys, number text, blank lines, headers ---------------------------------------------------
def test_json_lines_keys_may_be_numbers_or_text_and_stay_text(batch: Container, acme: Principal, tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = iris_rows(300)
    for i, r in enumerate(rows):
        if i % 3:
            r["id"] = i  # a number after the first line's text
    job = run_job(batch, acme, write_input(tmp_path / "in.jsonl", rows), deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED" and job.rows_failed == 0, job.error
    assert read_parts(job).column("id").to_pylist() == [str(r["id"]) for r in rows]
    numbers = [dict(r, id=i) for i, r in enumerate(iris_rows(50))]
    again = run_job(batch, acme, write_input(tmp_path / "ids.jsonl", numbers), deployment="iris", key_columns=["id"])
    assert again.status == "SUCCEEDED" and read_parts(again).column("id").to_pylist() == [str(i) for i in range(50)]


def test_json_lines_number_keys_are_carried_as_written_beyond_64_bits_too(batch: Container, acme: Principal, tmp_path: Path) -> None:
    ids = ["12345678901234567890123", "12345678901234567890124", "-9223372036854775809", "1.50", "1e3", "1.0000000000000001", "1.0", "7"]
    features = ",".join(f'"{f}":{r[f]}' for r, f in zip(iris_rows(1) * 4, FEATURES, strict=True))
    path = tmp_path / "ids.jsonl"
    path.write_text("".join(f'{{"id": {i}, {features}}}\n' for i in ids))
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED" and read_parts(job).column("id").to_pylist() == ids, job.error


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_feature_that_is_also_a_key_is_scored_in_every_format(batch: Container, acme: Principal, tmp_path: Path, fmt: str) -> None:
    rows: list[dict[str, Any]] = iris_rows(40)
    job = run_job(batch, acme, write_input(tmp_path / f"in.{fmt}", rows), deployment="iris", key_columns=["sepal_length"])
    assert (job.status, job.rows_out, job.rows_failed) == ("SUCCEEDED", 40, 0), job.error
    assert [float(v) for v in read_parts(job).column("sepal_length").to_pylist()] == [r["sepal_length"] for r in rows]


def test_a_list_key_column_is_written_to_csv_as_its_json_text(batch: Container, acme: Principal, tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [{**r, "id": [str(i), f"r{i}"] if i % 4 else None} for i, r in enumerate(iris_rows(20))]
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([("id", pa.list_(pa.string())), *((f, pa.float64()) for f in FEATURES)])), tmp_path / "in.parquet")
    job = run_job(batch, acme, tmp_path / "in.parquet", deployment="iris", key_columns=["id"], output_format="csv")
    assert (job.status, job.rows_out) == ("SUCCEEDED", 20), job.error
    assert read_parts(job).column("id").to_pylist() == ["" if i % 4 == 0 else f'["{i}","r{i}"]' for i in range(20)]  # a null key: an empty field


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_binary_key_column_is_written_to_text_as_utf8_or_base64(batch: Container, acme: Principal, tmp_path: Path, fmt: str) -> None:
    keys = [b"k-1", b"\xff\x00", None, "é".encode(), b"k-4"]
    rows: list[dict[str, Any]] = [{**r, "id": keys[i]} for i, r in enumerate(iris_rows(5))]
    rows[4]["sepal_length"] = float("nan")  # fails: its error record carries the key as text too
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([("id", pa.binary()), *((f, pa.float64()) for f in FEATURES)])), tmp_path / "in.parquet")
    job = run_job(batch, acme, tmp_path / "in.parquet", deployment="iris", key_columns=["id"], output_format=fmt)
    assert (job.status, job.rows_out, job.rows_failed) == ("SUCCEEDED", 4, 1), job.error
    written = {"parquet": keys[:4], "jsonl": ["k-1", "/wA=", None, "é"], "csv": ["k-1", "/wA=", "", "é"]}[fmt]  # Parquet keeps bytes; CSV has no null
    assert read_parts(job).column("id").to_pylist() == written
    assert read_errors(job) == [{"row": 4, "id": "k-4", "reason": "'sepal_length' is NaN"}]


def test_a_parquet_file_naming_a_column_twice_fails_at_planning(batch: Container, acme: Principal, tmp_path: Path) -> None:
    columns = [pa.array([1.0, 2.0]) for _ in range(5)]
    pq.write_table(pa.Table.from_arrays(columns, names=["sepal_length", *FEATURES]), tmp_path / "twice.parquet")
    job = run_job(batch, acme, tmp_path / "twice.parquet", deployment="iris")
    assert job.status == "FAILED" and job.rows_out == 0
    assert "names a column twice: ['sepal_length']" in (job.error or ""), job.error


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_numbers_written_as_text_read_alike_in_csv_and_json_lines(batch: Container, acme: Principal, tmp_path: Path, fmt: str) -> None:
    rows: list[dict[str, Any]] = iris_rows(12)
    texts = {0: "5.1", 1: " 6.2 ", 2: "+.5e1", 3: "1_4", 4: "\u0661.4", 5: "0x1p3", 6: "٣", 7: "inf"}
    for i, text in texts.items():
        rows[i]["sepal_length"] = text
    job = run_job(batch, acme, write_input(tmp_path / f"in.{fmt}", rows), deployment="iris")
    reasons = {e["row"]: e["reason"] for e in read_errors(job)}
    assert reasons == {
        3: "'sepal_length' is not a number: '1_4'",
        4: "'sepal_length' is not a number: '\u0661.4'",
        5: "'sepal_length' is not a number: '0x1p3'",
        6: "'sepal_length' is not a number: '٣'",
        7: "'sepal_length' is infinite",
    }
    assert job.rows_out == 7


def test_a_blank_csv_line_is_reported_as_one(batch: Container, acme: Principal, tmp_path: Path) -> None:
    path = write_input(tmp_path / "in.csv", iris_rows(20))
    lines = path.read_text().split("\n")
    lines.insert(6, "")  # data row 5
    path.write_text("\n".join(lines))
    job = run_job(batch, acme, path, deployment="iris")
    assert job.rows_in == 21 and job.rows_out == 20
    assert read_errors(job) == [{"row": 5, "reason": "blank line", "input": ""}]


def test_header_names_are_read_without_the_spaces_around_them(batch: Container, acme: Principal, tmp_path: Path) -> None:
    path = write_input(tmp_path / "in.csv", iris_rows(30))
    text = path.read_text().split("\n", 1)
    path.write_text(", ".join(text[0].split(",")) + "\n" + text[1])
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED" and job.rows_out == 30, job.error


def test_a_missing_column_error_lists_the_columns_found(batch: Container, acme: Principal, tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,sepal_len,sepal_width,petal_length,petal_width\nx,1,2,3,4\n")
    job = run_job(batch, acme, path, deployment="iris")
    assert job.status == "FAILED"
    assert "its columns are 'id', 'sepal_len', 'sepal_width', 'petal_length', 'petal_width'" in (job.error or ""), job.error


# B. Each Parquet row group is decoded once ------------------------------------------------------
def test_each_row_group_is_decoded_once_even_when_larger_than_a_chunk(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = iris_rows(5000)
    path = write_input(tmp_path / "in.parquet", rows, row_group_rows=2200)  # groups of 2200, 2200, 600; chunks of 700
    decoded: list[int] = []
    real = pq.ParquetFile.iter_batches

    def counted(self: pq.ParquetFile, *args: Any, **kw: Any) -> Any:
        decoded.extend(kw.get("row_groups") or range(self.metadata.num_row_groups))
        return real(self, *args, **kw)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counted)
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED", job.error
    assert sorted(decoded) == [0, 1, 2] and job.chunks_total == 3
    assert read_parts(job).column("id").to_pylist() == [r["id"] for r in rows]


def test_a_finalize_repeated_while_the_first_runs_leaves_the_succeeded_jobs_folder_whole(batch: Container, acme: Principal, tmp_path: Path) -> None:
    """Step Functions retries Finalize on a Lambda service fault while the first invocation may
    still run: the repeat that loses the SUCCEEDED write finds the job SUCCEEDED, and leaves
    `_SUCCESS` and the manifest as the winner wrote them."""
    from sluice.batch.manifest import MANIFEST, SUCCESS

    path = write_input(tmp_path / "in.csv", iris_rows(50))
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, source="cli", start=False, output_uri=str(tmp_path / "out"))
    runner = batch.batch_runner
    planned = runner.plan(acme.tenant, job.id)
    spec = JobSpec.from_dict(planned["job"])
    for chunk in runner.chunks(planned):
        runner.score(spec, chunk)
    write, repeats, started = runner.files.write_bytes, [], []

    def write_then_repeat(uri: str, data: bytes, **kw: Any) -> None:
        write(uri, data, **kw)
        if uri.endswith("/" + SUCCESS) and not started:  # the first is about to mark the job: the repeat runs whole
            started.append(True)
            repeats.append(runner.finalize(acme.tenant, job.id))

    runner.files.write_bytes = write_then_repeat  # type: ignore[method-assign]
    try:
        first = runner.finalize(acme.tenant, job.id)
    finally:
        runner.files.write_bytes = write  # type: ignore[method-assign]
    done = batch.registry.get_job(acme.tenant, job.id)
    folder = local_path(done.output_uri)
    assert done.status == first["status"] == repeats[0]["status"] == "SUCCEEDED"
    assert (folder / SUCCESS).exists() and json.loads((folder / MANIFEST).read_text())["status"] == "SUCCEEDED"


def test_a_failed_job_whose_output_folder_is_inside_its_input_folder_is_cleaned_as_any(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An output folder inside the input's (`in/out/`): past Plan, its files are the job's
    results, so a failed job takes back a try no chunk recorded and writes its FAILED manifest
    there, as in any folder (a check for the input's files in the output folder left both)."""
    from sluice.batch.plan import JobSpec
    from sluice.domain.errors import Unavailable

    folder = tmp_path / "in"
    folder.mkdir()
    write_input(folder / "in.parquet", iris_rows(1400), row_group_rows=700)
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(folder), operator=True, start=False, output_uri=str(folder / "out"))
    runner, registry = batch.batch_runner, batch.registry
    planned = runner.plan(acme.tenant, job.id)
    spec, chunks = JobSpec.from_dict(planned["job"]), runner.chunks(planned)
    assert len(chunks) == 2 and runner.score(spec, chunks[0])["recorded"]

    def throttled(tenant: str, job_id: str, result: Any) -> bool:
        raise Unavailable("the registry is throttled")

    with monkeypatch.context() as patched:
        patched.setattr(registry, "record_chunk", throttled)
        with pytest.raises(Unavailable):
            runner.score(spec, chunks[1])
    runner.mark_failed(acme.tenant, job.id, error="States.TaskFailed", cause="chunk 1 failed")
    left = _folder(registry.get_job(acme.tenant, job.id))
    assert "_manifest.json" in left and "part-00001.parquet" not in left, left
