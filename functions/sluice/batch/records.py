"""Where CSV records end: the newlines outside quoted fields, found a block at a time.

A CSV field may hold line breaks when it is quoted (RFC 4180), so a newline ends a record
only outside quotes. Quoting is read as the CSV parser reads it: a quote opens a field only
at the start of the field (after a comma or a line break); inside a quoted field, a doubled
quote is a quote and a lone one closes the field; a quote anywhere else is a plain
character. The scanner looks at runs of quotes, not single quotes, so all of this is a
matter of each run's length and of the byte before it, which makes it vectorizable:

- a run of odd length at the start of a field toggles the state (opens, or closes);
- a run of odd length elsewhere closes a quoted field and leaves an unquoted one as it is;
- a run of even length changes nothing.

A scanner is fed consecutive blocks and returns, for each, the absolute offsets of the
newlines that end records. Each run of quotes belongs to the block (and the byte range)
where it starts: a scanner holds back a run that reaches the end of its block until it sees
the byte after it, and skips a run that began before its first byte (`prev` is a quote).
"""

from __future__ import annotations

import numpy as np

QUOTE, NEWLINE, COMMA = 0x22, 0x0A, 0x2C
_EMPTY = np.empty(0, dtype=np.int64)


class RecordScanner:
    def __init__(self, at: int, *, inside: bool = False, prev: int = NEWLINE) -> None:
        self.at = at  # the offset of the next byte to be fed
        self.inside = inside  # inside a quoted field
        self.prev = prev  # the byte before `at` (NEWLINE at the start of the data)
        self._skip = prev == QUOTE  # leading quotes continue a run that is not ours
        self._held = b""

    @property
    def holding(self) -> bool:
        """A run of quotes reached the end of what was fed: the next byte decides it."""
        return bool(self._held)

    def feed(self, block: bytes, *, final: bool = False) -> np.ndarray:
        """The offsets of the record-ending newlines in `block` (which starts at `self.at`
        less what was held back). `final`: nothing follows it."""
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
        else:
            self._held = b""
        if not data:
            return _EMPTY
        boundaries = self._scan(np.frombuffer(data, dtype=np.uint8), base)
        self.prev = data[-1]
        return boundaries

    def _scan(self, arr: np.ndarray, base: int) -> np.ndarray:
        if QUOTE not in arr:  # the common case: no quote in the block
            return _EMPTY if self.inside else np.flatnonzero(arr == NEWLINE) + base
        quote = arr == QUOTE
        before = np.empty_like(quote)
        before[0] = self.prev == QUOTE
        before[1:] = quote[:-1]
        after = np.empty_like(quote)
        after[-1] = False  # a run never reaches the end of a block (held back above)
        after[:-1] = quote[1:]
        starts = np.flatnonzero(quote & ~before)
        ends = np.flatnonzero(quote & ~after)
        odd = (ends - starts) % 2 == 0  # length ends - starts + 1 is odd
        previous = np.where(starts > 0, arr[np.maximum(starts - 1, 0)], self.prev)
        field_start = (previous == COMMA) | (previous == NEWLINE)
        toggle = odd & field_start  # opens an unquoted field or closes a quoted one
        closes = odd & ~field_start  # closes a quoted field; plain text in an unquoted one
        count = np.cumsum(toggle, dtype=np.int64)
        index = np.arange(len(starts))
        last_close = np.maximum.accumulate(np.where(closes, index, -1))
        since = count - np.where(last_close >= 0, count[np.maximum(last_close, 0)], 0)
        state = np.where(last_close >= 0, since & 1, (count + int(self.inside)) & 1).astype(bool)
        newlines = np.flatnonzero(arr == NEWLINE)
        run = np.searchsorted(starts, newlines) - 1  # the last run before each newline
        inside_at = np.where(run >= 0, state[np.maximum(run, 0)], self.inside)
        self.inside = bool(state[-1]) if len(state) else self.inside
        return newlines[~inside_at] + base
