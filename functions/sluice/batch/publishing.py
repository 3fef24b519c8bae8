"""A batch job's answers published into a table of precomputed answers (`publish: {table,
key, ttl_s}` on the job), for `precomputed` nodes to serve.

While the job runs, each chunk writes its scored rows under the job's own generation (the job
id), keyed by each row's entity (the `key` column), in calls of the store's size, and says what
the answers hold (`describe`); a chunk scored again writes the same items. A row whose key is
empty fails, named in the chunk's error file: every input row is scored and published, or
counted failed. When the job succeeds, Finalize points the table at its generation, in one
write (`publish_job`), unless a job made after it has published first (the table only moves
forward: this job's answers are then kept below that one's, to be put back should it be
withdrawn); until then readers see the previous job's answers, and a job that fails, or is
cancelled, is never pointed at (its rows expire with their time to live). Once the job's
success is recorded, the generation it replaced is removed (`retire_replaced`); a job that
ends any other way after it published (cancelled, found dead, or failed in Finalize's last
steps) is withdrawn, and the publication it replaced put back (`withdraw_job`), by every
step that ends a job so.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sluice.batch.uris import join
from sluice.codecs.datatypes import exact_integers_below
from sluice.codecs.stored_rows import encode_rows
from sluice.domain import now
from sluice.domain.errors import BadRequest, NotFound, SluiceError, Unavailable
from sluice.domain.precomputed import MAX_ENTITY_BYTES, entity_of
from sluice.observability import get_logger
from sluice.registry.precomputed import Publication, Superseded

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import pyarrow as pa

    from sluice.batch.filestore import FileStore
    from sluice.batch.plan import JobSpec
    from sluice.domain.jobs import BatchJob, ChunkResult, PublishTarget
    from sluice.domain.results import Answer
    from sluice.registry.precomputed import PrecomputedStore


def check_publish(job: BatchJob, store: PrecomputedStore | None, columns: list[str] | tuple[str, ...], fmt: str) -> None:
    """Refuse, when the job is planned, a `publish` this process cannot serve: no table is
    configured, or the key column is not in the input (JSON Lines: checked row by row)."""
    if job.publish is None:
        return
    if store is None:
        raise Unavailable("publish: no table of precomputed answers is configured here (SLUICE_PRECOMPUTED_TABLE)", field="publish")
    if fmt != "jsonl" and job.publish.key not in columns:
        raise BadRequest(f"publish.key: the input has no column '{job.publish.key}'; its columns are {list(columns)}", field="publish.key")


class Publishing:
    """One chunk's answers on their way into its job's table."""

    def __init__(self, store: PrecomputedStore, spec: JobSpec, target: PublishTarget) -> None:
        self.store, self.spec, self.target = store, spec, target
        self._described = False
        self._lock = threading.Lock()
        self.described: Publication | None = None
        self._keys: list[np.ndarray] = []  # the chunk's rows published: each one's key digest and row (`KEYS`)
        self.exact: dict[str, str] = {}  # the columns of 64-bit integer inputs (CSV reads their text) and their datatypes, set by the scorer

    @property
    def key(self) -> str:
        return self.target.key

    def entities(self, table: pa.Table, reasons: np.ndarray) -> np.ndarray:
        """Each row's entity; a row without one gets its reason (it fails, named in the error file)."""
        import pyarrow as pa

        found = np.empty(table.num_rows, dtype=object)
        values = table.column(self.key).to_pylist() if self.key in table.column_names else [None] * table.num_rows
        if self.key in table.column_names and pa.types.is_floating(kind := table.schema.field(self.key).type):
            # A key read as floats (it is a numeric input of the model too): a whole number past
            # the type's exact integers may have been rounded as it was read (9007199254740993
            # reads as 9007199254740992), so it is no entity, never another one.
            bound = exact_integers_below(np.dtype(kind.to_pandas_dtype()))
            values = [None if isinstance(v, float) and v.is_integer() and abs(v) >= bound else v for v in values]
        elif self.key in self.exact and self.key in table.column_names and pa.types.is_string(table.schema.field(self.key).type):
            # A 64-bit integer input's text (CSV): its entity is the integer it writes, as the
            # model reads it (`5.0`, ` 5` and `+5` are `5`), exactly.
            from sluice.batch.integers import whole_of

            values = [v if v is None else whole_of(v, self.key, self.exact[self.key])[0] for v in values]
        found[:] = [entity_of(v) for v in values]
        missing = np.flatnonzero(np.equal(found, None) & np.equal(reasons, None))
        reasons[missing] = (
            f"publish key column '{self.key}' is empty on this row, a list or an object, not UTF-8 text, an infinite number, longer than {MAX_ENTITY_BYTES} bytes (UTF-8), "
            "or a whole number too large for the floats it was read as: it cannot be published"
        )
        return found

    def collect(self, entities: np.ndarray, answer: Answer) -> list[tuple[str, bytes, float | None]]:
        """The rows of one call as the table stores them, each with when it was computed where
        it is a stored answer (a deployment with a `precomputed` node: published again, it keeps
        its own time, so `max_age_s` still ages it; None: computed now); the first call says
        what they hold."""
        rows = len(entities)
        if not self._described:
            with self._lock:
                if self.described is None:
                    self.described = Publication(
                        generation=self.spec.job_id, job=self.spec.job_id, deployment=self.spec.deployment,
                        outputs=[s.to_dict() for s in answer.signature.outputs if s.name in answer.result.outputs],
                        classes={k: list(v) for k, v in answer.result.classes.items()},
                    )  # fmt: skip
                self._described = True
        return list(zip(entities.tolist(), encode_rows(answer.result.outputs, rows), _stored_times(answer, rows), strict=True))

    def write(self, rows: list[tuple[str, bytes, float | None]], numbers: list[np.ndarray]) -> None:
        """Write one piece's rows; `numbers`: their rows in the input, in the same order, for `keys`."""
        if not rows:
            return
        kept = np.empty(len(rows), dtype=KEYS)
        kept["key"] = key_digests([entity for entity, _, _ in rows])
        kept["row"] = np.concatenate(numbers)
        self._keys.append(kept)
        at = time.time()
        t, spec = self.target, self.spec
        by_time: dict[float, list[tuple[str, bytes]]] = {}
        for entity, body, computed_at in rows:
            by_time.setdefault(at if computed_at is None else computed_at, []).append((entity, body))
        for computed_at, some in by_time.items():
            self.store.put_answers(spec.tenant, t.table, spec.job_id, some, computed_at=computed_at, expires_at=at + t.ttl_s)
        if self.described is not None:
            self.store.describe(spec.tenant, t.table, self.described, expires_at=at + t.ttl_s)
            self.described = None  # once a chunk

    def keys(self) -> bytes | None:
        """The chunk's published rows as Finalize reads them (`repeated_keys`): each key's
        digest and row, in NumPy's format; None where it published none."""
        if not self._keys:
            return None
        out = io.BytesIO()
        np.save(out, np.concatenate(self._keys), allow_pickle=False)
        return out.getvalue()


