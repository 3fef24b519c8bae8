"""The one record grammar (`sluice.batch.records`), tried against plain references: for text
that hypothesis writes (quotes, delimiters and line ends inside fields, every line-end style,
byte order marks, blank and whitespace-only lines, bytes that are not UTF-8) and chunk
boundaries anywhere, Plan and the readers give exactly the records Python's csv module reads
(CSV) and the lines `json.loads` reads (JSON Lines), each exactly once, with the same values."""

from __future__ import annotations

import csv
import io
import json
import math
import random
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.csv as pv
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.batch.columns import Feed, parse_number
from sluice.batch.files import Files
from sluice.batch.pieces import Piece, RecordsUnaccounted
from sluice.batch.plan import JobSpec, _plan_text
from sluice.batch.readers import read_chunk
from sluice.batch.records import CSV, Records, RecordScanner
from sluice.domain.errors import InvalidInput
from tests.support import is_utf8, sampled

PROPERTY = settings(
    max_examples=100, derandomize=True, database=None, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)  # fmt: skip


# The scanner against pyarrow's parser -----------------------------------------------------------
FIELDS = ["a", "bb", "1", "", '"x"', '"y\nz"', '"q""r"', '""', '","', '"\n"', 'z"w', "5'10\"", 'a""', '"""s"""', '"t\r\nu"', '"v\rw"']


def _records_by_pyarrow(data: bytes) -> int:
    skipped = [0]

    def skip(row: object) -> str:
        skipped[0] += 1
        return "skip"

    table = pv.read_csv(
        io.BytesIO(data),
        read_options=pv.ReadOptions(column_names=["a", "b", "c"], use_threads=False),
        parse_options=pv.ParseOptions(ignore_empty_lines=False, invalid_row_handler=skip, newlines_in_values=True),
    )
    return table.num_rows + skipped[0]


def _records_by_scanner(data: bytes, rng: random.Random) -> int:
    scanner = CSV.scanner(0)
    ends: list[int] = []
    at = 0
    while at < len(data):
        stop = min(len(data), at + rng.randint(1, 9))
        ends += scanner.feed(data[at:stop], final=stop == len(data)).tolist()
        at = stop
    assert not scanner.inside
    return len([e for e in ends if e < len(data) - 1]) + 1


@pytest.mark.parametrize("seed", range(4))
def test_the_scanner_finds_the_records_the_csv_parser_reads(seed: int) -> None:
    rng = random.Random(seed)
    checked = 0
    for _ in range(400):
        rows = [",".join(rng.choice(FIELDS) for _ in range(3)) for _ in range(rng.randint(1, 6))]
        data = rng.choice(["\n", "\r\n", "\r"]).join(rows).encode() + b"\n"
        try:
            expected = _records_by_pyarrow(data)
        except Exception:  # a file the parser refuses outright: nothing to agree on
            continue
        assert _records_by_scanner(data, rng) == expected, data
        checked += 1
    assert checked > 200


def test_a_run_of_quotes_split_between_blocks_counts_as_one_run() -> None:
    data = b'a,"x""\n""y",b\nc,d,e\n'  # the doubled quotes are cut apart below
    for cut in range(1, len(data)):
        scanner = RecordScanner(0)
        ends = scanner.feed(data[:cut]).tolist() + scanner.feed(data[cut:], final=True).tolist()
        assert ends == [13, 19], cut


@pytest.mark.parametrize("data", [b"a\r\nb\rc\n\rd\r", b'"x\r\ny"\r"z"\r\n'])
def test_a_line_end_split_between_blocks_ends_one_record(data: bytes) -> None:
    whole = CSV.scanner(0).feed(data, final=True).tolist()
    for cut in range(1, len(data)):
        scanner = CSV.scanner(0)
        assert scanner.feed(data[:cut]).tolist() + scanner.feed(data[cut:], final=True).tolist() == whole, cut


