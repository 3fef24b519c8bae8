"""Every implementation of a port, for its contract tests: the embedded one and its AWS twin
(on moto). A contract test takes `registry` or `store` and runs once per implementation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import boto3
import pytest
from moto import mock_aws
from tests.support import OneCallAtATime, fake_aws_credentials

from sluice.registry.dynamodb import DynamoRegistry, create_table
from sluice.registry.sqlite import SqliteRegistry
from sluice.storage.folder import FolderStore, path_of_file_url
from sluice.storage.s3 import S3Store, parse_s3_url

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

    from sluice.registry import Registry
    from sluice.storage import ArtifactStore

REGION = "us-east-1"
TABLE = "sluice-registry"
BUCKET = "sluice-artifacts"
INBOX = "sluice-inbox"  # a bucket outside the store, for push by URI


@contextmanager
def moto_world(monkeypatch: pytest.MonkeyPatch, folder: Path) -> Iterator[None]:
    """Fake credentials, no shared config files, and every AWS call answered by moto."""
    fake_aws_credentials(monkeypatch, REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(folder / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(folder / "no-aws-credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        yield


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    with moto_world(monkeypatch, tmp_path):
        yield


@pytest.fixture(scope="module")
def registry_table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DynamoDBClient]:
    """The registry's table on moto, made once for a module (a client and a table cost ~0.15
    CPU-s, more than most tests): a client of it, the `aws` fixture's world around it. A test
    that uses it leaves it empty (`emptied`)."""
    with pytest.MonkeyPatch.context() as monkeypatch, moto_world(monkeypatch, tmp_path_factory.mktemp("aws")):
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, TABLE)
        yield client


@contextmanager
def emptied(client: DynamoDBClient) -> Iterator[DynamoDBClient]:
    """The module's registry table, every item deleted when the test is done: the next test
    finds it as a new one."""
    assert not client.scan(TableName=TABLE, Select="COUNT")["Count"], "the shared table is not empty"
    try:
        yield client
    finally:
        keys = [{"pk": item["pk"], "sk": item["sk"]} for page in client.get_paginator("scan").paginate(TableName=TABLE, ProjectionExpression="pk, sk") for item in page["Items"]]
        for at in range(0, len(keys), 25):
            client.batch_write_item(RequestItems={TABLE: [{"DeleteRequest": {"Key": key}} for key in keys[at : at + 25]]})


@pytest.fixture(params=["sqlite", "dynamodb"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    if request.param == "sqlite":
        yield SqliteRegistry(tmp_path / "registry.db")
        return
    with emptied(request.getfixturevalue("registry_table")) as client:
        yield DynamoRegistry(TABLE, client=cast("DynamoDBClient", OneCallAtATime(client)))


class StoreCase(Protocol):
    """A store under test, plus what a test needs to reach behind it."""

    store: ArtifactStore
    foreign_uri: str  # a URI of a scheme this store does not read

    def overwrite(self, uri: str, data: bytes) -> None:
        """Replace the bytes behind an artifact URI, as a corrupted disk or a rogue writer would."""
        ...

    def count(self) -> int:
        """How many objects the store holds."""
        ...

    def external(self, name: str, data: bytes | None) -> str:
        """A URI outside the store, holding `data` (or nothing when None)."""
        ...


class FolderCase:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = FolderStore(root / "artifacts")
        self.foreign_uri = f"s3://{INBOX}/model.onnx"

    def overwrite(self, uri: str, data: bytes) -> None:
        path_of_file_url(uri).write_bytes(data)

    def count(self) -> int:
        return sum(1 for p in (self.root / "artifacts").rglob("*") if p.is_file())

    def external(self, name: str, data: bytes | None) -> str:
        path = self.root / "inbox" / name
        if data is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return path.as_uri()


class S3Case:
    def __init__(self, client: S3Client) -> None:
        self.client = client
        for bucket in (BUCKET, INBOX):
            client.create_bucket(Bucket=bucket)
        self.store = S3Store.from_url(f"s3://{BUCKET}/prod", region=REGION)
        self.foreign_uri = "file:///srv/models/model.onnx"

    def overwrite(self, uri: str, data: bytes) -> None:
        bucket, key = parse_s3_url(uri)
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def count(self) -> int:
        return int(self.client.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0))

    def external(self, name: str, data: bytes | None) -> str:
        if data is not None:
            self.client.put_object(Bucket=INBOX, Key=f"uploads/{name}", Body=data)
        return f"s3://{INBOX}/uploads/{name}"


@pytest.fixture(params=["folder", "s3"])
def store_case(request: pytest.FixtureRequest, tmp_path: Path) -> StoreCase:
    if request.param == "folder":
        return FolderCase(tmp_path)
    request.getfixturevalue("aws")
    return S3Case(boto3.client("s3", region_name=REGION))


@pytest.fixture
def store(store_case: StoreCase) -> ArtifactStore:
    return store_case.store
