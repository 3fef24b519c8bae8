"""Score one chunk: read it, check each row against the signature, infer the good rows in
large batches through the prediction service (so splits and ensembles apply as they do
online), and write one part file and, when a row failed, one error file.

Every row read ends in exactly one of the two files; a chunk whose rows cannot be read at
all raises, so its orchestrator retries it. Parts and error files have fixed names per
chunk: scoring a chunk again overwrites them.

Offline, a deployment's shadow mirrors are not run (a batch job would multiply the mirror's
load, and mirror verdicts describe live traffic); a split picks its variant per inference
batch, not per row, and batch calls are kept out of the deployment's live statistics.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.batch.columns import feed_arrays, needed_columns, plan_feeds
from sluice.batch.outputs import prediction_columns
from sluice.batch.readers import ChunkUnreadable, read_chunk
from sluice.batch.uris import join
from sluice.batch.writers import CONTENT_TYPES, EXTENSIONS, ErrorWriter, PartWriter
from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.domain import Principal
from sluice.domain.errors import InvalidInput
from sluice.domain.jobs import ChunkResult
from sluice.domain.policy import walk
from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.services.loop import run

if TYPE_CHECKING:
    import pyarrow as pa

    from sluice.batch.filestore import FileStore
    from sluice.batch.plan import Chunk, JobSpec
    from sluice.batch.readers import Piece
    from sluice.domain.results import Resolved
    from sluice.services.predictions import PredictionService

BYTES_PER_TEXT_VALUE = 64  # a guess for string inputs when sizing requests by bytes


def part_name(index: int, fmt: str) -> str:
    return f"part-{index:05d}.{EXTENSIONS[fmt]}"


def error_name(index: int) -> str:
    return f"errors/part-{index:05d}.jsonl"


class ChunkScorer:
    def __init__(
        self,
        predictions: PredictionService,
        files: FileStore,
        *,
        infer_rows: int,
        read_rows: int,
        max_request_bytes: int,
    ) -> None:
        self.predictions = predictions
        self.files = files
        self.infer_rows = infer_rows
        self.read_rows = read_rows
        self.max_request_bytes = max_request_bytes

    def score(self, spec: JobSpec, chunk: Chunk) -> ChunkResult:
        started = time.monotonic()
        principal = Principal(spec.tenant, frozenset({"predict"}), f"batch:{spec.job_id}")
        resolved = run(self.predictions.resolve(principal, spec.deployment))
        signature = resolved.version.signature
        available = list(spec.columns)
        if spec.format == "jsonl":  # fields vary by line: a missing one fails its row only
            available += [n for s in signature.inputs for n in (s.name, *(s.feature_names or ()))]
        feeds = plan_feeds(signature, available)
        keys = list(spec.key_columns)
        columns = list(dict.fromkeys([*keys, *needed_columns(feeds)]))
        run_rows = self._rows_per_call(resolved, feeds)
        with_variant = any(node.kind == "split" for node in walk(resolved.node))
        versions: Counter[str] = Counter()
        with tempfile.TemporaryDirectory(prefix="sluice-chunk-") as work:
            part = PartWriter(Path(work) / "part", spec.output_format)
            errors = ErrorWriter(Path(work) / "errors")
            rows_in = 0
            for piece in read_chunk(self.files, spec, chunk, feeds, columns, batch_rows=self.read_rows):
                rows_in += piece.table.num_rows + len(piece.dropped)
                errors.write([_dropped(number, reason, text, keys) for number, reason, text in piece.dropped])
                self._score_piece(principal, feeds, spec, piece, run_rows, part, errors, versions, with_variant)
            rows_out, rows_failed = part.close(), errors.close()
            if rows_in != chunk.rows or rows_in != rows_out + rows_failed:
                raise ChunkUnreadable(
                    f"chunk {chunk.index}: {rows_in} rows read, {chunk.rows} planned, "
                    f"{rows_out} scored and {rows_failed} failed"
                )
            part_uri = join(spec.output_uri, part_name(chunk.index, spec.output_format)) if rows_out else None
            error_uri = join(spec.output_uri, error_name(chunk.index)) if rows_failed else None
            if part_uri:
                self.files.upload(part_uri, part.path, content_type=CONTENT_TYPES[spec.output_format])
            if error_uri:
                self.files.upload(error_uri, errors.path, content_type=CONTENT_TYPES["jsonl"])
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

    def _rows_per_call(self, resolved: Resolved, feeds: list[Any]) -> int:
        """Rows per inference call: the configured batch, or fewer when the version is a
        SageMaker endpoint, whose request body is capped in bytes."""
        rows = self.infer_rows
        tenant = resolved.deployment.tenant
        runtimes = {resolved.version.runtime} | {
            run(self.predictions.version_of(tenant, node.model, node.version)).runtime
            for node in walk(resolved.node)
            if node.kind == "single"
        }
        if "sagemaker" not in runtimes:
            return rows
        per_row = 0
        for feed in feeds:
            values = len(feed.columns) if feed.stacked else (feed.width or 1)
            size = BYTES_PER_TEXT_VALUE if feed.datatype == "BYTES" else V2_TO_NUMPY[feed.datatype].itemsize
            per_row += values * size
        return max(1, min(rows, self.max_request_bytes // max(per_row, 1)))

    def _score_piece(
        self,
        principal: Principal,
        feeds: list[Any],
        spec: JobSpec,
        piece: Piece,
        run_rows: int,
        part: PartWriter,
        errors: ErrorWriter,
        versions: Counter[str],
        with_variant: bool,
    ) -> None:
        """Check a piece's rows once, infer the good ones a batch at a time, write both kinds."""
        import pyarrow as pa

        table = piece.table
        reasons = piece.reasons.copy() if piece.reasons is not None else np.full(table.num_rows, None, dtype=object)
        arrays = feed_arrays(feeds, table, reasons)
        good = np.equal(reasons, None)
        rows = None if good.all() else np.flatnonzero(good)  # None: every row, in order
        count = table.num_rows if rows is None else len(rows)
        for at in range(0, count, run_rows):
            stop = min(at + run_rows, count)
            taken = None if rows is None else rows[at:stop]
            inputs = {n: (a[at:stop] if taken is None else a[taken]) for n, a in arrays.items()}
            try:
                request = PredictionRequest(spec.deployment, ArrayInputs(inputs), mirrors=False)
                prediction = run(self.predictions.predict(principal, request))
            except InvalidInput as exc:  # the model refused rows that passed the signature
                reasons[slice(at, stop) if taken is None else taken] = f"the model rejected these rows: {exc.message}"
                continue
            answer = prediction.answer
            kept = table.slice(at, stop - at) if taken is None else table.take(pa.array(taken))
            numbers = piece.rows[at:stop] if taken is None else piece.rows[taken]
            out = _keys(kept, numbers, spec.key_columns)
            flat = spec.output_format == "csv"
            out.update(prediction_columns(answer.signature, answer.result, flat=flat))
            if with_variant:
                out["variant"] = pa.array([answer.variant or ""] * (stop - at), type=pa.string())
            part.write(pa.table(out))
            versions[answer.version.ref] += stop - at
        bad = np.flatnonzero(~np.equal(reasons, None))
        if len(bad):
            key_values = {k: table.column(k).take(pa.array(bad)).to_pylist() for k in spec.key_columns}
            errors.write([
                {"row": int(piece.rows[i]), **{k: key_values[k][j] for k in spec.key_columns}, "reason": reasons[i]}
                for j, i in enumerate(bad)
            ])  # fmt: skip


def _keys(table: pa.Table, rows: np.ndarray, key_columns: tuple[str, ...]) -> dict[str, Any]:
    import pyarrow as pa

    if key_columns:
        return {k: table.column(k) for k in key_columns}
    return {"row": pa.array(rows, type=pa.int64())}


def _dropped(number: int, reason: str, text: str | None, keys: list[str]) -> dict[str, Any]:
    record: dict[str, Any] = {"row": number, **dict.fromkeys(keys), "reason": reason}
    if text is not None:
        record["input"] = text
    return record
