"""Batch files in a folder on this machine, through pyarrow's local filesystem.

A local input's version is `<size>:<mtime_ns>`: a file rewritten mid-job fails its chunks
instead of mixing two files into one output. A file appears under its name only when
complete: it is written aside (a hidden `.tmp-` name the inbox ignores), then renamed.
What a job writes is its owner's alone (`sluice.owner_only`): folders 0700, and the file
written aside is made 0600 before pyarrow writes into it, which keeps that mode.

Every operation answers the machine's refusals as sluice's errors (`os_errors`, as S3's are
through `s3_errors`): a path under a file, a folder where a file goes, a denied permission or a
full disk fails the job or the command with a message naming the path, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from sluice import owner_only
from sluice.batch.filestore import BLOCK, Stat, changed
from sluice.batch.uris import local_path
from sluice.domain.errors import BadRequest, Forbidden, NotFound, Unavailable

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa
    from pyarrow.fs import LocalFileSystem


class LocalFiles:
    def __init__(self) -> None:
        self._fs: LocalFileSystem | None = None

    @property
    def fs(self) -> LocalFileSystem:
        if self._fs is None:
            from pyarrow.fs import LocalFileSystem

            self._fs = LocalFileSystem()
        return self._fs

    # Reading ----------------------------------------------------------------------------
    def stat(self, uri: str, version: str | None = None) -> Stat:
        from pyarrow.fs import FileType

        with os_errors(uri):
            info = self.fs.get_file_info(_path(uri))
        if info.type == FileType.NotFound:
            raise NotFound(f"no file at {uri}", field="input_uri")
        if info.type != FileType.File:
            raise BadRequest(f"{uri} is not a file", field="input_uri")
        return Stat(info.size, f"{info.size}:{info.mtime_ns}")

    def metadata(self, uri: str, version: str | None = None) -> dict[str, str]:
        return {}  # a local file carries no job options

    def open_random(self, uri: str, version: str) -> pa.NativeFile:
        """A seekable file over the input, for Parquet (the caller closes it)."""
        self._check(uri, version)
        with os_errors(uri):
            return self.fs.open_input_file(_path(uri))

    def read_blocks(self, uri: str, version: str, start: int, end: int | None = None) -> Iterator[bytes]:
        self._check(uri, version)
        with os_errors(uri), self.fs.open_input_file(_path(uri)) as fh:
            fh.seek(start)
            left = None if end is None else max(0, end - start)
            while left is None or left > 0:
                block = fh.read(BLOCK if left is None else min(BLOCK, left))
                if not block:
                    return
                if left is not None:
                    left -= len(block)
                yield block

    def read_bytes(self, uri: str, version: str | None = None) -> bytes:
        if version is not None:
            self._check(uri, version)
        with os_errors(uri, field="uri"), self.fs.open_input_stream(_path(uri), compression=None) as fh:
            return fh.readall()

    def exists(self, uri: str) -> bool:
        from pyarrow.fs import FileType

        with os_errors(uri):
            return self.fs.get_file_info(_path(uri)).type == FileType.File

    def _check(self, uri: str, version: str) -> None:
        if self.stat(uri).version != version:
            raise changed(uri)

    # Writing ----------------------------------------------------------------------------
    def write_bytes(self, uri: str, data: bytes, *, content_type: str = "application/octet-stream") -> None:
        self._replace(uri, lambda tmp: self._write(tmp, data))

    def upload(self, uri: str, source: Path, *, content_type: str = "application/octet-stream") -> None:
        self._replace(uri, lambda tmp: self.fs.copy_file(str(source.absolute()), tmp))

    def delete(self, uri: str) -> None:
        with os_errors(uri, field="output_uri"), contextlib.suppress(FileNotFoundError, NotADirectoryError):  # nothing there
            self.fs.delete_file(_path(uri))

    def names(self, folder: str, *, depth: int | None = None) -> list[str]:
        from pyarrow.fs import FileSelector, FileType

        root = _path(folder).rstrip("/")
        with os_errors(folder):
            if self.fs.get_file_info(root).type != FileType.Directory:
                return []
            if depth is not None:  # a walk that stops `depth` folders down (never the whole of a large tree)
                return _names_within(root, depth)
            found = self.fs.get_file_info(FileSelector(root, recursive=True))
        return [info.path[len(root) + 1 :] for info in found if info.type == FileType.File]

    def check_folder(self, folder: str) -> None:
        """A folder, or nothing yet (it is made when the first file is written)."""
        path = local_path(folder).absolute()
        with os_errors(folder, field="output_uri"):
            above = next(p for p in (path, *path.parents) if p.exists())  # the root at the latest
            if not above.is_dir():
                raise BadRequest(f"{folder} cannot be a folder: {above} is a file", field="output_uri")

    def _write(self, path: str, data: bytes) -> None:
        # compression=None: never guess a codec from the file's name
        with self.fs.open_output_stream(path, compression=None) as fh:
            fh.write(data)

    def _replace(self, uri: str, write: Callable[[str], None]) -> None:
        path = local_path(uri).absolute()
        with os_errors(uri, field="output_uri"):
            owner_only.folder(path.parent)
            tmp = str(path.with_name(f".tmp-{secrets.token_hex(6)}-{path.name}"))
            try:
                os.close(owner_only.descriptor(tmp, "xb"))  # pyarrow would make it 0666 less the umask
                write(tmp)
                self.fs.move(tmp, str(path))  # a rename: readers see the old file or the new one
            except BaseException:
                with contextlib.suppress(OSError):
                    self.fs.delete_file(tmp)
                raise


@contextlib.contextmanager
def os_errors(uri: str, *, field: str = "input_uri") -> Iterator[None]:
    """The machine's refusals (OSError) as sluice's errors, naming `uri`.
    Where a file is read, a missing one is NotFound; where one is written (`output_uri`), a
    folder that cannot be made is the path's fault."""
    try:
        yield
    except FileNotFoundError as exc:
        if field == "output_uri":
            raise BadRequest(f"cannot write {uri}: {_reason(exc, uri)}", field=field) from None
        raise NotFound(f"no file at {uri}", field=field) from None
    except PermissionError as exc:
        raise Forbidden(f"access to {uri} is denied: {_reason(exc, uri)}", field=field) from None
    except (NotADirectoryError, IsADirectoryError, FileExistsError) as exc:
        raise BadRequest(f"cannot use {uri}: {_reason(exc, uri)} (a file where a folder goes, or the reverse)", field=field) from None
    except OSError as exc:
        if exc.errno is None:  # pyarrow's own refusal of the path ("... is a directory")
            raise BadRequest(f"cannot use {uri}: {_reason(exc, uri)}", field=field) from None
        raise Unavailable(f"cannot use {uri}: {_reason(exc, uri)}", field=field) from None  # a full disk, an I/O error


def _reason(exc: OSError, uri: str) -> str:
    """The system's words for the error; the machine's path, where pyarrow puts it, as the URI."""
    if exc.errno:
        return os.strerror(exc.errno)
    return str(exc).replace(_path(uri).rstrip("/"), uri)


def _path(uri: str) -> str:
    return str(local_path(uri).absolute())


def _names_within(root: str, depth: int, below: str = "") -> list[str]:
    """The files under `root`, as paths relative to it, no more than `depth` folders down."""
    out: list[str] = []
    with os.scandir(os.path.join(root, below) if below else root) as entries:
        for entry in entries:
            name = f"{below}/{entry.name}" if below else entry.name
            if entry.is_file():
                out.append(name)
            elif depth > 0 and entry.is_dir(follow_symlinks=False):
                out += _names_within(root, depth - 1, name)
    return out