def test_a_piece_that_does_not_account_for_its_records_cannot_be_made() -> None:
    import pyarrow as pa

    def piece(numbers: list[int], dropped: list[int]) -> Piece:
        table = pa.table({"a": pa.array(["x"] * len(numbers))})
        failures: list[tuple[int, str, str | None]] = [(d, "blank line", "") for d in dropped]
        return Piece(table, np.asarray(numbers, dtype=np.int64), dropped=failures, records=Records("file:///in", 10, 4))

    assert len(piece([10, 12], [11, 13]).rows) == 2
    for numbers, dropped in (([10, 11, 12], []), ([10, 11, 12, 13], [13]), ([10, 10, 12], [13]), ([10, 11, 12], [14])):
        with pytest.raises(RecordsUnaccounted):
            piece(numbers, dropped)


# Plan and the readers against Python's csv module ----------------------------------------------
LINE_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])
TEXT = st.lists(
    st.sampled_from([b"a", b"7", b" ", b"\t", b",", b'"', b"\n", b"\r", b"\xc3\xa9", b"\xff", b"\xc3", b"\xef\xbb\xbf", b"'"]),
    max_size=6,
).map(b"".join)


@cache
@st.composite
def csv_fields(draw: st.DrawFn) -> bytes:
    text = draw(TEXT)
    style = draw(sampled(("quoted", "plain", "after-quote")))
    if style == "quoted":
        return b'"' + text.replace(b'"', b'""') + b'"'
    plain = text.replace(b",", b"").replace(b"\r", b"").replace(b"\n", b"").lstrip(b'"')
    return plain if style == "plain" else b'"' + text.replace(b'"', b'""') + b'"' + plain.replace(b'"', b"")


@st.composite
def csv_files(draw: st.DrawFn) -> tuple[bytes, int]:
    width = draw(st.integers(1, 3))
    names = [b"a", b"b", b"c"][:width]
    header = b",".join(b'"' + n + b'"' if draw(st.booleans()) else n for n in names)
    records = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(sampled(("row", "row", "row", "row", "blank", "spaces", "short", "long")))
        count = {"row": width, "short": max(width - 1, 0), "long": width + 1}.get(kind, 0)
        record = b",".join(draw(csv_fields()) for _ in range(count)) if count else (b"  \t" if kind == "spaces" else b"")
        records.append(record)
    ends = [draw(LINE_ENDS) for _ in range(len(records) + 1)]
    body = header + ends[0] + b"".join(r + e for r, e in zip(records, ends[1:], strict=True))
    if records and draw(st.booleans()):
        body = body[: -len(ends[-1])]  # no line end after the last record
    bom = b"\xef\xbb\xbf" if draw(st.booleans()) else b""
    return bom + body, width


