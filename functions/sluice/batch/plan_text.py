"""What a CSV or JSON Lines input's first bytes say, for Plan: its columns (a CSV's header, the
fields its first object lines name) and where its data starts; refused where they say it is no
text (compressed bytes, a Parquet file) whatever its name, or names a column twice."""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

from sluice.batch.records import data_start, first_record
from sluice.domain.errors import BadRequest, InvalidInput

if TYPE_CHECKING:
    from sluice.batch.filestore import FileStore, Stat
    from sluice.batch.records import Grammar

MAX_HEADER_BYTES = 1024 * 1024
MAX_FIRST_LINE_BYTES = 64 * 1024 * 1024  # a JSON Lines line planning reads on to the end of for its fields, at most


def once_each(names: list[str], what: str) -> None:
    """Refuse an input that names a column twice: which one a feature reads could not be told."""
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InvalidInput(f"{what} names a column twice: {twice}", field="input_uri")


# The first bytes of compressed files: such a file cannot be split into chunks, whatever its name.
COMPRESSED = (
    (re.compile(rb"\x1f\x8b"), "gzip"),
    (re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)"), "bzip2"),
    (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd"),
    (re.compile(rb"\xfd7zXZ\x00"), "xz"),
    (re.compile(rb"PK\x03\x04"), "zip"),
)


def text_columns(uri: str, fmt: str, stat: Stat, files: FileStore, grammar: Grammar) -> tuple[list[str], int]:
    """A CSV or JSON Lines input's columns (its header's, or the fields its first object lines
    name) and where its data starts (after a byte order mark, and a CSV's header); refused where
    its first bytes say it is no text (compressed, Parquet) or it holds nothing."""
    head = text_head(files, uri, stat)
    refuse_compressed(uri, head, tail(files, uri, stat) if head.startswith(PARQUET_MAGIC) else b"")
    data = data_start(head)  # after a byte order mark
    if data and data >= stat.size:
        raise InvalidInput(f"{uri} holds nothing but a byte order mark: there is nothing to score", field="input_uri")
    if fmt == "csv":
        header = first_record(files, uri, stat.version, grammar, MAX_HEADER_BYTES)
        if header is None:
            raise InvalidInput("the CSV header is longer than 1 MiB", field="input_uri")
        return csv_header(header[0]), header[1]
    opening, whole = _opening(files, uri, stat)[data:], stat.size <= MAX_HEADER_BYTES
    try:
        return _jsonl_fields(opening, whole=whole), data
    except InvalidInput:  # no whole object line in the opening: the line it ends inside, read on to its end
        if whole:
            raise
        cut = opening.rfind(b"\n") + 1
        line, whole = _first_line(files, uri, stat, data + cut)
        return _jsonl_fields(opening[:cut] + line, whole=whole), data


def text_head(files: FileStore, uri: str, stat: Stat) -> bytes:
    out = bytearray()
    for block in files.read_blocks(uri, stat.version, 0, min(stat.size, MAX_HEADER_BYTES)):
        out += block
        if b"\n" in block:
            break
    return bytes(out)


PARQUET_MAGIC = b"PAR1"  # a Parquet file's first and last four bytes


def tail(files: FileStore, uri: str, stat: Stat) -> bytes:
    """The input's last four bytes (a Parquet file's footer magic)."""
    return b"".join(files.read_blocks(uri, stat.version, max(0, stat.size - 4), stat.size))


def refuse_compressed(uri: str, head: bytes, tail: bytes = b"") -> None:
    """`tail`: the last four bytes, read where the first are Parquet's (a CSV header may begin
    `PAR1`, as a gene's name does: only a file that ends so too is Parquet)."""
    if head.startswith(PARQUET_MAGIC) and tail == PARQUET_MAGIC:  # a Parquet file read as text: its columns would be bytes
        raise BadRequest(
            f"{uri.rsplit('/', 1)[-1]} is a Parquet file (it starts with PAR1), whatever its name or the format given "
            "says: name it .parquet or give the format parquet",
            field="input_uri",
        )
    for magic, name in COMPRESSED:
        if magic.match(head):
            raise BadRequest(
                f"{uri.rsplit('/', 1)[-1]} is compressed ({name}), whatever its name says: compressed inputs "
                "cannot be split into chunks; upload Parquet (compressed inside) or uncompressed CSV or JSON Lines",
                field="input_uri",
            )


def csv_header(record: bytes) -> list[str]:
    """The column names of the header record (its line end already cut off)."""
    import pyarrow as pa
    import pyarrow.csv as pv

    try:
        record.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("the first line of the CSV is not UTF-8 text", field="input_uri") from None
    try:
        names = pv.read_csv(
            io.BytesIO(record + b"\n"),
            read_options=pv.ReadOptions(use_threads=False),
            parse_options=pv.ParseOptions(newlines_in_values=True),
        ).column_names
    except pa.ArrowInvalid:
        raise InvalidInput("the first line of the CSV is not a header row", field="input_uri") from None
    names = [str(n).strip() for n in names]  # "id, bmi" names 'bmi', not ' bmi'
    once_each(names, "the CSV header")
    return names


def _opening(files: FileStore, uri: str, stat: Stat) -> bytes:
    """The input's first MiB (all of it, when it is smaller)."""
    return b"".join(files.read_blocks(uri, stat.version, 0, min(stat.size, MAX_HEADER_BYTES)))


def _first_line(files: FileStore, uri: str, stat: Stat, start: int) -> tuple[bytes, bool]:
    """The line from `start`, with its newline, read on past the opening to its end (at most
    `MAX_FIRST_LINE_BYTES`), and whether the input ends with it."""
    out = bytearray()
    end = min(stat.size, start + MAX_FIRST_LINE_BYTES + 1)
    for block in files.read_blocks(uri, stat.version, start, end):
        at = block.find(b"\n")
        if at >= 0:
            out += block[: at + 1]
            return bytes(out), False
        out += block
    if end < stat.size or len(out) > MAX_FIRST_LINE_BYTES:
        raise InvalidInput(f"a line near the start of the input is longer than {MAX_FIRST_LINE_BYTES >> 20} MiB: no field of it can be read", field="input_uri")
    return bytes(out), True  # the input's last line


def _jsonl_fields(opening: bytes, *, whole: bool) -> list[str]:
    """Every field the object lines of the input's opening name, in the order first seen (none
    when those lines are blank): fields may vary by line, so a feature or key is missing
    altogether only when no line there names it. `whole`: the opening is the whole input, so
    its last line counts even without a newline after it."""
    import orjson

    lines = opening.split(b"\n")
    if not whole:
        lines = lines[:-1] or lines  # the last may be cut off
    fields: dict[str, None] = {}
    objects = 0
    for line in lines:
        try:
            parsed = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a bad line is an error row, not a reason to refuse the file
        if isinstance(parsed, dict):
            objects += 1
            fields.update(dict.fromkeys(parsed))
    if not objects and opening.strip():
        raise InvalidInput("no line near the start of the input is a JSON object", field="input_uri")
    return list(fields)  # blank lines only: each fails as a row