def _stored_times(answer: Answer, rows: int) -> list[float | None]:
    """When each row of an answer was computed, where it was read from a table of precomputed
    answers (`Answer.computed_at`); None for a row computed now."""
    times = answer.computed_at
    if answer.source is None or times is None:
        return [None] * rows
    if isinstance(times, list):
        return [None if t is None else float(t) for t in times]
    return [float(times) if answer.source == "precomputed" else None] * rows


# A chunk's published keys (`Publishing.keys`), beside its part in the job's folder (a name
# starting with `_`, which Hive-style readers of the folder skip); Finalize removes them.
KEYS = np.dtype([("key", "<u8"), ("row", "<i8")])
SHOWN_ROWS = 2


def keys_uri(output_uri: str, index: int) -> str:
    return join(output_uri, f"_publish/keys-{index:05d}.npy")


def key_digests(entities: list[str]) -> np.ndarray:
    """Each entity's 64-bit digest (BLAKE2b): the same in every process, unlike `hash`."""
    digest = hashlib.blake2b
    return np.frombuffer(b"".join(digest(e.encode("utf-8", "surrogatepass"), digest_size=8).digest() for e in entities), dtype="<u8")


def repeated_keys(files: FileStore, job: BatchJob, chunks: Sequence[ChunkResult]) -> list[str]:
    """Why the job's answers cannot be published: a key on more than one row of the input
    (a table holds one answer an entity: which row's would it serve?), read from what each
    chunk published (`keys_uri`); none where every entity is on one row. The digests alone
    are held and sorted in place (8 bytes a row); the rows of one repeated key are looked for
    only where there is one."""
    if job.publish is None:
        return []

    def published() -> Iterator[np.ndarray]:
        for chunk in chunks:
            if chunk.rows_out:
                with contextlib.suppress(NotFound):  # none published (every row failed)
                    yield np.load(io.BytesIO(files.read_bytes(keys_uri(job.output_uri, chunk.index))), allow_pickle=False)

    digests = [part["key"].copy() for part in published()]
    if not digests:
        return []
    every = np.concatenate(digests)
    del digests
    every.sort()
    repeated = every[1:][every[1:] == every[:-1]]
    if not len(repeated):
        return []
    keys = len(np.unique(repeated))
    one = repeated[0]
    rows = sorted(int(r) for part in published() for r in part["row"][part["key"] == one])[:SHOWN_ROWS]
    return [
        f"publish.key: {keys} {'value' if keys == 1 else 'values'} of column '{job.publish.key}' {'is' if keys == 1 else 'are'} "
        f"on more than one row (rows {rows[0]} and {rows[1]} share one): a table holds one answer an entity, so "
        "nothing was published: give each entity one row"
    ]