def _csv_reference(data: bytes) -> list[list[str]]:
    reader = csv.reader(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", errors="surrogateescape", newline=""))
    return list(reader)[1:]


def _plan_and_read(tmp_path: Path, name: str, data: bytes, chunk_bytes: int, keys: tuple[str, ...], feeds: list[Feed]) -> tuple[int, list[Piece]]:
    chunk_bytes = max(chunk_bytes, len(data) // 40)  # boundaries anywhere, but not thousands of them
    path = tmp_path / name
    path.write_bytes(data)
    files = Files()
    stat = files.stat(path.as_uri())
    fmt = name.rsplit(".", 1)[1]
    columns, chunks = _plan_text(path.as_uri(), fmt, stat, files, chunk_bytes)
    spec = JobSpec("acme", "job-1", "d", path.as_uri(), stat.version, fmt, fmt, "file:///out/", keys, tuple(columns))
    wanted = list(dict.fromkeys([*keys, *(c for f in feeds for c in f.columns)]))
    pieces = [p for chunk in chunks for p in read_chunk(files, spec, chunk, feeds, wanted, batch_rows=1000)]
    for chunk, piece in zip(chunks, pieces, strict=True):
        assert (piece.records.first, len(piece.records)) == (chunk.first_row, chunk.rows)
    return sum(c.rows for c in chunks), pieces


def _outcomes(pieces: list[Piece]) -> dict[int, Any]:
    """Each record's outcome by its number: ("row", values, reason) or ("failed", reason)."""
    found: dict[int, Any] = {}
    for piece in pieces:
        values = piece.table.to_pylist()
        reasons = piece.reasons if piece.reasons is not None else [None] * len(values)
        for number, row, reason in zip(piece.rows.tolist(), values, reasons, strict=True):
            assert number not in found
            found[number] = ("row", row, reason)
        for number, reason, _ in piece.dropped:
            assert number not in found
            found[number] = ("failed", reason)
    return found


@PROPERTY
@given(file=csv_files(), cut=st.integers(1, 64))
def test_plan_and_the_csv_reader_give_the_records_pythons_csv_module_reads(tmp_path: Path, file: tuple[bytes, int], cut: int) -> None:
    data, width = file
    names = ("a", "b", "c")[:width]
    expected = _csv_reference(data)
    total, pieces = _plan_and_read(tmp_path, "in.csv", data, cut, names, [])
    got = _outcomes(pieces)
    assert total == len(expected) and sorted(got) == list(range(total)), (data, expected, got)
    for number, fields in enumerate(expected):
        outcome = got[number]
        if not fields:
            assert outcome == ("failed", "blank line"), (data, number)
        elif len(fields) != width:
            assert outcome[0] == "failed" and outcome[1] in (f"expected {width} fields", "blank line"), (data, number, outcome)
        elif any("\udc80" <= ch <= "\udcff" for f in fields for ch in f):
            first = next(n for n, f in zip(names, fields, strict=True) if any("\udc80" <= ch <= "\udcff" for ch in f))
            assert outcome == ("failed", f"'{first}' is not UTF-8 text"), (data, number)
        else:
            assert outcome == ("row", {n: f or None for n, f in zip(names, fields, strict=True)}, None), (data, number)


# Plan and the readers against json.loads ---------------------------------------------------------
class _TooDeep(ValueError):
    """A line nested past 1,024 levels (what orjson reads), in its top-level member `args[0]`."""


def _depth(value: Any) -> int:
    if isinstance(value, dict | list):
        return 1 + max(map(_depth, value.values() if isinstance(value, dict) else value), default=0)
    return 0


def _strict_json(line: bytes) -> Any:
    """json.loads held to JSON as sluice reads it: UTF-8, no NaN or Infinity, nested up to
    1,024 levels (the outermost counted), whatever the stack holds."""

    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)  # the reference reads any depth, to say which member is too deep
    try:
        value = json.loads(line.decode("utf-8"), parse_constant=refuse)
        if _depth(value) > 1024:
            raise _TooDeep(next(k for k, v in value.items() if _depth(v) > 1023) if isinstance(value, dict) else None)
    finally:
        sys.setrecursionlimit(limit)
    return value


DEPTHS = st.sampled_from([1, 199, 200, 201, 900, 1023, 1024, 1100])  # past the HTTP API's limit (200), around orjson's (1,024)


def _nested(depth: int, objects: bool) -> bytes:
    return (b'{"k": ' * depth + b"1" + b"}" * depth) if objects else b"[" * depth + b"]" * depth


VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["0.5", " 7 ", "x", "", "1e3", "nan", "é", "\u2028"]),
    st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.sampled_from(["k"]), st.integers(0, 3), max_size=1),
)


