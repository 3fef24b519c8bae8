"""Part and error files, written a batch at a time to a local file (then put in place whole).

Parts are Parquet, CSV or JSON Lines; error files are always JSON Lines: one object per row
that could not be scored, with its number in the input, its key columns and the reason.
JSON Lines are written in whole lines (`owner_only.append_lines`).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sluice import owner_only
from sluice.domain.errors import Unprocessable

if TYPE_CHECKING:
    import pyarrow as pa

EXTENSIONS = {"parquet": "parquet", "csv": "csv", "jsonl": "jsonl"}
CONTENT_TYPES = {
    "parquet": "application/vnd.apache.parquet",
    "csv": "text/csv",
    "jsonl": "application/x-ndjson",
}
ROW_GROUP_ROWS = 131_072


def _apart(names: list[str], others: list[str]) -> list[str]:
    """The first few of `names` that `others` lacks."""
    return [name for name in names if name not in others][:5]


class PartWriter:
    """Rows of one part, in the output format; opened on the first rows it gets."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path = path
        self.format = fmt
        self.rows = 0
        self._schema: pa.Schema | None = None
        self._writer: Any = None
        self._file: IO[bytes] | None = None
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self.format == "csv":
            table = _csv_ready(table)
        if self._schema is None:
            self._open(table.schema)
        elif table.schema != self._schema:
            if table.schema.names != self._schema.names:  # a retry writes them again: refused, not retried
                raise Unprocessable(
                    f"rows answered columns {_apart(table.schema.names, self._schema.names)} where earlier rows of this part answered "
                    f"{_apart(self._schema.names, table.schema.names)}: a part holds one set of columns (a switch whose cases answer "
                    "other classes cannot be written by a batch job; give its cases models of the same classes)",
                    field="deployment",
                )
            table = table.cast(self._schema)
        self.rows += table.num_rows
        if self.format == "parquet":
            # Row groups of a useful size, not one per inference batch.
            self._pending.append(table)
            self._pending_rows += table.num_rows
            if self._pending_rows >= ROW_GROUP_ROWS:
                self._flush()
        elif self.format == "csv":
            self._writer.write_table(table)
        else:
            _write_jsonl(self._file, table)  # type: ignore[arg-type]

    def _open(self, schema: pa.Schema) -> None:
        import pyarrow as pa
        import pyarrow.csv as pv
        import pyarrow.parquet as pq

        self._schema = schema
        if self.format == "parquet":
            # Dictionaries pay off for text (labels, keys), and cost 5x the write time for numbers.
            text = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
            self._writer = pq.ParquetWriter(self.path, schema, compression="snappy", use_dictionary=text)
        elif self.format == "csv":
            self._writer = pv.CSVWriter(self.path, schema)
        else:
            self._file = owner_only.open_file(self.path, buffering=0)

    def _flush(self) -> None:
        import pyarrow as pa

        if self._pending:
            self._writer.write_table(pa.concat_tables(self._pending), row_group_size=max(self._pending_rows, 1))
            self._pending, self._pending_rows = [], 0

    def close(self) -> int:
        if self.format == "parquet" and self._writer is not None:
            self._flush()
        if self._writer is not None:
            self._writer.close()
        if self._file is not None:
            self._file.close()
        return self.rows


def _csv_ready(table: pa.Table) -> pa.Table:
    """`table` with each column a CSV cannot hold (a list, a struct, a map, bytes: a key column
    read so from Parquet) written as text: nested values as their JSON, bytes by `as_text`."""
    import json

    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_nested(field.type):
            text = pa.array([None if v is None else json.dumps(v, default=as_text, separators=(",", ":")) for v in table.column(i).to_pylist()], pa.string())
        elif pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type) or pa.types.is_fixed_size_binary(field.type):
            text = pa.array([None if v is None else as_text(v) for v in table.column(i).to_pylist()], pa.string())
        else:
            continue
        table = table.set_column(i, pa.field(field.name, pa.string()), text)
    return table


def as_text(value: Any) -> str:
    """A value JSON has no form for, as a text output writes it: bytes as their UTF-8 text, or
    as base64 where they are not UTF-8 (CSV cannot hold them, JSON has no bytes); anything else
    (a date, a decimal) as its str."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return base64.b64encode(value).decode()
    return str(value)


class ErrorWriter:
    """One JSON object per failed row: `row`, the key columns, `reason` (and `input`, the raw
    line, for text rows that did not parse)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = 0
        self._file: IO[bytes] | None = None

    def write(self, records: list[dict[str, Any]]) -> None:
        import orjson

        if not records:
            return
        if self._file is None:
            self._file = owner_only.open_file(self.path, buffering=0)
        owner_only.append_lines(self._file.fileno(), b"".join(orjson.dumps(r, default=as_text) + b"\n" for r in records))
        self.rows += len(records)

    def close(self) -> int:
        if self._file is not None:
            self._file.close()
        return self.rows


def _write_jsonl(out: IO[bytes], table: pa.Table) -> None:
    import orjson

    owner_only.append_lines(out.fileno(), b"".join(orjson.dumps(row, default=as_text) + b"\n" for row in table.to_pylist()))
