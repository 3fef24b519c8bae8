"""JSON Lines chunks: read whole by pyarrow's JSON reader where that is proven to give the
records the line-by-line reader gives (`_one_object_per_line`), line by line otherwise, so
one bad line costs one row."""

from __future__ import annotations

import io
import math
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.batch.integers import FINE_NUMBER_BYTES, fine_number_of
from sluice.batch.pieces import EXACT_INTEGERS, Piece, arrow_types, check_rows, is_utf8, shown
from sluice.batch.records import CARRIAGE
from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.codecs.json_text import PARSER_DEPTH, NestedTooDeep, loads, too_deep
from sluice.codecs.lines import names_twice
from sluice.domain.precomputed import MAX_ENTITY_BYTES

if TYPE_CHECKING:
    import pyarrow as pa

    from sluice.batch.columns import Feed
    from sluice.batch.plan import Chunk, JobSpec
    from sluice.batch.records import Owned


def read_json_lines(owned: Owned, spec: JobSpec, chunk: Chunk, feeds: list[Feed], columns: list[str]) -> Piece:
    import pyarrow as pa
    import pyarrow.json as pj

    records = owned.records
    n = len(records)
    check_rows(chunk, n)
    types = arrow_types(spec, feeds, text_features=False, lists=True)
    if not n:
        return Piece(pa.table({c: pa.array([], type=types.get(c, pa.string())) for c in columns}), np.empty(0, np.int64), records=records)
    schema = pa.schema([(c, types.get(c, pa.string())) for c in columns])
    keys = set(spec.key_columns)
    exact = {name for feed in feeds if feed.width is None and feed.datatype in EXACT_INTEGERS for name in feed.columns} - keys
    if _one_object_per_line(owned):
        region = owned.data
        # Key columns are read as they come (a number or a string) and then made text. The
        # columns of 64-bit integer inputs as floats first, which hold every value below 2**53
        # exactly (`5` and `5.0` alike); past it, again as integers (exactly), else line by line.
        # An integer input's number written finer than a float keeps (`integers.FINE_NUMBER`):
        # as integers, then line by line, where its text is read exactly (a fraction the float
        # would round away fails). Looked for in those members alone (`fine_number_of`), or
        # anywhere where a line escapes a name (`"\u0078"` is `"x"`).
        floats_first = exact and not _fine(region, exact)
        for kinds in ((schema,) if not floats_first else (_as_floats(schema, exact), schema)):
            try:
                table = pj.read_json(
                    io.BytesIO(region),
                    read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(region) + 1)),  # one block
                    parse_options=pj.ParseOptions(
                        explicit_schema=pa.schema([f for f in kinds if f.name not in keys]),
                        unexpected_field_behavior="infer" if keys else "ignore",
                    ),
                )
            except pa.ArrowInvalid:
                continue
            if table.num_rows == n and _keys_as_text(table, keys) and _exact_enough(table, exact, kinds):
                table = _with_keys_as_text(table, keys, n).select(columns)
                return Piece(table, records.numbers, records=records)
            if not exact or kinds is schema:
                break  # else read again as integers: a value past 2**53 as floats
    return _jsonl_by_line(owned, chunk, schema, feeds, spec.publish.key if spec.publish is not None else None, keys)


