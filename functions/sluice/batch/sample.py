"""Rows of a local Parquet, CSV or JSON Lines file as a version's input tensors, through the
batch readers: the same column matching and checks a batch job applies, for the few thousand
rows a converter's check, a calibration or an evaluation needs."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.errors import InvalidInput

if TYPE_CHECKING:
    from sluice.batch.filestore import FileStore
    from sluice.domain.jobs import BatchJob
    from sluice.domain.locations import Root
    from sluice.domain.signature import Signature

CHUNK_BYTES = 64 * 1024 * 1024


SHOWN_ROWS = 5  # row numbers a skip reason names
NO_ROW = "no row this model can take"  # what a read with no row left holds none of, by default


@dataclasses.dataclass(slots=True)
class Skips:
    """The rows of one reason a read left out: how many, and the first `SHOWN_ROWS` numbers."""

    count: int = 0
    first: list[int] = dataclasses.field(default_factory=list)

    def add(self, row: int) -> None:
        self.count += 1
        if len(self.first) < SHOWN_ROWS:
            self.first.append(row)


@dataclasses.dataclass(slots=True)
class RowsRead:
    """What a read made of every row of its input: kept (`arrays`, numbered in `rows`),
    skipped for a reason (`skipped`), or not read, past the limit (`unread`). Rows are
    numbered from 0, as a batch job's error files number them."""

    arrays: dict[str, np.ndarray]
    rows: np.ndarray
    total: int
    skipped: dict[str, Skips] = dataclasses.field(default_factory=dict)
    unread: int = 0

    def skip(self, row: int, reason: str) -> None:
        self.skipped.setdefault(reason, Skips()).add(row)

    @property
    def skipped_rows(self) -> int:
        return sum(s.count for s in self.skipped.values())

    def none_left(self, shown: str, *, what: str = NO_ROW, field: str) -> InvalidInput:
        """The error of a read that left no row to use: `shown` holds `what`, with the rows
        skipped by reason and those not read past the limit."""
        why = "; ".join(f"{reason}: {s.count}" for reason, s in self.skipped.items())
        unread = f"; not read past the limit: {self.unread}" if self.unread else ""
        return InvalidInput(f"{shown} holds {what}" + (f" (rows skipped: {why}{unread})" if why else ""), field=field)

    def summary(self) -> dict[str, Any]:
        """JSON-able: `total`, `skipped` (count and first rows by reason), `unread`."""
        return {
            "total": self.total, "skipped": self.skipped_rows,
            "skipped_by_reason": {reason: {"rows": s.count, "first": s.first} for reason, s in self.skipped.items()},
            "unread": self.unread,
        }  # fmt: skip


def read_rows(path: str | Path, signature: Signature, *, limit: int, field: str = "data") -> dict[str, np.ndarray]:
    """Up to `limit` rows that can be fed to `signature`, from the start of the file. Rows a
    batch job would refuse (a missing value, a word where a number belongs) are skipped; a
    file with none left is refused."""
    return read_file(path, signature, limit=limit, field=field).arrays


def read_file(path: str | Path, signature: Signature, *, limit: int, field: str = "data", nothing: str = NO_ROW) -> RowsRead:
    """`read_rows`, saying what became of every row of the file; `nothing`: what a file with no
    row left holds none of, as its error says it."""
    from sluice.batch.local_files import LocalFiles
    from sluice.batch.uris import format_of
    from sluice.domain.jobs import BatchJob

    file = Path(path).resolve()
    if not file.is_file():
        raise InvalidInput(f"no such file: {path}", field=field)
    uri = file.as_uri()
    fmt = format_of(uri)
    job = BatchJob("sample", "local", "sample", uri, uri, fmt, fmt)  # type: ignore[arg-type]
    return read_job(job, signature, LocalFiles(), limit=limit, field=field, shown=file.name, nothing=nothing)


def job_rows(
    job: BatchJob, signature: Signature, files: FileStore, *, limit: int, allowed: Root | None = None, field: str = "job", shown: str | None = None
) -> dict[str, np.ndarray]:
    """Up to `limit` rows of a batch job's input (a file, a prefix or a manifest of many, as
    the job reads it, confined to `allowed` as its Plan confines it), from its start, rows the
    job would refuse skipped; an input with none left is refused, naming `field`."""
    return read_job(job, signature, files, limit=limit, allowed=allowed, field=field, shown=shown).arrays


