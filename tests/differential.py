"""The differential fuzzer's shared parts (tests/integration/test_differential.py): hypothesis
strategies that write CSV, JSON Lines and Parquet inputs and stream records for the demo
models, the reference reading of each (Python's `csv` module, `json.loads` per line, pyarrow),
ONNX Runtime called directly, and the comparison of what a driver answered with what the
reference expects. The rules the reference applies are written down in the test module.

Strategies take `avoid`, the names of input shapes not to generate (the known defects of the
drivers: the test module's `KNOWN_DEFECTS`), so that a property test keeps finding new
discrepancies while a known one waits for its fix.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from tests.conftest import MODELS
from tests.support import is_utf8, sampled

BOM = b"\xef\xbb\xbf"
JSON_SPACE = " \t\r\n"


# The models ----------------------------------------------------------------------------------
DEMO_FILES = {"iris": "iris.onnx", "diabetes": "diabetes_mlp.onnx"}


@cache
def session(deployment: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(MODELS / DEMO_FILES[deployment]), options, providers=["CPUExecutionProvider"])


@cache
def features(deployment: str) -> tuple[str, ...]:
    """The model's feature names, as its ONNX metadata says."""
    return tuple(session(deployment).get_modelmeta().custom_metadata_map["feature_names"].split(","))


@dataclass(frozen=True)
class Answer:
    """What ONNX Runtime answers for one row: a label and its probabilities (iris), or a value."""

    prediction: Any
    probabilities: dict[str, float] | None = None


def ort_answers(deployment: str, rows: np.ndarray) -> list[Answer]:
    """ONNX Runtime called directly on float32 rows [n, F]."""
    if not len(rows):
        return []
    outputs = session(deployment).run(None, {"input": np.ascontiguousarray(rows, dtype=np.float32)})
    if deployment == "iris":
        labels, probabilities = outputs
        return [Answer(str(label), {str(k): float(v) for k, v in p.items()}) for label, p in zip(labels, probabilities, strict=True)]
    return [Answer(float(value)) for value in np.asarray(outputs[0]).reshape(len(rows))]


# What the reference expects --------------------------------------------------------------------
class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()  # a key or id whose form the documentation leaves open: not compared


@dataclass(frozen=True)
class Valid:
    """A record the reference scores: its rows (float32 [k, F]), its key (batch) or id (stream),
    and whether the stream answers a list (`predictions`, a record of `batch` or of k != 1 rows)."""

    rows: np.ndarray
    key: Any = None
    several: bool = False

    def __repr__(self) -> str:
        return f"Valid({self.rows.tolist()}, key={self.key!r})"


@dataclass(frozen=True)
class Invalid:
    """A record the reference refuses, and why (the reason the driver gives is not compared)."""

    why: str
    key: Any = ANY


Record = Valid | Invalid


@dataclass
class Expected:
    records: list[Record] = field(default_factory=list)
    refused: str | None = None  # the whole input fails (at planning), and why
    may_refuse: str | None = None  # every record fails: failing at planning instead is right too

    @property
    def valid(self) -> list[tuple[int, Valid]]:
        return [(i, r) for i, r in enumerate(self.records) if isinstance(r, Valid)]

    @property
    def invalid(self) -> list[int]:
        return [i for i, r in enumerate(self.records) if isinstance(r, Invalid)]


# A number, as the reference reads one -----------------------------------------------------------
# docs/batch.md: "ASCII digits with an optional sign, decimal point and exponent, spaces or tabs
# around them, or nan / inf (which then fail their row as NaN and infinity do)".
TEXT_NUMBER = re.compile(
    r"[ \t]*[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|nan|inf|infinity)[ \t]*",
    re.IGNORECASE,
)


def feature_value(value: Any, *, booleans: bool = False) -> float | str:
    """The float32-ready value of one feature, or why it cannot feed the model. `booleans`:
    true/false are numbers (Parquet boolean columns; never JSON's true and false)."""
    if value is None:
        return "missing value"
    if isinstance(value, bool):
        if not booleans:
            return "true/false is not a number"
        number = float(value)
    elif isinstance(value, int | Decimal):
        try:
            number = float(value)
        except OverflowError:
            return "out of range"
    elif isinstance(value, float):
        number = value
    elif isinstance(value, str):
        if not TEXT_NUMBER.fullmatch(value):
            return f"not a number: {value[:20]!r}"
        number = float(value.strip(" \t"))
    else:
        return f"not a number: {type(value).__name__}"
    if not math.isfinite(number):
        return "NaN or infinite"
    with np.errstate(over="ignore"):
        if not np.isfinite(np.float32(number)):
            return "out of range for FP32"
    return number


def _row(values: list[float]) -> np.ndarray:
    return np.asarray([values], dtype=np.float32)


def _features_of(getter: Any, names: tuple[str, ...], **kw: Any) -> list[float] | str:
    out: list[float] = []
    for name in names:
        value = feature_value(getter(name), **kw)
        if isinstance(value, str):
            return f"{name!r}: {value}"
        out.append(value)
    return out


# JSON, strictly --------------------------------------------------------------------------------
class NotJson(ValueError):
    pass


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in items]
    if len(set(names)) != len(names):
        raise NotJson(f"an object names {sorted({n for n in names if names.count(n) > 1})} twice")
    return dict(items)


def _constant(name: str) -> Any:
    raise NotJson(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise NotJson(f"{text} is beyond float64's range")
    return number


def strict_json(text: str) -> Any:
    """RFC 8259 JSON: no NaN or Infinity, an object's names unique, numbers within float64's range
    (RFC 8259 §9 lets a parser limit the range: a number beyond it makes the text invalid)."""
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_finite)
    except (json.JSONDecodeError, NotJson, RecursionError) as exc:
        raise NotJson(str(exc)) from None


