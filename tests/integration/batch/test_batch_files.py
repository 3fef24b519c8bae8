"""The batch file port: each URI goes to the store for its scheme, both stores read what Plan
pinned and refuse a file that changed since, and writes never leave a half-written file."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto import mock_aws

from sluice.batch.files import Files
from sluice.batch.local_files import LocalFiles
from sluice.batch.s3_files import S3Files
from sluice.clients import AwsClients
from sluice.domain.errors import BadRequest, Conflict, NotFound
from tests.support import fake_aws_credentials

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

REGION = "eu-west-1"
BUCKET = "sluice-files-test"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    fake_aws_credentials(monkeypatch, REGION)
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        yield client


def test_each_uri_goes_to_the_store_for_its_scheme_and_a_job_may_mix_them(s3: Any, tmp_path: Path) -> None:
    files = Files(clients=AwsClients(region=REGION))
    assert isinstance(files.store(f"s3://{BUCKET}/a"), S3Files)
    assert isinstance(files.store(str(tmp_path / "a")), LocalFiles)
    assert isinstance(files.store((tmp_path / "a").as_uri()), LocalFiles)

    local = tmp_path / "in.jsonl"
    local.write_bytes(b'{"x": 1}\n')
    files.upload(f"s3://{BUCKET}/out/in.jsonl", local, content_type="application/x-ndjson")
    files.write_bytes((tmp_path / "out" / "done.json").as_uri(), files.read_bytes(f"s3://{BUCKET}/out/in.jsonl"))
    head = s3.head_object(Bucket=BUCKET, Key="out/in.jsonl")
    assert head["ContentType"] == "application/x-ndjson"
    assert (tmp_path / "out" / "done.json").read_bytes() == b'{"x": 1}\n'
    assert files.exists(f"s3://{BUCKET}/out/in.jsonl") and not files.exists(f"s3://{BUCKET}/out/nope")


def test_a_local_file_is_read_at_the_version_planned_and_refused_once_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "day.csv"
    path.write_bytes(b"a,b\n1,2\n3,4\n")
    files = LocalFiles()
    stat = files.stat(str(path))
    assert stat.size == 12
    assert b"".join(files.read_blocks(str(path), stat.version, 4, 8)) == b"1,2\n"
    assert b"".join(files.read_blocks(path.as_uri(), stat.version, 8)) == b"3,4\n"

    path.write_bytes(b"a,b\n9,9\n9,9\n9,9\n")
    with pytest.raises(Conflict, match="changed while the job ran"):
        list(files.read_blocks(str(path), stat.version, 0))
    with pytest.raises(Conflict):
        files.open_random(str(path), stat.version)


def test_a_local_parquet_input_opens_as_a_seekable_arrow_file(tmp_path: Path) -> None:
    path = tmp_path / "day.parquet"
    pq.write_table(pa.table({"x": list(range(1000))}), path, row_group_size=100)
    files = LocalFiles()
    with files.open_random(str(path), files.stat(str(path)).version) as raw:
        parquet = pq.ParquetFile(raw)
        assert parquet.metadata.num_row_groups == 10
        assert parquet.read_row_group(3).column("x")[0].as_py() == 300


def test_local_writes_replace_whole_files_and_leave_nothing_aside(tmp_path: Path) -> None:
    files = LocalFiles()
    target = tmp_path / "deep" / "er" / "part-00000.csv.gz"  # a codec suffix must not compress it
    files.write_bytes(str(target), b"first")
    files.write_bytes(str(target), b"second")
    assert target.read_bytes() == b"second"
    source = tmp_path / "made.bin"
    source.write_bytes(b"uploaded")
    files.upload(target.as_uri(), source)
    assert target.read_bytes() == b"uploaded"
    assert sorted(os.listdir(target.parent)) == ["part-00000.csv.gz"]  # no .tmp- file left
    files.delete(str(target))
    files.delete(str(target))  # deleting what is gone is fine
    assert not files.exists(str(target))


def test_missing_and_non_files_say_so(tmp_path: Path) -> None:
    files = LocalFiles()
    with pytest.raises(NotFound):
        files.stat(str(tmp_path / "nope.csv"))
    with pytest.raises(NotFound):
        files.read_bytes(str(tmp_path / "nope.json"))
    with pytest.raises(BadRequest, match="is not a file"):
        files.stat(str(tmp_path))
    with pytest.raises(BadRequest, match="s3:// or file://"):
        files.stat("https://example.com/day.csv")


def test_s3_reads_are_pinned_to_the_planned_etag(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="in/day.csv", Body=b"a,b\n1,2\n3,4\n")
    files = S3Files(clients=AwsClients(region=REGION))
    uri = f"s3://{BUCKET}/in/day.csv"
    stat = files.stat(uri)
    assert stat.size == 12
    assert b"".join(files.read_blocks(uri, stat.version, 4, 8)) == b"1,2\n"
    raw = files.open_random(uri, stat.version)
    raw.seek(8)
    assert raw.read() == b"3,4\n"

    s3.put_object(Bucket=BUCKET, Key="in/day.csv", Body=b"a,b\n9,9\n9,9\n")  # same size, new ETag
    with pytest.raises(Conflict, match="changed while the job ran"):
        list(files.read_blocks(uri, stat.version, 0))
    with pytest.raises(Conflict):
        files.open_random(uri, stat.version)
    raw.seek(0)
    with pytest.raises(Conflict):  # a file opened before the change refuses its next range
        raw.read()
    with pytest.raises(NotFound):
        files.stat(f"s3://{BUCKET}/in/nope.csv")


def test_both_stores_list_the_files_under_a_folder_relative_to_it(s3: Any, tmp_path: Path) -> None:
    files = Files(clients=AwsClients(region=REGION))
    for root in (f"s3://{BUCKET}/out/job", (tmp_path / "out" / "job").as_uri()):
        assert files.names(root) == []
        for name in ("part-00000.csv", "errors/part-00000.jsonl", "_SUCCESS"):
            files.write_bytes(f"{root}/{name}", b"x")
        files.write_bytes(f"{root}-other/part-00000.csv", b"x")  # a sibling with a longer name
        assert sorted(files.names(root)) == ["_SUCCESS", "errors/part-00000.jsonl", "part-00000.csv"], root
        assert sorted(files.names(root + "/")) == sorted(files.names(root))
        # `depth`: no more than that many folders down, as a job looks through its output folder
        # (a folder named as an output may hold a large tree: it is never walked whole).
        files.write_bytes(f"{root}/old/deep/part-00001.csv", b"x")
        assert sorted(files.names(root, depth=1)) == ["_SUCCESS", "errors/part-00000.jsonl", "part-00000.csv"], root
        assert sorted(files.names(root, depth=0)) == ["_SUCCESS", "part-00000.csv"], root
        assert "old/deep/part-00001.csv" in files.names(root) and "old/deep/part-00001.csv" in files.names(root, depth=2)
