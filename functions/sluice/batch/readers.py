"""Read one chunk, a piece at a time: the key and feature columns of its rows, each row's
number in the input, and the rows that did not parse at all (with why).

Memory is bounded by the chunk (text formats hold their byte range) or by one read batch
(Parquet), never by the input.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.batch.plan import source_of
from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.codecs.lines import without_bom
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


@dataclass(slots=True)
class Piece:
    table: pa.Table  # key and feature columns of the rows that parsed
    rows: np.ndarray  # their numbers in the input
    reasons: np.ndarray | None = None  # why a parsed row cannot be fed, if found while parsing
    dropped: list[tuple[int, str, str | None]] = field(default_factory=list)  # (row, reason, text)


def read_chunk(
    files: FileStore, spec: JobSpec, chunk: Chunk, feeds: list[Feed], columns: list[str], *, batch_rows: int
) -> Iterator[Piece]:
    import pyarrow as pa

    try:
        if spec.format == "parquet":
            yield from _parquet(files, spec, chunk, columns, batch_rows)
        elif spec.format == "csv":
            yield _csv(*_csv_region(files, spec, chunk), spec, chunk, feeds, columns)
        else:
            region = _region(files, spec, chunk)
            yield _jsonl(without_bom(region) if chunk.start == 0 else region, spec, chunk, feeds, columns)
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
                yield Piece(pa.Table.from_batches([part]), np.arange(first, last, dtype=np.int64))
            group_start = group_end


# Text ----------------------------------------------------------------------------------------
def _region(files: FileStore, spec: JobSpec, chunk: Chunk) -> bytes:
    """The bytes of the lines this chunk owns: those starting in [start, end)."""
    assert chunk.start is not None and chunk.end is not None
    start, end = chunk.start, chunk.end
    origin = max(0, start - 1)
    buffer = bytearray()
    begin = 0 if start == 0 else None  # offset in buffer where the owned lines begin
    finish = None
    searched = 0
    for block in files.read_blocks(*source_of(spec, chunk), origin):
        buffer += block
        if begin is None:
            newline = buffer.find(b"\n")
            if newline < 0:
                continue
            begin = newline + 1
            if origin + begin >= end:
                return b""  # no line starts in this range
        # The last owned line ends at the first newline at or after end - 1.
        look_from = max(begin, end - 1 - origin, searched)
        newline = buffer.find(b"\n", look_from)
        if newline >= 0:
            finish = newline + 1
            break
        searched = len(buffer)
    if begin is None:
        return b""
    return bytes(buffer[begin:finish])


def _csv_region(files: FileStore, spec: JobSpec, chunk: Chunk) -> tuple[bytes, int]:
    """The bytes of the CSV records this chunk owns (those starting in [start, end), line
    breaks inside quoted fields included), and how many records they hold."""
    import numpy as np

    from sluice.batch.records import NEWLINE, RecordScanner

    assert chunk.start is not None and chunk.end is not None
    start, end = chunk.start, chunk.end
    blocks = files.read_blocks(*source_of(spec, chunk), start - 1)
    buffer = bytearray(next(iter(blocks), b""))
    if not buffer:
        return b"", 0
    prev = buffer[0]
    del buffer[0]
    scanner = RecordScanner(start, inside=chunk.quoted, prev=prev)
    found: list[np.ndarray] = []
    begin = start if prev == NEWLINE and not chunk.quoted else None
    finish = None

    def look(block: bytes, final: bool) -> int | None:
        nonlocal begin
        ends = scanner.feed(block, final=final)
        if len(ends):
            found.append(ends)
            if begin is None:
                begin = int(ends[0]) + 1
            last = ends[ends >= end - 1]
            if len(last):
                return int(last[0]) + 1
        return None

    pending = bytes(buffer)
    for block in blocks:
        finish = look(pending, final=False)
        if finish is not None:
            break
        buffer += block
        pending = block
    else:
        finish = look(pending, final=True)
    if begin is None or begin >= end:
        return b"", 0  # no record starts in this range
    stop = finish if finish is not None else start + len(buffer)
    ends = np.concatenate(found) if found else np.empty(0, np.int64)
    records = int(np.count_nonzero((ends >= begin) & (ends < stop)))
    if stop > begin and (finish is None and (not ends.size or ends[-1] != stop - 1)):
        records += 1  # the last record, with no newline at the end of the input
    return bytes(buffer[begin - start : stop - start]), records


def _lines(region: bytes) -> int:
    if not region:
        return 0
    return region.count(b"\n") + (0 if region.endswith(b"\n") else 1)


def _check_rows(chunk: Chunk, found: int) -> None:
    if found != chunk.rows:
        raise ChunkUnreadable(
            f"chunk {chunk.index} holds {found} lines where {chunk.rows} were planned"
        )


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


def _csv(region: bytes, lines: int, spec: JobSpec, chunk: Chunk, feeds: list[Feed], columns: list[str]) -> Piece:
    import pyarrow as pa
    import pyarrow.csv as pv

    _check_rows(chunk, lines)
    if not lines:
        return Piece(pa.table({c: pa.array([], type=pa.string()) for c in columns}), np.empty(0, np.int64))

    def parse(text_features: bool) -> tuple[pa.Table, list[tuple[int, str]]]:
        invalid: list[tuple[int, str]] = []

        def skip(row: Any) -> str:
            invalid.append((int(row.number) - 1, row.text))
            return "skip"

        table = pv.read_csv(
            io.BytesIO(region),
            read_options=pv.ReadOptions(column_names=list(spec.columns), use_threads=False, block_size=max(1 << 20, len(region) + 1)),
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
    if table.num_rows + len(invalid) != lines:
        raise ChunkMalformed(
            f"chunk {chunk.index}: the CSV parser read {table.num_rows + len(invalid)} records where "
            f"{lines} were counted; check the quoting (a field that starts with a quote ends with "
            "one, and a quote inside it is written twice)",
            field="input_uri",
        )
    keep = np.ones(lines, dtype=bool)
    dropped = []
    for local, text in invalid:
        keep[local] = False
        reason = "blank line" if not text.strip() else f"expected {len(spec.columns)} fields"
        dropped.append((chunk.first_row + local, reason, text[:LINE_SHOWN]))
    if len(spec.columns) > 1:  # a blank line parses as one empty field: wrong for more columns
        blank = _blank_records(region, lines)
        if len(blank):
            parsed = np.flatnonzero(keep)  # the table's rows, by their local number
            in_table = np.isin(parsed, blank)
            for local in parsed[in_table]:
                dropped.append((chunk.first_row + int(local), "blank line", ""))
            keep[parsed[in_table]] = False
            table = table.filter(pa.array(~in_table))
            dropped.sort(key=lambda d: d[0])
    rows = chunk.first_row + np.flatnonzero(keep)
    return Piece(table, rows.astype(np.int64), dropped=dropped)


def _blank_records(region: bytes, lines: int) -> np.ndarray:
    """The local numbers of the empty records of a region (a blank line is its own record;
    one inside a quoted field is not a line of its own, and is not found here as blank
    unless the record is empty, which quoting rules out)."""
    if b"\n\n" not in region and b"\n\r\n" not in region and not region.startswith((b"\n", b"\r\n")):
        return np.empty(0, np.int64)
    from sluice.batch.records import RecordScanner

    ends = RecordScanner(0).feed(region, final=True)
    starts = np.concatenate(([0], ends[:-1] + 1)) if len(ends) else np.zeros(1, np.int64)
    width = ends - starts[: len(ends)]
    arr = np.frombuffer(region, dtype=np.uint8)
    blank = (width == 0) | ((width == 1) & (arr[np.maximum(ends - 1, 0)] == 0x0D))
    return np.flatnonzero(blank)[: lines]


def _jsonl(region: bytes, spec: JobSpec, chunk: Chunk, feeds: list[Feed], columns: list[str]) -> Piece:
    import pyarrow as pa
    import pyarrow.json as pj

    lines = _lines(region)
    _check_rows(chunk, lines)
    types = _arrow_types(spec, feeds, text_features=False)
    if not lines:
        return Piece(pa.table({c: pa.array([], type=types.get(c, pa.string())) for c in columns}), np.empty(0, np.int64))
    schema = pa.schema([(c, types.get(c, pa.string())) for c in columns])
    keys = set(spec.key_columns)
    try:
        # Key columns are read as they come (a number or a string) and then made text.
        table = pj.read_json(
            io.BytesIO(region),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(region) + 1)),
            parse_options=pj.ParseOptions(
                explicit_schema=pa.schema([f for f in schema if f.name not in keys]),
                unexpected_field_behavior="infer" if keys else "ignore",
            ),
        )
        if table.num_rows == lines and _keys_as_text(table, keys):  # blank lines are skipped silently
            table = _with_keys_as_text(table, keys, lines).select(columns)
            return Piece(table, np.arange(chunk.first_row, chunk.first_row + lines, dtype=np.int64))
    except pa.ArrowInvalid:
        pass
    return _jsonl_by_line(region, chunk, schema, feeds)


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


def _jsonl_by_line(region: bytes, chunk: Chunk, schema: pa.Schema, feeds: list[Feed]) -> Piece:
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
    body = region[:-1] if region.endswith(b"\n") else region
    for local, line in enumerate(body.split(b"\n")):
        number = chunk.first_row + local
        text = line.strip()
        if not text:
            dropped.append((number, "blank line", line.decode(errors="replace")))
            continue
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            dropped.append((number, "not valid JSON", line[:LINE_SHOWN].decode(errors="replace")))
            continue
        if not isinstance(obj, dict):
            dropped.append((number, "not a JSON object", line[:LINE_SHOWN].decode(errors="replace")))
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
            elif pa.types.is_string(f.type) and isinstance(value, int | float) and not isinstance(value, bool) and f.name not in numeric:
                value = orjson.dumps(value).decode()  # a key (or text input) written as a number
            elif value is not None and not _fits(value, f.type):
                reason = reason or f"'{f.name}' is not {f.type}: {str(value)[:40]!r}"
                value = None
            values[f.name].append(value)
        rows.append(number)
        reasons.append(reason)
    table = pa.table({f.name: pa.array(values[f.name], type=f.type) for f in schema}, schema=schema)
    return Piece(table, np.asarray(rows, dtype=np.int64), np.asarray(reasons, dtype=object), dropped)


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