def text_line(raw: bytes) -> tuple[Any, str | None]:
    """A JSON line's value, or None and why it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    if not text.strip(JSON_SPACE):
        return None, "blank line"
    try:
        return strict_json(text), None
    except NotJson as exc:
        return None, f"not JSON: {exc}"


def _json_key(value: Any) -> Any:
    """A JSON Lines key as batch output carries it: text as it is, whole numbers as digits,
    other numbers compared by value; true/false and nested values are left open."""
    if value is None or isinstance(value, str | float):
        return value
    if isinstance(value, bool):
        return ANY
    if isinstance(value, int):
        return str(value)
    return ANY


# Reference readings ----------------------------------------------------------------------------
def expect_batch(fmt: str, data: bytes, deployment: str, key: str | None) -> Expected:
    reader = {"csv": expect_csv, "jsonl": expect_jsonl, "parquet": expect_parquet}[fmt]
    return reader(data, features(deployment), key)


def expect_csv(data: bytes, names: tuple[str, ...], key: str | None) -> Expected:
    """Python's csv module (RFC 4180 quoting, `\\n`, `\\r\\n` and `\\r` line ends), read from
    bytes: each field decoded as UTF-8 where sluice reads it (the key and the features)."""
    if not data:
        return Expected(refused="an empty file")
    if data.startswith(BOM):
        data = data[len(BOM) :]
    try:  # latin-1 keeps every byte as one character: the structure is ASCII
        rows = list(csv.reader(io.StringIO(data.decode("latin-1"), newline=""), strict=True))
    except csv.Error as exc:
        return Expected(refused=f"not CSV: {exc}")
    if not rows or not rows[0]:
        return Expected(refused="no header row")
    try:
        header = [n.encode("latin-1").decode("utf-8").strip() for n in rows[0]]
    except UnicodeDecodeError:
        return Expected(refused="a header that is not UTF-8")
    if len(set(header)) != len(header):
        return Expected(refused="a column named twice")
    if any(n not in header for n in names):
        return Expected(refused="a feature column is missing")
    records = rows[1:]
    if key is not None and key not in header and records:
        return Expected(refused="the key column is missing")
    at = {n: header.index(n) for n in header}
    out: list[Record] = []
    for row in records:
        if not row:
            out.append(Invalid("blank line", key=None))
            continue
        if len(row) != len(header):
            out.append(Invalid(f"{len(row)} fields", key=None))
            continue
        try:
            text = {n: row[at[n]].encode("latin-1").decode("utf-8") for n in (*names, *([key] if key else []))}
        except UnicodeDecodeError:
            out.append(Invalid("not UTF-8"))
            continue
        key_value = (text[key] or None) if key else None
        values = _features_of(lambda n, text=text: text[n] or None, names)
        out.append(Invalid(values, key_value) if isinstance(values, str) else Valid(_row(values), key_value))
    return Expected(out)


def json_lines(data: bytes) -> list[bytes]:
    """A JSON Lines text's lines: split at `\\n` only (a `\\r` before it is JSON whitespace, one
    elsewhere is part of its line); text after the last `\\n` is a line too, whatever it holds."""
    pieces = data.split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()
    return pieces


def expect_jsonl(data: bytes, names: tuple[str, ...], key: str | None) -> Expected:
    if data.startswith(BOM):
        data = data[len(BOM) :]
    if not data:
        return Expected(refused="an empty file (nothing but a BOM, maybe)")
    out: list[Record] = []
    named: set[str] = set()
    objects = 0
    for raw in json_lines(data):
        value, why = text_line(raw)
        if why is not None:
            out.append(Invalid(why))
            continue
        if not isinstance(value, dict):
            out.append(Invalid("not a JSON object"))
            continue
        objects += 1
        named.update(value)
        key_value = _json_key(value.get(key)) if key else None
        values = _features_of(value.get, names)
        if key is not None and key not in value and not isinstance(values, str):  # a line lacking its key fails (one written null is carried)
            values = f"the line has no key '{key}'"
        out.append(Invalid(values, key_value) if isinstance(values, str) else Valid(_row(values), key_value))
    if out and not objects:
        return Expected(out, may_refuse="no line is a JSON object")
    if objects and any(n not in named for n in names):
        return Expected(refused="a feature no line names")
    if key is not None and out and key not in named:
        return Expected(refused="a key column no line names")
    return Expected(out)


def expect_parquet(data: bytes, names: tuple[str, ...], key: str | None) -> Expected:
    """pyarrow's reading of the file: integer, floating, boolean and decimal columns are numbers;
    text columns (dictionary-encoded or not) hold numbers written as text; any other type is
    not a number."""
    table = pq.read_table(io.BytesIO(data))
    if any(n not in table.column_names for n in names):
        return Expected(refused="a feature column is missing")
    if key is not None and key not in table.column_names and table.num_rows:
        return Expected(refused="the key column is missing")
    columns = {n: _parquet_values(table.column(n)) for n in names}
    keys = table.column(key).to_pylist() if key else [None] * table.num_rows
    out: list[Record] = []
    for i in range(table.num_rows):
        values = _features_of(lambda n, i=i: columns[n][i], names, booleans=True)
        out.append(Invalid(values, keys[i]) if isinstance(values, str) else Valid(_row(values), keys[i]))
    return Expected(out)


class _NotANumber:
    def __repr__(self) -> str:
        return "<not a number>"


NOT_A_NUMBER = _NotANumber()


def _parquet_values(column: pa.ChunkedArray) -> list[Any]:
    kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    values = column.to_pylist()
    numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind) or pa.types.is_decimal(kind)
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if numeric or text:
        return values
    return [None if v is None else NOT_A_NUMBER for v in values]


# Stream records ---------------------------------------------------------------------------------
RECORD_KEYS = frozenset({"id", "features", "inputs", "batch", "routing_key", "variant", "deployment"})


def expect_stream(data: bytes, deployment: str) -> list[Record]:
    """`sluice stream`'s pipe: a BOM at its start is not part of line 1; every line, the text
    after the last newline included (whatever it holds), is one record."""
    if data.startswith(BOM):
        data = data[len(BOM) :]
    return [expect_record(raw, deployment) for raw in json_lines(data)]


def expect_record(raw: bytes, deployment: str) -> Record:
    """One stream record's body (docs/streaming.md, Records): a JSON object of `id` and exactly
    one of `features` (every feature, no other), `inputs` (rows of F numbers, or one row) or
    `batch` (rows or feature objects), with no other field than those a record may carry and
    no other deployment than its source's. An `id` is a string of at most 128 characters or an
    integer within 64 bits. Features are JSON numbers; text, true/false and null are not."""
    body, why = text_line(raw)
    if why is not None:
        return Invalid(why, key=None)
    if not isinstance(body, dict):
        return Invalid("not a JSON object", key=None)
    rid = body.get("id")
    if not _carried_id(rid):
        return Invalid("an id that is neither text of at most 128 characters nor a 64-bit integer", key=None)
    extra = set(body) - RECORD_KEYS
    if extra:
        return Invalid(f"unknown field {sorted(extra)[0]!r}", rid)
    if body.get("deployment") not in (None, deployment):
        return Invalid("another deployment", rid)
    if body.get("variant") is not None:
        return Invalid("not generated: variant", rid)
    given = [n for n in ("features", "inputs", "batch") if body.get(n) is not None]
    if len(given) != 1:
        return Invalid("not exactly one of features, inputs, batch", rid)
    names = features(deployment)
    shape = given[0]
    value = body[shape]
    if shape == "features":
        rows = [_feature_object(value, names)]
    elif shape == "inputs":
        if isinstance(value, list) and value and not any(isinstance(v, list) for v in value):
            value = [value]  # one row without its batch axis
        rows = _rows(value, names)
    else:
        rows = _rows(value, names, objects=True)
    bad = next((r for r in rows if isinstance(r, str)), None) if isinstance(rows, list) else rows
    if bad is not None:
        return Invalid(bad, rid)
    return Valid(np.asarray(rows, dtype=np.float32), rid, several="batch" in body or len(rows) != 1)


def _carried_id(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return value is None or len(value) <= 128
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value <= 2**64 - 1


def _number(value: Any) -> float | str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"not a JSON number: {value!r}"[:60]
    return feature_value(value)


def _feature_object(value: Any, names: tuple[str, ...]) -> list[float] | str:
    if not isinstance(value, dict):
        return "features is not an object"
    if set(value) != set(names):
        return "missing or unknown features"
    out = [_number(value[n]) for n in names]
    return next((v for v in out if isinstance(v, str)), out)  # type: ignore[return-value]


def _rows(value: Any, names: tuple[str, ...], *, objects: bool = False) -> list[Any] | str:
    if not isinstance(value, list) or not value:
        return "not a non-empty list of rows"
    rows: list[Any] = []
    for row in value:
        if objects and isinstance(row, dict):
            rows.append(_feature_object(row, names))
        elif isinstance(row, list) and len(row) == len(names):
            numbers = [_number(v) for v in row]
            rows.append(next((v for v in numbers if isinstance(v, str)), numbers))
        else:
            rows.append(f"not a row of {len(names)} numbers")
    return rows


# Cases ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchCase:
    """An input file for `sluice batch run`: its format and bytes, the deployment, the key
    column (`--key`), the chunk size (CSV, JSON Lines: `batch_chunk_bytes`; Parquet:
    `batch_chunk_rows`) and the output format (`--format`; None: the input's)."""

    format: str
    deployment: str
    data: bytes
    key: str | None = None
    chunk: int = 1 << 20
    output: str | None = None

    def expected(self) -> Expected:
        return expect_batch(self.format, self.data, self.deployment, self.key)


@dataclass(frozen=True)
class StreamCase:
    """`sluice stream --deployment D --batch-lines N < data`."""

    deployment: str
    data: bytes
    batch_lines: int = 4096

    def expected(self) -> list[Record]:
        return expect_stream(self.data, self.deployment)


@dataclass(frozen=True)
class EventCase:
    """Records for the stream Lambda, one body each, as an SQS or a Kinesis event."""

    deployment: str
    source: str  # "sqs", "sqs-fifo" or "kinesis"
    bodies: tuple[bytes, ...]
    batch_rows: int = 4096

    def expected(self) -> list[Record]:
        return [expect_record(body, self.deployment) for body in self.bodies]


# Strategies: values -----------------------------------------------------------------------------
NICE = (5.1, 3.5, 1.4, 0.2, 6.7, 3.0, 5.2, 2.3, 4.9, 0.0, 1.0, 7.0, 0.05, -0.04, 0.5, 100.0)
ODD_NUMBERS = (
    "", " ", "\t", "NaN", "nan", "-nan", "+NaN", "inf", "-inf", "+inf", "Infinity", "-Infinity", "INF",
    "infinity", "0x1", "0X1A", "0x1p3", "1_4", "1_000", "\u0661.4", "\u0663", "\uff11", "\u00bd", "true", "false", "True",
    "yes", "null", "None", "1.5.2", "e5", "1e", "1e+", "--1", "+-1", "1e39", "-1e39", "3.4028235e38",
    "3.4028236e38", "1e-50", "4.9e-324", "1e309", "1e400", "-1e400", "1d0", "nan(1)", "1f", "0b1",
    "1j", ". 5", "1 2", "\u00a01", "1\u00a0", "\v1", "1\f", "5.1 ", " +1 ", "\t-0.5\t", "00", "-0",
    "1E5", "1e-5", ".5", "5.", "+.5e-1", "0.000", "\uff11\uff12", "1,5", "5;1", "1\n", "\r1",
)  # fmt: skip


# Strategies of fixed arguments are built once (`sampled`, and the factories below under
# `cache`): a strategy built anew inside a composite is validated again at every draw.
@cache
def finite_values() -> st.SearchStrategy[float | int]:
    return st.one_of(
        sampled(NICE),
        st.floats(-100, 100, allow_nan=False, allow_infinity=False),
        st.integers(-20, 20),
    )


@cache
@st.composite
def number_text(draw: st.DrawFn) -> str:
    """A finite number, spelled one of the ways docs/batch.md allows."""
    value = draw(finite_values())
    style = draw(sampled(("repr", "fixed", "exp", "EXP", "whole", "dot")))
    if isinstance(value, int):
        text = {"fixed": f"{value}.0", "exp": f"{value}e0", "EXP": f"{value}E+00", "dot": f"{value}."}.get(style, str(value))
    elif style == "fixed":
        text = f"{value:.{draw(st.integers(0, 6))}f}"
    elif style in ("exp", "EXP"):
        text = f"{value:.{draw(st.integers(0, 8))}{'e' if style == 'exp' else 'E'}}"
    elif style == "dot" and 0 < abs(value) < 1:
        text = repr(value).replace("0.", ".", 1)
    else:
        text = repr(value)
    if not text.startswith("-") and draw(st.booleans()):
        text = "+" + text
    if draw(st.integers(0, 4)) == 0:
        text = draw(sampled((" ", "\t", "  "))) + text + draw(sampled(("", " ", "\t")))
    return text


@cache
@st.composite
def cell_number(draw: st.DrawFn, messy: bool = True) -> str:
    """What a feature cell holds: a number; in a `messy` record, now and then anything a
    number is confused with."""
    if not messy or draw(st.integers(0, 9)) < 7:
        return draw(number_text())
    return draw(sampled(ODD_NUMBERS))


@cache
def messy() -> st.SearchStrategy[bool]:
    """Whether a record's values may be wrong (one record in three): most records are clean,
    so that most are scored and compared with ONNX Runtime's answers."""
    return st.integers(0, 2).map(lambda n: n == 0)


ODD_TEXT = st.text(
    alphabet=st.sampled_from(list('ab ,;"\'\\\n\r\t\u2028\u00e9\u65e5\U0001f600\x00\x7f{}[]:#=')),
    max_size=6,
)


@cache
def odd_keys() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(["c-1041", "1041", "", " ", "a,b", 'a"b', '"', "x\ny", "x\r\ny", "x\ry", " lead", "trail ",
                         "é", "日本", "😀", "\u2028", "NULL", "null", "NaN", "true", "0x1", "1e3", "#", "=1+1"]),
        ODD_TEXT,
    )  # fmt: skip


