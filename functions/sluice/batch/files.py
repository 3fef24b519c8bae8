"""Batch inputs and outputs by URI: `s3://bucket/key` through boto3, `file:///path` (or a plain
path) on this machine.

Reads never load a whole input: Parquet gets a seekable file that fetches byte ranges, text
formats a stream of blocks from an offset. Every read of an input names the version Plan saw
(the S3 ETag, or a local file's size and mtime): an object replaced mid-job fails its chunks
instead of mixing two files into one output. Writes are whole objects: a local file appears
under its name only when complete (written aside, then renamed), an S3 object only when its
upload completes.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from sluice.domain.errors import BadRequest, Conflict, Forbidden, NotFound, SluiceError, Unavailable
from sluice.storage.folder import path_of_file_url

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

BLOCK = 8 * 1024 * 1024
RANDOM_READ_AHEAD = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Stat:
    size: int
    version: str  # the S3 ETag, or `<size>:<mtime_ns>` of a local file


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def split_s3(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise BadRequest(f"not an s3://bucket/key URI: {uri!r}", field="input_uri")
    return parsed.netloc, parsed.path.lstrip("/")


def local_path(uri: str) -> Path:
    if uri.startswith("file://"):
        return path_of_file_url(uri)
    if "://" in uri:
        raise BadRequest(f"batch files are s3:// or file:// URIs, not {uri!r}", field="input_uri")
    return Path(uri).expanduser()


def as_uri(location: str | Path) -> str:
    """A URI for a path or URI: s3:// and file:// stay, paths become absolute file:// URIs."""
    text = str(location)
    if is_s3(text) or text.startswith("file://"):
        return text
    return Path(text).expanduser().resolve().as_uri()


def join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def bucket_and_key(uri: str) -> tuple[str | None, str | None]:
    return split_s3(uri) if is_s3(uri) else (None, None)