@cache
@st.composite
def json_lines(draw: st.DrawFn) -> bytes:
    kind = draw(sampled(("object",) * 6 + ("blank", "spaces", "null", "scalar", "array", "two", "broken", "latin1", "nan", "deep", "bom")))
    obj: dict[str, Any] = {}
    for key in draw(st.lists(sampled(("id", "x", "other")), unique=True)):
        obj[key] = draw(VALUES)
    text = json.dumps(obj, ensure_ascii=draw(st.booleans())).encode()
    pad = draw(sampled((b"", b" ", b"\t", b"\r")))
    return {
        "object": pad + text + draw(sampled((b"", b" ", b"\r"))),
        "blank": b"",
        "spaces": b" \t\r",
        "null": pad + b"null",
        "scalar": draw(sampled((b"1", b'"s"', b"true"))),
        "array": b"[" + text + b"]",
        "two": text + draw(sampled((b" ", b"\r", b""))) + text,
        "broken": text[: max(1, len(text) // 2)],
        "latin1": b'{"id": "caf\xe9", "x": 1}',
        "nan": b'{"id": "n", "x": NaN}' if draw(st.booleans()) else b'{"other": -Infinity, "x": 1}',
        "deep": b'{"other": ' + _nested(draw(DEPTHS), draw(st.booleans())) + b', "x": 2}',
        "bom": b"\xef\xbb\xbf" + text,
    }[kind]


@st.composite
def jsonl_files(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(json_lines(), max_size=10))
    if draw(st.booleans()):  # a file of objects only, as most are: the fast path's ground
        lines = [json.dumps({"id": draw(VALUES), "x": draw(VALUES)}).encode() for _ in lines]
    body = b"".join(line + draw(sampled((b"\n", b"\r\n"))) for line in lines)
    if lines and draw(st.booleans()):
        body = body.rstrip(b"\n")
    return (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + body


def _expected_line(line: bytes) -> Any:
    """What becomes of one line: ("failed", reason) or ("row", {"id", "x"}, reason)."""
    if not line.strip(b" \t\r"):
        return ("failed", "blank line")
    try:
        obj = _strict_json(line)
    except _TooDeep as exc:
        where = f"'{exc.args[0]}'" if exc.args[0] is not None else "the JSON"
        return ("failed", f"{where} is nested too deep to read: more than 1,024 levels of arrays and objects, the outermost counted (the HTTP API reads at most 200)")
    except ValueError:
        return ("failed", "not valid JSON" if is_utf8(line) else "not valid JSON (not UTF-8 text)")
    if not isinstance(obj, dict):
        return ("failed", "not a JSON object")
    key, x, reason = obj.get("id"), obj.get("x"), None
    if isinstance(key, bool) or not isinstance(key, str | int | float | None):
        key = json.dumps(key, separators=(",", ":"), ensure_ascii=False)  # a key is carried as text: its JSON
    elif isinstance(key, int | float):
        key = json.loads(line, parse_int=str, parse_float=str)["id"]  # a number, as written (digits beyond 64 bits too)
    if isinstance(x, str):
        parsed = parse_number(x)
        reason = reason or (None if parsed is not None else f"'x' is not a number: {x[:40]!r}")
        x = parsed
    elif isinstance(x, bool) or not isinstance(x, int | float | None):  # shown as the line writes it
        reason, x = reason or f"'x' is not a number: {orjson.dumps(x).decode()[:40]!r}", None
    elif x is not None:
        x = float(x)
    if "id" not in obj:  # the job's key: a line lacking it fails (one written null is carried as null)
        reason = reason or "the line has no key 'id'"
    return ("row", {"id": key, "x": x}, reason)


@PROPERTY
@given(data=jsonl_files(), cut=st.integers(1, 96))
def test_plan_and_the_json_lines_reader_give_the_lines_json_loads_reads(tmp_path: Path, data: bytes, cut: int) -> None:
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    lines = body.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the line end of the last line
    feeds = [Feed("x", ("x",), "FP64", stacked=False)]
    try:
        total, pieces = _plan_and_read(tmp_path, "in.jsonl", data, cut, ("id",), feeds)
    except InvalidInput as exc:  # Plan takes the fields from the object lines near the start
        if "nothing but a byte order mark" in exc.message:
            assert data == b"\xef\xbb\xbf", data
            return
        assert "no line near the start" in exc.message
        assert not any(_expected_line(line)[0] == "row" for line in body.split(b"\n")[:-1]), data
        return
    got = _outcomes(pieces)
    assert total == len(lines) and sorted(got) == list(range(total)), (data, got)
    for number, line in enumerate(lines):
        expected, outcome = _expected_line(line), got[number]
        if expected[0] == "row" and outcome[0] == "row":
            assert outcome[1]["id"] == expected[1]["id"], (line, outcome)
            same = outcome[1]["x"] == expected[1]["x"] or (outcome[1]["x"] is not None and math.isnan(outcome[1]["x"]) and math.isnan(expected[1]["x"]))
            assert same and outcome[2] == expected[2], (line, outcome, expected)
        else:
            assert outcome == expected, (line, outcome)


def test_json_lines_too_deep_for_the_stack_fail_alone_and_what_orjson_reads_is_read_on_either_path(tmp_path: Path) -> None:
    """With the stack Python gives (hypothesis gives it more): a line whose unused member nests
    1,000 levels of objects is a row on the fast path and the slow one alike (the names given
    twice are looked for without recursion); a feature holding a list 1,000 deep, or a key one
    300 deep (orjson writes 254), fails that line alone, naming the member; the rest are read."""
    from sluice.batch.json_lines import _one_object_per_line
    from sluice.batch.readers import owned_by

    assert sys.getrecursionlimit() <= 1000
    feeds = [Feed("x", ("x",), "FP64", stacked=False)]
    deep_other = b'{"id": "a", "x": 1, "other": ' + _nested(999, objects=True) + b"}"
    fine = [b'{"id": "b", "x": 2}', b'{"id": "c", "x": 3}']
    for slow in (False, True):  # a broken line sends the chunk down the slow path
        data = b"\n".join([deep_other, *fine, *([b"{broken"] if slow else [])]) + b"\n"
        path = tmp_path / f"in-{slow}.jsonl"
        path.write_bytes(data)
        files = Files()
        stat = files.stat(path.as_uri())
        _, chunks = _plan_text(path.as_uri(), "jsonl", stat, files, 1 << 20)
        spec = JobSpec("acme", "job-1", "d", path.as_uri(), stat.version, "jsonl", "jsonl", "file:///out/", ("id",), ("id", "x"))
        assert _one_object_per_line(owned_by(files, spec, chunks[0])) is not slow
        _, pieces = _plan_and_read(tmp_path, f"in-{slow}.jsonl", data, 1 << 20, ("id",), feeds)
        got = _outcomes(pieces)
        assert [got[n] for n in range(3)] == [("row", {"id": key, "x": x}, None) for key, x in (("a", 1.0), ("b", 2.0), ("c", 3.0))], got
    deep_x = b'{"id": "d", "x": ' + _nested(999, objects=False) + b"}"
    deep_id = b'{"id": ' + _nested(300, objects=False) + b', "x": 4}'
    _, pieces = _plan_and_read(tmp_path, "deep.jsonl", b"\n".join([*fine, deep_x, deep_id, *fine]) + b"\n", 1 << 20, ("id",), feeds)
    got = _outcomes(pieces)
    assert [got[n][0] for n in range(6)] == ["row", "row", "failed", "failed", "row", "row"], got
    assert got[2][1].startswith("'x' is nested too deep to read: 1,000 levels") and got[3][1].startswith("'id' is nested too deep to read"), got


@PROPERTY
@given(opened=st.lists(st.integers(0, 1100), min_size=1, max_size=6))
def test_the_json_lines_fast_path_takes_long_lines_that_open_at_most_1024_brackets(tmp_path: Path, opened: list[int]) -> None:
    """Lines over 2 KiB (shorter ones cannot nest past 1,024 levels) take pyarrow's reader when
    none opens more than 1,024 arrays and objects (strings' brackets counted: a bound, not the
    depth), as the line-by-line reader reads them; a chunk with one that opens more does not."""
    from sluice.batch.json_lines import _one_object_per_line
    from sluice.batch.readers import owned_by

    lines = [json.dumps({"id": n, "s": ("[{" * count)[:count] + "." * 2100}).encode() for n, count in enumerate(opened)]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    files = Files()
    stat = files.stat(path.as_uri())
    _, chunks = _plan_text(path.as_uri(), "jsonl", stat, files, 1 << 24)
    spec = JobSpec("acme", "job-1", "d", path.as_uri(), stat.version, "jsonl", "jsonl", "file:///out/", ("id",), ("id", "s"))
    assert _one_object_per_line(owned_by(files, spec, chunks[0])) == (max(opened) + 1 <= 1024)  # the line's own `{` counted


# The JSON Lines fast path against the slow one ---------------------------------------------------
NUMBER_TEXT = st.builds(
    lambda sign, whole, fraction, exponent: f"{sign}{whole}{fraction}{exponent}",
    st.sampled_from(["", "-"]),
    st.one_of(st.just("0"), st.from_regex(r"[1-9][0-9]{0,20}", fullmatch=True)),
    st.one_of(st.just(""), st.from_regex(r"\.[0-9]{1,25}", fullmatch=True)),
    st.one_of(st.just(""), st.integers(-330, 280).map(lambda e: f"e{e:+d}"), st.integers(0, 99).map(lambda e: f"E{e}")),
)
WORDS = st.text(max_size=8).filter(lambda t: "NaN" not in t and "Inf" not in t)  # either sends a line to the slow path
KEYS = (WORDS, st.integers(-(2**63), 2**63 - 1))  # a file's keys are one or the other (or null)
NUMBER_OR_NULL = st.one_of(NUMBER_TEXT, st.just("null"))


# Strategies of fixed arguments are built once (`sampled`, and these under `cache`): a strategy
# built anew inside a composite is validated again at every draw.
@cache
def _nullable(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), values)


@cache
def _permutations(values: tuple[str, ...]) -> st.SearchStrategy[list[str]]:
    return st.permutations(values)


@st.composite
def object_lines(draw: st.DrawFn) -> bytes:
    """JSON Lines of objects with a text or whole-number key and a number (written any way
    JSON allows), as most files are: the fast path's ground."""
    other = draw(sampled((None, "text", "list")))
    keys = _nullable(draw(sampled(KEYS)))
    lines = []
    for _ in range(draw(st.integers(1, 12))):
        fields = {"id": json.dumps(draw(keys), ensure_ascii=draw(st.booleans())), "x": draw(NUMBER_OR_NULL)}
        if other is not None:
            fields["other"] = json.dumps(draw(WORDS) if other == "text" else draw(st.lists(st.integers(0, 9), max_size=3)))
        names = draw(_permutations(tuple(fields)))[: draw(st.integers(0, len(fields)))]
        comma, colon = draw(sampled(((",", ":"), (", ", ": "), (" ,\t", " : "))))
        line = "{" + comma.join(f"{json.dumps(n)}{colon}{fields[n]}" for n in names) + "}"
        lines.append(line.encode() + draw(sampled((b"", b"\r"))))
    return b"".join(line + b"\n" for line in lines)


@PROPERTY
@given(data=object_lines())
def test_the_json_lines_fast_path_reads_what_the_slow_path_reads(tmp_path: Path, data: bytes) -> None:
    import pyarrow as pa

    from sluice.batch.json_lines import _jsonl_by_line, _one_object_per_line, read_json_lines
    from sluice.batch.readers import owned_by

    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    files = Files()
    stat = files.stat(path.as_uri())
    columns, chunks = _plan_text(path.as_uri(), "jsonl", stat, files, 1 << 20)
    spec = JobSpec("acme", "job-1", "d", path.as_uri(), stat.version, "jsonl", "jsonl", "file:///out/", ("id",), tuple(columns))
    feeds = [Feed("x", ("x",), "FP64", stacked=False)]
    owned = owned_by(files, spec, chunks[0])
    fast = read_json_lines(owned, spec, chunks[0], feeds, ["id", "x"])
    slow = _jsonl_by_line(owned, chunks[0], pa.schema([("id", pa.string()), ("x", pa.float64())]), feeds, keys={"id"})
    keyed = all(json.loads(line).get("id") is not None for line in data.splitlines())
    if not keyed:  # a line lacking its key, or one written null: read line by line, which tells them apart
        assert fast.reasons is not None and fast.reasons.tolist() == slow.reasons.tolist(), data
        assert [r is not None for r in slow.reasons] == ["id" not in json.loads(line) for line in data.splitlines()], data
    else:
        assert np.equal(slow.reasons, None).all() and not slow.dropped, data
        assert _one_object_per_line(owned) and fast.reasons is None, data  # the fast path was taken
    assert fast.rows.tolist() == slow.rows.tolist()
    assert fast.table.column("id").to_pylist() == slow.table.column("id").to_pylist(), data
    x = (fast.table.column("x").to_numpy(zero_copy_only=False), slow.table.column("x").to_numpy(zero_copy_only=False))
    assert np.array_equal(*x, equal_nan=True), (data, x)