NON_UTF8 = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\x80", b"\x80", b"\xfe\xff")


@cache
@st.composite
def chunk_size(draw: st.DrawFn, length: int) -> int:
    """Bytes (or rows) per chunk: from one that cuts every record (at most 16 chunks) to one
    that holds the whole input."""
    smallest = max(1, -(-length // 16))
    return draw(st.one_of(st.integers(smallest, max(smallest, length + 2)), st.just(1 << 20)))


# Strategies: CSV ---------------------------------------------------------------------------------
def _csv_quote(text: bytes) -> bytes:
    return b'"' + text.replace(b'"', b'""') + b'"'


@st.composite
def csv_cell(draw: st.DrawFn, value: bytes, *, bare_cr: bool) -> bytes:
    """A field as a CSV writer would put it (quoted where it must be, or anyway), and now and
    then as a careless one would (a comma left unquoted)."""
    must = any(c in value for c in (b",", b'"', b"\n", b"\r")) or value.startswith(b'"')
    if must:
        careless = b"," in value and not any(c in value for c in (b'"', b"\n", b"\r"))
        if careless and draw(st.integers(0, 5)) == 0:
            return value
        return _csv_quote(value)
    return _csv_quote(value) if draw(st.integers(0, 4)) == 0 else value


@st.composite
def csv_cases(draw: st.DrawFn, avoid: Collection[str] = ()) -> BatchCase:
    deployment = draw(sampled(("iris", "iris", "diabetes")))
    names = list(features(deployment))
    key = draw(sampled((None, "id")))
    extras = draw(st.lists(sampled(("note", "extra", "id2")), max_size=2, unique=True))
    columns = draw(st.permutations([*names, *extras, *(["id"] if key else [])]))
    bare_cr = "csv-bare-cr" not in avoid
    endings = [b"\n", b"\r\n", *([b"\r"] if bare_cr else [])]
    non_utf8 = "non-utf8" not in avoid

    def header_name(name: str) -> bytes:
        style = draw(sampled(("plain", "plain", "quoted", "padded", "quoted-padded")))
        text = name.encode()
        if "padded" in style:
            text = b" " + text + b" "
        return _csv_quote(text) if "quoted" in style else text

    lines = [b",".join(header_name(n) for n in columns)]
    for _ in range(draw(st.integers(0, 7))):
        shape = draw(st.integers(0, 19))
        if shape == 0:
            lines.append(b"")
            continue
        if shape == 1:
            lines.append(draw(sampled((b" ", b"\t", b"  "))))
            continue
        cells = []
        wrong = draw(messy())
        for column in columns:
            if column == "id":
                value = draw(odd_keys()).encode()
            elif column in names:
                value = draw(cell_number(wrong)).encode()
            else:
                value = draw(ODD_TEXT).encode()
            if non_utf8 and wrong and column in ("id", *names) and draw(st.integers(0, 9)) == 0:
                value += draw(sampled(NON_UTF8))
            cells.append(draw(csv_cell(value, bare_cr=bare_cr)))
        if shape == 2:  # a field too few, or too many
            cells = cells[:-1] if draw(st.booleans()) else [*cells, b"1"]
        lines.append(b",".join(cells))
    data = b""
    for i, line in enumerate(lines):
        data += line
        if i < len(lines) - 1 or draw(st.integers(0, 3)):
            data += draw(st.sampled_from(endings))
    if draw(st.integers(0, 9)) == 0:
        data = BOM + data
    output = draw(sampled((None, None, "csv", "jsonl", "parquet")))
    return BatchCase("csv", deployment, data, key, draw(chunk_size(len(data))), output)


# Strategies: JSON --------------------------------------------------------------------------------
@cache
@st.composite
def json_number(draw: st.DrawFn, wrong: bool = True, *, big: bool = True) -> str:
    """A JSON number token: valid (in many spellings), or where it may be `wrong`, now and then
    one JSON does not allow, one out of range, or (`big`) a whole number beyond 2**53."""
    kind = draw(st.integers(0, 9)) if wrong else 2
    if kind == 0:
        return draw(sampled(("+1", "01", ".5", "5.", "NaN", "Infinity", "-Infinity", "0x1", "1_0", "- 1")))
    if kind == 1:
        large = ["123456789012345678901234567890", "18446744073709551615", "9007199254740993", "-9223372036854775809"]
        return draw(st.sampled_from(["1e400", "-1e400", "1E-400", "1e39", "-0", "-0.0", "0e0", *(large if big else [])]))
    value = draw(finite_values())
    if isinstance(value, int):
        return draw(st.sampled_from([str(value), f"{value}.0", f"{value}e0", f"{value}E+0", f"{value}.000e-0"]))
    style = draw(sampled(("repr", "exp", "fixed")))
    if style == "exp":
        return f"{value:.{draw(st.integers(0, 8))}e}"
    if style == "fixed":
        text = f"{value:.{draw(st.integers(1, 6))}f}"
        return text
    return json.dumps(value)


def json_string(text: str, *, ascii_only: bool) -> bytes:
    return json.dumps(text, ensure_ascii=ascii_only).encode()


@cache
@st.composite
def json_name(draw: st.DrawFn, name: str) -> bytes:
    """A member name, now and then with a character written as a \\u escape (the same name)."""
    if draw(st.integers(0, 9)) == 0 and name:
        at = draw(st.integers(0, len(name) - 1))
        return b'"' + name[:at].encode() + f"\\u{ord(name[at]):04x}".encode() + name[at + 1 :].encode() + b'"'
    return json.dumps(name).encode()


@cache
@st.composite
def json_feature(draw: st.DrawFn, *, text_numbers: bool, non_utf8: bool, wrong: bool = True, big: bool = True) -> bytes | None:
    """A feature's value as JSON text (None: the member is left out): a number, or in a record
    that may be `wrong`, now and then anything else."""
    kind = draw(st.integers(0, 29)) if wrong else 0
    if kind < 20:
        return draw(json_number(wrong, big=big)).encode()
    if kind < 25 and text_numbers:
        raw = json_string(draw(cell_number(wrong)), ascii_only=draw(st.booleans()))
        if non_utf8 and draw(st.integers(0, 5)) == 0:
            raw = raw[:-1] + draw(sampled(NON_UTF8)) + b'"'
        return raw
    if kind == 25:
        return None
    return draw(sampled((b"null", b"true", b"false", b"[1]", b'{"v": 1}', b'""', b"[]", b'"5.1"')))


@cache
@st.composite
def json_key_value(draw: st.DrawFn, *, non_utf8: bool, scalar: bool = False) -> bytes | None:
    """A key's (or id's) value: text, a number, null, left out, or (unless `scalar`) true,
    false, a list or an object."""
    kind = draw(st.integers(0, 8 if scalar else 9))
    if kind < 5:
        raw = json_string(draw(odd_keys()), ascii_only=draw(st.booleans()))
        if non_utf8 and draw(st.integers(0, 5)) == 0:
            raw = raw[:-1] + draw(sampled(NON_UTF8)) + b'"'
        return raw
    if kind < 7:
        return str(draw(st.integers(-(2**63), 2**63 - 1) | st.integers(0, 10**6))).encode()
    if kind == 7:
        return draw(json_number()).encode()
    if kind == 8:
        return None
    return draw(sampled((b"null", b"true", b"false", b"[1, 2]", b'{"a": "b"}', b"1.5", b"-0")))


@st.composite
def json_object(draw: st.DrawFn, members: list[tuple[str, bytes | None]], *, twice: Collection[str] = ()) -> bytes:
    """An object of these members (None: left out), in any order and spacing; now and then
    one of the names in `twice` named twice."""
    present = [(n, v) for n, v in members if v is not None]
    present = draw(st.permutations(present))
    doubled = [n for n, _ in present if n in twice]
    if doubled and draw(st.integers(0, 9)) == 0:
        name = draw(st.sampled_from(doubled))
        present.insert(draw(st.integers(0, len(present))), (name, draw(json_number()).encode()))
    space = draw(sampled((b"", b" ", b"\t", b"  ")))
    parts = [draw(json_name(n)) + b":" + space + v for n, v in present]
    return b"{" + space + (b"," + space).join(parts) + space + b"}"


LINE_END = (b"\n", b"\n", b"\n", b"\r\n")


def _assemble(draw: st.DrawFn, lines: list[bytes], *, bom: bool, tail: bool) -> bytes:
    data = b""
    for i, line in enumerate(lines):
        data += line
        if i < len(lines) - 1 or draw(st.integers(0, 3)):
            data += draw(sampled(LINE_END))
    if tail and data.endswith(b"\n") and draw(st.integers(0, 9)) == 0:
        data += draw(sampled((b" ", b"\t", b"\r", b"  \t")))  # a whitespace-only last fragment
    if bom and draw(st.integers(0, 9)) == 0:
        data = BOM + data
    return data


OTHER_LINES = (b"", b"", b" ", b"\t", b"\r", b"1", b'"x"', b"[]", b"[1, 2]", b"true", b"{", b'{"a":', b"}", b"{}", b"nul")


@st.composite
def jsonl_cases(draw: st.DrawFn, avoid: Collection[str] = ()) -> BatchCase:
    deployment = draw(sampled(("iris", "iris", "diabetes")))
    names = features(deployment)
    key = draw(sampled((None, "id")))
    non_utf8 = "non-utf8" not in avoid
    others = [*OTHER_LINES, *([b"null", b" null ", b"null\r"] if "jsonl-null-line" not in avoid else [])]
    lines: list[bytes] = []
    two_on_a_line = False
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            lines.append(draw(st.sampled_from(others)))
            continue
        wrong = draw(messy())
        big = "jsonl-big-integer" not in avoid
        members = [(n, draw(json_feature(text_numbers=True, non_utf8=non_utf8, wrong=wrong, big=big))) for n in names]
        if key:
            members.append((key, draw(json_key_value(non_utf8=non_utf8, scalar="jsonl-key-not-text" in avoid))))
        if draw(st.integers(0, 5)) == 0:
            extra = json_string(draw(ODD_TEXT), ascii_only=False)
            if non_utf8 and "jsonl-non-utf8-ignored" not in avoid and draw(st.booleans()):
                extra = extra[:-1] + draw(sampled(NON_UTF8)) + b'"'
            members.append(("note", extra))
        line = draw(json_object(members, twice=() if "duplicate-feature" in avoid else names))
        if kind == 1:  # something after the object
            extra_object = draw(json_object([(n, draw(json_number(False)).encode()) for n in names]))
            after = draw(st.sampled_from([b" " + extra_object, b"\r" + extra_object, b",", b" x", b"\r", b" \t"]))
            two_on_a_line |= after.endswith(b"}")
            line += after
        lines.append(line)
    no_blank = two_on_a_line and "jsonl-two-objects-and-blank" in avoid
    if no_blank:
        lines = [line if line.strip() else b"{" for line in lines]  # a bad line, not a blank one
    data = _assemble(draw, lines, bom="jsonl-bom" not in avoid, tail=not no_blank)
    if "jsonl-first-object-incomplete" in avoid:
        data = _complete_first_object(data, names, key)
    if "jsonl-first-object-unterminated" in avoid:
        data = _terminate_a_lone_last_object(data)
    output = draw(sampled((None, None, "csv", "jsonl", "parquet")))
    return BatchCase("jsonl", deployment, data, key, draw(chunk_size(len(data))), output)


def _objects(data: bytes) -> list[int]:
    """The numbers of the lines that are JSON objects."""
    return [i for i, raw in enumerate(json_lines(data.removeprefix(BOM))) if isinstance(text_line(raw)[0], dict)]


def _complete_first_object(data: bytes, names: tuple[str, ...], key: str | None) -> bytes:
    """Put a line naming every column (with null values) first, unless the first object line
    names them all (see KNOWN_DEFECTS: jsonl-first-object-incomplete)."""
    bom, start = (BOM, data[len(BOM) :]) if data.startswith(BOM) else (b"", data)
    first = {n: None for n in (*names, *([key] if key else []))}
    objects = _objects(start)
    if objects and all(n in text_line(json_lines(start)[objects[0]])[0] for n in first):
        return data
    return bom + json.dumps(first).encode() + b"\n" + start


def _terminate_a_lone_last_object(data: bytes) -> bytes:
    """End the input with a newline where its first object is its last line and has none
    (see KNOWN_DEFECTS: jsonl-first-object-unterminated)."""
    if data.endswith(b"\n"):
        return data
    objects = _objects(data)
    return data + b"\n" if objects and objects[0] == len(json_lines(data.removeprefix(BOM))) - 1 else data


# Strategies: Parquet -----------------------------------------------------------------------------
NUMERIC_TYPES = ("float64", "float32", "int64", "int32", "int8", "uint64", "bool", "decimal", "string", "large_string", "dictionary")
ODD_TYPES = ("list", "struct", "null")
KEY_TYPES = ("string", "string", "large_string", "int64", "float64", "dictionary", "list")


@cache
@st.composite
def _parquet_value(draw: st.DrawFn, kind: str, wrong: bool, avoid: Collection[str] = ()) -> Any:
    """A cell of a column of this kind; where it may be `wrong`, now and then null, NaN,
    infinite, out of FP32's range, or text that is not a number."""
    odd = wrong and draw(st.integers(0, 3)) == 0
    nullable = not (kind == "bool" and "parquet-boolean-null" in avoid)
    if kind == "null" or (odd and nullable and draw(st.integers(0, 2)) == 0):
        return None
    if kind in ("float64", "float32"):
        specials = [math.nan, math.inf, -math.inf, 1e39, -0.0, 5e-324] if kind == "float64" else [math.nan, math.inf, -0.0]
        return draw(st.sampled_from(specials)) if odd else float(draw(finite_values()))
    if kind in ("int64", "int32", "int8"):
        bits = int(kind[3:])
        return draw(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if draw(st.integers(0, 5)) == 0 else st.integers(-10, 10))
    if kind == "uint64":
        return draw(st.integers(0, 2**64 - 1) | st.integers(0, 10))
    if kind == "bool":
        return draw(st.booleans())
    if kind == "decimal":
        return Decimal(f"{float(draw(finite_values())):.3f}")
    if kind in ("string", "large_string", "dictionary"):
        return draw(cell_number(odd))
    if kind == "list":
        return [float(draw(finite_values()))]
    return {"v": float(draw(finite_values()))}


def _parquet_array(kind: str, values: list[Any]) -> pa.Array:
    types = {
        "float64": pa.float64(), "float32": pa.float32(), "int64": pa.int64(), "int32": pa.int32(), "int8": pa.int8(),
        "uint64": pa.uint64(), "bool": pa.bool_(), "decimal": pa.decimal128(12, 3), "string": pa.string(),
        "large_string": pa.large_string(), "dictionary": pa.string(), "list": pa.list_(pa.float64()),
        "struct": pa.struct([("v", pa.float64())]), "null": pa.null(),
    }  # fmt: skip
    if kind == "float32":
        array = pa.array(np.asarray([0.0 if v is None else v for v in values], dtype=np.float32), mask=np.asarray([v is None for v in values], dtype=bool))
    else:
        array = pa.array(values, type=types[kind])
    return array.dictionary_encode() if kind == "dictionary" else array


@st.composite
def parquet_cases(draw: st.DrawFn, avoid: Collection[str] = ()) -> BatchCase:
    deployment = draw(sampled(("iris", "iris", "diabetes")))
    names = features(deployment)
    rows = draw(st.integers(0, 10))
    wrong = draw(messy())
    kinds = [k for k in (*NUMERIC_TYPES, *(ODD_TYPES if wrong else ())) if not (k == "dictionary" and "parquet-dictionary-numbers" in avoid)]
    columns: dict[str, pa.Array] = {}
    for name in names:
        kind = draw(st.sampled_from(kinds)) if draw(st.booleans()) else "float64"
        columns[name] = _parquet_array(kind, [draw(_parquet_value(kind, wrong, avoid)) for _ in range(rows)])
    key = draw(sampled((None, "id")))
    output = draw(sampled((None, None, "csv", "jsonl", "parquet")))
    if key:
        kind = draw(sampled(tuple(k for k in KEY_TYPES if not (k == "list" and output == "csv"))))
        if kind in ("string", "large_string", "dictionary"):
            values = [None if draw(st.integers(0, 9)) == 0 else draw(odd_keys()) for _ in range(rows)]
        elif kind == "int64":
            values = [draw(st.integers(-(2**63), 2**63 - 1) | st.none()) for _ in range(rows)]
        elif kind == "float64":
            values = [draw(st.floats(allow_nan=False) | st.none()) for _ in range(rows)]
        else:
            values = [draw(st.lists(st.integers(-5, 5), max_size=3) | st.none()) for _ in range(rows)]
        kind_of = {"int64": "int64", "float64": "float64", "list": "list"}
        array = pa.array(values, type=pa.list_(pa.int64())) if kind == "list" else _parquet_array(kind_of.get(kind, kind), values)
        columns[key] = array
    for extra in draw(st.lists(sampled(("note", "nested", "tags")), max_size=2, unique=True)):
        columns[extra] = (
            pa.array([{"a": [1, 2], "b": {"c": "d"}}] * rows) if extra == "nested"
            else pa.array([["x", None]] * rows) if extra == "tags"
            else pa.array([draw(ODD_TEXT) for _ in range(rows)], type=pa.string())
        )  # fmt: skip
    order = draw(st.permutations(list(columns)))
    table = pa.table({n: columns[n] for n in order})
    buffer = io.BytesIO()
    pq.write_table(
        table, buffer, row_group_size=draw(st.integers(1, max(rows, 1))),
        use_dictionary=draw(st.booleans()), compression=draw(sampled(("snappy", "none", "zstd"))),
    )  # fmt: skip
    return BatchCase("parquet", deployment, buffer.getvalue(), key, draw(st.integers(1, max(rows + 1, 1))), output)


def parquet_file(columns: dict[str, pa.Array | list[Any]], *, row_group_size: int | None = None) -> bytes:
    """A Parquet file of these columns (for the regression examples)."""
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer, row_group_size=row_group_size)
    return buffer.getvalue()


# Strategies: stream records -----------------------------------------------------------------------
@cache
@st.composite
def json_row(draw: st.DrawFn, width: int) -> bytes:
    """A row of `width` numbers; one record in three may be wrong (its length, its values)."""
    wrong = draw(messy())
    count = draw(st.sampled_from([width] * 4 + [width - 1, width + 1])) if wrong else width
    values = [
        draw(json_number(wrong)) if not wrong or draw(st.integers(0, 9)) else draw(sampled(("null", '"5.1"', "true")))
        for _ in range(count)
    ]
    return b"[" + ", ".join(values).encode() + b"]"


@cache
@st.composite
def stream_record(draw: st.DrawFn, deployment: str, avoid: Collection[str] = ()) -> bytes:
    """One stream record's body, mostly `{id, features}` (the hot path), and the other request
    shapes and the mistakes of docs/streaming.md."""
    names = features(deployment)
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return draw(sampled((*OTHER_LINES, b"null", b'{"id": 1}', b'{"features": null}')))
    members: list[tuple[str, bytes | None]] = [("id", draw(json_key_value(non_utf8=True)))]  # refused as a record
    if kind <= 14:
        wrong = draw(messy())
        feature_members = [(n, draw(json_feature(text_numbers=False, non_utf8=False, wrong=wrong))) for n in names]
        if wrong and draw(st.integers(0, 9)) == 0:
            feature_members.append((draw(st.sampled_from(["color", names[0].upper(), " " + names[0]])), b"1"))
        value = draw(json_object(feature_members, twice=() if "duplicate-feature" in avoid else names))
        members.append(("features", value))
    elif kind <= 16:
        row = draw(json_row(len(names)))
        members.append(("inputs", row if draw(st.booleans()) else b"[" + row + b"]"))
    else:
        rows = []
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.booleans()):
                rows.append(draw(json_row(len(names))))
            else:
                rows.append(draw(json_object([(n, draw(json_number(False)).encode()) for n in names])))
        members.append(("batch", b"[" + b", ".join(rows) + b"]"))
    extra = draw(st.integers(0, 19))
    if extra == 0:
        members.append(draw(st.sampled_from([("tenant", b'"acme"'), ("extra", b"1"), ("deployment", b'"diabetes"' if deployment == "iris" else b'"iris"')])))
    elif extra == 1:
        members.append(draw(st.sampled_from([("deployment", json.dumps(deployment).encode()), ("routing_key", b'"k-1"'), ("routing_key", b"7")])))
    return draw(json_object(members))


