"""A SQLite lookup table read whole into memory, where answering from memory costs less than
the lookups it replaces and gives what SQL would give.

The rule (`Holding.table`): a table is read whole once the keys asked of it reach its number
of rows (SQLite pays about the same for a row it hands back whether it found it by key or read
it in order, so holding never costs more than twice the lookups made: a batch job's chunks, or
many requests), when it has at most `most` rows (the operator's `lookup_sqlite_hold_rows`).
Whatever is held is checked against the file on every use (SQLite's `PRAGMA data_version`,
which changes when anyone commits to it): a change drops it and starts the count again.

It is held only where a dictionary of its keys answers exactly as the `IN` query: a plain
table (not a view or a virtual table) whose definition names no collation; each key column
of TEXT affinity (a key asked as text, or as an integer: SQLite compares the integer's digits)
or of INTEGER affinity asked with integers; and no two rows of one key. A table that is not
held is read with SQL, as always; that decision is asked again once the file has changed.
Values are kept as SQLite hands them back; a lookup's rows are served from them cast once per
lookup (`rows`), or as the query's lists (`get_many`). Rows of a text key with their dictionary
codes (a batch job's Parquet column) find their rows through the dictionary, mapped once with
Arrow (`pyarrow.compute.index_in`: the same binary text comparison as the query's); other keys
one at a time in the dictionary of keys, which for a few keys is the cheaper way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.arrow_numbers import text_column, to_numbers
from sluice.codecs.coded_text import coded
from sluice.domain.errors import SluiceError

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence

    from sluice.domain.lookups import Lookup
    from sluice.runtimes.found import Key
    from sluice.runtimes.lookup_values import Values

FIRST_COUNT = 1024  # keys asked before a table's rows are counted, and between two looks at a file that changed
SEEN = 4  # text dictionaries whose rows a held table keeps (a batch job's row groups, read in turn)


class _Index(dict):  # type: ignore[type-arg]
    """A key's row, read in C (`index[key]`); a key not held: the row after the last, which is
    no entity's."""

    __slots__ = ("absent",)

    def __init__(self, pairs: Any, absent: int) -> None:
        super().__init__(pairs)
        self.absent = absent

    def __missing__(self, key: Any) -> int:
        return self.absent


