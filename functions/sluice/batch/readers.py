"""Read one chunk, a piece at a time: the key and feature columns of its rows, each row's
number in the input, and the records that did not parse at all (with why). Every piece says
which records it read (`records.Records`: their object, numbers and bytes), counted by the
record grammar (`records.py`), not by the parser; a piece whose rows and failures do not
account for exactly those records, each once, cannot be made (`RecordsUnaccounted`).

Memory is bounded by the chunk (text formats hold their byte range) or by one read batch
(Parquet), never by the input.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.batch.plan import source_of
from sluice.batch.records import BOM, CARRIAGE, Owned, Records, grammar_of, read_range
from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.domain.errors import BackendError, InvalidInput

if TYPE_CHECKING:
    import pyarrow as pa

    from sluice.batch.columns import Feed
    from sluice.batch.filestore import FileStore
    from sluice.batch.plan import Chunk, JobSpec

LINE_SHOWN = 500


class ChunkUnreadable(BackendError):
    """A chunk's bytes could not be read or parsed at all: the chunk fails (and is retried)."""

    code = "chunk_unreadable"


class ChunkMalformed(InvalidInput):
    """A chunk's bytes parse, but not into the records Plan counted (the CSV's quoting reads
    otherwise than Plan read it): the same bytes would fail again, so it is not retried."""

    code = "chunk_malformed"


class RecordsUnaccounted(ChunkMalformed):
    """A reader's rows and failures are not exactly the records it read, each once: the chunk
    fails rather than write a wrong count (the same bytes would fail again)."""

    code = "records_unaccounted"


@dataclass(slots=True)
class Piece:
    """Records read, and what became of each: a row of `table` (numbered in `rows`), or a
    failure in `dropped` (row, reason, text). Made only when the two account for every record
    of `records` exactly once."""

    table: pa.Table  # key and feature columns of the rows that parsed
    rows: np.ndarray  # their numbers in the input
    reasons: np.ndarray | None = None  # why a parsed row cannot be fed, if found while parsing
    dropped: list[tuple[int, str, str | None]] = field(default_factory=list)  # (row, reason, text)
    records: Records = field(kw_only=True)  # what was read, counted by the record grammar

    def __post_init__(self) -> None:
        account(self)


def account(piece: Piece) -> None:
    """Check that a piece's rows and failures are its records, each exactly once."""
    records, n = piece.records, len(piece.records)
    rows = piece.rows
    if piece.table.num_rows != len(rows) or (piece.reasons is not None and len(piece.reasons) != len(rows)):
        raise RecordsUnaccounted(f"{piece.table.num_rows} rows were read with {len(rows)} row numbers")
    if len(rows) + len(piece.dropped) != n:
        raise RecordsUnaccounted(
            f"{n} records were read, but {len(rows)} rows and {len(piece.dropped)} failures made of them"
        )
    if not n:
        return
    numbers = np.concatenate((rows, np.fromiter((d[0] for d in piece.dropped), np.int64, len(piece.dropped))))
    local = numbers - records.first
    if local.min() < 0 or local.max() >= n or np.bincount(local, minlength=n).max() > 1:
        raise RecordsUnaccounted(
            f"the rows and failures made of records {records.first}-{records.first + n - 1} "
            "are not each of them once"
        )


def read_chunk(
    files: FileStore, spec: JobSpec, chunk: Chunk, feeds: list[Feed], columns: list[str], *, batch_rows: int
) -> Iterator[Piece]:
    import pyarrow as pa

    try:
        if spec.format == "parquet":
            yield from _parquet(files, spec, chunk, columns, batch_rows)
        elif spec.format == "csv":
            yield _csv(owned_by(files, spec, chunk), spec, chunk, feeds, columns)
        else:
            yield _jsonl(owned_by(files, spec, chunk), spec, chunk, feeds, columns)
    except (pa.ArrowException, OSError) as exc:
        raise ChunkUnreadable(f"chunk {chunk.index} could not be read ({type(exc).__name__})") from exc


