"""Replay: a deployment's captured requests run against a candidate (a version or another
deployment) and compared with the answers they got, an offline shadow over real traffic.

Captured records are read into arrays as they come, grouped by captured version and
tensors, and each group of up to `batch_rows` rows is scored through the data plane's bulk call
(`inference.bulk.score_many` over the candidate's policy node: `run_node`, no mirrors, no live
statistics), which isolates a record the candidate refuses, so it fails alone. A record that
cannot be read (a redacted value, a layout of its own) is found when its group is stacked,
and read alone. Every captured row ends scored or failed, with the reason (redacted inputs,
no captured outputs, an error). The verdict is the shadow's (`sluice.inference.compare` and
`sluice.stats.verdicts.comparison`): label agreement with its Wilson interval, mean and max
absolute difference; with the captured latency and the replay's own rows per second.
"""

from __future__ import annotations

import asyncio
import gc
import re
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.capture.reader import capture_window, deployment_records
from sluice.domain.errors import InvalidRequest, SluiceError
from sluice.domain.policy import NAME_PATTERN, parse_policy
from sluice.domain.results import InferenceResult
from sluice.domain.values import isoformat, parse_model_version, parse_version
from sluice.inference.bulk import Records, score_many
from sluice.inference.compare import compare
from sluice.inference.loop import gc_paused
from sluice.services.models import require_found
from sluice.stats.verdicts import comparison

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sluice.capture.reader import CaptureReader
    from sluice.domain import ModelVersion, Principal
    from sluice.domain.policy import Node
    from sluice.inference.predictions import PredictionService