class HeldTable:
    """A table's rows by key (`index`: the key as a lookup's rows hold it: text or an integer,
    a tuple of them for two keys), the columns read as SQLite gave them, and the file's
    `data_version` when read. `kinds`: each key column's Python type (str, int)."""

    __slots__ = ("casts", "columns", "index", "keys", "kinds", "seen", "version")

    def __init__(self, index: _Index, columns: dict[str, Sequence[Any]], kinds: tuple[type, ...], version: int, keys: Sequence[Any] = ()) -> None:
        self.index, self.columns, self.kinds, self.version = index, columns, kinds, version
        self.casts: dict[tuple[Any, ...], Values | None] = {}
        self.keys = keys  # one text key: each row's key as read (a row whose key is not text is never found)
        self.seen: list[tuple[Any, np.ndarray]] = []  # text dictionaries' rows (`at`), the latest first

    def get_many(self, keys: Sequence[Key], features: Sequence[str], event_time: str) -> tuple[list[Key], dict[str, list[Any]], list[Any]]:
        """What the `IN` query gives for `keys` (the store's text tuples): the keys found, each
        feature's values and the event times (None: a column the table does not have)."""
        if self.kinds == (str,):
            objs: list[Any] = [k[0] for k in keys]
        else:
            objs = [tuple(v if t is str else int(v) for v, t in zip(k, self.kinds, strict=True)) for k in keys]
            objs = objs if len(self.kinds) > 1 else [o[0] for o in objs]
        at = list(map(self.index.__getitem__, objs))
        absent = self.index.absent
        if absent in at:
            found = [k for k, i in zip(keys, at, strict=True) if i != absent]
            at = [i for i in at if i != absent]
        else:
            found = list(keys)
        empty = [None] * len(at)
        values = {f: list(map(self.columns[f].__getitem__, at)) if f in self.columns else list(empty) for f in features}
        times = list(map(self.columns[event_time].__getitem__, at)) if event_time in self.columns else empty
        return found, values, times

    def rows(self, node: Lookup, together: list[Any]) -> Values | None:
        """Each row's values (`together`: the rows' keys as `keys_of` reads them), or None where
        the table's values do not all cast to the lookup's datatypes (then the store is asked,
        which fails only the rows of an entity whose value does not)."""
        values = self.casts.get(node.reads, False)
        if values is False:
            values = self.casts[node.reads] = self._cast(node)
        if values is None:
            return None
        return values.take(self.at(together))

    def at(self, together: Sequence[Any]) -> np.ndarray:
        """Each row's place in the table (the row after the last: not held). Text rows with
        their codes (`sluice.codecs.coded_text`) are found by their dictionary, each distinct
        value once (with Arrow, and kept for the next rows of the same dictionary); others one
        key at a time."""
        text = coded(together) if isinstance(together, np.ndarray) else None
        if text is None or self.kinds != (str,):
            return np.fromiter(map(self.index.__getitem__, together), dtype=np.intp, count=len(together))
        dictionary = text.dictionary
        for known, rows in self.seen:
            if known is dictionary or (len(known) == len(dictionary) and known.equals(dictionary)):
                return rows[text.codes]
        import pyarrow as pa
        import pyarrow.compute as pc

        if not isinstance(self.keys, pa.Array):  # made once: a row whose key is not text, null (never found)
            self.keys = text_column([k if type(k) is str and k else None for k in self.keys])  # "": never found either
        keys = self.keys
        if not pa.types.is_string(dictionary.type):
            dictionary = dictionary.cast(pa.string())
        found = pc.index_in(dictionary, options=pc.SetLookupOptions(keys, skip_nulls=True))
        rows = to_numbers(found, null_slots=True).astype(np.intp)
        if found.null_count:  # a value not among the keys: not held
            rows[to_numbers(found.is_null())] = self.index.absent
        self.seen = [(text.dictionary, rows), *self.seen[: SEEN - 1]]
        return rows[text.codes]

    def _cast(self, node: Lookup) -> Values | None:
        from sluice.runtimes.found import Found
        from sluice.runtimes.lookup_values import Values, from_found

        n = self.index.absent
        event_time = node.reads[3]
        empty = [None] * n
        keys: list[Key] = [(str(i),) for i in range(n)]  # named only by an error, which gives up here
        found = Found(keys, {f.name: list(self.columns.get(f.name, empty)) for f in node.features}, list(self.columns.get(event_time, empty)))
        try:
            every = from_found(node, keys, found)
        except (SluiceError, ValueError, TypeError, OverflowError):  # a value of some entity does not cast
            return None
        return every.concat(Values.empty(node, 1))  # the row of a key not held: not found