@st.composite
def stream_cases(draw: st.DrawFn, avoid: Collection[str] = ()) -> StreamCase:
    deployment = draw(sampled(("iris", "iris", "diabetes")))
    lines = draw(st.lists(stream_record(deployment, avoid), max_size=8))
    data = _assemble(draw, lines, bom="stream-bom" not in avoid, tail="stream-whitespace-tail" not in avoid)
    last = data.rpartition(b"\n")[2]
    if "stream-whitespace-tail" in avoid and last and not last.strip():
        data += b"\n"  # a whitespace-only line, not the last fragment
    return StreamCase(deployment, data, draw(sampled((1, 2, 3, 4096))))


@st.composite
def event_cases(draw: st.DrawFn, avoid: Collection[str] = ()) -> EventCase:
    deployment = draw(sampled(("iris", "iris", "diabetes")))
    source = draw(sampled(("sqs", "sqs-fifo", "kinesis")))
    bodies = draw(st.lists(stream_record(deployment, avoid), min_size=1, max_size=10))
    if source.startswith("sqs"):  # an SQS body is text, of one character at least
        bodies = [b for b in bodies if b and is_utf8(b)] or [b"{}"]
    else:  # a Kinesis record's data is one byte at least
        bodies = [b for b in bodies if b] or [b"{}"]
    return EventCase(deployment, source, tuple(bodies), draw(sampled((1, 2, 3, 4096))))


