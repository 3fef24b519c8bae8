"""Batch files on S3, through boto3 (a client from `sluice.clients.AwsClients`).

Every read of an input is pinned to the version Plan saw: ranged GETs carry `IfMatch` with
its ETag, so an object replaced mid-job answers 412 and its chunks fail (Conflict) instead of
mixing two files into one output; an upload's version id (an ETag is in quotes, a version id
never is) is read as `VersionId`, the very bytes its event announced, whatever was written over
them since. Writes are whole objects: one appears only when its upload completes.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sluice.batch.filestore import BLOCK, Stat, changed
from sluice.batch.uris import split_s3
from sluice.clients import lazy_client
from sluice.domain.errors import BadRequest, Forbidden, NotFound, SluiceError, Unavailable

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Unpack

    from mypy_boto3_s3 import S3Client

    from sluice.clients import AwsArgs

RANDOM_READ_AHEAD = 1024 * 1024
POOL = 32  # scoring threads share the client


class S3Files:
    def __init__(self, **aws: Unpack[AwsArgs]) -> None:
        self._s3 = lazy_client("s3", aws, max_pool_connections=POOL)

    @property
    def client(self) -> S3Client:
        return self._s3()  # type: ignore[no-any-return]

    # Reading ----------------------------------------------------------------------------
    def stat(self, uri: str, version: str | None = None) -> Stat:
        head = self._head(uri, version)
        return Stat(int(head["ContentLength"]), _version_id(version).get("VersionId") or str(head["ETag"]))

    def metadata(self, uri: str, version: str | None = None) -> dict[str, str]:
        return dict(self._head(uri, version).get("Metadata") or {})

    def _head(self, uri: str, version: str | None) -> Any:
        bucket, key = split_s3(uri)
        with s3_errors(uri):
            return self.client.head_object(Bucket=bucket, Key=key, **_version_id(version))

    def open_random(self, uri: str, version: str) -> io.RawIOBase:
        bucket, key = split_s3(uri)
        stat = self.stat(uri, version)
        if stat.version != version:
            raise changed(uri)
        return _S3RangeFile(self.client, bucket, key, stat.size, version, uri)

    def read_blocks(self, uri: str, version: str, start: int, end: int | None = None) -> Iterator[bytes]:
        bucket, key = split_s3(uri)
        if end is not None and end <= start:
            return
        span = f"bytes={start}-" + ("" if end is None else str(end - 1))
        with s3_errors(uri):
            body = self.client.get_object(Bucket=bucket, Key=key, Range=span, **_pinned(version))["Body"]
        with contextlib.closing(body):
            while True:
                with s3_errors(uri):
                    block = body.read(BLOCK)
                if not block:
                    return
                yield block

    def read_bytes(self, uri: str, version: str | None = None) -> bytes:
        bucket, key = split_s3(uri)
        with s3_errors(uri):
            return self.client.get_object(Bucket=bucket, Key=key, **(_pinned(version) if version else {}))["Body"].read()

    def exists(self, uri: str) -> bool:
        try:
            self.stat(uri)
        except NotFound:
            return False
        return True

    # Writing ----------------------------------------------------------------------------
    def write_bytes(self, uri: str, data: bytes, *, content_type: str = "application/octet-stream") -> None:
        bucket, key = split_s3(uri)
        with s3_errors(uri):
            self.client.put_object(Bucket=bucket, Key=key, Body=data, ContentType=content_type)

    def upload(self, uri: str, source: Path, *, content_type: str = "application/octet-stream") -> None:
        bucket, key = split_s3(uri)
        with s3_errors(uri):
            self.client.upload_file(str(source), bucket, key, ExtraArgs={"ContentType": content_type})

    def delete(self, uri: str) -> None:
        bucket, key = split_s3(uri)
        with s3_errors(uri):
            self.client.delete_object(Bucket=bucket, Key=key)

    def check_folder(self, folder: str) -> None:
        """A prefix: any can hold objects (an object named as the prefix stays beside them)."""

    def names(self, folder: str, *, depth: int | None = None) -> list[str]:
        bucket, prefix = split_s3(folder.rstrip("/") + "/")
        found: list[str] = []
        with s3_errors(folder):
            if depth is not None:  # listed a folder at a time, `depth` folders down at most
                return self._names_within(bucket, prefix, prefix, depth)
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                found += [o["Key"][len(prefix) :] for o in page.get("Contents", [])]
        return found

    def _names_within(self, bucket: str, root: str, prefix: str, depth: int) -> list[str]:
        found: list[str] = []
        below: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
            found += [o["Key"][len(root) :] for o in page.get("Contents", [])]
            below += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        for sub in below if depth > 0 else ():
            found += self._names_within(bucket, root, sub, depth - 1)
        return found


def _version_id(version: str | None) -> dict[str, str]:
    """The request parameter that reads `version` when it is a version id (not an ETag)."""
    return {} if version is None or version.startswith('"') else {"VersionId": version}


def _pinned(version: str) -> dict[str, str]:
    """The request parameter that holds a read to `version`: its version id, or its ETag."""
    return _version_id(version) or {"IfMatch": version}


class _S3RangeFile(io.RawIOBase):
    """A read-only, seekable view of one S3 object version, one ranged GET per read (with a
    small read-ahead for the many short reads of a Parquet footer)."""

    def __init__(self, client: Any, bucket: str, key: str, size: int, version: str, uri: str) -> None:
        super().__init__()
        self._client, self._bucket, self._key = client, bucket, key
        self._size, self._version, self._uri = size, version, uri
        self._pos = 0
        self._cache_start, self._cache = 0, b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def size(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self._size - self._pos
        n = min(n, self._size - self._pos)
        if n <= 0:
            return b""
        start, end = self._pos, self._pos + n
        cached_end = self._cache_start + len(self._cache)
        if not (self._cache_start <= start and end <= cached_end):
            fetch_end = min(self._size, max(end, start + RANDOM_READ_AHEAD))
            with s3_errors(self._uri):
                self._cache = self._client.get_object(
                    Bucket=self._bucket, Key=self._key, Range=f"bytes={start}-{fetch_end - 1}",
                    **_pinned(self._version),
                )["Body"].read()  # fmt: skip
            self._cache_start = start
        offset = start - self._cache_start
        data = self._cache[offset : offset + n]
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


@contextlib.contextmanager
def s3_errors(uri: str) -> Iterator[None]:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as exc:
        raise _s3_error(exc, uri) from exc
    except BotoCoreError as exc:
        raise Unavailable(f"S3 is unavailable for {uri}; try again") from exc


def _s3_error(exc: Any, uri: str) -> SluiceError:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code in ("NoSuchKey", "NoSuchVersion", "NoSuchBucket", "NotFound", "404"):
        return NotFound(f"no object at {uri}", field="input_uri")
    if code in ("PreconditionFailed", "412") or status == 412:
        return changed(uri)
    if code in ("AccessDenied", "403") or status == 403:
        return Forbidden(f"access to {uri} is denied", field="input_uri")
    if code in ("InvalidRange", "416"):
        return BadRequest(f"{uri} is shorter than planned", field="input_uri")
    return Unavailable(f"S3 could not serve {uri}; try again")
