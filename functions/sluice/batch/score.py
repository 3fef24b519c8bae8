"""Score one chunk: read it, check each row against the signature, score the good rows
through the data plane's bulk call (`inference.bulk.score_many`: large calls of the one
prediction call, so splits and ensembles apply as they do online), and write one part file
and, when a row failed, one error file.

Every row read ends in exactly one of the two files. A row the model refuses fails alone
(the bulk call bisects its call; its neighbours are scored); a chunk whose rows cannot be
read at all, or whose calls fail for a reason that may pass (a backend down, a timeout),
raises, so its orchestrator retries it. Parts and error files have fixed names per chunk:
scoring a chunk again overwrites them.

With `threads` above 1, a piece's rows are scored in that many shares on as many threads
(ONNX Runtime, pyarrow and NumPy release the GIL), while the calling thread reads the next
piece and writes the finished ones in order: a chunk in flight at a time, and its pieces (one
being scored, one being read) bound the memory, whatever the thread count.

Offline, a deployment's shadow mirrors are not run (a batch job would multiply the mirror's
load, and mirror verdicts describe live traffic); a split picks its variant per inference
batch, not per row, and batch calls are kept out of the deployment's live statistics.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.batch.columns import feed_arrays, needed_columns, plan_feeds
from sluice.batch.pieces import EXACT_INTEGERS, ChunkUnreadable
from sluice.batch.publishing import Publishing, keys_uri
from sluice.batch.readers import read_chunk
from sluice.batch.uris import join
from sluice.batch.writers import CONTENT_TYPES, EXTENSIONS, ErrorWriter, PartWriter
from sluice.codecs.arrow_numbers import from_numbers, repeated_text
from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.codecs.plain import present_columns
from sluice.domain import Principal
from sluice.domain.errors import InvalidInput, SluiceError
from sluice.domain.jobs import ChunkResult
from sluice.inference.bulk import Records, Result, score_many
from sluice.inference.loop import run

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import pyarrow as pa

    from sluice.batch.filestore import FileStore
    from sluice.batch.pieces import Piece
    from sluice.batch.plan import Chunk, JobSpec
    from sluice.domain.results import Resolved
    from sluice.inference.predictions import PredictionService
    from sluice.registry.precomputed import PrecomputedStore

BYTES_PER_TEXT_VALUE = 64  # a guess for string inputs when sizing requests by bytes


def part_name(index: int, fmt: str) -> str:
    return f"part-{index:05d}.{EXTENSIONS[fmt]}"


def error_name(index: int) -> str:
    return f"errors/part-{index:05d}.jsonl"


@dataclass(eq=False, slots=True)
class ChunkScorer:
    predictions: PredictionService
    files: FileStore
    _: KW_ONLY
    infer_rows: int
    read_rows: int
    max_request_bytes: int
    precomputed: PrecomputedStore | None = None  # where a job with `publish` writes its answers
    # Inference threads, kept across chunks (each thread keeps its event loop).
    _pools: dict[int, ThreadPoolExecutor] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def _pool(self, threads: int) -> ThreadPoolExecutor | None:
        if threads <= 1:
            return None
        with self._lock:
            pool = self._pools.get(threads)
            if pool is None:
                pool = self._pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="sluice-infer")
            return pool

    def score(
        self, spec: JobSpec, chunk: Chunk, *, threads: int = 1, before_writing: Callable[[], None] | None = None
    ) -> ChunkResult:
        """`before_writing` is called before each piece's answers are written into the table it
        publishes into (where it publishes) and once the chunk is scored, before its files go
        into the job's folder: it raises when the job may no longer write there. A try still
        running when its job has ended (a step tried again while its first try ran on) so writes
        nothing more into a generation that may be served by now."""
        started = time.monotonic()
        principal = Principal(spec.tenant, frozenset({"predict"}), f"batch:{spec.job_id}")
        # The policy the job started with (`JobSpec.revision`, and the revisions of the
        # deployments it references, `JobSpec.refs`), whatever the deployments are now.
        resolved = run(self.predictions.resolve(principal, spec.deployment, revision=spec.revision, refs=spec.refs))
        signature = resolved.version.signature
        available = list(spec.columns)
        if spec.format == "jsonl":  # fields vary by line: a missing one fails its row only
            # An input Plan found (by its own name or its feature names) is fed as Plan chose;
            # one it did not see is fed by its feature names, and each line lacking them fails.
            have = set(available)
            available += [
                n for s in signature.inputs
                if s.name not in have and not (s.feature_names and have.issuperset(s.feature_names))
                for n in (s.feature_names or (s.name,))
            ]  # fmt: skip
        feeds = plan_feeds(signature, available)
        keys = list(spec.key_columns)
        publishing = Publishing(self.precomputed, spec, spec.publish) if spec.publish is not None and self.precomputed is not None else None
        if publishing is not None and spec.format == "csv":  # CSV reads their text (`pieces.arrow_types`)
            publishing.exact = {c: feed.datatype for feed in feeds if feed.width is None and feed.datatype in EXACT_INTEGERS for c in feed.columns}
        columns = list(dict.fromkeys([*keys, *([publishing.key] if publishing else []), *needed_columns(feeds)]))
        reached = run(self.predictions.walk_through(principal.tenant, resolved.node, refs=spec.refs))  # its references at their pinned revisions
        run_rows = self._rows_per_call(resolved, feeds, reached)
        # A row of a scalar input (rank 0) is its value alone: the bulk call scores it alone.
        scalars = frozenset(spec.name for spec in signature.inputs if not spec.shape)
        with_variant = any(node.kind == "split" for node in reached)
        versions: Counter[str] = Counter()
        pool = self._pool(threads)
        with tempfile.TemporaryDirectory(prefix="sluice-chunk-") as work:
            part = PartWriter(Path(work) / "part", spec.output_format)
            errors = ErrorWriter(Path(work) / "errors")
            rows_in = 0
            scoring: deque[_Scoring] = deque()  # pieces whose calls run, finished in order
            try:
                pieces = read_chunk(self.files, spec, chunk, feeds, columns, batch_rows=self.read_rows)
                for piece in _read_ahead(pieces) if spec.format == "parquet" else pieces:
                    rows_in += len(piece.records)  # counted by the record grammar, not the parser
                    errors.write([_dropped(number, reason, text, keys, chunk.uri) for number, reason, text in piece.dropped])
                    scoring.append(self._start_piece(principal, feeds, spec, piece, run_rows, with_variant, pool, threads, publishing, scalars))
                    while len(scoring) > 1:
                        _finish_piece(scoring.popleft(), spec, part, errors, versions, chunk.uri, publishing, before_writing)
                while scoring:
                    _finish_piece(scoring.popleft(), spec, part, errors, versions, chunk.uri, publishing, before_writing)
            finally:  # after a failure: shares not started yet need not run
                for left in scoring:
                    for share in left.shares:
                        if isinstance(share, Future):
                            share.cancel()
            rows_out, rows_failed = part.close(), errors.close()
            _release_arrow_memory()
            if rows_in != chunk.rows or rows_in != rows_out + rows_failed:
                raise ChunkUnreadable(
                    f"chunk {chunk.index}: {rows_in} rows read, {chunk.rows} planned, "
                    f"{rows_out} scored and {rows_failed} failed"
                )
            part_at = join(spec.output_uri, part_name(chunk.index, spec.output_format))
            errors_at = join(spec.output_uri, error_name(chunk.index))
            part_uri, error_uri = part_at if rows_out else None, errors_at if rows_failed else None
            if before_writing is not None:
                before_writing()
            # Each of the chunk's two names holds this try's rows or nothing: a file an earlier
            # try of the chunk left there (its recording failed, the chunk was tried again and
            # its rows ended otherwise, as a split's variants may) never stays beside this one's.
            for uri, path, kind in ((part_uri, part.path, spec.output_format), (error_uri, errors.path, "jsonl")):
                if uri is not None:
                    self.files.upload(uri, path, content_type=CONTENT_TYPES[kind])
            for uri, at in ((part_uri, part_at), (error_uri, errors_at)):
                if uri is None:
                    self.files.delete(at)  # nothing there: nothing done
            if publishing is not None:  # what it published, for Finalize to find a key on two rows
                if before_writing is not None:  # asked again: the uploads above may have taken long
                    before_writing()
                keys, keys_at = publishing.keys(), keys_uri(spec.output_uri, chunk.index)
                if keys is None:
                    self.files.delete(keys_at)
                else:
                    self.files.write_bytes(keys_at, keys, content_type="application/octet-stream")
        return ChunkResult(
            index=chunk.index,
            rows_in=rows_in,
            rows_out=rows_out,
            rows_failed=rows_failed,
            part=part_uri,
            errors=error_uri,
            versions=dict(versions),
            seconds=round(time.monotonic() - started, 3),
        )

    def _rows_per_call(self, resolved: Resolved, feeds: list[Any], reached: list[Any]) -> int:
        """Rows per inference call: the configured batch, or fewer when a version the policy
        reaches (`reached`: through its references too) is a SageMaker endpoint, whose request
        body is capped in bytes."""
        rows = self.infer_rows
        tenant = resolved.deployment.tenant
        runtimes = {resolved.version.runtime} | {
            run(self.predictions.version_of(tenant, node.model, node.version)).runtime for node in reached if node.kind == "single"
        }
        if "sagemaker" not in runtimes:
            return rows
        per_row = 0
        for feed in feeds:
            values = len(feed.columns) if feed.stacked else (feed.width or 1)
            size = BYTES_PER_TEXT_VALUE if feed.datatype == "BYTES" else V2_TO_NUMPY[feed.datatype].itemsize
            per_row += values * size
        return max(1, min(rows, self.max_request_bytes // max(per_row, 1)))

    def _start_piece(
        self,
        principal: Principal,
        feeds: list[Any],
        spec: JobSpec,
        piece: Piece,
        run_rows: int,
        with_variant: bool,
        pool: ThreadPoolExecutor | None,
        threads: int,
        publishing: Publishing | None = None,
        scalars: frozenset[str] = frozenset(),
    ) -> _Scoring:
        """Check a piece's rows once, and start scoring the good ones (on the pool, a share per
        thread, or here when there is none)."""
        table = piece.table
        reasons = piece.reasons.copy() if piece.reasons is not None else np.full(table.num_rows, None, dtype=object)
        arrays = feed_arrays(feeds, table, reasons)
        entities = publishing.entities(table, reasons) if publishing is not None else None  # a row without one fails
        good = np.equal(reasons, None)
        rows = None if good.all() else np.flatnonzero(good)  # None: every row, in order
        if rows is not None:
            arrays = {name: array[rows] for name, array in arrays.items()}
        count = table.num_rows if rows is None else len(rows)
        # A share of whole calls per thread, each share one `score_many` in one run of that
        # thread's event loop (not one run per call).
        calls = -(-count // run_rows)
        size = -(-calls // (threads if pool is not None else 1)) * run_rows
        shares: list[Future[_Scored] | _Scored] = []
        for at in range(0, count, size or 1):
            share = slice(at, min(at + size, count))
            args = (principal, spec, table, piece.rows, rows, arrays, share, run_rows, with_variant, publishing, entities, scalars)
            shares.append(pool.submit(self._score_share, *args) if pool is not None else self._score_share(*args))
        return _Scoring(piece, reasons, shares)

    def _score_share(
        self,
        principal: Principal,
        spec: JobSpec,
        table: pa.Table,
        numbers: np.ndarray,
        rows: np.ndarray | None,
        arrays: dict[str, np.ndarray],
        share: slice,
        run_rows: int,
        with_variant: bool,
        publishing: Publishing | None = None,
        entities: np.ndarray | None = None,
        scalars: frozenset[str] = frozenset(),
    ) -> _Scored:
        """Score a share of a piece's good rows (`rows`: their places in the piece; None, every
        row), and make the output columns of each call as it answers (this thread's Python work
        then overlaps the other threads' inference). A row the model refuses fails alone; any
        other failure fails the chunk, which its orchestrator retries."""
        import pyarrow as pa

        scored = _Scored([], [], [])
        flat = spec.output_format == "csv"

        def present(result: Result) -> None:
            answer, taken = result.answer, _in_piece(result.records, share, rows)
            kept = table.slice(taken.start, taken.stop - taken.start) if isinstance(taken, slice) else table.take(from_numbers(np.asarray(taken)))
            out = _keys(kept, numbers[taken], spec.key_columns)
            out.update(present_columns(answer.signature, answer.result, flat=flat))
            if with_variant:
                out["variant"] = repeated_text(answer.variant or "", kept.num_rows)
            scored.parts.append((pa.table(out), answer.models or answer.version.ref))  # rows that took different cases: each row's
            if publishing is not None and entities is not None:
                scored.published += publishing.collect(entities[taken], answer)
                scored.numbers.append(np.asarray(numbers[taken], np.int64).reshape(-1))

        records = Records({name: array[share] for name, array in arrays.items()}, scalars=scalars)
        outcomes = run(score_many(
            self.predictions, principal, spec.deployment, records,
            max_rows=run_rows, mirrors=False, stop_on_retry=True, on_result=present, revision=spec.revision, refs=spec.refs,
        ))  # fmt: skip
        for error in outcomes.errors:
            if error.retry:
                raise error.error
        scored.failed = [(_in_piece(e.records, share, rows), _refused(e.error)) for e in outcomes.errors]
        return scored


class _Scored:
    """A share's output: a table and the version that answered per call, and the rows refused
    (their places in the piece, and why)."""

    __slots__ = ("failed", "numbers", "parts", "published")

    def __init__(
        self,
        parts: list[tuple[pa.Table, str | list[str]]],
        failed: list[tuple[slice | np.ndarray, str]],
        published: list[tuple[str, bytes, float | None]],
    ) -> None:
        self.parts, self.failed, self.published = parts, failed, published
        self.numbers: list[np.ndarray] = []  # the published rows' rows in the input, in order


class _Scoring:
    """A piece whose shares were started: its rows' reasons, and each share."""

    __slots__ = ("piece", "reasons", "shares")

    def __init__(self, piece: Piece, reasons: np.ndarray, shares: list[Future[_Scored] | _Scored]) -> None:
        self.piece, self.reasons, self.shares = piece, reasons, shares


def _in_piece(records: slice | np.ndarray, share: slice, rows: np.ndarray | None) -> slice | np.ndarray:
    """A share's records as places in its piece."""
    if isinstance(records, slice):
        start, stop = share.start + records.start, share.start + records.stop
        return slice(start, stop) if rows is None else rows[start:stop]
    return records + share.start if rows is None else rows[records + share.start]


def _refused(error: Exception) -> str:
    if isinstance(error, InvalidInput):
        return f"the model rejected this row: {error.message}"
    return f"{error.code}: {error.message}" if isinstance(error, SluiceError) else str(error)


def _finish_piece(
    scoring: _Scoring,
    spec: JobSpec,
    part: PartWriter,
    errors: ErrorWriter,
    versions: Counter[str],
    source: str | None,
    publishing: Publishing | None = None,
    before_writing: Callable[[], None] | None = None,
) -> None:
    """Write a piece's scored rows (in order) and its failed ones, once its calls are done.
    `source`: the object the rows came from, when the input is many objects (each row then
    names it, in an `object` column and in its error record)."""

    reasons = scoring.reasons
    published: list[tuple[str, bytes, float | None]] = []
    numbers: list[np.ndarray] = []
    for share in scoring.shares:
        scored = share.result() if isinstance(share, Future) else share
        published += scored.published
        numbers += scored.numbers
        for taken, reason in scored.failed:
            reasons[taken] = reason
        for table, ref in scored.parts:
            if source is not None:
                table = table.add_column(0, "object", repeated_text(source, table.num_rows))
            part.write(table)
            if isinstance(ref, str):
                versions[ref] += table.num_rows
            else:
                versions.update(ref)
    if publishing is not None:  # before the piece counts as done: a failed write fails the chunk, retried whole
        if before_writing is not None:  # the job still runs: its generation is not served yet
            before_writing()
        publishing.write(published, numbers)
    bad = np.flatnonzero(~np.equal(reasons, None))
    if len(bad):
        table, numbers = scoring.piece.table, scoring.piece.rows
        key_values = {k: table.column(k).take(from_numbers(np.asarray(bad, np.int64))).to_pylist() for k in spec.key_columns}
        errors.write([
            {**_object(source), "row": int(numbers[i]), **{k: key_values[k][j] for k in spec.key_columns}, "reason": reasons[i]}
            for j, i in enumerate(bad)
        ])  # fmt: skip


def _read_ahead(pieces: Iterator[Piece]) -> Iterator[Piece]:
    """The pieces of a Parquet chunk, the next one decoded on a thread of its own while this
    one is scored (pyarrow decodes without the GIL), as a reader thread would."""
    with ThreadPoolExecutor(1, thread_name_prefix="sluice-read") as reader:
        coming = reader.submit(next, pieces, None)
        while (piece := coming.result()) is not None:
            coming = reader.submit(next, pieces, None)
            yield piece


def _release_arrow_memory() -> None:
    """Give the chunk's decoded batches back to the system: the allocator keeps freed pages
    for reuse, and a job of many chunks would otherwise peak above a job of one."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def _keys(table: pa.Table, rows: np.ndarray, key_columns: tuple[str, ...]) -> dict[str, Any]:
    if key_columns:
        return {k: table.column(k) for k in key_columns}
    return {"row": from_numbers(rows.astype(np.int64, copy=False))}


def _object(source: str | None) -> dict[str, str]:
    return {} if source is None else {"object": source}


def _dropped(number: int, reason: str, text: str | None, keys: list[str], source: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {**_object(source), "row": number, **dict.fromkeys(keys), "reason": reason}
    if text is not None:
        record["input"] = text
    return record