# Parquet -------------------------------------------------------------------------------------
def _parquet(files: FileStore, spec: JobSpec, chunk: Chunk, columns: list[str], batch_rows: int) -> Iterator[Piece]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    low, high = chunk.first_row, chunk.first_row + chunk.rows
    with files.open_random(*source_of(spec, chunk)) as raw:
        parquet = pq.ParquetFile(raw)
        metadata = parquet.metadata
        group_start = 0
        for group in range(metadata.num_row_groups):
            group_rows = metadata.row_group(group).num_rows
            group_end = group_start + group_rows
            if group_end <= low or group_start >= high:
                group_start = group_end
                continue
            at = group_start
            for batch in parquet.iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns):
                batch_start, at = at, at + batch.num_rows
                if at <= low:
                    continue
                if batch_start >= high:
                    break
                first, last = max(low, batch_start), min(high, at)
                part = batch.slice(first - batch_start, last - first)
                records = Records(source_of(spec, chunk)[0], first, last - first)
                yield Piece(pa.Table.from_batches([part]), np.arange(first, last, dtype=np.int64), records=records)
            group_start = group_end


# Text ----------------------------------------------------------------------------------------
def owned_by(files: FileStore, spec: JobSpec, chunk: Chunk) -> Owned:
    """The records a chunk owns (those starting in its byte range), read by the grammar Plan
    counted them with."""
    assert chunk.start is not None and chunk.end is not None
    uri, version = source_of(spec, chunk)
    grammar = grammar_of(spec.format)
    return read_range(files, uri, version, chunk.start, chunk.end, grammar, inside=chunk.quoted, first=chunk.first_row)


def _check_rows(chunk: Chunk, found: int) -> None:
    if found != chunk.rows:
        raise ChunkUnreadable(
            f"chunk {chunk.index} holds {found} records where {chunk.rows} were planned"
        )


def _shown(text: bytes) -> str:
    return text[:LINE_SHOWN].decode(errors="replace")


def _is_utf8(data: bytes) -> bool:
    """Whether bytes are UTF-8 text, checked in place (no copy)."""
    import pyarrow as pa

    if data.isascii():
        return True
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int64))
    try:
        pa.LargeStringArray.from_buffers(1, offsets, pa.py_buffer(data)).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _arrow_types(spec: JobSpec, feeds: list[Feed], *, text_features: bool) -> dict[str, Any]:
    import pyarrow as pa

    types: dict[str, Any] = {}
    for feed in feeds:
        for name in feed.columns:
            numeric = V2_TO_NUMPY[feed.datatype].kind in "fiub"
            types[name] = pa.float64() if numeric and not text_features and feed.width is None else pa.string()
    for key in spec.key_columns:
        types[key] = pa.string()  # keys of text inputs are text: "c-1041" and 1041 alike
    return types


