"""Read one chunk, a piece at a time: the key and feature columns of its rows, each row's
number in the input, and the records that did not parse at all (with why). Every piece says
which records it read (`records.Records`: their object, numbers and bytes), counted by the
record grammar (`records.py`), not by the parser; a piece whose rows and failures do not
account for exactly those records, each once, cannot be made (`RecordsUnaccounted`). Parquet
and CSV are read here, JSON Lines in `json_lines.py`.

Memory is bounded by the chunk (text formats hold their byte range) or by one read batch
(Parquet), never by the input.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.batch.json_lines import read_json_lines
from sluice.batch.pieces import (
    ChunkMalformed,
    ChunkUnreadable,
    Piece,
    arrow_types,
    check_rows,
    is_utf8,
    shown,
)
from sluice.batch.plan import source_of
from sluice.batch.records import BOM, Owned, Records, grammar_of, read_range
from sluice.codecs.arrow_numbers import from_numbers

if TYPE_CHECKING:
    import pyarrow as pa

    from sluice.batch.columns import Feed
    from sluice.batch.filestore import FileStore
    from sluice.batch.plan import Chunk, JobSpec

def read_chunk(
    files: FileStore, spec: JobSpec, chunk: Chunk, feeds: list[Feed], columns: list[str], *, batch_rows: int
) -> Iterator[Piece]:
    import pyarrow as pa

    try:
        if spec.format == "parquet":
            text = {c for f in feeds if f.datatype == "BYTES" for c in f.columns} - set(spec.key_columns)
            yield from _parquet(files, spec, chunk, columns, batch_rows, text)
        elif spec.format == "csv":
            yield _csv(owned_by(files, spec, chunk), spec, chunk, feeds, columns)
        else:
            yield read_json_lines(owned_by(files, spec, chunk), spec, chunk, feeds, columns)
    except (pa.ArrowException, OSError) as exc:
        raise ChunkUnreadable(f"chunk {chunk.index} could not be read ({type(exc).__name__})") from exc


# Parquet -------------------------------------------------------------------------------------
def _parquet(files: FileStore, spec: JobSpec, chunk: Chunk, columns: list[str], batch_rows: int, text: set[str]) -> Iterator[Piece]:
    """`text`: the columns that feed text inputs (no key among them), read as Parquet stores
    them, a dictionary and each row's index in it (`columns._text_values`), so that a row's
    text is not made a string of its own."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    low, high = chunk.first_row, chunk.first_row + chunk.rows
    with files.open_random(*source_of(spec, chunk)) as raw:
        parquet = pq.ParquetFile(raw)
        metadata = parquet.metadata
        schema = parquet.schema_arrow
        text = {c for c in text if schema.get_field_index(c) >= 0 and (pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(schema.field(c).type))}
        if text:
            parquet = pq.ParquetFile(raw, metadata=metadata, read_dictionary=sorted(text))
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


def _csv(owned: Owned, spec: JobSpec, chunk: Chunk, feeds: list[Feed], columns: list[str]) -> Piece:
    import pyarrow as pa
    import pyarrow.csv as pv

    records = owned.records
    n = len(records)
    check_rows(chunk, n)
    if not n:
        return Piece(pa.table({c: pa.array([], type=pa.string()) for c in columns}), np.empty(0, np.int64), records=records)
    region, unfit = owned.data, {}
    if not is_utf8(region):  # the parser needs UTF-8: the records that are not fail, or are mended
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
                include_columns=columns, column_types=arrow_types(spec, feeds, text_features=text_features),
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
        dropped.append((chunk.first_row + local, reason, shown(content)))
    # Records the parser made rows of that fail all the same: blank ones (a blank record reads
    # as one empty field) and those holding bytes that are not UTF-8 in a column read.
    parsed = np.flatnonzero(keep)  # the table's rows, by their local number
    failing = owned.lengths[parsed] == 0
    if unfit:
        failing |= np.isin(parsed, np.fromiter(unfit, np.int64, len(unfit)))
    if failing.any():
        for local in parsed[failing].tolist():
            dropped.append((chunk.first_row + local, unfit.get(local, "blank line"), shown(owned.content(local))))
        keep[parsed[failing]] = False
        table = table.filter(from_numbers(~failing))
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
