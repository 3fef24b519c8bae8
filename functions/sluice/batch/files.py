"""Batch inputs and outputs by URI: each URI goes to the store for its scheme, `s3://` to S3
(boto3), `file://` or a plain path to this machine's filesystem (pyarrow). A job may mix the
two (a local file scored into an S3 prefix, or the reverse), so the choice is made per URI,
here and nowhere else."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from sluice.batch.uris import is_s3

if TYPE_CHECKING:
    import io
    from collections.abc import Iterator
    from pathlib import Path
    from typing import Unpack

    import pyarrow as pa
    from mypy_boto3_s3 import S3Client

    from sluice.batch.filestore import FileStore, Stat
    from sluice.clients import AwsSource


class Files:
    """A `FileStore` over both schemes; each store is built the first time a URI needs it
    (a local run never imports boto3)."""

    def __init__(
        self, *, s3_client: S3Client | None = None, local: FileStore | None = None, s3: FileStore | None = None, **aws: Unpack[AwsSource]
    ) -> None:
        self._s3_client, self._aws = s3_client, aws
        self._local, self._s3 = local, s3
        self._lock = threading.Lock()

    def store(self, uri: str) -> FileStore:
        """The store for `uri`'s scheme."""
        if is_s3(uri):
            return self._s3 or self._build_s3()
        return self._local or self._build_local()

    def _build_s3(self) -> FileStore:
        with self._lock:
            if self._s3 is None:
                from sluice.batch.s3_files import S3Files

                self._s3 = S3Files(client=self._s3_client, **self._aws)
            return self._s3

    def _build_local(self) -> FileStore:
        with self._lock:
            if self._local is None:
                from sluice.batch.local_files import LocalFiles

                self._local = LocalFiles()
            return self._local

    def stat(self, uri: str, version: str | None = None) -> Stat:
        return self.store(uri).stat(uri, version)

    def metadata(self, uri: str, version: str | None = None) -> dict[str, str]:
        return self.store(uri).metadata(uri, version)

    def open_random(self, uri: str, version: str) -> io.RawIOBase | pa.NativeFile:
        return self.store(uri).open_random(uri, version)

    def read_blocks(self, uri: str, version: str, start: int, end: int | None = None) -> Iterator[bytes]:
        return self.store(uri).read_blocks(uri, version, start, end)

    def read_bytes(self, uri: str, version: str | None = None) -> bytes:
        return self.store(uri).read_bytes(uri, version)

    def exists(self, uri: str) -> bool:
        return self.store(uri).exists(uri)

    def write_bytes(self, uri: str, data: bytes, *, content_type: str = "application/octet-stream") -> None:
        self.store(uri).write_bytes(uri, data, content_type=content_type)

    def upload(self, uri: str, source: Path, *, content_type: str = "application/octet-stream") -> None:
        self.store(uri).upload(uri, source, content_type=content_type)

    def delete(self, uri: str) -> None:
        self.store(uri).delete(uri)

    def names(self, folder: str, *, depth: int | None = None) -> list[str]:
        return self.store(folder).names(folder, depth=depth)

    def check_folder(self, folder: str) -> None:
        self.store(folder).check_folder(folder)