def drop_keys(files: FileStore, job: BatchJob, chunks: Sequence[ChunkResult]) -> None:
    """The chunks' published keys removed from the job's folder, once Finalize has read them."""
    if job.publish is None:
        return
    for chunk in chunks:
        with contextlib.suppress(SluiceError):
            files.delete(keys_uri(job.output_uri, chunk.index))


@dataclass(frozen=True, slots=True)
class Published:
    """A job's answers published into its table: served in place of `replaced` (None: nothing
    was), or kept below those of a job made after it that published first, to be put back
    should that one be withdrawn."""

    table: str
    generation: str
    replaced: Publication | None


def publish_job(store: PrecomputedStore | None, job: BatchJob) -> Published | None:
    """Point the job's table at its answers (at its success). None when the job published
    nothing (no row was scored). Where the table serves the answers of a job made after this one
    (`Superseded`: those stay, this job's are what their withdrawal would put back, and this job
    still succeeds; logged), what it replaced is nothing."""
    target = job.publish
    if target is None or store is None:
        return None
    found = store.described(job.tenant, target.table, job.id)
    if found is None:
        return None
    at = now()
    publication = Publication(
        generation=job.id, job=job.id, deployment=job.deployment, outputs=found.outputs,
        classes=found.classes, published_at=at, rows=job.rows_out, made_at=job.created_at,
    )  # fmt: skip
    try:
        replaced = store.publish(job.tenant, target.table, publication, expires_at=at + target.ttl_s)
    except Superseded as later:
        get_logger().warning(
            "batch job's answers not published: a job made after it published first",
            extra={"job": job.id, "table": target.table, "served": later.current.job},
        )
        return Published(target.table, job.id, None)
    return Published(target.table, job.id, replaced)


def retire_replaced(store: PrecomputedStore, job: BatchJob, published: Published) -> None:
    """Once the job's success is recorded: remove the answers of the generation it replaced,
    and what the table would put back below the job's (never, now: it succeeded), wherever the
    job's publication stands (served, or kept below a later job's)."""
    if published.replaced is not None:
        store.retire(job.tenant, published.table, published.replaced.generation)
    store.settle(job.tenant, published.table, job.id)  # marks its publication succeeded, even one that replaced nothing


def withdraw_job(store: PrecomputedStore | None, job: BatchJob) -> None:
    """Once a job has ended without success (failed, cancelled, found dead): where its table
    points at its answers (it published, then did not succeed after all), point it back at
    what they replaced, as it was. A later job's publication since stays."""
    if job.publish is not None and store is not None and job.status != "SUCCEEDED":
        store.withdraw(job.tenant, job.publish.table, job.id)