# What a driver answered, compared --------------------------------------------------------------
PROBABILITY_TOLERANCE = {"rel_tol": 1e-4, "abs_tol": 1e-6}


@dataclass
class BatchRun:
    """What `sluice batch run` left: its exit code, the job it printed, the scored rows of its
    parts in part order, its error records, and whether `_SUCCESS` was written."""

    code: int
    job: dict[str, Any]
    parts: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    success_marker: bool
    stderr: str = ""


def same_key(expected: Any, got: Any) -> bool:
    """A carried key equals the input's: text as text (empty text and a missing value alike:
    CSV has no null), numbers by value (JSON has no NaN or infinity: null stands for them)."""
    if expected is ANY:
        return True
    if expected is None or expected == "":
        return got is None or got == ""
    if isinstance(expected, bool):
        return got == expected or str(got).lower() == str(expected).lower()
    if isinstance(expected, float):
        if got is None:
            return not math.isfinite(expected)
        try:
            number = float(got)
        except (TypeError, ValueError):
            return False
        return number == expected or (math.isnan(number) and math.isnan(expected))
    if isinstance(expected, int):
        return got == expected or got == str(expected)
    return bool(got == expected)


def _close(got: Any, want: float, **tolerance: float) -> bool:
    """Within tolerance; NaN for NaN (null in JSON, which has no NaN)."""
    if got is None or got == "":
        return math.isnan(want)
    number = float(got)
    return math.isclose(number, want, **tolerance) or (math.isnan(number) and math.isnan(want))


