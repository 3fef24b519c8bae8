"""Files and folders sluice writes on this machine are its owner's alone.

The home (`~/.sluice`, `SLUICE_HOME`) holds every tenant's data: key hashes, models, uploads,
results, captured requests, batch inputs and outputs. Nothing sluice writes grants another
local user any access: folders are made 0700 and files 0600 (0700 for an executable copied in),
whatever the umask. Every writer of sluice's own goes through this module; what libraries write
(SQLite's journal, pyarrow, the Prometheus client) is covered by `umask()`, which the `sluice`
command holds for its whole run (`sluice serve`'s workers inherit it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

FOLDER_MODE = 0o700
FILE_MODE = 0o600
EXECUTABLE_MODE = 0o700
UMASK = 0o077  # what a library creates comes out 0600 (files) and 0700 (folders)
_OTHERS = 0o077  # any access for group or others

_FLAGS = {
    "wb": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "ab": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "xb": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
    "r+b": os.O_RDWR | os.O_CREAT,
}


def folder(path: Path | str, *, exist_ok: bool = True) -> Path:
    """`mkdir -p`, every folder it makes 0700 (pathlib's `parents=True` gives the parents it
    makes 0777 less the umask, whatever `mode` says). A folder that exists is left as it is."""
    path = Path(path)
    try:
        os.mkdir(path, FOLDER_MODE)
    except FileNotFoundError:
        if path.parent == path:
            raise
        folder(path.parent)
        try:
            os.mkdir(path, FOLDER_MODE)
        except FileExistsError:  # made meanwhile by another thread or process
            if not exist_ok or not path.is_dir():
                raise
    except FileExistsError:
        if not exist_ok or not path.is_dir():
            raise
    return path


def descriptor(path: Path | str, mode: str = "wb") -> int:
    """A file descriptor open for writing (`wb`, `ab`, `xb` or `r+b`), the file created 0600;
    one found open to others (written by an older sluice) is made 0600 too."""
    fd = os.open(path, _FLAGS[mode] | os.O_CLOEXEC, FILE_MODE)
    try:
        tighten(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def tighten(path: Path | str | int) -> None:
    """A file (a path or a descriptor) open to others, and the current user's, is made the
    owner's alone, its owner bits kept (an older sluice wrote 0644); a missing one is left."""
    with contextlib.suppress(FileNotFoundError):  # gone, or gone meanwhile
        found = os.stat(path)
        if found.st_mode & _OTHERS and found.st_uid == os.getuid():
            os.chmod(path, stat.S_IMODE(found.st_mode) & ~_OTHERS)


def open_file(path: Path | str, mode: str = "wb", *, buffering: int = -1) -> IO[bytes]:
    """`open(path, mode)` for writing, binary, the file the owner's alone (see `descriptor`);
    `buffering=0` for one whose lines go through `append_lines`."""
    return os.fdopen(descriptor(path, mode), mode, buffering=buffering)


def aside(path: Path | str) -> tuple[IO[bytes], Path]:
    """A new file in `path`'s folder (which must exist), open for writing, 0600, under a name
    no other writer has, even one in the same process and thread (`mkstemp`): what it holds is
    put in place by renaming it over `path`, so two writers of one file at once never write
    into each other's; the caller removes it when it does not."""
    fd, partial = tempfile.mkstemp(dir=Path(path).parent, prefix=f".{Path(path).name}.", suffix=".tmp")
    return os.fdopen(fd, "wb"), Path(partial)


def write(path: Path | str, data: bytes) -> Path:
    """The whole file, atomically: written aside in the same folder (0600, its folders made as
    `folder` makes them), then renamed over `path`. A reader sees the old file or the new one."""
    path = Path(path)
    folder(path.parent)
    fh, partial = aside(path)
    try:
        with fh:
            fh.write(data)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise
    return path


def append_lines(fd: int, data: bytes) -> None:
    """Whole lines (`data` ends with a newline) added at the end of the file open at `fd`,
    never half of one: one write call where the system takes it all (as it does unless the
    disk fills or a size limit is met), and when a write fails partway the file is cut back to
    where it ended before, so the next lines never continue a broken one. Every JSON Lines
    file sluice appends to goes through here. A descriptor that cannot seek (a pipe) is only
    written: there is nothing to cut back."""
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
    except OSError:
        start = None
    view = memoryview(data)
    try:
        while view:
            wrote = os.write(fd, view)
            if not wrote:
                raise OSError(errno.EIO, "a write took none of the bytes")
            view = view[wrote:]
    except BaseException:
        if start is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
        raise


def copy(source: Path | str, target: Path | str) -> Path:
    """A copy of `source` (its bytes, never its mode): 0700 when the source is executable by
    its owner, else 0600."""
    executable = os.stat(source).st_mode & stat.S_IXUSR
    with open(source, "rb") as src, open_file(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
        if executable:
            os.fchmod(dst.fileno(), EXECUTABLE_MODE)
    return Path(target)


@contextlib.contextmanager
def umask() -> Iterator[None]:
    """The process's umask at 0o077 for the duration: what a library creates (SQLite's -wal
    and -shm, pyarrow's files and folders, the metrics client's files) is the owner's alone,
    and so is what child processes create (they inherit it)."""
    previous = os.umask(UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def secure_home(home: Path | str) -> str | None:
    """A home that exists and is open to others is made 0700; None when there was nothing to
    do, else what was done (or why it could not be), for the operator to read.

    Only the home itself is changed: without access to it another user reaches nothing beneath
    it, so what an older sluice wrote inside (0644 files, 0755 folders) is out of reach too,
    and a home with a large store is not walked at every start."""
    home = Path(home)
    try:
        found = home.stat()
    except FileNotFoundError:
        return None  # made 0700 by the first writer that needs it
    mode = stat.S_IMODE(found.st_mode)
    if not stat.S_ISDIR(found.st_mode) or not mode & _OTHERS:
        return None
    if found.st_uid != os.getuid():
        return f"warning: {home} is open to other users ({mode:04o}) and belongs to another user: sluice cannot make it 0700"
    try:
        os.chmod(home, FOLDER_MODE)
    except OSError as exc:
        return f"warning: {home} is open to other users ({mode:04o}) and could not be made 0700 ({exc.strerror})"
    return f"{home} was open to other users ({mode:04o}): made 0700, the owner's alone"


__all__ = [
    "EXECUTABLE_MODE", "FILE_MODE", "FOLDER_MODE", "UMASK",
    "append_lines", "aside", "copy", "descriptor", "folder", "open_file", "secure_home", "tighten", "umask", "write",
]  # fmt: skip


# An ONNX model names its external data by paths relative to where it is read from: bytes a
# tenant sent are read from here, so no path in them reaches a file (ONNX Runtime refuses
# absolute paths and `..` itself; a relative one would otherwise be read from the process's
# working folder: an operator's home, Lambda's code).
ONNX_EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"
_empty: str | None = None


def no_external_data(options: Any) -> Any:
    """ONNX Runtime `options` under which a model's external data is looked for in an empty
    folder of this process's own: a model whose weights name a file fails to load."""
    global _empty
    if _empty is None or not os.path.isdir(_empty) or os.listdir(_empty):
        _empty = tempfile.mkdtemp(prefix="sluice-no-files-")  # 0700, and empty
    options.add_session_config_entry(ONNX_EXTERNAL_DATA_FOLDER, _empty)
    return options
