"""The record grammar of text inputs, written once: where the records of a CSV or JSON Lines
file end, which records a byte range of the file owns, and where each record came from. Plan
counts records with it and the readers cut their chunks with it, so the two cannot disagree.

**Line ends.** A CSV record ends at a line end outside quoted fields: `\\n`, `\\r\\n` or a bare
`\\r`, as Python's csv module reads a file opened with `newline=""` (and as pyarrow's CSV parser
does). JSON Lines separates its records with `\\n` only, as its specification says: a `\\r`
before the `\\n` is JSON whitespace, so `\\r\\n` files read as expected, and a bare `\\r`
elsewhere is whitespace inside the line, as JSON reads it (a line holding two objects with a
`\\r` between them is one line that is not valid JSON). A UTF-8 byte order mark at the start
of the file belongs to no record.

**Quoting (CSV).** A quote opens a field only at the start of the field (after a comma or a
line end); inside a quoted field, a doubled quote is a quote and a lone one closes the field;
a quote anywhere else is a plain character. The scanner looks at runs of quotes, not single
quotes, so all of this is a matter of each run's length and of the byte before it, which makes
it vectorizable:

- a run of odd length at the start of a field toggles the state (opens, or closes);
- a run of odd length elsewhere closes a quoted field and leaves an unquoted one as it is;
- a run of even length changes nothing.

**Ownership.** A record belongs to the byte range it starts in, as Hadoop's TextInputFormat
reads lines: a range [start, end) owns the records whose first byte lies in it, skips the
partial record it starts in, and reads past its end to finish its last one. A record's end is
the offset of the last byte of its line end (the `\\n` of a `\\r\\n`), and the next record starts
one byte later: a range owns the records that follow the ends in [start - 1, end - 1), and the
first record of the data. A CSV range may start inside a quoted field; Plan counts each range
for both states it may start in and chains them from the top (`count_range`).

A scanner is fed consecutive blocks and returns, for each, the absolute offsets of the record
ends in it. A run of quotes, or a `\\r`, at the end of a block is held back until the byte
after it is seen (the run's length, or whether a `\\n` follows, decides it); a run that began
before the scanner's first byte (`prev` is a quote) is skipped: it belongs to the range where
it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sluice.batch.filestore import FileStore

QUOTE, NEWLINE, CARRIAGE, COMMA = 0x22, 0x0A, 0x0D, 0x2C
BOM = b"\xef\xbb\xbf"
_EMPTY = np.empty(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Grammar:
    """How one text format splits into records."""

    name: str
    quoting: bool  # fields may be quoted, and a quoted field may hold line ends (CSV); else \n ends a record

    def scanner(self, at: int, *, inside: bool = False, prev: int = NEWLINE) -> RecordScanner:
        return RecordScanner(at, inside=inside, prev=prev, quoting=self.quoting)

    def starts_record(self, prev: int, byte: int) -> bool:
        """Whether a record starts at a byte, given the byte before it (outside quotes)."""
        if prev == NEWLINE:
            return True
        return self.quoting and prev == CARRIAGE and byte != NEWLINE

    def content_lengths(self, data: bytes, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        """The length of each record `data[starts[i]:stops[i]]` without its line end."""
        lengths = stops - starts
        if not len(lengths):
            return lengths
        arr = np.frombuffer(data, dtype=np.uint8)
        last = stops - 1
        ends_line = (arr[last] == NEWLINE) | (arr[last] == CARRIAGE) if self.quoting else arr[last] == NEWLINE
        lengths = lengths - ends_line
        if self.quoting:  # the \r of a \r\n
            crlf = ends_line & (arr[last] == NEWLINE) & (lengths > 0) & (arr[np.maximum(last - 1, 0)] == CARRIAGE)
            lengths = lengths - crlf
        return lengths


CSV = Grammar("csv", quoting=True)
JSON_LINES = Grammar("jsonl", quoting=False)


def grammar_of(fmt: str) -> Grammar:
    return CSV if fmt == "csv" else JSON_LINES


@dataclass(frozen=True, slots=True)
class Records:
    """Where a run of consecutive records came from: their object, the number of the first one
    in it, and for text the bytes of each, `[starts[i], stops[i])` in the object, its line end
    included (Parquet rows have numbers, not byte ranges)."""

    object: str
    first: int
    count: int
    starts: np.ndarray | None = None
    stops: np.ndarray | None = None

    def __len__(self) -> int:
        return self.count

    @property
    def numbers(self) -> np.ndarray:
        return np.arange(self.first, self.first + self.count, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Owned:
    """The records a byte range owns: their bytes, read whole (`data` starts at `origin` in the
    object), each one's identity, and each one's length without its line end."""

    grammar: Grammar
    data: bytes
    origin: int
    records: Records
    lengths: np.ndarray

    def span(self, local: int) -> slice:
        """Where one record lies in `data` (its line end included), by its number in the range."""
        assert self.records.starts is not None and self.records.stops is not None
        return slice(int(self.records.starts[local]) - self.origin, int(self.records.stops[local]) - self.origin)

    def content(self, local: int) -> bytes:
        """One record's bytes without its line end."""
        start = self.span(local).start
        return self.data[start : start + int(self.lengths[local])]


