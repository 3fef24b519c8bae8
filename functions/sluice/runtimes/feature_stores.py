"""Online feature stores behind one small port, `FeatureStore.get_many`: the records of many
entities in one call (up to the store's limit), column by column (`Found`: the keys found, each
feature's values and the event times, in the same order), so a chunk of thousands of rows
costs no Python object per value beyond what the store hands back.

- `DynamoStore`: a DynamoDB table keyed by the entity (BatchGetItem, 100 keys a call; the
  UnprocessedKeys asked again with backoff);
- `SageMakerStore`: a SageMaker Feature Store feature group's online store (BatchGetRecord,
  100 identifiers a call; the UnprocessedIdentifiers asked again);
- `SqliteStore`: a table of a local SQLite file, opened read-only.

Values come back as the store holds them (numbers, strings, booleans; SageMaker's as strings);
`sluice.runtimes.lookups` casts them to the declared datatypes. Every store counts its calls
(`calls`), which the statistics and the benchmarks report.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import stat
import threading
import time
from itertools import chain
from typing import TYPE_CHECKING, Any, Protocol

from sluice.caching import keep
from sluice.domain.errors import BackendError, SluiceError, Unavailable, Unprocessable
from sluice.runtimes.found import Found, Key, epoch_seconds

__all__ = ["FeatureStore", "Found", "Key", "epoch_seconds"]  # the records' shape lives in `found`

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from sluice.domain.lookups import Lookup
    from sluice.runtimes.lookup_values import Values

log = logging.getLogger(__name__)
_Plan = tuple[list[str], tuple[Any, ...], str, tuple[tuple[tuple[str, int | None], ...], int | None]]  # see `SqliteStore._plan`
PLANS = 512  # SQLite questions whose SQL a store keeps, by shape (the table, the columns, the number of keys)
FILE_CHECK_S = 1.0  # how often a SQLite store looks at its path again (a file replaced: opened anew)

class FeatureStore(Protocol):
    max_keys: int  # the most keys one call takes
    concurrent: bool  # whether calls may run at once
    calls: int

    def get_many(
        self, table: str, key_names: Sequence[str], keys: Sequence[Key], features: Sequence[str], event_time: str, key_types: Sequence[str] = ()
    ) -> Found:
        """The records found among `keys` (at most `max_keys`); a key not found is absent.
        `event_time`: the attribute to read the record's time from ("": none wanted).
        `key_types`: per key, `S` (text) or `N` (a number), as the key's input holds it."""
        ...


class _Counted:
    max_keys = 100
    concurrent = True

    def __init__(self) -> None:
        self.calls = 0
        self._count_lock = threading.Lock()

    def _counted(self) -> None:
        with self._count_lock:
            self.calls += 1


# DynamoDB -----------------------------------------------------------------------------------
def _plain(value: dict[str, Any]) -> Any:
    """A DynamoDB attribute value as Python (numbers kept as their text: cast once, later)."""
    kind, inner = next(iter(value.items()))
    if kind in ("S", "N"):
        return inner
    if kind == "BOOL":
        return bool(inner)
    if kind == "NULL":
        return None
    return inner  # binary as bytes (a BYTES feature's UTF-8 text); sets, lists, maps: the cast refuses them, the feature named


class _Remote(_Counted):
    """A store behind an AWS client that may leave part of a call unprocessed: asked again
    `retries` times, with backoff (`sleep`: a test passes a no-op)."""

    def __init__(self, client: Any, *, retries: int = 5, sleep: Any = time.sleep) -> None:
        super().__init__()
        self.client = client
        self.retries = retries
        self.sleep = sleep

    def _responses(
        self, what: str, call: Callable[[Any], dict[str, Any]], request: Any, unprocessed: str, left: str, asked: str = ""
    ) -> Iterator[dict[str, Any]]:
        """`call(request)`'s response, then again with what the store left unprocessed (the
        response's `unprocessed`), with backoff, until nothing is; `what` names the store in errors,
        `asked` what a request the store finds invalid asked for (`aws_error`)."""
        for attempt in range(self.retries + 1):
            self._counted()
            try:
                response = call(request)
            except Exception as exc:
                raise aws_error(exc, what, asked) from None
            yield response
            request = response.get(unprocessed)
            if not request:
                return
            if attempt < self.retries:
                self.sleep(min(0.05 * 2**attempt, 1.0))
        raise Unavailable(f"{what} left {left} unprocessed after {self.retries + 1} calls (throttled); retry shortly")


# A key's type as DynamoDB names it, and the inputs that give it (`lookups._TYPES`).
_KINDS = {"S": "a string (S), from a BYTES input", "N": "a number (N), from an integer input"}


