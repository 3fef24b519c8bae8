"""What a job's output folder says of it: `_manifest.json` (its counts, timings, parts, error
files and, for an input of many objects, each object), `_SUCCESS`, and the accounting Finalize
does before it writes them (every chunk scored, rows in = rows out + rows failed)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from sluice.domain import now

if TYPE_CHECKING:
    from sluice.domain.jobs import BatchJob, ChunkResult

MANIFEST = "_manifest.json"
SUCCESS = "_SUCCESS"
# The names a job writes in its output folder (see score.part_name and score.error_name).
RESULT_NAMES = re.compile(r"(?:part-\d{5}\.(?:parquet|csv|jsonl)|errors/part-\d{5}\.jsonl|_manifest\.json|_SUCCESS)")


def manifest(
    job: BatchJob, chunks: list[ChunkResult], status: str, error: str | None, objects: list[dict[str, Any]]
) -> bytes:
    """The manifest's bytes; `objects`: those of an input of many objects (see `objects_of`)."""
    versions: dict[str, int] = {}
    for chunk in chunks:
        for ref, rows in chunk.versions.items():
            versions[ref] = versions.get(ref, 0) + rows
    document = {
        "job": job.id,
        "tenant": job.tenant,
        "deployment": job.deployment,
        "revision": job.revision,
        "refs": job.refs or {},
        "status": status,
        "error": error,
        "input": job.input_uri,
        "output": job.output_uri,
        "format": job.format,
        "output_format": job.output_format,
        "key_columns": list(job.key_columns),
        "counts": {
            "chunks": job.chunks_total,
            "chunks_done": len(chunks),
            "rows_total": job.rows_total,
            "rows_in": sum(c.rows_in for c in chunks),
            "rows_out": sum(c.rows_out for c in chunks),
            "rows_failed": sum(c.rows_failed for c in chunks),
        },
        "timings": {
            "created_at": job.created_at,
            "started_at": job.started_at,
            "finished_at": now(),
            "scoring_seconds": round(sum(c.seconds for c in chunks), 3),
        },
        "versions": versions,
        "parts": [{"chunk": c.index, "uri": c.part, "rows": c.rows_out} for c in chunks if c.part],
        "errors": [{"chunk": c.index, "uri": c.errors, "rows": c.rows_failed} for c in chunks if c.errors],
    }
    if objects:
        document["objects"] = objects
    return json.dumps(document, indent=2).encode()


def objects_of(planned: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An input of many objects: each object, its rows and the chunks that read it, from the
    chunk list (none when the input is one object)."""
    objects: dict[str, dict[str, Any]] = {}
    for data in planned:
        uri = data.get("uri")
        if uri is None:
            return []
        entry = objects.setdefault(uri, {"uri": uri, "version": data.get("version"), "rows": 0, "chunks": []})
        entry["rows"] += int(data["rows"])
        entry["chunks"].append(int(data["index"]))
    return list(objects.values())


def problems(job: BatchJob, chunks: list[ChunkResult]) -> list[str]:
    """What keeps the job from succeeding: chunks not scored, rows unaccounted for, no row
    scored at all (none when it may succeed)."""
    found = []
    expected = set(range(job.chunks_total or 0))
    missing = sorted(expected - {c.index for c in chunks})
    if missing:
        found.append(f"{len(missing)} of {len(expected)} chunks not scored: {_listing(missing)}")
    rows_in = sum(c.rows_in for c in chunks)
    rows_out = sum(c.rows_out for c in chunks)
    rows_failed = sum(c.rows_failed for c in chunks)
    if rows_in != rows_out + rows_failed:
        found.append(f"{rows_in} rows in but {rows_out} out and {rows_failed} failed")
    if not missing and job.rows_total is not None and rows_in != job.rows_total:
        found.append(f"{rows_in} rows scored of {job.rows_total} planned")
    if not found and rows_in and not rows_out:
        first = min((c for c in chunks if c.errors), key=lambda c: c.index, default=None)
        where = f"; the reasons are in {first.errors}" if first is not None else ""
        found.append(f"none of the {rows_in} rows could be scored{where}")
    return found


def failure_message(job: BatchJob, chunks: list[ChunkResult], error: str, cause: str) -> str:
    """Why the job failed, in words: the error's own message, and which chunks never finished."""
    text = cause
    try:
        parsed = json.loads(cause)
        if isinstance(parsed, dict):
            text = str(parsed.get("errorMessage") or parsed.get("Cause") or cause)
    except ValueError:
        pass
    message = f"{error}: {text}" if text else error
    if job.chunks_total:
        missing = sorted(set(range(job.chunks_total)) - {c.index for c in chunks})
        if missing:
            message += f" ({len(missing)} of {job.chunks_total} chunks not scored: {_listing(missing)})"
    return message


def _listing(indexes: list[int], limit: int = 20) -> str:
    shown = ", ".join(str(i) for i in indexes[:limit])
    return shown + (f" and {len(indexes) - limit} more" if len(indexes) > limit else "")