def assert_answer(deployment: str, expected: Answer, prediction: Any, probabilities: dict[str, Any] | None, confidence: Any, where: str) -> None:
    if deployment == "iris":
        assert prediction == expected.prediction, f"{where}: predicted {prediction!r}, ONNX Runtime {expected.prediction!r}"
        assert expected.probabilities is not None and probabilities is not None, where
        assert set(probabilities) == set(expected.probabilities), f"{where}: classes {sorted(probabilities)}"
        for label, p in expected.probabilities.items():
            assert _close(probabilities[label], p, **PROBABILITY_TOLERANCE), (
                f"{where}: probability of {label} {probabilities[label]}, ONNX Runtime {p}"
            )
        top = max(expected.probabilities.values(), key=lambda p: -math.inf if math.isnan(p) else p)
        assert _close(confidence, top, **PROBABILITY_TOLERANCE), f"{where}: confidence {confidence}, ONNX Runtime's top probability {top}"
    else:
        assert _close(prediction, expected.prediction, rel_tol=1e-4, abs_tol=1e-4), (
            f"{where}: predicted {prediction!r}, ONNX Runtime {expected.prediction!r}"
        )


def _batch_answer(deployment: str, row: dict[str, Any], where: str) -> tuple[Any, dict[str, Any] | None, Any]:
    if deployment != "iris":
        return row["prediction"], None, None
    probabilities = {k.removeprefix("probability_"): v for k, v in row.items() if k.startswith("probability_")}
    return row["prediction"], probabilities, row["confidence"]