def _csv(owned: Owned, spec: JobSpec, chunk: Chunk, feeds: list[Feed], columns: list[str]) -> Piece:
    import pyarrow as pa
    import pyarrow.csv as pv

    records = owned.records
    n = len(records)
    _check_rows(chunk, n)
    if not n:
        return Piece(pa.table({c: pa.array([], type=pa.string()) for c in columns}), np.empty(0, np.int64), records=records)
    region, unfit = owned.data, {}
    if not _is_utf8(region):  # the parser needs UTF-8: the records that are not fail, or are mended
        region, unfit = _mend_utf8(owned, list(spec.columns), set(columns))

    # pyarrow skips a byte order mark at the start of what it parses: a record starting with
    # one (U+FEFF in a field) is kept whole behind a blank line that is skipped.
    lead = b"\n" if region.startswith(BOM) else b""

    def parse(text_features: bool) -> tuple[pa.Table, list[tuple[int, str]]]:
        invalid: list[tuple[int, str]] = []

        def skip(row: Any) -> str:
            invalid.append((int(row.number) - 1 - len(lead), row.text))
            return "skip"

        table = pv.read_csv(
            io.BytesIO(lead + region),
            read_options=pv.ReadOptions(
                column_names=list(spec.columns), use_threads=False, skip_rows=len(lead),
                block_size=max(1 << 20, len(region) + 2),
            ),
            parse_options=pv.ParseOptions(invalid_row_handler=skip, ignore_empty_lines=False, newlines_in_values=True),
            convert_options=pv.ConvertOptions(
                include_columns=columns, column_types=_arrow_types(spec, feeds, text_features=text_features),
                strings_can_be_null=True, null_values=[""],  # "nan" is NaN, not a missing value
            ),
        )  # fmt: skip
        return table, invalid

    try:
        table, invalid = parse(text_features=False)
    except pa.ArrowInvalid:
        table, invalid = parse(text_features=True)  # a value that is not a number: find which
    if table.num_rows + len(invalid) != n or any(
        not 0 <= local < n or text.encode() != _mended(owned, region, local) for local, text in invalid
    ):
        raise ChunkMalformed(
            f"chunk {chunk.index}: the CSV parser read {table.num_rows + len(invalid)} records where "
            f"{n} were counted; check the quoting (a field that starts with a quote ends with "
            "one, and a quote inside it is written twice)",
            field="input_uri",
        )
    keep = np.ones(n, dtype=bool)
    dropped = []
    for local, _ in invalid:
        keep[local] = False
        content = owned.content(local)
        reason = "blank line" if not content.strip() else f"expected {len(spec.columns)} fields"
        dropped.append((chunk.first_row + local, reason, _shown(content)))
    # Records the parser made rows of that fail all the same: blank ones (a blank record reads
    # as one empty field) and those holding bytes that are not UTF-8 in a column read.
    parsed = np.flatnonzero(keep)  # the table's rows, by their local number
    failing = owned.lengths[parsed] == 0
    if unfit:
        failing |= np.isin(parsed, np.fromiter(unfit, np.int64, len(unfit)))
    if failing.any():
        for local in parsed[failing].tolist():
            dropped.append((chunk.first_row + local, unfit.get(local, "blank line"), _shown(owned.content(local))))
        keep[parsed[failing]] = False
        table = table.filter(pa.array(~failing))
        dropped.sort(key=lambda d: d[0])
    rows = chunk.first_row + np.flatnonzero(keep)
    return Piece(table, rows.astype(np.int64), dropped=dropped, records=records)


def _mended(owned: Owned, region: bytes, local: int) -> bytes:
    """A record as the parser was given it (bytes that are not UTF-8 mended), its line end cut."""
    start = owned.span(local).start
    return region[start : start + int(owned.lengths[local])]


SURROGATES = re.compile("[\udc80-\udcff]")
WINDOW = 1 << 16


def _mend_utf8(owned: Owned, names: list[str], read: set[str]) -> tuple[bytes, dict[int, str]]:
    """The chunk's bytes with every byte that is not UTF-8 replaced by `?` (one byte for one:
    the records and their fields stay where they are), and the records that fail for it: those
    with such bytes in a column that is read. A record of the wrong width fails for that."""
    assert owned.records.stops is not None
    data = bytearray(owned.data)
    view = memoryview(owned.data)
    stops = owned.records.stops - owned.origin
    unfit: dict[int, str] = {}
    at = 0
    while at < len(data):
        try:
            _, used = codecs.utf_8_decode(view[at : at + WINDOW], "strict", at + WINDOW >= len(data))
            at += used
            continue
        except UnicodeDecodeError as exc:
            bad = at + exc.start
        local = int(np.searchsorted(stops, bad, side="right"))
        span = owned.span(local)
        text = owned.data[span].decode("utf-8", "surrogateescape")
        fields = next(csv.reader(io.StringIO(text, newline="")), [])
        if len(fields) == len(names):
            wrong = [name for name, value in zip(names, fields, strict=True) if name in read and SURROGATES.search(value)]
            if wrong:
                unfit[local] = f"'{wrong[0]}' is not UTF-8 text"
        data[span] = SURROGATES.sub("?", text).encode()
        at = span.stop
    return bytes(data), unfit