class DynamoStore(_Remote):
    """`client`: a DynamoDB client (boto3's low-level one). `key_types`: per key name, `S` or `N`
    (from the input's datatype). A key of empty text is no item's (DynamoDB refuses the whole
    call that asks for one): it is not asked, and is not found, as in the other stores."""

    def get_many(
        self, table: str, key_names: Sequence[str], keys: Sequence[Key], features: Sequence[str], event_time: str, key_types: Sequence[str] = ()
    ) -> Found:
        types = list(key_types) or ["S"] * len(key_names)
        found = Found.of(features)
        keys = [k for k in keys if "" not in k]
        if not keys:
            return found
        names = {f"#a{i}": n for i, n in enumerate(dict.fromkeys((*key_names, *features, *([event_time] if event_time else []))))}
        request: dict[str, Any] = {
            table: {
                "Keys": [{n: {t: v} for n, t, v in zip(key_names, types, key, strict=True)} for key in keys],
                "ProjectionExpression": ", ".join(names),
                "ExpressionAttributeNames": names,
            }
        }
        asked = ", ".join(f"key '{n}' was asked as {_KINDS[t]}" for n, t in zip(key_names, types, strict=True))
        for response in self._responses(f"DynamoDB table '{table}'", lambda r: self.client.batch_get_item(RequestItems=r), request, "UnprocessedKeys", "keys", asked):
            for item in response.get("Responses", {}).get(table, ()):
                values = {k: _plain(v) for k, v in item.items()}
                found.add(tuple(str(values.get(n)) for n in key_names), values, values.get(event_time))
        return found


# SageMaker Feature Store --------------------------------------------------------------------
class SageMakerStore(_Remote):
    def get_many(
        self, table: str, key_names: Sequence[str], keys: Sequence[Key], features: Sequence[str], event_time: str, key_types: Sequence[str] = ()
    ) -> Found:
        wanted = _wanted(features, event_time)
        identifiers: list[dict[str, Any]] = [{"FeatureGroupName": table, "RecordIdentifiersValueAsString": [k[0] for k in keys], "FeatureNames": wanted}]
        found = Found.of(features)
        for response in self._responses(f"feature group '{table}'", lambda r: self.client.batch_get_record(Identifiers=r), identifiers, "UnprocessedIdentifiers", "records"):
            for record in response.get("Records", ()):
                values = {f["FeatureName"]: f["ValueAsString"] if "ValueAsString" in f else f.get("ValueAsStringList") for f in record.get("Record", ())}
                found.add((record["RecordIdentifierValueAsString"],), values, values.get(event_time))
            errors = [e for e in response.get("Errors", ()) if e.get("ErrorCode") != "ResourceNotFound"]  # a record not found is a miss
            if errors:
                log.warning("lookup: BatchGetRecord errors", extra={"feature_group": table, "error": str(errors[0])[:500]})
                raise BackendError(f"feature group '{table}' refused records ({errors[0].get('ErrorCode', 'error')})")
        return found


