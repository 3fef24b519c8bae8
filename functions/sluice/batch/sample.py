"""Rows of a local Parquet, CSV or JSON Lines file as a version's input tensors, through the
batch readers: the same column matching and checks a batch job applies, for the few thousand
rows a converter's check, a calibration or an evaluation needs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sluice.domain.errors import InvalidInput

if TYPE_CHECKING:
    from sluice.batch.filestore import FileStore
    from sluice.domain.jobs import BatchJob
    from sluice.domain.locations import Root
    from sluice.domain.signature import Signature

CHUNK_BYTES = 64 * 1024 * 1024


def read_rows(path: str | Path, signature: Signature, *, limit: int, field: str = "data") -> dict[str, np.ndarray]:
    """Up to `limit` rows that can be fed to `signature`, from the start of the file. Rows a
    batch job would refuse (a missing value, a word where a number belongs) are skipped; a
    file with none left is refused."""
    from sluice.batch.local_files import LocalFiles
    from sluice.batch.uris import format_of
    from sluice.domain.jobs import BatchJob

    file = Path(path).resolve()
    if not file.is_file():
        raise InvalidInput(f"no such file: {path}", field=field)
    uri = file.as_uri()
    fmt = format_of(uri)
    job = BatchJob("sample", "local", "sample", uri, uri, fmt, fmt)  # type: ignore[arg-type]
    return job_rows(job, signature, LocalFiles(), limit=limit, field=field, shown=file.name)


def job_rows(
    job: BatchJob, signature: Signature, files: FileStore, *, limit: int, allowed: Root | None = None, field: str = "job", shown: str | None = None
) -> dict[str, np.ndarray]:
    """Up to `limit` rows of a batch job's input (a file, a prefix or a manifest of many, as
    the job reads it, confined to `allowed` as its Plan confines it), from its start, rows the
    job would refuse skipped; an input with none left is refused, naming `field`."""
    from sluice.batch.columns import feed_arrays, needed_columns, plan_feeds
    from sluice.batch.plan import plan_job
    from sluice.batch.readers import read_chunk

    plan = plan_job(job, signature, files, chunk_rows=max(limit, 1), chunk_bytes=CHUNK_BYTES, allowed=allowed)
    feeds = plan_feeds(signature, plan.spec.columns)
    columns = needed_columns(feeds)
    parts: dict[str, list[np.ndarray]] = {f.input: [] for f in feeds}
    kept = 0
    for chunk in plan.chunks:
        for piece in read_chunk(files, plan.spec, chunk, feeds, columns, batch_rows=max(limit, 1)):
            n = piece.table.num_rows
            reasons = piece.reasons.copy() if piece.reasons is not None else np.full(n, None, dtype=object)
            arrays = feed_arrays(feeds, piece.table, reasons)
            good = np.flatnonzero(np.equal(reasons, None))[: limit - kept]
            for name, array in arrays.items():
                parts[name].append(array[good])
            kept += len(good)
            if kept >= limit:
                break
        if kept >= limit:
            break
    if kept == 0:
        raise InvalidInput(f"{shown or job.input_uri} holds no row this model can take", field=field)
    return {name: np.concatenate(chunks) for name, chunks in parts.items()}


def generated_rows(signature: Signature, n: int, *, seed: int = 0) -> dict[str, np.ndarray]:
    """`n` rows of standard-normal values (integers 0-9 for integer inputs) in the shapes the
    signature declares, for a check when the user gives no sample."""
    from sluice.codecs.datatypes import V2_TO_NUMPY

    rng = np.random.default_rng(seed)
    rows: dict[str, np.ndarray] = {}
    for spec in signature.inputs:
        dtype = V2_TO_NUMPY[spec.datatype]
        shape = [n, *(d if d > 0 else 1 for d in spec.shape[1:])]
        if dtype.kind == "f":
            rows[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            rows[spec.name] = rng.integers(0, 10, size=shape).astype(dtype)
        else:
            raise InvalidInput(
                f"input '{spec.name}' is {spec.datatype}; give sample rows (a file) for it", field="sample"
            )
    return rows