def read_job(
    job: BatchJob, signature: Signature, files: FileStore, *, limit: int, allowed: Root | None = None, field: str = "job", shown: str | None = None,
    nothing: str = NO_ROW,
) -> RowsRead:
    """`job_rows`, saying what became of every row of the input."""
    from sluice.batch.columns import feed_arrays, needed_columns, plan_feeds
    from sluice.batch.plan import plan_job
    from sluice.batch.readers import read_chunk

    plan = plan_job(job, signature, files, chunk_rows=max(limit, 1), chunk_bytes=CHUNK_BYTES, allowed=allowed)
    feeds = plan_feeds(signature, plan.spec.columns)
    columns = needed_columns(feeds)
    parts: dict[str, list[np.ndarray]] = {f.input: [] for f in feeds}
    numbers: list[np.ndarray] = []
    out = RowsRead({}, np.empty(0, np.int64), plan.rows_total)
    kept = 0
    for chunk in plan.chunks:
        for piece in read_chunk(files, plan.spec, chunk, feeds, columns, batch_rows=max(limit, 1)):
            n = piece.table.num_rows
            reasons = piece.reasons.copy() if piece.reasons is not None else np.full(n, None, dtype=object)
            arrays = feed_arrays(feeds, piece.table, reasons)
            good = np.flatnonzero(np.equal(reasons, None))[: limit - kept]
            # The rows after the last one kept, once the limit is reached, are not read.
            end = int(piece.rows[good[-1]]) if kept + len(good) >= limit and len(good) else None
            for i in np.flatnonzero(np.not_equal(reasons, None)).tolist():
                if end is None or piece.rows[i] < end:
                    out.skip(int(piece.rows[i]), str(reasons[i]))
            for row, reason, _ in piece.dropped:
                if end is None or row < end:
                    out.skip(row, reason)
            for name, array in arrays.items():
                parts[name].append(array[good])
            numbers.append(piece.rows[good])
            kept += len(good)
            if kept >= limit:
                break
        if kept >= limit:
            break
    if kept == 0:
        raise out.none_left(shown or job.input_uri, what=nothing, field=field)
    out.arrays = {name: np.concatenate(chunks) for name, chunks in parts.items()}
    out.rows = np.concatenate(numbers)
    out.unread = out.total - kept - out.skipped_rows
    return out


def as_stored(path: str | Path, name: str, read: RowsRead) -> list[Any]:
    """The values of text column `name` of the rows `read` kept from the file at `path`, each
    as the file types it, a number as a Python int or float, text as a str (what a JSON value
    of that type would be): Parquet by the column's type; CSV, which has none, as pyarrow reads
    a column (whole numbers if every value is one, else numbers if every value is a finite
    one, else text); JSON Lines by each row's JSON value."""
    import pyarrow as pa

    from sluice.batch.uris import format_of

    texts = [str(t) for t in read.arrays[name].tolist()]
    fmt = format_of(Path(path).name)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        kind = pq.read_schema(path).field(name).type
        kind = kind.value_type if pa.types.is_dictionary(kind) else kind
        if pa.types.is_integer(kind):
            return [int(t) for t in texts]
        if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
            return [_number(t) for t in texts]
        return texts
    if fmt == "csv":
        import pyarrow.compute as pc

        for kind in (pa.int64(), pa.float64()):
            try:
                numbers = pc.cast(pa.array(texts, pa.string()), kind).to_pylist()
            except pa.ArrowInvalid:
                continue
            # A float column's NaN or infinity is a missing value (None), as Parquet's is (`_number`).
            return [_exact(x, t) if kind == pa.int64() or math.isfinite(x) else None for x, t in zip(numbers, texts, strict=True)]
        return texts
    return _json_values(Path(path), name, read.rows, texts)


def _exact(number: Any, text: str) -> Any:
    """`number`, or the file's `text` where a float stands for a whole number past 2**53 (a
    30-digit code: a float would post another number; its text is what the API names it)."""
    if type(number) is float and number.is_integer() and abs(number) >= 2**53:
        return text
    return number


def _number(text: str) -> float | None:
    """A float column's value as a number; NaN and infinities, which JSON has not and no label
    is (a float column's missing value: its text was posted as the class "nan"), as None."""
    number = float(text)
    return number if math.isfinite(number) else None


def _json_values(path: Path, name: str, rows: np.ndarray, texts: list[str]) -> list[Any]:
    """Each kept row's JSON value under `name` (a number, or its text), by its line in the file
    (rows are numbered by line from 0, as the reader counts records)."""
    from sluice.batch.records import BOM
    from sluice.codecs.json_text import loads

    wanted = dict(zip(rows.tolist(), range(len(texts)), strict=True))
    out: list[Any] = list(texts)
    last = int(rows[-1]) if len(rows) else -1
    with path.open("rb") as file:
        for number, line in enumerate(file):
            if number > last:
                break
            at = wanted.get(number)
            if at is None:
                continue
            value = loads(line.removeprefix(BOM) if number == 0 else line).get(name)  # a line the reader kept: an object
            if (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and math.isfinite(value)):
                out[at] = _exact(value, texts[at])
    return out


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