# SQLite ---------------------------------------------------------------------------------------
class SqliteStore(_Counted):
    """A local file, opened read-only once and read under a lock (SQLite answers a lookup in
    microseconds; threads would only queue). A table asked for as many keys as it has rows, of
    at most `hold_rows`, is read whole and answered from memory until the file changes
    (`sluice.runtimes.sqlite_held`: the rule, and where it does not apply)."""

    max_keys = 500
    concurrent = False

    def __init__(self, path: str, hold_rows: int = 0) -> None:
        super().__init__()
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None  # the (device, inode) opened
        self._looked_at = -math.inf  # when the path was last looked at (monotonic seconds)
        self._hold_rows = hold_rows
        self._forget()

    def _forget(self) -> None:
        """Nothing kept of the file's tables: their columns, the questions' SQL, what is held."""
        from sluice.runtimes.sqlite_held import Holding

        self._columns: dict[str, dict[str, str]] = {}  # a table's columns and their declared types
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._specs: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # a held table's spec, by what a lookup reads (`rows`)
        self._holding = Holding(self._hold_rows)

    def _connection(self) -> sqlite3.Connection:
        """The file's connection. The path is looked at again at most every `FILE_CHECK_S`: a
        file replaced since it was opened (another inode: a feature pipeline's new file moved
        into place) is opened anew and nothing kept of the old one is used; a file gone is a
        503, as one never there. Changes made to the file itself are SQLite's to tell
        (`data_version`, the schema): seen at once."""
        now = time.monotonic()
        if self._db is not None and now - self._looked_at < FILE_CHECK_S:
            return self._db
        try:
            found = os.stat(self.path)
            where = (found.st_dev, found.st_ino) if stat.S_ISREG(found.st_mode) else None
        except OSError:
            where = None
        if where != self._file or self._db is None:
            if self._db is not None:
                self._db.close()
                self._db, self._file = None, None
                self._forget()
            if where is None:
                raise Unavailable(f"the features file for SQLite lookups is not there ({os.path.basename(self.path)})")
            from pathlib import Path

            self._db = sqlite3.connect(f"{Path(self.path).resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
            self._file = where  # looked at before it was opened: a file replaced in between is found at the next look
        self._looked_at = now
        return self._db

    def _read(self, db: sqlite3.Connection, table: str, key_names: Sequence[str], features: Sequence[str], event_time: str) -> list[str]:
        """The table's columns a question reads (a feature's column not there: a missing feature;
        the event time's, when asked: a 422 naming it). The columns are kept once read, and read
        again where a question names one they lack (a column added since); a question that reads
        one no longer there fails, and `get_many` then forgets them."""
        wanted = _wanted(features, event_time)
        columns = self._columns.get(table)
        if columns is None or not columns.keys() >= set(map(_folded, wanted)):
            # A table or view the file declares: not one of SQLite's own (`pragma_database_list`
            # would answer with the file's path), whatever its name.
            declared = db.execute("SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name = ? COLLATE NOCASE", (table,)).fetchone()
            columns = {_folded(row[1]): row[2] or "" for row in db.execute(f'PRAGMA table_info("{table}")')} if declared else {}
            if not columns:  # not kept: the table may be made later
                raise BackendError(f"the features file has no table '{table}'")
            self._columns[table] = columns
        missing = [k for k in key_names if _folded(k) not in columns]
        if missing:
            raise BackendError(f"table '{table}' has no key column '{missing[0]}'")
        if event_time and _folded(event_time) not in columns:
            # Asked only for `max_age_s` or `event_time_output`: without the column no record's age
            # could be told, and every row would quietly take its defaults, as a stale one does.
            # Refused as a feature missing without a default is (422), naming the column.
            raise Unprocessable(
                f"table '{table}' has no event-time column '{event_time}' (the lookup's event_time, read for max_age_s and "
                f"event_time_output): no record's age can be told; name the column that holds its event times",
                field="policy",
                column=event_time,
            )
        return [c for c in wanted if _folded(c) in columns]

    def rows(self, node: Lookup, together: list[Any], key_types: Sequence[str]) -> Values | None:
        """Each row's values straight from the table held in memory (no store call), where it
        is held, current, and its keys are of the kinds the rows hold; else None: ask `get_many`."""
        if not self._holding.held:
            return None
        event_time = node.reads[3]
        with self._lock:
            try:
                db = self._connection()
                asked = (node.reads, tuple(key_types))
                spec = self._specs.get(asked)
                if spec is None:  # kept once `_read` has passed and found every column, as `_plan`'s
                    features = [f.name for f in node.features]
                    read = self._read(db, node.table, list(node.keys), features, event_time)
                    spec = (node.table, tuple(node.keys), tuple(read), asked[1])
                    if len(read) == len(_wanted(features, event_time)):
                        keep(self._specs, asked, spec, PLANS)
                held = self._holding.current(db, spec)
            except (SluiceError, sqlite3.Error):  # `get_many` tells
                return None
        if held is None or any((t == "S") != (k is str) for t, k in zip(key_types, held.kinds, strict=True)):
            return None
        return held.rows(node, together)  # what was current when asked; never changed, only replaced

    def _plan(self, db: sqlite3.Connection, table: str, key_names: Sequence[str], features: Sequence[str], event_time: str, types: Sequence[str], n: int) -> _Plan:
        """The columns a question of `n` keys reads, its holding spec, its SQL and where each
        feature and the event time are in a row it gives (None: a column not there), worked out
        once per shape of question (kept only once `_read` has passed: a table or a key column
        not there is asked again each time, as it may be made later)."""
        shape = (table, tuple(key_names), tuple(features), event_time, tuple(types), n)
        plan = self._plans.get(shape)
        if plan is None:
            from sluice.runtimes.sqlite_held import affinity

            read = self._read(db, table, key_names, features, event_time)
            one = "(" + ", ".join("?" * len(key_names)) + ")"
            if all(affinity(self._columns[table][_folded(k)]) == "TEXT" for k in key_names):  # a key found is the text asked
                cols = ", ".join(f'"{c}"' for c in (*key_names, *read))
                if len(key_names) == 1:
                    where = f'"{key_names[0]}" IN ({", ".join("?" * n)})'
                else:
                    where = f"({', '.join(chr(34) + k + chr(34) for k in key_names)}) IN (VALUES {', '.join([one] * n)})"
                where += "".join(f' AND "{k}" <> \'\'' for k in key_names)  # a key of empty text is in no store (`lookups.ask`), as held
                sql = f'SELECT {cols} FROM "{table}" WHERE {where}'
            else:
                # A key column of numbers (or of no type): SQLite compares as numbers ('7' asked
                # finds 7.0) and the key read back is not the text asked ('7.0'), so each row comes
                # with the key that asked for it: the question's own values joined to the table.
                asked = ", ".join(f"a.column{i + 1}" for i in range(len(key_names)))
                on = " AND ".join(f't."{k}" = a.column{i + 1} AND t."{k}" <> \'\'' for i, k in enumerate(key_names))
                sql = f'SELECT {", ".join((asked, *(f"t.{chr(34)}{c}{chr(34)}" for c in read)))} FROM (VALUES {", ".join([one] * n)}) AS a JOIN "{table}" AS t ON {on}'
            at = {c: len(key_names) + i for i, c in enumerate(read)}  # each column read's place in a row
            places = (tuple((f, at.get(f)) for f in features), at.get(event_time))
            plan = (read, (table, shape[1], tuple(read), shape[4]), sql, places)
            if len(read) == len(_wanted(features, event_time)):  # a column missing: asked again, it may be added
                keep(self._plans, shape, plan, PLANS)  # a batch job's chunks ask for many counts of keys
        return plan

    def get_many(
        self, table: str, key_names: Sequence[str], keys: Sequence[Key], features: Sequence[str], event_time: str, key_types: Sequence[str] = ()
    ) -> Found:
        types = key_types or ("S",) * len(key_names)
        with self._lock:
            self.calls += 1  # only here, under the store's lock
            try:
                db = self._connection()
                _, spec, sql, (places, when) = self._plan(db, table, key_names, features, event_time, types, len(keys))
                held = self._holding.table(db, spec, len(keys))
                if held is not None:
                    return Found(*held.get_many(keys, features, event_time))
                if "N" in types:
                    params: list[Any] = [int(v) if t == "N" else v for k in keys for v, t in zip(k, types, strict=True)]
                elif len(key_names) == 1:
                    params = [k[0] for k in keys]
                else:
                    params = list(chain.from_iterable(keys))
                rows = db.execute(sql, params).fetchall()
            except SluiceError:
                raise
            except sqlite3.Error as exc:
                self._forget()  # a column or a table gone since it was read: read again next time
                log.warning("lookup: SQLite failed", extra={"table": table, "error": str(exc)[:500]})
                raise BackendError(f"reading table '{table}' of the features file failed ({type(exc).__name__})") from None
        if not rows:
            return Found([], {f: [] for f in features}, [])
        n = len(key_names)
        columns = list(zip(*rows, strict=True))
        found: list[Key] = [(k if type(k) is str else str(k),) for k in columns[0]] if n == 1 else list(zip(*(map(str, c) for c in columns[:n]), strict=True))
        empty = [None] * len(rows)
        return Found(found, {f: list(empty) if i is None else list(columns[i]) for f, i in places}, empty if when is None else list(columns[when]))


def _folded(column: str) -> str:
    """A column's name as SQLite matches it: ASCII letters in either case alike, nothing else."""
    return column.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")


def _wanted(features: Sequence[str], event_time: str) -> list[str]:
    """The columns a question reads beside its keys: its features, then the event time ("": none)."""
    return [c for c in dict.fromkeys((*features, event_time)) if c]


# Errors -------------------------------------------------------------------------------------
def aws_error(exc: Exception, what: str, asked: str = "") -> SluiceError:
    """A store's failure as a sluice error; the raw text to the log only. `asked`: what the
    request asked for (its keys and their types), said where the store finds it invalid (a
    DynamoDB key of another type or name than the table's key attribute)."""
    from sluice.runtimes.aws_failures import aws_failure

    if isinstance(exc, SluiceError):
        return exc
    match aws_failure(exc, "lookup", store=what):
        case ("timeout" | "unreachable", _):
            return Unavailable(f"{what} is not reachable")
        case ("refused", "ProvisionedThroughputExceededException" | "ThrottlingException" | "RequestLimitExceeded" | "InternalServerError" | "ServiceUnavailable" as code):
            return Unavailable(f"{what} is throttling reads ({code}); retry shortly")
        case ("refused", "ResourceNotFoundException" | "ResourceNotFound"):
            return BackendError(f"{what} does not exist")
        case ("refused", "AccessDeniedException" | "AccessDenied"):
            return BackendError(f"sluice may not read {what}: the operator grants it (graphs.lookups in the deployment's config)")
        case ("refused", "ValidationException") if asked:
            return BackendError(
                f"{what} refused the keys asked (ValidationException): {asked}; the table's key attributes must be of these names "
                "and types (a number (N) key is read from an INT32 or INT64 input, a string (S) key from a BYTES one)"
            )
        case (_, code):
            return BackendError(f"reading {what} failed ({code})")