class ReplayService:
    def __init__(self, predictions: PredictionService, reader: CaptureReader | None, *, batch_rows: int = 4096) -> None:
        self.predictions = predictions  # offline: the batch runner's (no live statistics, no mirrors)
        self.reader = reader
        self.batch_rows = batch_rows
        self._versions: dict[tuple[str, str, int], ModelVersion | None] = {}

    def target(self, principal: Principal, against: str) -> tuple[str, Node]:
        """`MODEL:VERSION` or a deployment name."""
        registry = self.predictions.registry
        if isinstance(against, str) and ":" in against:
            model, number = parse_model_version(against, field="against")
            require_found(registry.get_version, principal.tenant, model, number, field="against")
            return against, parse_policy({"kind": "single", "model": model, "version": number}, field="against")
        if not isinstance(against, str) or not re.fullmatch(NAME_PATTERN, against):
            raise InvalidRequest(f"{against!r} is not MODEL:VERSION or a deployment name", field="against")
        require_found(registry.get_deployment, principal.tenant, against, field="against")
        return f"deployment {against}", parse_policy({"kind": "ref", "deployment": against}, field="against")

    def replay(self, principal: Principal, deployment: str, *, since: Any, until: Any = None, against: str) -> dict[str, Any]:
        """`since` and `until` as `sluice.domain.values.parse_time` reads them, a duration ago
        included (`2h`); `until` None is now."""
        principal.require("admin")
        tenant = principal.tenant
        self.predictions.registry.get_deployment(tenant, deployment)  # this tenant's, or 404
        start, end = capture_window(since, until, now=time.time(), what="a replay")
        label, node = self.target(principal, against)
        if self.reader is None:
            raise InvalidRequest("data capture is off here: there is nothing to replay", field="deployment")
        started = time.perf_counter()
        records = deployment_records(self.reader, self.predictions.registry, tenant, deployment, start, end)
        result = asyncio.run(self._run(principal, node, records))
        seconds = time.perf_counter() - started
        rows = result["scored_rows"]
        return {
            "deployment": deployment,
            "against": label,
            "since": isoformat(start),
            "until": isoformat(end),
            **result,
            "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds, 1) if seconds > 0 and rows else None,
        }

    async def _run(self, principal: Principal, node: Node, records: Iterable[dict[str, Any]]) -> dict[str, Any]:
        tally = _Tally()
        pending: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        pending_rows: dict[tuple[Any, ...], int] = {}
        batch_rows = self.batch_rows
        records_seen = rows_seen = failed_rows = 0
        failures = tally.failures

        # The collector held off while captured records are read and scored (most of a
        # replay: thousands of small acyclic objects, freed by reference counting), and run on
        # the young once a batch, so cycles made while scoring do not pile up.
        with gc_paused():
            for record in records:
                records_seen += 1
                rows = int(record.get("rows") or 0)
                rows_seen += rows
                inputs, outputs = record.get("inputs"), record.get("outputs")
                reason = None
                if "unreadable" in record:
                    reason = "unreadable record"
                elif not inputs:
                    reason = "inputs redacted or not captured"
                elif not outputs:
                    reason = "outputs not captured"
                if reason is not None:
                    if rows:  # a record of no rows fails none
                        failures[reason] += rows
                        failed_rows += rows
                    continue
                if not rows:  # nothing to score
                    continue
                # Records are stacked with those of the same version and the same tensors (a
                # request may ask for some outputs only), so no record's tensors are left out
                # of its batch, whatever the order. A record with a redacted value or a shape
                # of its own is found when its batch is stacked, and is then looked at alone
                # (no per-record check on the way: most batches are whole).
                key = (record.get("model"), record.get("version"), _names(inputs), _names(outputs))
                waiting = pending.get(key)
                if waiting is None:
                    waiting = pending[key] = []
                    pending_rows[key] = 0
                waiting.append(record)
                pending_rows[key] += rows
                if pending_rows[key] >= batch_rows:
                    del pending_rows[key]
                    await self._score(principal, node, key, pending.pop(key), tally)
                    gc.collect(0)
            for key in list(pending):
                await self._score(principal, node, key, pending.pop(key), tally)
        counts = tally.counts
        counts["records"], counts["rows"] = records_seen, rows_seen
        counts["failed_rows"] += failed_rows
        verdict = comparison({**tally.sums, **tally.maxes})
        return {
            **counts,
            "failures": dict(failures),
            "verdict": verdict,
            "latency": {
                "captured_p50_ms": _percentile(tally.latencies, 50),
                "captured_p99_ms": _percentile(tally.latencies, 99),
            },
        }

    async def _score(self, principal: Principal, node: Node, key: tuple[Any, ...], batch: list[dict[str, Any]], tally: _Tally) -> None:
        """One captured version's records of the same tensors: read into arrays, scored, compared."""
        model, version = key[0], key[1]
        primary = await self._version(principal.tenant, model, version)
        rows = [int(r.get("rows") or 0) for r in batch]
        if primary is None:
            gone = f"captured version {model}:{version} is gone" if _is_version(version) else "unreadable record"
            tally.fail(gone, sum(rows))
            return
        try:
            inputs, outputs = _read(batch, sum(rows))
        except (ValueError, TypeError, KeyError):
            if len(batch) == 1:
                tally.fail(_why(batch[0]), rows[0])
                return
            readable = [one for one in batch if _readable(one, tally)]
            if len(readable) < len(batch):  # the others, together again
                if readable:
                    await self._score(principal, node, key, readable, tally)
                return
            for one in batch:  # each reads alone, not together (their layouts differ)
                await self._score(principal, node, key, [one], tally)
            return
        counts = None if rows.count(1) == len(rows) else np.asarray(rows)  # None: a row each (single-row requests)
        scalars = frozenset(name for name, tensor in batch[0]["inputs"].items() if not tensor["shape"])  # a value per record, each scored alone
        done = await score_many(self.predictions, principal, node, Records(inputs, counts, scalars=scalars), max_rows=self.batch_rows)
        classes = batch[0].get("classes") or {}
        for result in done.results:
            answer = result.answer
            captured = InferenceResult({name: array[result.rows] for name, array in outputs.items()}, classes)
            got, most = compare(primary.signature, captured, answer.signature, answer.result)
            got["compared"] = len(result)
            for name, value in got.items():
                tally.sums[name] += value
            for name, value in most.items():
                tally.maxes[name] = max(tally.maxes.get(name, value), value)
            chosen = result.records
            answered = batch[chosen] if isinstance(chosen, slice) else [batch[i] for i in chosen.tolist()]
            tally.counts["scored_rows"] += _count(result.rows)
            tally.latencies.extend(r.get("latency_ms") or 0.0 for r in answered)
        for error in done.errors:
            tally.fail(error.reason[:200], sum(rows[i] for i in _positions(error.records)))

    async def _version(self, tenant: str, model: Any, version: Any) -> ModelVersion | None:
        if not _is_version(version):  # as captured: read with the parser every door uses
            return None
        number = parse_version(version, field="version")
        key = (tenant, str(model), number)
        if key not in self._versions:
            try:
                self._versions[key] = await self.predictions.version_of(tenant, str(model), number)
            except SluiceError:
                self._versions[key] = None
        return self._versions[key]


