"""What a chunk wrote, and whether it is still there as written.

Score records each file it wrote (its part and error file) with the size and version the
file store sees just after (the S3 ETag, or a local file's `<size>:<mtime_ns>`). Finalize
looks at each again before it writes `_SUCCESS`: a file removed or replaced since (another
job into the same folder, a cleanup) fails the job, naming the file, instead of a job that
says SUCCEEDED beside missing rows. The same bytes hold the rows Score counted.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import NotFound

if TYPE_CHECKING:
    from sluice.batch.filestore import FileStore
    from sluice.domain.jobs import BatchJob, ChunkResult

CHECK_THREADS = 16  # files looked at at once (one HEAD each on S3)
SHOWN_FILES = 5  # files named in a failure, at most


def as_written(files: FileStore, result: ChunkResult) -> ChunkResult:
    """The chunk's result with the size and version of the files it wrote, as `files` sees
    them now."""
    changes: dict[str, Any] = {}
    if result.part:
        part = files.stat(result.part)
        changes |= {"part_bytes": part.size, "part_version": part.version}
    if result.errors:
        errors = files.stat(result.errors)
        changes |= {"errors_bytes": errors.size, "errors_version": errors.version}
    return replace(result, **changes)


def is_as_written(files: FileStore, uri: str, version: str) -> bool:
    """The file at `uri` is there, at the version written."""
    try:
        return files.stat(uri).version == version
    except NotFound:
        return False


def not_as_written(files: FileStore, job: BatchJob, chunks: list[ChunkResult]) -> list[str]:
    """What is wrong with the files the chunks recorded: each missing, or not the size and
    version its chunk wrote (none for a result recorded without them)."""
    expected = [
        (c.index, uri, rows, size, version)
        for c in chunks
        for uri, rows, size, version in (
            (c.part, c.rows_out, c.part_bytes, c.part_version),
            (c.errors, c.rows_failed, c.errors_bytes, c.errors_version),
        )
        if uri
    ]
    if not expected:
        return []
    with ThreadPoolExecutor(min(CHECK_THREADS, len(expected)), thread_name_prefix="sluice-finalize") as pool:
        wrong = [w for w in pool.map(lambda e: _wrong(files, job.output_uri, *e), expected) if w is not None]
    if not wrong:
        return []
    shown = "; ".join(wrong[:SHOWN_FILES]) + (f"; and {len(wrong) - SHOWN_FILES} more" if len(wrong) > SHOWN_FILES else "")
    return [f"{len(wrong)} of {len(expected)} files are not as their chunks wrote them: {shown}"]


def _wrong(files: FileStore, folder: str, index: int, uri: str, rows: int, size: int | None, version: str | None) -> str | None:
    name = _relative(folder, uri)
    try:
        stat = files.stat(uri)
    except NotFound:
        return f"{name} (chunk {index}, {rows} rows) is missing"
    if size is not None and stat.size != size:
        return f"{name} (chunk {index}, {rows} rows) is {stat.size} bytes where {size} were written"
    if version is not None and stat.version != version:
        return f"{name} (chunk {index}, {rows} rows) was replaced after it was written"
    return None


def _relative(folder: str, uri: str) -> str:
    """`part-00003.parquet` for a file of the job's folder (the whole URI for any other)."""
    base = folder.rstrip("/") + "/"
    return uri[len(base) :] if uri.startswith(base) else uri
