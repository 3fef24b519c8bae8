"""A job's error files read back for its caller: the first rows of `errors/part-*.jsonl` under
its output folder, in chunk order, read a window at a time: never a whole file."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import NotFound

if TYPE_CHECKING:
    from sluice.batch.filestore import FileStore
    from sluice.domain.jobs import BatchJob

ERROR_FILE = re.compile(r"part-\d{5}\.jsonl")
ERROR_WINDOW = 64 * 1024  # read an error file this much at a time
ERROR_READ_MAX = 1024 * 1024  # and never more than this of all of them, however long a row
ERROR_ROWS_DEFAULT = 20  # rows `GET /api/v1/batch-jobs/{id}/errors` answers unless told
ERROR_ROWS_MAX = 100


def first_error_rows(files: FileStore | None, job: BatchJob, limit: int) -> dict[str, Any]:
    """The first `limit` rows of the job's error files, the files they came from, and whether
    there are more (`truncated`)."""
    import orjson

    out: dict[str, Any] = {"job": job.id, "rows_failed": job.rows_failed, "rows": [], "files": [], "truncated": False}
    if files is None or job.rows_failed == 0:
        return out
    folder = job.output_uri.rstrip("/") + "/errors/"
    try:
        names = sorted(n for n in files.names(folder) if ERROR_FILE.fullmatch(n))
    except NotFound:
        return out
    budget = ERROR_READ_MAX
    rows: list[dict[str, Any]] = out["rows"]
    for name in names:
        if len(rows) >= limit or budget <= 0:
            break
        uri = folder + name
        try:
            stat = files.stat(uri)
        except NotFound:
            continue  # replaced by a rerun meanwhile
        out["files"].append(uri)
        pending, start = b"", 0
        while len(rows) < limit and start < stat.size and budget > 0:
            end = min(stat.size, start + ERROR_WINDOW, start + budget)
            block = b"".join(files.read_blocks(uri, stat.version, start, end))
            if not block:
                break
            budget -= len(block)
            start += len(block)
            *lines, pending = (pending + block).split(b"\n")
            for line in lines:
                if line.strip() and len(rows) < limit:
                    rows.append(_error_row(orjson, line))
        if pending.strip() and len(rows) < limit and start >= stat.size:
            rows.append(_error_row(orjson, pending))  # a last line without its newline
    out["truncated"] = len(rows) < job.rows_failed
    return out


def _error_row(orjson: Any, line: bytes) -> dict[str, Any]:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return {"reason": "unreadable error record", "input": line.decode("utf-8", "replace")}
    return row if isinstance(row, dict) else {"reason": "unreadable error record", "input": row}