def _as_floats(schema: pa.Schema, exact: set[str]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([pa.field(f.name, pa.float64()) if f.name in exact else f for f in schema])


def _exact_enough(table: pa.Table, exact: set[str], kinds: pa.Schema) -> bool:
    """Whether the 64-bit integer inputs' columns hold what was written: as integers, always;
    as floats, every value below 2**53 (else each line is read, exactly)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return all(
        not pa.types.is_floating(kinds.field(name).type) or name not in table.column_names or (pc.max(pc.abs(table.column(name))).as_py() or 0.0) < 2.0**53
        for name in exact
    )


OPEN, CLOSE = ord("{"), ord("}")
DEPTH = PARSER_DEPTH  # the deepest nesting the line-by-line parser reads (orjson's limit)


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
    if not is_utf8(data) or _nan_or_infinity(data):
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
        at = np.flatnonzero((arr | 0x20) == OPEN)  # where a `[` or a `{` stands (0x5B | 0x20 is 0x7B)
        if np.bincount(np.searchsorted(first, at, side="right"), minlength=len(first) + 1)[1:].max() > DEPTH:  # [0]: before line 1
            return False
    return True


def _fine(region: bytes, names: set[str]) -> bool:
    """Whether a member of `names` in `region` may hold a number a float does not read as written."""
    if b"\\u" in region:  # a name may be escaped: any such number, wherever it stands
        return FINE_NUMBER_BYTES.search(region) is not None
    return any(fine_number_of(name).search(region) is not None for name in names)


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
    """Whether every key column read is a string or a whole number on every line (else: line by
    line, which tells a line lacking its key, which fails, from one whose key is null)."""
    import pyarrow as pa

    return all(
        k in table.column_names
        and (pa.types.is_string(t := table.schema.field(k).type) or pa.types.is_integer(t))
        and table.column(k).null_count == 0
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


def _jsonl_by_line(
    owned: Owned, chunk: Chunk, schema: pa.Schema, feeds: list[Feed], entity: str | None = None, keys: set[str] | frozenset[str] = frozenset()
) -> Piece:
    """The slow path, for chunks with a line that is blank, not JSON, or holds a value of the
    wrong type: each line on its own, so one bad line costs one row. `entity`: the column a
    job publishes by (`publish.key`), a whole number of which is read as the integer it is.
    `keys`: made text as the fast path makes them, so every part of a job has one type a key."""
    import orjson
    import pyarrow as pa

    from sluice.domain.values import parse_number

    numeric = {name for feed in feeds if feed.width is None and V2_TO_NUMPY[feed.datatype].kind in "fiub" for name in feed.columns}
    listed = {name for feed in feeds if feed.width is not None and V2_TO_NUMPY[feed.datatype].kind in "fiub" for name in feed.columns}
    features = {name for feed in feeds for name in feed.columns}
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
            dropped.append((number, "blank line", shown(line)))
            continue
        try:
            obj = loads(line)
        except orjson.JSONDecodeError:
            reason = "not valid JSON" if is_utf8(line) else "not valid JSON (not UTF-8 text)"
            dropped.append((number, reason, shown(line)))
            continue
        except NestedTooDeep as exc:
            dropped.append((number, exc.message, shown(line)))
            continue
        if not isinstance(obj, dict):
            dropped.append((number, "not a JSON object", shown(line)))
            continue
        try:
            twice = names_twice(line, obj)
            if twice is not None:  # which value would count is anyone's guess: the line fails
                dropped.append((number, f"not valid JSON: an object names {twice!r} twice", shown(line)))
                continue
            reason = None
            for f in schema:
                value = obj.get(f.name)
                if value is not None and f.name in numeric and pa.types.is_integer(f.type):  # a 64-bit integer input's
                    value, wrong = _integer(value, f.name, f.type, line)
                    reason = reason or wrong
                elif value is not None and f.name in numeric and isinstance(value, str):
                    parsed = parse_number(value)  # numbers written as text count, as in CSV
                    if parsed is None:
                        reason = reason or f"'{f.name}' is not a number: {value[:40]!r}"
                    value = parsed
                elif value is not None and f.name in numeric and (isinstance(value, bool) or not isinstance(value, int | float)):
                    reason = reason or f"'{f.name}' is not a number: {_json_text(value)[:40]!r}"
                    value = None
                elif value is not None and f.name in listed:
                    value, wrong = _numbers(value)
                    reason = reason or (wrong and f"'{f.name}' must hold a list of numbers: {wrong}")
                elif f.name in numeric and isinstance(value, int) and pa.types.is_floating(f.type):
                    value = float(value)  # pyarrow refuses a whole number beyond 2**53 as a float
                elif pa.types.is_string(f.type) and isinstance(value, int | float) and not isinstance(value, bool) and f.name not in numeric:
                    # a key (or text input) written as a number: as written; the entity's whole number as an integer (`7.0` is `7`)
                    value = str(value) if isinstance(value, int) else _whole(_as_written(line, f.name)) if f.name == entity else _as_written(line, f.name)
                elif f.name not in features and value is not None and not isinstance(value, str):
                    value = orjson.dumps(value).decode()  # a key written as true/false, a list or an object: its JSON
                elif value is not None and not _fits(value, f.type):
                    reason = reason or f"'{f.name}' is not {f.type}: {str(value)[:40]!r}"
                    value = None
                values[f.name].append(value)
        except (RecursionError, orjson.JSONEncodeError):  # a value nested deeper than the stack holds (or orjson writes)
            refused = too_deep(line)
            if refused is None:
                raise
            for column in values.values():
                del column[len(rows) :]  # what was kept of this line
            dropped.append((number, refused.message, shown(line)))
            continue
        if reason is None and keys:  # a key the line lacks (one written null is carried as null), once its values are read
            lacking = next((k for k in sorted(keys) if k not in obj), None)
            reason = None if lacking is None else f"the line has no key '{lacking}'"
        rows.append(number)
        reasons.append(reason)
    table = _with_keys_as_text(pa.table({f.name: pa.array(values[f.name], type=f.type) for f in schema}, schema=schema), set(keys), len(rows))
    return Piece(table, np.asarray(rows, dtype=np.int64), np.asarray(reasons, dtype=object), dropped, records=owned.records)


STRING_OR_BRACKET = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')  # a JSON string, or an opening or closing bracket
NAME_END = re.compile(rb"[ \t\r]*:[ \t\r]*")
NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _integer(value: Any, name: str, arrow_type: Any, line: bytes) -> tuple[int | None, str | None]:
    """A JSON value for a 64-bit integer input's column: the integer it is, exactly (a number
    written with a point or an exponent too: `5.0`, `9007199254740993.0` as its text says, not
    as the float near it); text as NUMBER reads it, exactly; or why not (`integers.whole_of`)."""
    import pyarrow as pa

    from sluice.batch.integers import whole_of

    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None, f"'{name}' is not a number: {_json_text(value)[:40]!r}"
    if isinstance(value, float) and math.isfinite(value) and (abs(value) >= 2.0**53 or FINE_NUMBER_BYTES.search(line)):
        value = _as_written(line, name)  # the float may not be what was written (past 2**53, or finer than a float keeps): its text is
    found, why = whole_of(value, name, "UINT64" if pa.types.is_unsigned_integer(arrow_type) else "INT64")
    return found, why or None


def _json_text(value: Any) -> str:
    """A JSON value as the line writes it (`true`, not Python's `True`): text as it is."""
    import orjson

    return value if isinstance(value, str) else orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def _whole(written: str) -> str:
    """A key written as a number: a whole number as the integer it is (`7.0`, `7e0` and `7` are
    one entity, as `entity_of` reads a number; exactly, however many digits), any other as written."""
    from decimal import Decimal

    number = Decimal(written)
    if number.adjusted() >= MAX_ENTITY_BYTES or number != number.to_integral_value():
        return written  # a fraction; or more digits than any entity has (never spelled out)
    return str(int(number))


def _as_written(line: bytes, name: str) -> str:
    """The number the line's object holds under `name`, as its text is written: orjson reads a
    fraction, and a whole number beyond 64 bits, as a float, whose text may lose digits (two
    keys would then be one). The line is valid JSON that names `name` once."""
    import orjson

    depth = 0
    for token in STRING_OR_BRACKET.finditer(line):
        text = token.group()
        if text in (b"{", b"["):
            depth += 1
        elif text in (b"}", b"]"):
            depth -= 1
        elif depth == 1 and (colon := NAME_END.match(line, token.end())) and orjson.loads(text) == name and (number := NUMBER.match(line, colon.end())):
            return number.group().decode()
    raise AssertionError(f"no number named {name!r} in a line that has one")


def _numbers(value: Any) -> tuple[list[float | None] | None, str | None]:
    """A JSON list of numbers (or of numbers written as text) as floats, or why it is not one."""
    from sluice.domain.values import parse_number

    if not isinstance(value, list):
        return None, repr(_json_text(value)[:40])
    out: list[float | None] = []
    for item in value:
        if item is None or (isinstance(item, int | float) and not isinstance(item, bool)):
            out.append(None if item is None else float(item))
        elif isinstance(item, str) and (number := parse_number(item)) is not None:
            out.append(number)
        else:
            return None, repr(_json_text(item)[:40])
    return out, None


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

