"""Inputs of many objects on this machine: a folder (prefix) of files and a manifest listing
them. Every row of every object is accounted for, rows and errors name their object, an
object changed mid-job fails, hidden files are skipped, and a manifest may not reach outside
the tenant's inbox."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sluice.batch.plan import JobSpec
from sluice.batch.uris import local_path
from sluice.domain.errors import BadRequest, Conflict
from tests.integration.batch.inputs import iris_rows, write_input
from tests.integration.batch.jobs import read_errors, read_parts, run_job

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container


def _folder(root: Path, sizes: list[int], suffix: str = ".parquet") -> tuple[Path, list[list[dict[str, Any]]]]:
    """Files `dt=…/part-<i><suffix>` under `root`, of `sizes` rows each (distinct ids)."""
    root.mkdir(parents=True, exist_ok=True)
    batches = []
    for i, n in enumerate(sizes):
        rows = [r | {"id": f"f{i}-{r['id']}"} for r in iris_rows(n, seed=i)]
        folder = root / f"dt=2026-11-{20 + i:02d}"
        folder.mkdir(exist_ok=True)
        write_input(folder / f"part-{i}{suffix}", rows, row_group_rows=300)
        batches.append(rows)
    return root, batches


def _manifest(job: Any) -> dict[str, Any]:
    return json.loads((local_path(job.output_uri) / "_manifest.json").read_text())


def test_a_folder_of_parquet_files_accounts_for_every_row_and_names_each_object(
    batch: Container, acme: Principal, tmp_path: Path
) -> None:
    root, batches = _folder(tmp_path / "events", [1000, 1, 2300])
    # What Spark, Hive and sluice itself leave beside data: never read.
    (root / "_SUCCESS").write_bytes(b"")
    (root / "dt=2026-11-20" / ".part-0.parquet.crc").write_bytes(b"\x00crc")
    (root / "_manifest.json").write_text("{}")
    (root / "_temporary").mkdir()
    write_input(root / "_temporary" / "half.parquet", iris_rows(10))
    (root / "dt=2026-11-21" / "empty.parquet").write_bytes(b"")  # no rows: skipped

    job = run_job(batch, acme, root, deployment="iris", output_uri=str(tmp_path / "scored"))
    assert job.status == "SUCCEEDED", job.error
    assert job.format == "parquet" and job.output_format == "parquet"
    assert (job.rows_total, job.rows_in, job.rows_out, job.rows_failed) == (3301, 3301, 3301, 0)
    out = read_parts(job)
    names = [(root / f"dt=2026-11-{20 + i}" / f"part-{i}.parquet").as_uri() for i in range(3)]
    assert out.column_names[:2] == ["object", "row"]
    expected = [(names[i], n) for i, rows in enumerate(batches) for n in range(len(rows))]
    assert list(zip(out.column("object").to_pylist(), out.column("row").to_pylist(), strict=True)) == expected

    manifest = _manifest(job)
    assert [(o["uri"], o["rows"]) for o in manifest["objects"]] == [(n, len(b)) for n, b in zip(names, batches, strict=True)]
    assert sorted(c for o in manifest["objects"] for c in o["chunks"]) == list(range(job.chunks_total or 0))
    parts = [p["uri"] for p in manifest["parts"]]
    assert len(parts) == len(set(parts)) == job.chunks_total  # one part per chunk, across objects


def test_errors_name_their_object_and_row_within_it(batch: Container, acme: Principal, tmp_path: Path) -> None:
    root = tmp_path / "csvs"
    root.mkdir()
    first, second = iris_rows(900, seed=1), iris_rows(1200, seed=2)
    second[5]["sepal_length"] = "wide"
    second[1100]["petal_width"] = None
    write_input(root / "a.csv", first)
    write_input(root / "b.csv", second)
    job = run_job(batch, acme, root, deployment="iris", key_columns=["id"], output_uri=str(tmp_path / "out"))
    assert job.status == "SUCCEEDED", job.error
    assert (job.rows_in, job.rows_out, job.rows_failed) == (2100, 2098, 2)
    assert job.format == "csv"
    errors = read_errors(job)
    b = (root / "b.csv").as_uri()
    assert [(e["object"], e["row"], e["id"]) for e in errors] == [(b, 5, second[5]["id"]), (b, 1100, second[1100]["id"])]
    out = read_parts(job)
    assert out.column("id").to_pylist() == [r["id"] for r in first] + [r["id"] for i, r in enumerate(second) if i not in (5, 1100)]


def test_an_object_changed_mid_job_fails_its_chunks(batch: Container, acme: Principal, tmp_path: Path) -> None:
    root, _ = _folder(tmp_path / "lake", [800, 800], suffix=".jsonl")
    job = batch.batch.submit(acme, deployment="iris", input_uri=str(root), operator=True, source="cli",
                             output_uri=str(tmp_path / "out"), start=False)  # fmt: skip
    runner = batch.batch_runner
    planned = runner.plan(acme.tenant, job.id)
    spec, chunks = JobSpec.from_dict(planned["job"]), runner.chunks(planned)
    assert spec.format == "jsonl" and {c.uri for c in chunks} == {p.as_uri() for p in sorted(root.rglob("*.jsonl"))}
    changed = sorted(root.rglob("*.jsonl"))[1]
    write_input(changed, iris_rows(801, seed=42))  # rewritten under the same name
    assert runner.score(spec, next(c for c in chunks if c.uri != changed.as_uri()))["rows_in"] > 0
    with pytest.raises(Conflict, match="changed while the job ran"):
        runner.score(spec, next(c for c in chunks if c.uri == changed.as_uri()))


def test_a_manifest_lists_objects_in_its_order(batch: Container, acme: Principal, tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    a = write_input(tmp_path / "x" / "a.parquet", iris_rows(500, seed=3))
    b = write_input(tmp_path / "b.parquet", iris_rows(700, seed=4))
    listing = tmp_path / "inputs.json"
    listing.write_text(json.dumps({"files": [b.as_uri(), str(a), b.as_uri()]}))  # b twice: read once
    job = run_job(batch, acme, listing, deployment="iris", output_format="csv", output_uri=str(tmp_path / "out"))
    assert job.status == "SUCCEEDED", job.error
    assert (job.rows_in, job.rows_out) == (1200, 1200)
    objects = [o["uri"] for o in _manifest(job)["objects"]]
    assert objects == [b.as_uri(), a.as_uri()]
    assert read_parts(job).column("object").to_pylist() == [b.as_uri()] * 700 + [a.as_uri()] * 500


def test_an_empty_prefix_fails_the_job_saying_so(batch: Container, acme: Principal, tmp_path: Path) -> None:
    root = tmp_path / "nothing"
    root.mkdir()
    (root / "_SUCCESS").write_bytes(b"")  # hidden: still nothing to score
    job = run_job(batch, acme, root, deployment="iris", output_uri=str(tmp_path / "out"))
    assert job.status == "FAILED" and "holds no Parquet, CSV or JSON Lines object" in (job.error or "")


def test_mixed_formats_and_unknown_names_are_refused_naming_the_objects(batch: Container, acme: Principal, tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    root.mkdir()
    write_input(root / "a.csv", iris_rows(10))
    write_input(root / "b.jsonl", iris_rows(10))
    job = run_job(batch, acme, root, deployment="iris", output_uri=str(tmp_path / "out"))
    assert job.status == "FAILED"
    assert "mixes formats" in (job.error or "") and "a.csv is CSV" in (job.error or "") and "b.jsonl is JSON Lines" in (job.error or "")
    (root / "b.jsonl").rename(root / "b.txt")
    job = run_job(batch, acme, root, deployment="iris", output_uri=str(tmp_path / "out2"))
    assert job.status == "FAILED" and "b.txt" in (job.error or "")
    with pytest.raises(BadRequest, match="leave format out") as caught:
        batch.batch.submit(acme, deployment="iris", input_uri=str(root), format="csv", operator=True, source="cli", start=False)
    assert caught.value.field == "format"


def test_a_manifest_from_the_api_may_not_list_objects_outside_the_tenant_inbox(
    batch: Container, acme: Principal, tmp_path: Path
) -> None:
    from sluice.batch.orchestrators import LocalOrchestrator

    inbox = local_path(batch.batch_runner.paths.inbox(acme.tenant))
    (inbox / "iris").mkdir(parents=True)
    inside = write_input(inbox / "iris" / "day.parquet", iris_rows(100))
    other = local_path(batch.batch_runner.paths.inbox("other"))
    other.mkdir(parents=True)
    elsewhere = write_input(other / "x.parquet", iris_rows(100))  # another tenant's upload
    runner = LocalOrchestrator(batch.batch_runner, concurrency=1, backoff_s=0.01)
    for listed, status in (([inside.as_uri()], "SUCCEEDED"), ([inside.as_uri(), str(elsewhere)], "FAILED"),
                           ([str(inbox / "iris" / ".." / ".." / "other" / "x.parquet")], "FAILED")):  # fmt: skip
        listing = inbox / "iris" / "batch.json"
        listing.write_text(json.dumps({"files": listed}))
        job = batch.batch.submit(acme, deployment="iris", input_uri=listing.as_uri(), start=False)
        runner.run(acme.tenant, job.id)
        done = batch.registry.get_job(acme.tenant, job.id)
        assert done.status == status, done.error
        if status == "FAILED":
            assert "outside your inbox" in (done.error or "")


def test_objects_with_different_columns_are_refused_naming_both(batch: Container, acme: Principal, tmp_path: Path) -> None:
    root = tmp_path / "drift"
    root.mkdir()
    write_input(root / "a.parquet", iris_rows(50))
    write_input(root / "b.parquet", [r | {"extra": 1} for r in iris_rows(50)])
    job = run_job(batch, acme, root, deployment="iris", output_uri=str(tmp_path / "out"))
    assert job.status == "FAILED" and "the same columns" in (job.error or "")
    assert "a.parquet" in (job.error or "") and "b.parquet" in (job.error or "")


def test_objects_whose_key_column_types_differ_are_refused_naming_both(batch: Container, acme: Principal, tmp_path: Path) -> None:
    """A Parquet key keeps its type in the output: an `id` of text in one object and of
    integers in another would make parts that do not read as one table. Text stored as a
    dictionary is text: those objects are one input."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = iris_rows(20)
    features = {f: [r[f] for r in rows] for f in ("sepal_length", "sepal_width", "petal_length", "petal_width")}
    root = tmp_path / "types"
    root.mkdir()
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(20)], **features}), root / "a.parquet")
    pq.write_table(pa.table({"id": list(range(20)), **features}), root / "b.parquet")
    job = run_job(batch, acme, root, deployment="iris", key_columns=["id"], output_uri=str(tmp_path / "out"))
    assert job.status == "FAILED" and "key column 'id' is string in" in (job.error or "") and "integer in" in (job.error or ""), job.error
    assert "a.parquet" in (job.error or "") and "b.parquet" in (job.error or "")
    # Of one kind, these are one input: dictionary text beside text, a column of nulls beside
    # text, integers of two widths.
    for n, (a, b) in enumerate((
        ([f"r{i}" for i in range(20)], pa.array([f"s{i}" for i in range(20)]).dictionary_encode()),
        ([f"r{i}" for i in range(20)], pa.nulls(20)),
        (pa.array(range(20), pa.int64()), pa.array(range(20, 40), pa.int32())),
    )):
        pq.write_table(pa.table({"id": a, **features}), root / "a.parquet")
        pq.write_table(pa.table({"id": b, **features}), root / "b.parquet")
        job = run_job(batch, acme, root, deployment="iris", key_columns=["id"], output_uri=str(tmp_path / f"out{n}"))
        assert (job.status, job.rows_out) == ("SUCCEEDED", 40), (n, job.error)


def test_small_parquet_objects_are_scored_two_at_a_time_with_two_workers(
    batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each small object is one chunk of one piece: with two workers a second chunk is read
    and written while the first one's calls run, and every row still lands once, in order."""
    import threading

    from sluice.batch.score import ChunkScorer

    root, batches = _folder(tmp_path / "events", [200, 300, 250, 100])
    real = ChunkScorer.score
    lock, in_flight, most = threading.Lock(), [0], [0]
    second = threading.Event()

    def counting(self: ChunkScorer, spec: JobSpec, chunk: Any, **kw: Any) -> Any:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
            if in_flight[0] == 2:
                second.set()
        if chunk.index == 0:
            second.wait(30)  # the first chunk waits for the second to start
        try:
            return real(self, spec, chunk, **kw)
        finally:
            with lock:
                in_flight[0] -= 1

    monkeypatch.setattr(ChunkScorer, "score", counting)
    job = run_job(batch, acme, root, deployment="iris", output_uri=str(tmp_path / "scored"))
    assert job.status == "SUCCEEDED", job.error
    assert most[0] == 2
    assert job.rows_out == 850 and job.chunks_total == 4
    out = read_parts(job)
    assert out.column("row").to_pylist() == [n for rows in batches for n in range(len(rows))]