class RecordScanner:
    def __init__(self, at: int, *, inside: bool = False, prev: int = NEWLINE, quoting: bool = True) -> None:
        self.at = at  # the offset of the next byte to be fed
        self.inside = inside  # inside a quoted field
        self.prev = prev  # the byte before `at` (NEWLINE at the start of the data)
        self.quoting = quoting
        self._skip = quoting and prev == QUOTE  # leading quotes continue a run that is not ours
        self._held = b""

    @property
    def holding(self) -> bool:
        """A run of quotes, or a `\\r`, reached the end of what was fed: the next byte decides it."""
        return bool(self._held)

    @property
    def holding_quotes(self) -> bool:
        """A run of quotes reached the end of what was fed: its length is not known yet."""
        return self._held.startswith(b'"')

    def feed(self, block: bytes, *, final: bool = False) -> np.ndarray:
        """The offsets of the record ends in `block` (which starts at `self.at` less what was
        held back). `final`: nothing follows it."""
        if not self.quoting:
            base = self.at
            self.at += len(block)
            if b"\n" not in block:
                return _EMPTY
            return np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == NEWLINE) + base
        data = self._held + block if self._held else block
        base = self.at - len(self._held)
        self.at += len(block)
        if self._skip:
            rest = data.lstrip(b'"')
            base += len(data) - len(rest)
            data = rest
            if not data:
                self._held = b""
                return _EMPTY
            self._skip = False
            self.prev = QUOTE
        if not final and data.endswith(b'"'):
            keep = len(data.rstrip(b'"'))
            self._held, data = data[keep:], data[:keep]
        elif not final and data.endswith(b"\r"):
            self._held, data = data[-1:], data[:-1]
        else:
            self._held = b""
        if not data:
            return _EMPTY
        ends = self._scan(data, base)
        self.prev = data[-1]
        return ends

    def _scan(self, data: bytes, base: int) -> np.ndarray:
        arr = np.frombuffer(data, dtype=np.uint8)
        ends = _line_ends(data, arr)
        if b'"' not in data:  # the common case: no quote in the block
            return _EMPTY if self.inside else ends + base
        quote = arr == QUOTE
        before = np.empty_like(quote)
        before[0] = self.prev == QUOTE
        before[1:] = quote[:-1]
        after = np.empty_like(quote)
        after[-1] = False  # a run never reaches the end of a block (held back above)
        after[:-1] = quote[1:]
        starts = np.flatnonzero(quote & ~before)
        run_ends = np.flatnonzero(quote & ~after)
        odd = (run_ends - starts) % 2 == 0  # length run_ends - starts + 1 is odd
        previous = np.where(starts > 0, arr[np.maximum(starts - 1, 0)], self.prev)
        field_start = (previous == COMMA) | (previous == NEWLINE) | (previous == CARRIAGE)
        toggle = odd & field_start  # opens an unquoted field or closes a quoted one
        closes = odd & ~field_start  # closes a quoted field; plain text in an unquoted one
        count = np.cumsum(toggle, dtype=np.int64)
        index = np.arange(len(starts))
        last_close = np.maximum.accumulate(np.where(closes, index, -1))
        since = count - np.where(last_close >= 0, count[np.maximum(last_close, 0)], 0)
        state = np.where(last_close >= 0, since & 1, (count + int(self.inside)) & 1).astype(bool)
        run = np.searchsorted(starts, ends) - 1  # the last run before each line end
        inside_at = np.where(run >= 0, state[np.maximum(run, 0)], self.inside)
        self.inside = bool(state[-1]) if len(state) else self.inside
        return ends[~inside_at] + base


def _line_ends(data: bytes, arr: np.ndarray) -> np.ndarray:
    """Where the CSV line ends of a block end, quotes aside: every `\\n`, and every `\\r` not
    followed by one (a `\\r` at the end of the block was held back unless nothing follows)."""
    newlines = np.flatnonzero(arr == NEWLINE)
    if b"\r" not in data:
        return newlines
    returns = np.flatnonzero(arr == CARRIAGE)
    following = returns + 1
    bare = returns[(following >= len(arr)) | (arr[np.minimum(following, len(arr) - 1)] != NEWLINE)]
    if not len(bare):
        return newlines
    return np.sort(np.concatenate((newlines, bare)))


# Byte ranges of a file ------------------------------------------------------------------------
def data_start(head: bytes) -> int:
    """Where the records of a file start: after a UTF-8 byte order mark, if there is one."""
    return len(BOM) if head.startswith(BOM) else 0


