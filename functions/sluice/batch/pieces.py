"""What a chunk's readers share: the piece a reader yields, the check that it accounts for
every record it read, the errors a chunk fails with, and small helpers of the text readers
(`readers.py` reads Parquet and CSV, `json_lines.py` JSON Lines)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.domain.errors import BackendError, InvalidInput

if TYPE_CHECKING:
    import pyarrow as pa

    from sluice.batch.columns import Feed
    from sluice.batch.plan import Chunk, JobSpec
    from sluice.batch.records import Records

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
    if piece.table.num_rows != len(rows) or (
        piece.reasons is not None and len(piece.reasons) != len(rows)
    ):
        raise RecordsUnaccounted(
            f"{piece.table.num_rows} rows were read with {len(rows)} row numbers"
        )
    if len(rows) + len(piece.dropped) != n:
        raise RecordsUnaccounted(
            f"{n} records were read, but {len(rows)} rows and {len(piece.dropped)} failures made of them"
        )
    if not n:
        return
    numbers = np.concatenate(
        (rows, np.fromiter((d[0] for d in piece.dropped), np.int64, len(piece.dropped)))
    )
    local = numbers - records.first
    if local.min() < 0 or local.max() >= n or np.bincount(local, minlength=n).max() > 1:
        raise RecordsUnaccounted(
            f"the rows and failures made of records {records.first}-{records.first + n - 1} "
            "are not each of them once"
        )


def check_rows(chunk: Chunk, found: int) -> None:
    if found != chunk.rows:
        raise ChunkUnreadable(
            f"chunk {chunk.index} holds {found} records where {chunk.rows} were planned"
        )


def shown(text: bytes) -> str:
    return text[:LINE_SHOWN].decode(errors="replace")


def is_utf8(data: bytes) -> bool:
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


# Integer inputs, read as the integers written: a float holds no integer past 2**53, and rounds
# away a fraction written finer than it keeps (`1.0000000000000000001` reads as 1.0), so a value
# would be taken or refused by the other values of its chunk, or by its input's type.
EXACT_INTEGERS = frozenset({"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"})


def exact_type(datatype: str) -> Any:
    """The 64-bit type an integer input's column is read as (its own range checked after)."""
    import pyarrow as pa

    return pa.uint64() if datatype.startswith("UINT") else pa.int64()


def arrow_types(
    spec: JobSpec, feeds: list[Feed], *, text_features: bool, lists: bool = False
) -> dict[str, Any]:
    """The type each column is read as. `lists`: the format holds lists (JSON Lines), so an
    input of `k` numbers per row is read as a list of them."""
    import pyarrow as pa

    types: dict[str, Any] = {}
    for feed in feeds:
        for name in feed.columns:
            numeric = V2_TO_NUMPY[feed.datatype].kind in "fiub"
            if feed.width is not None:
                types[name] = pa.list_(pa.float64()) if numeric and lists else pa.string()
            elif feed.datatype in EXACT_INTEGERS and not text_features:
                # Past 2**53 a float is not the integer written: CSV's text is parsed here
                # (`columns._parse_numbers`), JSON Lines' numbers as the integers they are.
                types[name] = exact_type(feed.datatype) if lists else pa.string()
            else:
                types[name] = pa.float64() if numeric and not text_features else pa.string()
    published = (spec.publish.key,) if spec.publish is not None else ()
    for key in (*spec.key_columns, *published):  # keys of text inputs are text: "c-1041" and 1041 alike, "007" kept;
        types.setdefault(key, pa.string())  # a feature used as a key too is read as the feature (its key written from it)
    return types
