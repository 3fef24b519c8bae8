"""JSON text from outside sluice's HTTP API nested too deep to read: refused alone, as bad
input naming its top-level member, never as its batch's or its process's crash.

The HTTP API's body parser (pydantic's) refuses JSON nested past `API_DEPTH` levels. The other
doors (stream records and `sluice stream`'s lines, a batch job's JSON Lines, a JSON upload, the
CLI's JSON arguments and files) parse with orjson, which reads `PARSER_DEPTH` levels, or with
Python's json module; what reads the parsed value then walks it by recursion, and Python's
stack holds fewer levels than orjson reads. No text is measured on the way in (that would cost
every record): JSON is read as the parser reads it, and

- orjson's own refusal of deeper text is told apart from text that is not JSON (`loads`,
  whatever orjson's message says: by the text, only once it has failed);
- where a door walks the value, the `RecursionError` of one nested too deep for the stack is
  that input's `NestedTooDeep` (`too_deep`), found in the text only once it has failed.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from sluice.domain.errors import BadRequest

API_DEPTH = 200  # the HTTP API's parser (pydantic's) reads 200 levels; no shallower text is called too deep
PARSER_DEPTH = 1024  # orjson reads 1,024 levels, the outermost counted, and refuses 1,025
_OPENINGS = frozenset(b"[{")
TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"(?:[ \t\r\n]*:)?|[\[\]{}]')  # a string (a member's name: with its colon), or a bracket


class NestedTooDeep(BadRequest):
    """JSON nested too deep to read; `field` names the top-level member that is (`body` when
    the text is no object)."""


def loads(text: bytes | str) -> Any:
    """`text` parsed by orjson: `NestedTooDeep` where it nests past what orjson reads, else
    as orjson reads it (not JSON: `orjson.JSONDecodeError`), its integers exact (`exact_where_long`)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        refused = past_the_parser(exc)
        if refused is not None:
            raise refused from None
        raise
    return exact_where_long(text, value)


_LONG_DIGITS = re.compile(rb"\d{19}")
_LONG_DIGITS_TEXT = re.compile(r"\d{19}")


def exact_where_long(text: bytes | str, value: Any) -> Any:
    """`value`, orjson's reading of `text`, read again keeping every integer exact where the text
    has a run of 19 digits or more: orjson reads an integer past 64 bits as a float
    (-9223372036854775809 as -2**63 exactly, which an INT64 input then took; 2**64 as
    1.8446744073709552e+19, which a BYTES input took as that text), where the HTTP API's parser
    keeps it whole, for the checks to refuse it or take it as written. Python's json module reads
    it again: orjson accepted the text, so it holds no NaN, Infinity or number past a double's range,
    which Python's would take. A search in C; a 19-digit run in a string or a fraction costs the
    second reading alone."""
    long = (_LONG_DIGITS_TEXT if isinstance(text, str) else _LONG_DIGITS).search(text)  # type: ignore[arg-type]
    if long is None:
        return value
    import json

    return json.loads(text)


def loads_as_python(text: bytes | str) -> Any:
    """`text` as Python's json module reads it (NaN, Infinity, integers of any size: the
    CLI's arguments and files): `NestedTooDeep` where it nests deeper than the stack holds
    (not JSON: `json.JSONDecodeError`)."""
    import json

    try:
        return json.loads(text)
    except RecursionError:
        refused = too_deep(text)
        if refused is None:
            raise
        raise refused from None


def past_the_parser(exc: orjson.JSONDecodeError) -> NestedTooDeep | None:
    """The refusal to give when orjson failed on text because it nests past `PARSER_DEPTH`
    (`exc.doc` is the text as orjson read it, `exc.pos` where it stopped), or None when it
    failed for another reason. Told by the text, not by orjson's message, which its versions
    word differently."""
    doc, pos = exc.doc, exc.pos
    if not isinstance(doc, str) or not 0 <= pos < len(doc):
        return None
    read = doc[: pos + 1]
    if read.count("[") + read.count("{") <= PARSER_DEPTH:  # a count in C, before the closer look
        return None
    depth, name = nesting(read)
    return nested_too_deep(name, f"more than {PARSER_DEPTH:,}") if depth > PARSER_DEPTH else None


def too_deep(text: bytes | str) -> NestedTooDeep | None:
    """The refusal to give for `text`, whose value made its reader exhaust the stack (a
    `RecursionError`): `NestedTooDeep` naming its deepest member, or None when it nests no
    deeper than `API_DEPTH` (the stack ran out for another reason: not the input's fault)."""
    depth, name = nesting(text)
    return nested_too_deep(name, f"{depth:,}") if depth > API_DEPTH else None


def nested_too_deep(name: str | None, levels: str | None = None) -> NestedTooDeep:
    """The refusal of JSON nested too deep in its member `name` (None: the text as a whole, or
    a text that is no object), `levels` deep where that is known."""
    where = f"'{name}'" if name is not None else "the JSON"
    deep = f"{levels} levels of arrays and objects, the outermost counted" if levels else "its arrays and objects nest deeper than the reader walks"
    return NestedTooDeep(f"{where} is nested too deep to read: {deep} (the HTTP API reads at most {API_DEPTH})", field=name or "body")


def nesting(text: bytes | str) -> tuple[int, str | None]:
    """How deep `text`'s arrays and objects nest, the outermost counted, and the top-level
    member (of an object's text) where they first nest that deep; from the text alone, valid
    JSON or not: for text a reader gave up on."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    depth = deepest = 0
    name = member = None
    for token in TOKEN.finditer(data):
        mark = token.group()
        if len(mark) == 1:
            if mark[0] in _OPENINGS:
                depth += 1
                if depth > deepest:
                    deepest, name = depth, member
            else:
                depth -= 1
        elif depth == 1 and mark.endswith(b":"):
            try:
                member = orjson.loads(mark[: mark.rindex(b":")])
            except orjson.JSONDecodeError:
                member = None
    return deepest, name if deepest > 1 else None