def _jsonl(owned: Owned, spec: JobSpec, chunk: Chunk, feeds: list[Feed], columns: list[str]) -> Piece:
    import pyarrow as pa
    import pyarrow.json as pj

    records = owned.records
    n = len(records)
    _check_rows(chunk, n)
    types = _arrow_types(spec, feeds, text_features=False)
    if not n:
        return Piece(pa.table({c: pa.array([], type=types.get(c, pa.string())) for c in columns}), np.empty(0, np.int64), records=records)
    schema = pa.schema([(c, types.get(c, pa.string())) for c in columns])
    keys = set(spec.key_columns)
    if _one_object_per_line(owned):
        region = owned.data
        try:
            # Key columns are read as they come (a number or a string) and then made text.
            table = pj.read_json(
                io.BytesIO(region),
                read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(region) + 1)),  # one block
                parse_options=pj.ParseOptions(
                    explicit_schema=pa.schema([f for f in schema if f.name not in keys]),
                    unexpected_field_behavior="infer" if keys else "ignore",
                ),
            )
        except pa.ArrowInvalid:
            table = None
        if table is not None and table.num_rows == n and _keys_as_text(table, keys):
            table = _with_keys_as_text(table, keys, n).select(columns)
            return Piece(table, records.numbers, records=records)
    return _jsonl_by_line(owned, chunk, schema, feeds)


OPEN, CLOSE = ord("{"), ord("}")
DEPTH = 1024  # the deepest nesting the line-by-line parser reads (orjson's limit)


def _one_object_per_line(owned: Owned) -> bool:
    """Whether pyarrow's JSON reader is proven to read this chunk as the slow path does, one
    row per line with the same values. It is when:

    1. the bytes are UTF-8 (pyarrow does not check strings) and hold no `NaN` or `Inf` where
       a value may stand (pyarrow reads NaN, Inf and Infinity, which JSON does not have), and
       no line nests deeper than the line-by-line parser reads;
    2. every line starts with `{` and ends with `}` (before a `\r`). A JSON string cannot hold
       a line break, and `}` then `{` cannot follow each other inside a JSON value, so every
       line break lies between two top-level objects: each line holds at least one;
    3. pyarrow then reads as many rows as there are lines (checked after reading): at least
       one object per line and as many objects as lines make exactly one per line.

    (2) also keeps pyarrow's reader away from a chunk whose first value is `null`, on which
    pyarrow 26 crashes the process (SIGSEGV)."""
    data = owned.data
    if not _is_utf8(data) or _nan_or_infinity(data):
        return False
    starts = owned.records.starts
    assert starts is not None
    arr = np.frombuffer(data, dtype=np.uint8)
    first = starts - owned.origin
    lengths = owned.lengths
    if (lengths == 0).any() or (arr[first] != OPEN).any():
        return False
    last = first + lengths - 1
    last -= ((arr[last] == CARRIAGE) & (last > first)).astype(np.int64)
    if (arr[last] != CLOSE).any():
        return False
    if lengths.max() > 2 * DEPTH:  # nesting d levels takes 2d bytes: count the openings of each line
        openings = np.isin(arr, np.frombuffer(b"{[", dtype=np.uint8)).astype(np.int64)
        if np.add.reduceat(openings, first).max() > DEPTH:
            return False
    return True


def _nan_or_infinity(data: bytes) -> bool:
    """Whether `NaN` or `Inf` may stand where a value does (after `:`, `[`, `,` or `-`), as
    pyarrow reads them; inside a string ("Information") they are text."""
    for word in (b"NaN", b"Inf"):
        if word[:1] not in data:  # one byte is found far faster than three
            continue
        at = data.find(word)
        while at >= 0:
            before = data[max(0, at - 64) : at].rstrip(b" \t\r")
            if not before or before[-1:] in (b":", b"[", b",", b"-"):
                return True
            at = data.find(word, at + 1)
    return False


