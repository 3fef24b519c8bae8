"""JSON text from outside sluice's HTTP API, read under the rule the API's body parser holds
to: arrays and objects nest at most `MAX_DEPTH` levels deep, the outermost counted.

Every door that parses a caller's JSON itself, not through pydantic, goes through here: stream
records (SQS, Kinesis, Kafka) and `sluice stream`'s lines, a batch job's JSON Lines (and the
files read as one: labels, samples), a JSON upload, the CLI's JSON arguments and files. A
parser takes deeper text (orjson reads 1,024 levels), but what reads the value after it walks
it by recursion, and ~1,000 levels exhaust Python's stack: one record would fail its whole
batch with a `RecursionError`. Here it is refused alone, as bad input naming its field.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Any

import orjson

from sluice.domain.errors import BadRequest

MAX_DEPTH = 200  # as the HTTP API's parser (pydantic's): 200 levels are read, 201 are refused
_CONTAINERS = (dict, list)
_KINDS = frozenset(_CONTAINERS)
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"(?:[ \t\r\n]*:)?|[\[\]{}]')  # a string (a member's name: with its colon), or a bracket


class NestedTooDeep(BadRequest):
    """JSON nested past `MAX_DEPTH`; `field` names the top-level member that is (`body` when
    the text is no object)."""


def loads(text: bytes | str) -> Any:
    """`text` parsed by orjson (not JSON: `orjson.JSONDecodeError`), refused (`NestedTooDeep`)
    when it nests deeper than `MAX_DEPTH`, as deep as orjson reads or deeper."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if exc.msg == "depth limit exceeded":
            raise nested_too_deep(deep_member(text)) from None
        raise
    if len(text) > 2 * MAX_DEPTH:  # nesting d levels takes 2d characters: a short text is within
        refuse_too_deep(text, value)
    return value


def loads_as_python(text: bytes | str) -> Any:
    """`text` as Python's `json` module reads it (NaN, Infinity, integers of any size: the
    CLI's arguments and files), under the same rule (not JSON: `json.JSONDecodeError`)."""
    import json

    try:
        value = json.loads(text)
    except RecursionError:  # deeper than the stack holds: deeper than the rule allows
        raise nested_too_deep(deep_member(text)) from None
    refuse_too_deep(text, value)
    return value


def refuse_too_deep(text: bytes | str, value: Any) -> None:
    """Raises `NestedTooDeep` when `value` (parsed from `text`, by any parser) nests deeper
    than `MAX_DEPTH`. Text with no more brackets than that cannot (a count in C); otherwise
    the value is walked a level at a time, without recursion, until as many arrays and
    objects were found as the text opens (a batch of rows: its rows are the last)."""
    opening = ("[", "{") if type(text) is str else (b"[", b"{")
    openings = text.count(opening[0]) + text.count(opening[1])  # type: ignore[arg-type]
    if openings <= MAX_DEPTH or not _deeper(value, MAX_DEPTH, openings):
        return
    raise nested_too_deep(next((name for name, inner in value.items() if _deeper(inner, MAX_DEPTH - 1)), None) if type(value) is dict else None)


def nested_too_deep(name: str | None = None) -> NestedTooDeep:
    """The refusal of JSON nested too deep in its member `name` (None: the text as a whole, as
    when a parser gave up on it)."""
    where = f"'{name}'" if name is not None else "the JSON"
    return NestedTooDeep(
        f"{where} is nested too deep: arrays and objects nest at most {MAX_DEPTH} levels, the outermost counted", field=name or "body"
    )


def deep_member(text: bytes | str) -> str | None:
    """The top-level member of an object's JSON text whose value nests past `MAX_DEPTH`, read
    from the text alone: for text no parser has read (it gave up, as too deep)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    depth, name = 0, None
    for token in _TOKEN.finditer(data):
        mark = token.group()
        if mark in (b"{", b"["):
            depth += 1
            if depth > MAX_DEPTH:
                return name
        elif mark in (b"}", b"]"):
            depth -= 1
        elif depth == 1 and mark.endswith(b":"):
            try:
                name = orjson.loads(mark[: mark.rindex(b":")])
            except orjson.JSONDecodeError:
                name = None
    return None


def _deeper(value: Any, levels: int, openings: float = float("inf")) -> bool:
    """Whether `value`'s arrays and objects nest more than `levels` deep (itself counted): a
    level at a time, in C where a level holds one kind. `openings`: how many the text opens
    (its `[` and `{`, strings' too): once as many were found, no level is left below."""
    kind = type(value)
    if kind not in _CONTAINERS:
        return False
    level, kinds, found = [value], set[type]({kind}), 1
    for _ in range(levels):
        if found >= openings:
            return False
        if dict not in kinds:  # arrays only
            inner = list(chain.from_iterable(level))
        elif list not in kinds:  # objects only
            inner = list(chain.from_iterable(map(dict.values, level)))
        else:
            inner = list(chain.from_iterable(each.values() if type(each) is dict else each for each in level))
        kinds = set(map(type, inner))
        if list not in kinds and dict not in kinds:
            return False
        level = inner if kinds <= _KINDS else [each for each in inner if type(each) in _CONTAINERS]
        kinds &= _KINDS
        found += len(level)
    return True
