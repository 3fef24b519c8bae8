"""Batch planning without a model: chunk boundaries, line ownership, row checks, outputs."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sluice.batch.columns import Feed, feed_arrays, plan_feeds
from sluice.batch.files import Files
from sluice.batch.plan import Chunk, JobSpec, _plan_text, row_ranges
from sluice.batch.readers import owned_by
from sluice.batch.uris import format_of
from sluice.domain.errors import BadRequest, Conflict, InvalidInput
from sluice.domain.jobs import MOVES, TERMINAL, BatchJob, check_move, derived_job_id
from sluice.domain.signature import Signature, TensorSpec

IRIS = Signature(
    inputs=(TensorSpec("input", "FP32", (-1, 4), feature_names=("a", "b", "c", "d")),),
    outputs=(
        TensorSpec("label", "BYTES", (-1,), role="label"),
        TensorSpec("probabilities", "FP32", (-1, -1), role="probabilities"),
    ),
)


def test_row_groups_merge_up_to_the_target_and_a_large_one_stays_whole() -> None:
    chunks = row_ranges([100, 100, 100, 1000, 50, 50], target=250)
    assert [(c.first_row, c.rows) for c in chunks] == [(0, 200), (200, 100), (300, 1000), (1300, 100)]
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert sum(c.rows for c in chunks) == 1400
    assert row_ranges([], target=10) == []


def _job(uri: str, fmt: str) -> BatchJob:
    return BatchJob(id="job-1", tenant="acme", deployment="d", input_uri=uri, output_uri="file:///out/", format=fmt, output_format=fmt)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(6))
def test_text_chunks_own_each_line_exactly_once(tmp_path: Path, seed: int) -> None:
    """Whatever the line lengths and the chunk size, the regions Score reads hold every line
    once, in order, and Plan counts exactly the lines each region holds."""
    rng = random.Random(seed)
    header = rng.random() < 0.5
    pad = ["x" * rng.choice([0, 1, 2, 5, 17, 40, 300]) for _ in range(rng.randint(1, 400))]
    lines = [f"{p},{i}" if header else f'{{"p":"{p}","i":{i}}}' for i, p in enumerate(pad)]
    body = ("h,i\n" if header else "") + "\n".join(lines) + ("\n" if rng.random() < 0.7 else "")
    path = tmp_path / ("in.csv" if header else "in.jsonl")
    path.write_text(body)
    files = Files()
    job = _job(path.as_uri(), "csv" if header else "jsonl")
    stat = files.stat(job.input_uri)
    columns, chunks = _plan_text(job.input_uri, job.format, stat, files, rng.choice([3, 7, 64, 1000, 10**6]))
    if header:
        assert columns == ["h", "i"]
    spec = JobSpec("acme", "job-1", "d", job.input_uri, stat.version, job.format, job.format, "file:///out/", (), tuple(columns))
    seen: list[str] = []
    for chunk in chunks:
        region = owned_by(files, spec, chunk).data.decode()
        got = region[:-1].split("\n") if region.endswith("\n") else region.split("\n")
        assert len(got) == chunk.rows
        assert chunk.first_row == len(seen)
        seen.extend(got)
    assert seen == lines


def test_a_chunk_starting_mid_line_owns_the_next_line(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"aaaa\nbbbb\ncccc\n")
    files = Files()
    spec = JobSpec("t", "j", "d", path.as_uri(), files.stat(path.as_uri()).version, "jsonl", "jsonl", "", (), ())
    assert owned_by(files, spec, Chunk(0, 0, 2, 0, 6)).data == b"aaaa\nbbbb\n"  # reads past its end
    assert owned_by(files, spec, Chunk(1, 2, 1, 6, 15)).data == b"cccc\n"  # skips the partial line
    assert owned_by(files, spec, Chunk(1, 1, 1, 5, 10)).data == b"bbbb\n"  # starts on a line start
    assert owned_by(files, spec, Chunk(1, 0, 0, 11, 13)).data == b""  # no line starts inside


def test_formats_come_from_the_name_and_compressed_text_is_refused() -> None:
    assert format_of("s3://b/inbox/t/d/x.PARQUET") == "parquet"
    assert format_of("/data/x.ndjson") == "jsonl"
    with pytest.raises(BadRequest, match="compressed"):
        format_of("/data/x.csv.gz")
    with pytest.raises(BadRequest):
        format_of("/data/x.txt")


def test_columns_map_by_feature_names_else_by_input_name() -> None:
    (feed,) = plan_feeds(IRIS, ["id", "a", "b", "c", "d"])
    assert feed.stacked and feed.columns == ("a", "b", "c", "d")
    (feed,) = plan_feeds(IRIS, ["input"])
    assert not feed.stacked and feed.width == 4
    with pytest.raises(InvalidInput, match="'c', 'd'"):
        plan_feeds(IRIS, ["a", "b"])


def test_every_bad_row_gets_its_first_problem_and_good_rows_go_through() -> None:
    feed = Feed("input", ("a", "b"), "FP32", stacked=True)
    table = pa.table({
        "a": pa.array(["1.5", None, "x", "nan", "2", "1e39"]),
        "b": pa.array([1.0, 2.0, None, 3.0, float("inf"), 1.0]),
    })  # fmt: skip
    reasons = np.full(table.num_rows, None, dtype=object)
    arrays = feed_arrays([feed], table, reasons)
    assert list(reasons) == [
        None,
        "missing value for 'a'",
        "'a' is not a number: 'x'",
        "'a' is NaN",
        "'b' is infinite",
        "'a' is out of range for FP32",
    ]
    assert arrays["input"].dtype == np.float32 and arrays["input"][0].tolist() == [1.5, 1.0]


def test_list_columns_feed_inputs_of_fixed_width_and_integers_stay_whole() -> None:
    lists = Feed("x", ("x",), "FP32", stacked=False, width=3)
    ints = Feed("n", ("n",), "INT64", stacked=False, trailing_axis=True)
    table = pa.table({"x": pa.array([[1, 2, 3], [1, 2], None, [1, None, 3]]), "n": pa.array([1.0, 2.5, 3.0, 4.0])})
    reasons = np.full(4, None, dtype=object)
    arrays = feed_arrays([lists, ints], table, reasons)
    assert list(reasons) == [None, "'x' must hold 3 values", "missing value for 'x'", "missing value for 'x'"]
    assert arrays["x"][0].tolist() == [1, 2, 3] and arrays["n"].shape == (4, 1)
    reasons = np.full(4, None, dtype=object)
    feed_arrays([ints], table, reasons)
    assert reasons[1] == "'n' must be a whole number"


def test_a_finished_job_never_moves_and_only_listed_moves_are_allowed() -> None:
    for status in TERMINAL:
        for target in MOVES:
            with pytest.raises(Conflict):
                check_move("j", status, target)
    check_move("j", "RUNNING", "RUNNING")  # a retried Plan repeats its own move
    with pytest.raises(Conflict):
        check_move("j", "PENDING", "SUCCEEDED")


def test_the_same_upload_always_names_the_same_job() -> None:
    assert derived_job_id("up", "b", "k", "etag") == derived_job_id("up", "b", "k", "etag")
    assert derived_job_id("up", "b", "k", "etag") != derived_job_id("up", "b", "k", "etag2")


def test_requests_to_a_sagemaker_endpoint_are_sized_by_bytes() -> None:
    from types import SimpleNamespace

    from sluice.batch.score import ChunkScorer

    scorer = ChunkScorer(None, Files(), infer_rows=4096, read_rows=65536, max_request_bytes=1024 * 1024)  # type: ignore[arg-type]
    wide = [Feed("input", tuple(f"f{i}" for i in range(256)), "FP32", stacked=True)]
    from sluice.domain.policy import Single

    def resolved(runtime: str) -> SimpleNamespace:
        single = Single(model="m", version=1)
        return SimpleNamespace(version=SimpleNamespace(runtime=runtime), node=single, deployment=SimpleNamespace(tenant="t"))

    async def version_of(tenant: str, model: str, number: int) -> SimpleNamespace:
        return SimpleNamespace(runtime="onnx")

    scorer.predictions = SimpleNamespace(version_of=version_of)  # type: ignore[assignment]
    endpoint, in_process = resolved("sagemaker"), resolved("onnx")
    reached = [Single(model="m", version=1)]  # what the policy reaches (no references here)
    assert scorer._rows_per_call(endpoint, wide, reached) == 1024  # 1 MiB / (256 x 4 bytes)
    assert scorer._rows_per_call(in_process, wide, reached) == 4096
    assert scorer._rows_per_call(endpoint, [Feed("x", ("x",), "FP64", stacked=False, width=3)], reached) == 4096


def test_the_errors_worth_retrying_are_sluice_server_errors() -> None:
    import sluice.domain.errors
    from sluice.batch.orchestrators import TRANSIENT_ERRORS
    from sluice.batch.pieces import ChunkUnreadable

    known = {cls.__name__: cls for cls in vars(sluice.domain.errors).values() if isinstance(cls, type)} | {"ChunkUnreadable": ChunkUnreadable}
    assert all(known[name].status >= 500 for name in TRANSIENT_ERRORS)


def test_parquet_text_features_read_as_stored_give_each_row_its_value_and_keys_stay_text(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from sluice.batch.plan import _plan_parquet
    from sluice.batch.readers import read_chunk

    colour = ["red", "teal", None, "red", "blue", "red"]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": pa.array(colour), "colour": pa.array(colour)}), path, row_group_size=4)
    files = Files()
    stat = files.stat(path.as_uri())
    columns, chunks, _ = _plan_parquet(path.as_uri(), stat, files, chunk_rows=4)
    spec = JobSpec("acme", "job-1", "d", path.as_uri(), stat.version, "parquet", "parquet", "file:///out/", ("id",), tuple(columns))
    feeds = [Feed("colour", ("colour",), "BYTES", stacked=False), Feed("tag", ("id",), "BYTES", stacked=False)]
    seen: list[object] = []
    tags: list[object] = []
    for chunk in chunks:  # pieces with and without a missing value, across row groups
        for piece in read_chunk(files, spec, chunk, feeds, ["id", "colour"], batch_rows=3):
            assert piece.table.schema.field("id").type == pa.string()  # a key column is written back as it came
            reasons = np.full(piece.table.num_rows, None, dtype=object)
            arrays = feed_arrays(feeds, piece.table, reasons)
            seen += [r or v for r, v in zip(reasons.tolist(), arrays["colour"].tolist(), strict=True)]
            tags += arrays["tag"].tolist()
    assert seen == ["red", "teal", "missing value for 'colour'", "red", "blue", "red"]
    assert tags == ["red", "teal", "", "red", "blue", "red"]


def test_parquet_text_read_in_pieces_smaller_than_its_row_groups_dictionary(tmp_path: Path) -> None:
    """A piece of a row group carries the group's whole dictionary; each row still reads its own value."""
    import pyarrow.parquet as pq

    from sluice.batch.plan import _plan_parquet
    from sluice.batch.readers import read_chunk

    names = [f"c{(i * 7) % 40}" for i in range(100)]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"name": pa.array(names)}), path, row_group_size=60)
    files = Files()
    stat = files.stat(path.as_uri())
    columns, chunks, _ = _plan_parquet(path.as_uri(), stat, files, chunk_rows=100)
    spec = JobSpec("acme", "job-1", "d", path.as_uri(), stat.version, "parquet", "parquet", "file:///out/", (), tuple(columns))
    feeds = [Feed("name", ("name",), "BYTES", stacked=False)]
    seen: list[object] = []
    for chunk in chunks:
        for piece in read_chunk(files, spec, chunk, feeds, ["name"], batch_rows=9):
            assert len(piece.table.column("name").chunks[0].dictionary) > piece.table.num_rows
            seen += feed_arrays(feeds, piece.table, np.full(piece.table.num_rows, None, dtype=object))["name"].tolist()
    assert seen == names