def _keys_as_text(table: pa.Table, keys: set[str]) -> bool:
    """Whether every key column read is a string or a whole number (else: line by line)."""
    import pyarrow as pa

    return all(
        k not in table.column_names
        or pa.types.is_string(t := table.schema.field(k).type) or pa.types.is_integer(t) or pa.types.is_null(t)
        for k in keys
    )


def _with_keys_as_text(table: pa.Table, keys: set[str], rows: int) -> pa.Table:
    import pyarrow as pa

    for key in keys:
        if key not in table.column_names:
            table = table.append_column(key, pa.nulls(rows, type=pa.string()))
        elif not pa.types.is_string(table.schema.field(key).type):
            at = table.column_names.index(key)
            table = table.set_column(at, key, table.column(key).cast(pa.string()))
    return table


JSON_SPACE = b" \t\r"  # what JSON calls whitespace, less the line end (never inside a line)


def _jsonl_by_line(owned: Owned, chunk: Chunk, schema: pa.Schema, feeds: list[Feed]) -> Piece:
    """The slow path, for chunks with a line that is blank, not JSON, or holds a value of the
    wrong type: each line on its own, so one bad line costs one row."""
    import orjson
    import pyarrow as pa

    from sluice.batch.columns import parse_number

    numeric = {name for feed in feeds if feed.width is None and V2_TO_NUMPY[feed.datatype].kind in "fiub" for name in feed.columns}
    values: dict[str, list[Any]] = {f.name: [] for f in schema}
    rows: list[int] = []
    reasons: list[str | None] = []
    dropped: list[tuple[int, str, str | None]] = []
    data, origin = owned.data, owned.origin
    assert owned.records.starts is not None
    for local, (start, length) in enumerate(zip((owned.records.starts - origin).tolist(), owned.lengths.tolist(), strict=True)):
        number = chunk.first_row + local
        line = data[start : start + length]
        if not line.strip(JSON_SPACE):
            dropped.append((number, "blank line", _shown(line)))
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            reason = "not valid JSON" if _is_utf8(line) else "not valid JSON (not UTF-8 text)"
            dropped.append((number, reason, _shown(line)))
            continue
        if not isinstance(obj, dict):
            dropped.append((number, "not a JSON object", _shown(line)))
            continue
        reason = None
        for f in schema:
            value = obj.get(f.name)
            if value is not None and f.name in numeric and isinstance(value, str):
                parsed = parse_number(value)  # numbers written as text count, as in CSV
                if parsed is None:
                    reason = reason or f"'{f.name}' is not a number: {value[:40]!r}"
                value = parsed
            elif value is not None and f.name in numeric and (isinstance(value, bool) or not isinstance(value, int | float)):
                reason = reason or f"'{f.name}' is not a number: {str(value)[:40]!r}"
                value = None
            elif f.name in numeric and isinstance(value, int) and pa.types.is_floating(f.type):
                value = float(value)  # pyarrow refuses a whole number beyond 2**53 as a float
            elif pa.types.is_string(f.type) and isinstance(value, int | float) and not isinstance(value, bool) and f.name not in numeric:
                value = orjson.dumps(value).decode()  # a key (or text input) written as a number
            elif value is not None and not _fits(value, f.type):
                reason = reason or f"'{f.name}' is not {f.type}: {str(value)[:40]!r}"
                value = None
            values[f.name].append(value)
        rows.append(number)
        reasons.append(reason)
    table = pa.table({f.name: pa.array(values[f.name], type=f.type) for f in schema}, schema=schema)
    return Piece(table, np.asarray(rows, dtype=np.int64), np.asarray(reasons, dtype=object), dropped, records=owned.records)


def _fits(value: Any, arrow_type: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_string(arrow_type):
        return isinstance(value, str)
    if pa.types.is_boolean(arrow_type):
        return isinstance(value, bool)
    if pa.types.is_integer(arrow_type):
        return isinstance(value, int) and not isinstance(value, bool)
    if pa.types.is_floating(arrow_type):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True