def _origin(files: FileStore, uri: str, version: str, start: int) -> tuple[int, int]:
    """Where a range's bytes are read from, and the byte before that: the first range of the
    data starts after a byte order mark, as if after a line end."""
    if start <= len(BOM):
        skip = data_start(b"".join(files.read_blocks(uri, version, 0, len(BOM))))
        if start <= skip:
            return skip, NEWLINE
    if start == 0:
        return 0, NEWLINE
    return start, next(iter(files.read_blocks(uri, version, start - 1, start)))[0]


Counted = tuple[tuple[int, int], tuple[bool, bool]]  # records owned, state at the end: per state at the start


def count_range(files: FileStore, uri: str, version: str, start: int, end: int, grammar: Grammar, *, size: int) -> Counted:
    """How many records start in [start, end), if the range starts outside quotes and if it
    starts inside them, and the state it ends in for each (`size`: the file's). Streams:
    nothing is kept."""
    at, prev = _origin(files, uri, version, start)
    scanners = [grammar.scanner(at, inside=state, prev=prev) for state in ((False, True) if grammar.quoting else (False,))]
    counts = [0, 0]
    first = True
    for block in files.read_blocks(uri, version, at, end):
        if first and block:
            counts[0] += int(grammar.starts_record(prev, block[0]))
            first = False
        for state, scanner in enumerate(scanners):
            counts[state] += int(np.count_nonzero(scanner.feed(block) < end - 1))
    if grammar.quoting:
        tail = b""
        if scanners[0].holding_quotes and end < size:  # a run of quotes reaches the end: it is ours, read on to its end
            for block in files.read_blocks(uri, version, end):
                rest = block.lstrip(b'"')
                tail += block[: len(block) - len(rest) + 1]
                if rest:
                    break
        for state, scanner in enumerate(scanners):
            counts[state] += int(np.count_nonzero(scanner.feed(tail, final=True) < end - 1))
        return (counts[0], counts[1]), (scanners[0].inside, scanners[1].inside)
    return (counts[0], counts[0]), (False, False)


def read_range(
    files: FileStore, uri: str, version: str, start: int, end: int, grammar: Grammar, *, inside: bool = False, first: int = 0
) -> Owned:
    """The records that start in [start, end) (`inside`: the range starts inside a quoted
    field), read whole, and each one's identity; `first` is the number of the first of them."""
    at, prev = _origin(files, uri, version, start)
    scanner = grammar.scanner(at, inside=inside, prev=prev)
    buffer = bytearray()
    found: list[np.ndarray] = []
    begin: int | None = None
    finish: int | None = None

    def look(ends: np.ndarray) -> bool:
        """Take a block's record ends; whether the last owned record has ended."""
        nonlocal begin, finish
        if not len(ends):
            return False
        found.append(ends)
        if begin is None:
            begin = int(ends[0]) + 1
        last = ends[ends >= end - 1]
        if len(last):
            finish = int(last[0]) + 1
            return True
        return False

    done = False
    for block in files.read_blocks(uri, version, at):
        if not buffer and block and not inside and grammar.starts_record(prev, block[0]):
            begin = at
        buffer += block
        if look(scanner.feed(block)) or (begin is not None and begin >= end):
            done = True
            break
    if not done:
        look(scanner.feed(b"", final=True))
    eof = at + len(buffer)
    if begin is None or begin >= end or begin >= eof:
        return Owned(grammar, b"", start, Records(uri, first, 0, _EMPTY, _EMPTY), _EMPTY)
    stop = finish if finish is not None else eof
    ends = np.concatenate(found) if found else _EMPTY
    stops = ends[(ends >= begin) & (ends < stop)] + 1
    if stop > begin and (not len(stops) or stops[-1] != stop):
        stops = np.append(stops, stop)  # the last record, with no line end at the end of the input
    starts = np.concatenate(([begin], stops[:-1])).astype(np.int64)
    records = Records(uri, first, len(stops), starts, stops.astype(np.int64))
    data = bytes(memoryview(buffer)[begin - at : stop - at])
    return Owned(grammar, data, begin, records, grammar.content_lengths(data, starts - begin, records.stops - begin))


def first_record(files: FileStore, uri: str, version: str, grammar: Grammar, limit: int) -> tuple[bytes, int] | None:
    """The first record of a file without its line end (a CSV header), and where the next
    one starts; None when it runs past `limit` bytes."""
    at, prev = _origin(files, uri, version, 0)
    scanner = grammar.scanner(at, prev=prev)
    buffer = bytearray()
    ends = _EMPTY
    for block in files.read_blocks(uri, version, at, limit + 1):  # one byte more: what follows a \r
        buffer += block
        ends = scanner.feed(block)
        if len(ends):
            break
    else:
        if at + len(buffer) > limit:
            return None
        ends = scanner.feed(b"", final=True)  # the whole file was read
    stop = int(ends[0]) + 1 if len(ends) else at + len(buffer)
    data = bytes(buffer[: stop - at])
    length = grammar.content_lengths(data, np.zeros(1, np.int64), np.array([len(data)], np.int64))[0] if data else 0
    return data[:length], stop
