"""What every artifact store does, whether a folder or S3 holds the bytes (conftest's `store`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3
import pytest
from botocore.stub import Stubber

from sluice.domain.errors import (
    BackendError,
    BadRequest,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    SluiceError,
    Unavailable,
)
from sluice.storage.base import sha256_hex
from sluice.storage.s3 import S3Store, parse_s3_url

if TYPE_CHECKING:
    from conftest import StoreCase
    from sluice.storage import ArtifactStore

A, B = "acme", "globex"
MODEL = b"\x08\x07onnx-bytes" * 100


def test_put_then_get(store: ArtifactStore) -> None:
    ref = store.put(A, MODEL, suffix=".onnx")
    assert ref.sha256 == sha256_hex(MODEL)
    assert ref.size_bytes == len(MODEL)
    assert ref.uri.endswith(f"/tenants/{A}/sha256/{ref.sha256}.onnx")
    assert store.get(ref.uri, sha256=ref.sha256) == MODEL


def test_put_is_idempotent_and_content_addressed(store_case: StoreCase) -> None:
    store = store_case.store
    first = store.put(A, MODEL, suffix=".onnx")
    again = store.put(A, MODEL, suffix=".onnx")
    assert again == first
    assert store_case.count() == 1
    assert store.put(A, MODEL).uri != first.uri
    assert store.put(B, MODEL, suffix=".onnx").uri != first.uri
    assert store.put(A, MODEL + b"!", suffix=".onnx").uri != first.uri
    assert store_case.count() == 4


def test_get_verifies_the_checksum(store_case: StoreCase) -> None:
    store = store_case.store
    ref = store.put(A, MODEL, suffix=".onnx")
    with pytest.raises(BackendError):
        store.get(ref.uri, sha256=sha256_hex(b"something else"))
    store_case.overwrite(ref.uri, MODEL[:-1] + b"?")
    with pytest.raises(BackendError):
        store.get(ref.uri, sha256=ref.sha256)


def test_get_of_a_missing_artifact(store: ArtifactStore) -> None:
    ref = store.put(A, MODEL)
    store.delete(ref.uri)
    with pytest.raises(NotFound) as caught:
        store.get(ref.uri, sha256=ref.sha256)
    assert caught.value.field == "artifact_uri"


def test_get_refuses_uris_outside_the_store(store_case: StoreCase) -> None:
    outside = store_case.external("model.onnx", MODEL)
    with pytest.raises(Forbidden) as caught:
        store_case.store.get(outside, sha256=sha256_hex(MODEL))
    assert caught.value.field == "artifact_uri"


def test_delete_is_idempotent(store_case: StoreCase) -> None:
    store = store_case.store
    ref = store.put(A, MODEL)
    store.delete(ref.uri)
    store.delete(ref.uri)
    assert store_case.count() == 0


def test_owns_only_the_tenants_own_part(store_case: StoreCase) -> None:
    store = store_case.store
    ref = store.put(A, MODEL)
    assert store.owns(A, ref.uri)
    assert not store.owns(B, ref.uri)
    assert not store.owns("acm", ref.uri)
    assert not store.owns(A, ref.uri.replace(f"/tenants/{A}/", f"/tenants/{A}x/"))
    assert not store.owns(A, store_case.external("model.onnx", MODEL))
    assert not store.owns(A, "not a uri")


def test_read_external(store_case: StoreCase) -> None:
    store = store_case.store
    assert store.read_external(A, store_case.external("model.onnx", MODEL)) == MODEL
    own = store.put(A, MODEL)
    assert store.read_external(A, own.uri) == MODEL


def test_read_external_refuses_past_its_bound_before_reading(store_case: StoreCase) -> None:
    """A file past the bound was read whole (768 MiB into memory) and refused only then."""
    store = store_case.store
    uri = store_case.external("model.onnx", MODEL)
    assert store.read_external(A, uri, len(MODEL)) == MODEL
    with pytest.raises(PayloadTooLarge) as refused:
        store.read_external(A, uri, len(MODEL) - 1)
    assert refused.value.field == "artifact_uri"


def test_read_external_refuses_another_tenants_artifact(store: ArtifactStore) -> None:
    theirs = store.put(B, MODEL)
    through_mine = theirs.uri.replace(f"/tenants/{B}/", f"/tenants/{A}/../{B}/")
    for uri in (theirs.uri, through_mine):
        assert not store.owns(A, uri)
        with pytest.raises(Forbidden) as caught:
            store.read_external(A, uri)
        assert caught.value.field == "artifact_uri"


def test_read_external_of_nothing(store_case: StoreCase) -> None:
    store = store_case.store
    with pytest.raises(NotFound) as missing:
        store.read_external(A, store_case.external("missing.onnx", None))
    with pytest.raises(BadRequest) as foreign:
        store.read_external(A, store_case.foreign_uri)
    assert missing.value.field == foreign.value.field == "artifact_uri"


# The AWS twin's own behaviour -----------------------------------------------------------
@pytest.mark.usefixtures("aws")
def test_s3_puts_encrypted_and_uploads_each_object_once() -> None:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="sluice-artifacts")
    puts: list[dict[str, object]] = []
    client.meta.events.register("before-call.s3.PutObject", lambda params, **_: puts.append(params))
    store = S3Store("sluice-artifacts", "/models/", client=client)

    ref = store.put(A, MODEL, suffix=".onnx")
    store.put(A, MODEL, suffix=".onnx")
    assert len(puts) == 1
    assert ref.uri == f"s3://sluice-artifacts/models/tenants/{A}/sha256/{ref.sha256}.onnx"
    bucket, key = parse_s3_url(ref.uri)
    assert client.head_object(Bucket=bucket, Key=key)["ServerSideEncryption"] == "aws:kms"

    plain = S3Store("sluice-artifacts", client=client, server_side_encryption="AES256")
    other = plain.put(A, b"other bytes")
    assert (
        client.head_object(Bucket=bucket, Key=parse_s3_url(other.uri)[1])["ServerSideEncryption"]
        == "AES256"
    )


def test_s3_url() -> None:
    store = S3Store.from_url("s3://sluice-artifacts/prod/models/")
    assert (store.bucket, store.prefix) == ("sluice-artifacts", "prod/models")
    assert S3Store.from_url("s3://sluice-artifacts").prefix == ""
    with pytest.raises(ValueError):
        S3Store.from_url("file:///srv/artifacts")


@pytest.mark.usefixtures("aws")
@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        ("NoSuchKey", 404, NotFound),
        ("AccessDenied", 403, Forbidden),
        ("SlowDown", 503, Unavailable),
        ("InternalError", 500, Unavailable),
        ("InvalidObjectState", 403, BackendError),
    ],
)
def test_s3_failures_become_sluice_errors_without_their_text(
    code: str, status: int, error: type[SluiceError]
) -> None:
    client = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    store = S3Store("sluice-artifacts", client=client)
    with Stubber(client) as stub:
        stub.add_client_error("get_object", code, "arn:aws:s3:::secret-detail", status)
        with pytest.raises(error) as caught:
            store.get(f"s3://sluice-artifacts/tenants/{A}/sha256/abc", sha256="abc")
    assert type(caught.value) is error
    assert "secret-detail" not in caught.value.message
