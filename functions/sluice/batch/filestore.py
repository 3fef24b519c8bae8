"""The port batch jobs read and write their files through, whatever holds them.

Reads never load a whole input: Parquet gets a seekable file, text formats a stream of
blocks from an offset. Every read of an input names the version Plan saw (`Stat.version`):
an input replaced mid-job fails its chunks (Conflict) instead of mixing two files into one
output. Writes are whole files: none is seen half-written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sluice.domain.errors import Conflict

if TYPE_CHECKING:
    import io
    from collections.abc import Iterator
    from pathlib import Path

    import pyarrow as pa

BLOCK = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Stat:
    size: int
    version: str  # the S3 ETag (or the version id it was asked for), or `<size>:<mtime_ns>` of a local file


class FileStore(Protocol):
    def stat(self, uri: str, version: str | None = None) -> Stat:
        """`version`: an S3 version id to look at (an upload's, see `as_uploaded`); without
        one, or given an ETag, what is there now."""
        ...

    def metadata(self, uri: str, version: str | None = None) -> dict[str, str]:
        """Options stored with the file (an S3 object's `x-amz-meta-*`, prefix removed)."""
        ...

    def open_random(self, uri: str, version: str) -> io.RawIOBase | pa.NativeFile:
        """A seekable binary file over `version` of the input; the caller closes it."""
        ...

    def read_blocks(self, uri: str, version: str, start: int, end: int | None = None) -> Iterator[bytes]:
        """The bytes from `start` to `end` (or the end of the input), in blocks."""
        ...

    def read_bytes(self, uri: str, version: str | None = None) -> bytes:
        """A small file whole (chunk lists, manifests), at `version` where one is given."""
        ...

    def exists(self, uri: str) -> bool: ...

    def write_bytes(self, uri: str, data: bytes, *, content_type: str = "application/octet-stream") -> None: ...

    def upload(self, uri: str, source: Path, *, content_type: str = "application/octet-stream") -> None:
        """Put a finished local file at `uri` (replacing what was there)."""
        ...

    def delete(self, uri: str) -> None: ...

    def names(self, folder: str, *, depth: int | None = None) -> list[str]:
        """The files under the folder (or prefix) `folder`, as paths relative to it; `depth`:
        no more than that many folders down (0: those directly in it), never the whole tree."""
        ...

    def check_folder(self, folder: str) -> None:
        """Raise BadRequest (naming `output_uri`) where `folder` cannot hold a job's files."""
        ...


def changed(uri: str) -> Conflict:
    return Conflict(f"{uri} changed while the job ran; upload it again to score the new file", field="input_uri")


def as_uploaded(files: FileStore, uri: str, version: str | None) -> Stat:
    """The input as its upload left it: `version` is what the upload's event named (an S3
    version id, read even once a newer upload replaced it; or the quoted ETag, where the bucket
    keeps no versions). An object replaced since is refused, never read in its stead."""
    stat = files.stat(uri, version)
    if version is not None and stat.version != version:
        raise Conflict(
            f"{uri} changed since its upload (another object was written under its name): "
            "the newer object has a job of its own",
            field="input_uri",
        )
    return stat
