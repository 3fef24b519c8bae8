"""What a record of JSON Lines is, for every reader of them: a batch job's JSON Lines chunks
and `sluice stream`'s pipe count the same records, and fail the same ones.

- A record is a line: the bytes up to each newline (a `\\r` before it is whitespace), and the
  bytes after the last newline when there are any, whatever they are.
- A blank line (empty, or only whitespace, that last fragment included) is a record that fails;
  it is never skipped.
- A UTF-8 byte order mark at the very start of the input is not part of the first line. Anywhere
  else it is a byte like any other (and the line fails as JSON).
- A line nested deeper than its reader reads fails, naming its member (`sluice.codecs.json_text`).
"""

from __future__ import annotations

from typing import Any

BOM = b"\xef\xbb\xbf"


def without_bom(start: bytes) -> bytes:
    """The first bytes of an input, less a byte order mark."""
    return start[len(BOM) :] if start.startswith(BOM) else start


def lines_of(block: bytes) -> list[bytes]:
    """The records of a block of whole lines (the newline that ends the block ends a record;
    whatever follows it is one more)."""
    lines = block.split(b"\n")
    if lines[-1] == b"":  # the newline that ends the block
        lines.pop()
    return lines


def count_lines(block: bytes) -> int:
    """How many records `lines_of(block)` holds, counted in C."""
    return block.count(b"\n") + (not block.endswith(b"\n")) if block else 0


def names_twice(line: bytes, parsed: dict[str, Any]) -> str | None:
    """A name some object of the line gives twice, or None. orjson keeps the last of them
    silently; pyarrow refuses the whole block: a line (a batch row, a stream record) naming a
    field twice fails. A line whose colons are as many as its top-level
    names cannot name one twice (each name needs its colon), so only the others are parsed again."""
    if line.count(b":") <= len(parsed):
        return None
    import json

    class Twice(Exception):
        pass

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [name for name, _ in items]
        if len(set(names)) != len(names):
            raise Twice(next(n for n in names if names.count(n) > 1))
        return dict(items)

    try:
        json.loads(line, object_pairs_hook=pairs)
    except Twice as twice:
        return str(twice.args[0])
    except ValueError:
        return None
    except RecursionError:  # nested deeper than the stack holds, as orjson reads it: the same, from the text
        return _twice_in_text(line)
    return None


def _twice_in_text(line: bytes) -> str | None:
    """`names_twice` for a line that is valid JSON, read as text a token at a time (no
    recursion, whatever its depth): each object's names, as they come."""
    import json

    from sluice.codecs.json_text import TOKEN

    names: list[set[str] | None] = []  # for each open bracket, the names of its object so far (None: an array)
    for token in TOKEN.finditer(line):
        mark = token.group()
        if mark == b"{":
            names.append(set())
        elif mark == b"[":
            names.append(None)
        elif mark in (b"}", b"]"):
            names.pop()
        elif mark.endswith(b":"):  # a member's name
            name, seen = json.loads(mark[: mark.rindex(b":")]), names[-1]
            assert seen is not None  # valid JSON: a name stands in an object
            if name in seen:
                return str(name)
            seen.add(name)
    return None