class Files:
    def __init__(self, *, s3_client: S3Client | None = None, region: str | None = None) -> None:
        self.region = region
        self._s3 = s3_client
        self._lock = threading.Lock()

    @property
    def s3(self) -> S3Client:
        if self._s3 is None:
            # boto3's default session is not thread-safe: build one client, once.
            with self._lock:
                if self._s3 is None:
                    import boto3
                    from botocore.config import Config

                    config = Config(retries={"mode": "standard"}, max_pool_connections=32)
                    self._s3 = boto3.session.Session().client("s3", region_name=self.region, config=config)
        return self._s3

    # Reading ----------------------------------------------------------------------------
    def stat(self, uri: str) -> Stat:
        if is_s3(uri):
            bucket, key = split_s3(uri)
            with _s3_errors(uri):
                head = self.s3.head_object(Bucket=bucket, Key=key)
            return Stat(int(head["ContentLength"]), str(head["ETag"]))
        path = local_path(uri)
        try:
            info = path.stat()
        except FileNotFoundError:
            raise NotFound(f"no file at {uri}", field="input_uri") from None
        if not path.is_file():
            raise BadRequest(f"{uri} is not a file", field="input_uri")
        return Stat(info.st_size, f"{info.st_size}:{info.st_mtime_ns}")

    def metadata(self, uri: str) -> dict[str, str]:
        """An S3 object's user metadata (`x-amz-meta-*`, names lower-case, prefix removed)."""
        if not is_s3(uri):
            return {}
        bucket, key = split_s3(uri)
        with _s3_errors(uri):
            return dict(self.s3.head_object(Bucket=bucket, Key=key).get("Metadata") or {})

    def open_random(self, uri: str, version: str) -> io.RawIOBase:
        """A seekable binary file over the input (Parquet reads its footer, then columns)."""
        if is_s3(uri):
            bucket, key = split_s3(uri)
            stat = self.stat(uri)
            if stat.version != version:
                raise _changed(uri)
            return _S3RangeFile(self.s3, bucket, key, stat.size, version, uri)
        self._check_local(uri, version)
        return open(local_path(uri), "rb")  # the caller closes it

    def read_blocks(self, uri: str, version: str, start: int, end: int | None = None) -> Iterator[bytes]:
        """The bytes from `start` to `end` (or the end of the input), in blocks."""
        if is_s3(uri):
            bucket, key = split_s3(uri)
            span = f"bytes={start}-" + ("" if end is None else str(max(start, end - 1)))
            if end is not None and end <= start:
                return
            with _s3_errors(uri):
                body = self.s3.get_object(Bucket=bucket, Key=key, Range=span, IfMatch=version)["Body"]
            with contextlib.closing(body):
                while True:
                    with _s3_errors(uri):
                        block = body.read(BLOCK)
                    if not block:
                        return
                    yield block
            return
        self._check_local(uri, version)
        with open(local_path(uri), "rb") as fh:
            fh.seek(start)
            left = None if end is None else max(0, end - start)
            while left is None or left > 0:
                block = fh.read(BLOCK if left is None else min(BLOCK, left))
                if not block:
                    return
                if left is not None:
                    left -= len(block)
                yield block

    def read_bytes(self, uri: str) -> bytes:
        """A small object whole (chunk lists, manifests)."""
        if is_s3(uri):
            bucket, key = split_s3(uri)
            with _s3_errors(uri):
                return self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        try:
            return local_path(uri).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no file at {uri}", field="uri") from None

    def exists(self, uri: str) -> bool:
        if is_s3(uri):
            try:
                self.stat(uri)
            except NotFound:
                return False
            return True
        return local_path(uri).is_file()

    def _check_local(self, uri: str, version: str) -> None:
        if self.stat(uri).version != version:
            raise _changed(uri)

    # Writing ----------------------------------------------------------------------------
    def write_bytes(self, uri: str, data: bytes, *, content_type: str = "application/octet-stream") -> None:
        if is_s3(uri):
            bucket, key = split_s3(uri)
            with _s3_errors(uri):
                self.s3.put_object(Bucket=bucket, Key=key, Body=data, ContentType=content_type)
            return
        path = local_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)

    def upload(self, uri: str, source: Path, *, content_type: str = "application/octet-stream") -> None:
        """Put a finished local file at `uri` (replacing what was there)."""
        if is_s3(uri):
            bucket, key = split_s3(uri)
            with _s3_errors(uri):
                self.s3.upload_file(str(source), bucket, key, ExtraArgs={"ContentType": content_type})
            return
        path = local_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        os.close(fd)
        shutil.copyfile(source, tmp)
        os.replace(tmp, path)

    def delete(self, uri: str) -> None:
        if is_s3(uri):
            bucket, key = split_s3(uri)
            with _s3_errors(uri):
                self.s3.delete_object(Bucket=bucket, Key=key)
            return
        local_path(uri).unlink(missing_ok=True)


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
            with _s3_errors(self._uri):
                self._cache = self._client.get_object(
                    Bucket=self._bucket, Key=self._key, Range=f"bytes={start}-{fetch_end - 1}",
                    IfMatch=self._version,
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


def _changed(uri: str) -> Conflict:
    return Conflict(f"{uri} changed while the job ran; upload it again to score the new file", field="input_uri")


@contextlib.contextmanager
def _s3_errors(uri: str) -> Iterator[None]:
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
    if code in ("NoSuchKey", "NoSuchBucket", "NotFound", "404"):
        return NotFound(f"no object at {uri}", field="input_uri")
    if code in ("PreconditionFailed", "412") or status == 412:
        return _changed(uri)
    if code in ("AccessDenied", "403") or status == 403:
        return Forbidden(f"access to {uri} is denied", field="input_uri")
    if code in ("InvalidRange", "416"):
        return BadRequest(f"{uri} is shorter than planned", field="input_uri")
    return Unavailable(f"S3 could not serve {uri}; try again")