class Holding:
    """What one SQLite file's store knows about holding its tables: the keys asked of each
    (table, key columns, columns read, key types), the tables' row counts, and each decision
    (a table held, or None with the `data_version` and count it was taken at)."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.asked: dict[tuple[Any, ...], int] = {}
        self.rows: dict[str, tuple[int, int]] = {}  # a table's rows (up to one past `most`), by the data_version counted at
        self.held: dict[tuple[Any, ...], HeldTable | tuple[int, int]] = {}

    def current(self, db: sqlite3.Connection, spec: tuple[Any, ...]) -> HeldTable | None:
        """The table held for `spec`, if it still is what the file holds."""
        held = self.held.get(spec)
        if not isinstance(held, HeldTable):
            return None
        if db.execute("PRAGMA data_version").fetchone()[0] == held.version:
            return held
        self._forget(spec)
        return None

    def table(self, db: sqlite3.Connection, spec: tuple[Any, ...], asked: int) -> HeldTable | None:
        """The table held for `spec` (read now where the rule says so), or None: ask SQL.
        `spec`: (table, key columns, columns read, key types)."""
        if self.most <= 0:
            return None
        total = self.asked[spec] = self.asked.get(spec, 0) + asked
        decided = self.held.get(spec)
        if isinstance(decided, HeldTable):
            return self.current(db, spec)
        if decided is not None:  # not held: looked at again once the file has changed
            version, at = decided
            if total - at < FIRST_COUNT or db.execute("PRAGMA data_version").fetchone()[0] == version:
                self.held[spec] = (version, total) if total - at >= FIRST_COUNT else decided
                return None
            self._forget(spec)
            total = self.asked[spec] = asked
        if total < FIRST_COUNT:
            return None
        table = spec[0]
        counted = self.rows.get(table)
        if counted is not None and total < counted[1] <= self.most:  # not asked for as many keys as it had rows: the file
            return None  # is looked at again once it has been (a lookup of a few keys pays no `data_version` query)
        version = db.execute("PRAGMA data_version").fetchone()[0]
        if counted is None or counted[0] != version:  # counted up to one past the bound: a large table costs no more to count
            counted = self.rows[table] = (version, db.execute(f'SELECT count(*) FROM (SELECT 1 FROM "{table}" LIMIT ?)', (self.most + 1,)).fetchone()[0])
        rows = counted[1]
        if rows > self.most:
            self.held[spec] = (version, total)
            return None
        if total < rows:
            return None
        held = _read(db, *spec, version, self.most)
        self.held[spec] = held if held is not None else (version, total)
        return held

    def _forget(self, spec: tuple[Any, ...]) -> None:
        self.held.pop(spec, None)
        self.asked.pop(spec, None)
        self.rows.pop(spec[0], None)


def affinity(declared: str) -> str:
    """SQLite's column affinity of a declared type (its documented rules, in their order)."""
    kind = declared.upper()
    if "INT" in kind:
        return "INTEGER"
    if "CHAR" in kind or "CLOB" in kind or "TEXT" in kind:
        return "TEXT"
    if "BLOB" in kind or not kind:
        return "BLOB"
    if "REAL" in kind or "FLOA" in kind or "DOUB" in kind:
        return "REAL"
    return "NUMERIC"


def _read(db: sqlite3.Connection, table: str, key_names: Sequence[str], read: Sequence[str], types: Sequence[str], version: int, most: int) -> HeldTable | None:
    """The whole table by key, or None where a dictionary would not answer as SQL does (or it
    has grown past `most` rows since counted)."""
    found = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", (table,)).fetchone()
    definition = (found[0] or "").upper() if found else ""
    if not definition.startswith("CREATE TABLE") or "COLLATE" in definition:
        return None
    declared = {row[1]: row[2] for row in db.execute(f'PRAGMA table_info("{table}")')}
    kinds: list[type] = []
    for name, kind in zip(key_names, types, strict=True):
        column = affinity(declared.get(name, ""))
        if column == "TEXT":
            kinds.append(str)  # an integer asked is compared as its digits: the text of the store's key
        elif column == "INTEGER" and kind == "N":
            kinds.append(int)
        else:
            return None
    cols = ", ".join(f'"{c}"' for c in (*key_names, *read))
    rows = db.execute(f'SELECT {cols} FROM "{table}" LIMIT ?', (most + 1,)).fetchall()
    if len(rows) > most:
        return None
    n = len(key_names)
    columns = list(zip(*rows, strict=True)) if rows else [()] * (n + len(read))
    # A row of a key of empty text is in no store (`sluice.runtimes.lookups.ask`): never found.
    if n == 1 and set(map(type, columns[0])) <= {kinds[0]} and (kinds[0] is not str or "" not in columns[0]):  # the common case, at C speed
        index = _Index(zip(columns[0], range(len(rows)), strict=True), len(rows))
        valid = len(rows)
    else:  # a row whose key is not of its column's kind (NULL, a blob, a fraction) is never found by SQL
        index, valid = _Index((), len(rows)), 0
        for i, key in enumerate(zip(*columns[:n], strict=True)):
            if all(type(v) is k for v, k in zip(key, kinds, strict=True)) and "" not in key:
                index[key if n > 1 else key[0]] = i
                valid += 1
    if len(index) != valid:  # two rows of one key: SQL gives both, a dictionary one
        return None
    return HeldTable(index, dict(zip(read, columns[n:], strict=True)), tuple(kinds), version, columns[0] if n == 1 else ())