def check_batch(case: BatchCase, expected: Expected, run: BatchRun) -> None:
    """Every record of the reference ends exactly once: a valid one scored (ONNX Runtime's
    answer, its key carried, in input order), an invalid one as an error record with a reason.
    The job's counts and status say the same."""
    job, status = run.job, run.job.get("status")
    scored = len(run.parts)
    context = f"job {status} ({job.get('error')}), exit {run.code}"
    if expected.refused is not None:
        assert status == "FAILED" and run.code != 0, f"the reference refuses the input ({expected.refused}); {context}"
        assert not scored and not run.success_marker, f"a refused input scored {scored} rows"
        return
    if expected.may_refuse is not None and status == "FAILED" and not scored and not run.errors and job.get("rows_total") in (None, 0):
        return  # refused at planning: "no line near the start of the input is a JSON object"
    valid, invalid = expected.valid, expected.invalid
    # Errors first: each invalid record once, with a reason; its key, where given, its own.
    rows = sorted(e.get("row") for e in run.errors)
    if rows != invalid and job.get("counts"):
        reasons = {e.get("row"): e.get("reason") for e in run.errors}
        differ = [
            f"row {i}: sluice {'refuses it (' + str(reasons[i]) + ')' if i in reasons else 'does not refuse it'}, "
            f"the reference {'refuses it (' + r.why + ')' if isinstance(r, Invalid) else 'scores it'}"
            for i, r in enumerate(expected.records) if (i in reasons) != isinstance(r, Invalid)
        ]  # fmt: skip
        raise AssertionError(("; ".join(differ) or f"error records for rows {rows}, the reference refuses rows {invalid}") + f"; {context}")
    counts = job.get("counts") or {}
    want = {"rows_in": len(expected.records), "rows_out": len(valid), "rows_failed": len(invalid)}
    got = {k: counts.get(k) for k in want}
    assert got == want, f"counts {got}, the reference {want}; {context}"
    ok = bool(valid) or not expected.records
    assert status == ("SUCCEEDED" if ok else "FAILED"), f"{context}; the reference scores {len(valid)} of {len(expected.records)} rows"
    assert run.code == (0 if ok else 1), context
    assert run.success_marker == ok, f"_SUCCESS {'missing' if ok else 'written'}; {context}"
    assert rows == invalid, f"error records for rows {rows}, the reference refuses rows {invalid}"
    for error in run.errors:
        assert isinstance(error.get("reason"), str) and error["reason"], f"an error record without a reason: {error}"
        record = expected.records[error["row"]]
        if case.key and error.get(case.key) is not None:
            assert same_key(record.key, error[case.key]), f"row {error['row']}: error key {error[case.key]!r}, input {record.key!r}"
    # Scored rows: each valid record once, in input order, with ONNX Runtime's answer.
    assert scored == len(valid), f"{scored} rows scored, the reference scores {len(valid)}"
    if case.key:
        keys = [row.get(case.key) for row in run.parts]
        for (i, record), key in zip(valid, keys, strict=True):
            assert same_key(record.key, key), f"row {i}: key {key!r}, input {record.key!r} (keys in order: {keys})"
    else:
        numbers = [row.get("row") for row in run.parts]
        assert [int(n) for n in numbers] == [i for i, _ in valid], f"rows scored {numbers}, the reference's valid rows {[i for i, _ in valid]}"
    answers = ort_answers(case.deployment, np.concatenate([r.rows for _, r in valid]) if valid else np.empty((0, 0)))
    for (i, _), answer, row in zip(valid, answers, run.parts, strict=True):
        assert_answer(case.deployment, answer, *_batch_answer(case.deployment, row, f"row {i}"), where=f"row {i}")