class _Tally:
    """What a replay has found so far: the comparison's sums and maxima, failures by reason,
    rows counted, the captured latencies of the records scored."""

    __slots__ = ("counts", "failures", "latencies", "maxes", "sums")

    def __init__(self) -> None:
        self.sums: defaultdict[str, float] = defaultdict(float)
        self.maxes: dict[str, float] = {}
        self.failures: Counter[str] = Counter()
        self.counts = {"records": 0, "rows": 0, "scored_rows": 0, "failed_rows": 0}
        self.latencies: list[float] = []

    def fail(self, reason: str, rows: int) -> None:
        """`rows` failed for `reason` (none: a record of no rows fails nothing)."""
        if rows:
            self.failures[reason] += rows
            self.counts["failed_rows"] += rows


def _read(batch: list[dict[str, Any]], rows: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The records' captured inputs and outputs, stacked; raises when they do not stack."""
    inputs = _stacked(batch, "inputs")
    outputs = _stacked(batch, "outputs")
    if any(a.shape[0] != rows for a in (*inputs.values(), *outputs.values())):
        raise ValueError("rows do not match the data")
    return inputs, outputs


def _readable(record: dict[str, Any], tally: _Tally) -> bool:
    """Whether a record reads alone; if not, it is counted failed, with why."""
    rows = int(record.get("rows") or 0)
    try:
        _read([record], rows)
    except (ValueError, TypeError, KeyError):
        tally.fail(_why(record), rows)
        return False
    return True


def _positions(chosen: slice | np.ndarray) -> range | list[int]:
    return range(chosen.start, chosen.stop) if isinstance(chosen, slice) else chosen.tolist()


def _count(chosen: slice | np.ndarray) -> int:
    return chosen.stop - chosen.start if isinstance(chosen, slice) else len(chosen)


def _is_version(value: Any) -> bool:
    try:
        parse_version(value, field="version")
    except InvalidRequest:
        return False
    return True


def _names(tensors: Any) -> tuple[str, ...] | None:
    """A record's tensors by name, to group it with those of the same (None: not a mapping,
    found unreadable when stacked)."""
    return tuple(tensors) if tensors.__class__ is dict else None


def _why(record: dict[str, Any]) -> str:
    """Why a record could not be stacked on its own."""
    if not _complete(record.get("inputs") or {}):
        return "inputs redacted or not captured"
    if not _complete(record.get("outputs") or {}):
        return "outputs not captured"
    return "unreadable record"


def _complete(tensors: dict[str, Any]) -> bool:
    """Every tensor has its data, with no redacted (null) value."""
    for tensor in tensors.values():
        data = tensor.get("data") if tensor.__class__ is dict else None
        if data.__class__ is not list or None in data:
            return False
    return True


def _stacked(batch: list[dict[str, Any]], part: str) -> dict[str, np.ndarray]:
    """One array per tensor for the whole batch: the records' flat data joined, then read
    once (no array per record)."""
    from itertools import chain

    from sluice.codecs.datatypes import numpy_of_v2

    out: dict[str, np.ndarray] = {}
    for name, first in batch[0][part].items():
        datatype = first["datatype"]
        dtype = object if datatype == "BYTES" else numpy_of_v2(datatype)
        flat = list(chain.from_iterable(r[part][name]["data"] for r in batch))
        if None in flat:  # a redacted value: numpy would read it as NaN, False or None
            raise ValueError(f"{part} {name}: a value is missing")
        out[name] = np.asarray(flat, dtype=dtype).reshape(-1, *first["shape"][1:])
    return out


def _percentile(values: list[float], q: float) -> float | None:
    try:
        return round(float(np.percentile(np.asarray(values, dtype=np.float64), q)), 3) if values else None
    except (TypeError, ValueError):  # a record whose latency is not a number
        return None
