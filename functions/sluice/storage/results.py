"""Where asynchronous predictions keep their input, record, answer or error.

Every object of a result lies under `results/tenants/<tenant>/<id>/` in the artifact store's
bucket (or folder), beside, never inside, the content-addressed artifacts, so push-by-URI can
never import one, and one lifecycle rule on `results/` expires them all (the stack sets it; the
record's `expires_at` is checked on every read as well). SageMaker's asynchronous endpoints
that sluice creates write their answers under the tenant's own `results/tenants/<tenant>/`
too; any location outside it is refused, never read.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sluice import owner_only
from sluice.domain.errors import BackendError, Forbidden
from sluice.domain.locations import unsafe_s3_key
from sluice.storage.base import on_disk
from sluice.storage.folder import path_of_file_url

if TYPE_CHECKING:
    from sluice.storage.s3 import S3Store

RESULT_ID = re.compile(r"^[0-9a-f]{32}\Z")
RECORD = "record.json"


def result_prefix(tenant: str) -> str:
    return f"results/tenants/{tenant}/"


class ResultStore(Protocol):
    """Objects of asynchronous results, by tenant, id and name."""

    def uri(self, tenant: str, result_id: str, name: str) -> str:
        """Where `name` of that result lives (s3:// or file://)."""
        ...

    def area(self, tenant: str) -> str:
        """The URI prefix all of a tenant's results lie under (an endpoint's output path)."""
        ...

    def put(self, tenant: str, result_id: str, name: str, data: bytes, *, content_type: str | None = None) -> str:
        """Write one object; its URI."""
        ...

    def read(self, tenant: str, uri: str) -> tuple[bytes, str | None] | None:
        """An object in the tenant's area and its content type; None when it is not there (yet).
        Forbidden for a URI outside the tenant's area."""
        ...

    def owns(self, tenant: str, uri: str) -> bool: ...

    def read_bounded(self, tenant: str, uri: str, max_bytes: int) -> tuple[bytes | None, str | None, int] | None:
        """`read`, with the object's size; its bytes None (left unread) when over `max_bytes`."""
        ...

    def link(self, tenant: str, uri: str, *, expires_in: int) -> str | None:
        """A short-lived URL the object can be fetched from without sluice (S3: a presigned
        GET); None where there is none (a folder: sluice answers the bytes itself)."""
        ...

    def path(self, tenant: str, uri: str) -> Path | None:
        """The object's file, where it is one (a folder)."""
        ...


class FolderResults:
    """Results in the embedded home's folder store (local mode, `sluice serve`)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser().resolve()
        self._lock = threading.Lock()

    def _path(self, tenant: str, result_id: str, name: str) -> Path:
        return self.root / result_prefix(tenant) / result_id / name

    def uri(self, tenant: str, result_id: str, name: str) -> str:
        return self._path(tenant, result_id, name).as_uri()

    def area(self, tenant: str) -> str:
        return (self.root / result_prefix(tenant)).as_uri() + "/"

    def put(self, tenant: str, result_id: str, name: str, data: bytes, *, content_type: str | None = None) -> str:
        path = self._path(tenant, result_id, name)
        # Written whole, then renamed: a reader in another worker sees all of it or nothing.
        with on_disk():
            owner_only.write(path, data)
            if content_type is not None:
                owner_only.write(path.with_name(f".{path.name}.type"), content_type.encode())
        return path.as_uri()

    def _local(self, uri: str) -> Path:
        """The file a result's URI names. The URI is percent-encoded as `Path.as_uri` wrote it
        (a home under `Application Support` or `josé` has `%20` or `%C3%A9` in it), so it is
        decoded before it is resolved; the tenant's ownership is then checked on that real path."""
        try:
            path = path_of_file_url(uri)  # not a file URL: a ValueError
        except ValueError:
            raise Forbidden("the result lies outside this store", field="result") from None
        return path.resolve()

    def owns(self, tenant: str, uri: str) -> bool:
        try:
            return self._local(uri).is_relative_to(self.root / result_prefix(tenant))
        except Forbidden:
            return False

    def read(self, tenant: str, uri: str) -> tuple[bytes, str | None] | None:
        if not self.owns(tenant, uri):
            raise Forbidden("the result lies outside the caller's results", field="result")
        path = self._local(uri)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        meta = path.with_name(f".{path.name}.type")
        return data, (meta.read_text() if meta.exists() else None)

    def read_bounded(self, tenant: str, uri: str, max_bytes: int) -> tuple[bytes | None, str | None, int] | None:
        if not self.owns(tenant, uri):
            raise Forbidden("the result lies outside the caller's results", field="result")
        path = self._local(uri)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return None
        meta = path.with_name(f".{path.name}.type")
        content_type = meta.read_text() if meta.exists() else None
        return (path.read_bytes() if size <= max_bytes else None), content_type, size

    def link(self, tenant: str, uri: str, *, expires_in: int) -> str | None:
        return None

    def path(self, tenant: str, uri: str) -> Path | None:
        if not self.owns(tenant, uri):
            raise Forbidden("the result lies outside the caller's results", field="result")
        return self._local(uri)


class S3Results:
    """Results in the artifact bucket, under its prefix, private and encrypted as it is."""

    def __init__(self, store: S3Store) -> None:
        self.store = store
        self.bucket = store.bucket
        self._root = f"{store.prefix}/" if store.prefix else ""

    def _key(self, tenant: str, result_id: str, name: str) -> str:
        return f"{self._root}{result_prefix(tenant)}{result_id}/{name}"

    def uri(self, tenant: str, result_id: str, name: str) -> str:
        return f"s3://{self.bucket}/{self._key(tenant, result_id, name)}"

    def area(self, tenant: str) -> str:
        return f"s3://{self.bucket}/{self._root}{result_prefix(tenant)}"

    def put(self, tenant: str, result_id: str, name: str, data: bytes, *, content_type: str | None = None) -> str:
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self._key(tenant, result_id, name),
            "Body": data,
            "ServerSideEncryption": self.store.server_side_encryption,
        }
        if self.store.kms_key_id:
            params["SSEKMSKeyId"] = self.store.kms_key_id
        if content_type:
            params["ContentType"] = content_type
        try:
            self.store.client.put_object(**params)
        except Exception as exc:
            raise BackendError(f"could not write the request to the result store ({type(exc).__name__})") from None
        return self.uri(tenant, result_id, name)

    def _owned_key(self, tenant: str, uri: str) -> str | None:
        """The key of the tenant's result that `uri` names, read literally, as S3 and SageMaker
        read it (a URL parser would take a `?` or `#` and what follows off, and check a key
        other than the one written); None for any other bucket, prefix or unsafe key."""
        scheme, sep, rest = uri.partition("://")
        bucket, _, key = rest.partition("/")
        if scheme != "s3" or not sep or bucket != self.bucket or not key.startswith(f"{self._root}{result_prefix(tenant)}"):
            return None
        return None if unsafe_s3_key(key) else key

    def owns(self, tenant: str, uri: str) -> bool:
        return self._owned_key(tenant, uri) is not None

    def read(self, tenant: str, uri: str) -> tuple[bytes, str | None] | None:
        response = self._get(tenant, uri)
        if response is None:
            return None
        return response["Body"].read(), response.get("ContentType")

    def read_bounded(self, tenant: str, uri: str, max_bytes: int) -> tuple[bytes | None, str | None, int] | None:
        response = self._get(tenant, uri)
        if response is None:
            return None
        size = int(response.get("ContentLength") or 0)
        if size > max_bytes:
            response["Body"].close()  # one request either way: the body is left unread
            return None, response.get("ContentType"), size
        return response["Body"].read(), response.get("ContentType"), size

    def _get(self, tenant: str, uri: str) -> dict[str, Any] | None:
        """GetObject on one of the tenant's results; None when it is not there."""
        key = self._owned_key(tenant, uri)
        if key is None:
            raise Forbidden("the result lies outside the caller's results", field="result")
        from botocore.exceptions import ClientError

        try:
            return self.store.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise BackendError("could not read the result store") from None

    def link(self, tenant: str, uri: str, *, expires_in: int) -> str | None:
        key = self._owned_key(tenant, uri)
        if key is None:
            raise Forbidden("the result lies outside the caller's results", field="result")
        try:
            return str(
                self.store.presigner.generate_presigned_url(
                    "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_in
                )
            )
        except Exception as exc:
            raise BackendError(f"could not sign a link to the result ({type(exc).__name__})") from None

    def path(self, tenant: str, uri: str) -> Path | None:
        return None


def results_for(store: object) -> ResultStore | None:
    """The result store beside an artifact store (the same bucket or folder); None for others."""
    from sluice.storage.folder import FolderStore
    from sluice.storage.s3 import S3Store

    if isinstance(store, S3Store):
        return S3Results(store)
    if isinstance(store, FolderStore):
        return FolderResults(store.root)
    return None


def record_bytes(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode()


__all__ = ["RECORD", "RESULT_ID", "FolderResults", "ResultStore", "S3Results", "record_bytes", "result_prefix", "results_for"]