def same_id(expected: Any, got: Any) -> bool:
    """A stream output's id is the record's, as given: of the same JSON type and value; an
    empty id is none (null), as the API takes an empty request_id."""
    if expected == "":
        expected = None
    return type(got) is type(expected) and got == expected


def check_stream(deployment: str, expected: list[Record], outputs: list[dict[str, Any]], positions: list[dict[str, Any]]) -> None:
    """One output per record, naming the record's position (`positions`, or more): a valid record's answer is ONNX
    Runtime's (with its id), an invalid one's is an error (not a retry), with a reason."""
    assert len(outputs) == len(expected), f"{len(outputs)} outputs for {len(expected)} records"
    rows = [r.rows for r in expected if isinstance(r, Valid)]
    answers = iter(ort_answers(deployment, np.concatenate(rows) if rows else np.empty((0, 0))))
    for n, (record, out, position) in enumerate(zip(expected, outputs, positions, strict=True)):
        where = f"record {n}"
        source = out.get("source")
        assert isinstance(source, dict) and position.items() <= source.items(), f"{where}: source {source}, expected {position}"
        if isinstance(record, Invalid):
            assert isinstance(out.get("error"), str) and out["error"], f"{where}: the reference refuses it ({record.why}); got {out}"
            assert not out.get("retryable"), f"{where}: retried, not refused: {out}"
            if record.key is not ANY and record.key is not None:
                assert same_id(record.key, out.get("id")), f"{where}: error id {out.get('id')!r}, the record's {record.key!r}"
            continue
        assert "error" not in out, f"{where}: the reference scores it ({record.rows.tolist()}); got {out}"
        assert same_id(record.key, out.get("id")), f"{where}: id {out.get('id')!r}, the record's {record.key!r}"
        assert out.get("deployment") == deployment, where
        answered = out["predictions"] if record.several else [out]
        assert len(answered) == len(record.rows), f"{where}: {len(answered)} predictions for {len(record.rows)} rows"
        for answer, got in zip([next(answers) for _ in record.rows], answered, strict=True):
            assert_answer(deployment, answer, got.get("prediction"), got.get("probabilities"), got.get("confidence"), where)
