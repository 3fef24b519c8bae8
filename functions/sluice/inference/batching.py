"""Adaptive batching: concurrent requests for the same model version joined into one runtime
call, for the deployments that turn it on (`batching: {max_batch_size, max_delay_us}`).

It sits below the one prediction call: each request has been authenticated, resolved,
decoded and checked against the signature, and routed, by `PredictionService.predict`, which
also records its statistics and its log line afterwards, as for any request. Only the call to
the runtime is shared, at the version level (`PolicyRunner._single`):

- A request joins the open batch of its version (same runtime, version, outputs asked for,
  and input dtypes and shapes past the batch axis). The first request opens it; the batch
  leaves when it holds `max_batch_size` rows or `max_delay_us` after it opened (0: at the end
  of the event loop's current turn, with the requests already read), whichever is first. A
  request as large as the batch alone goes straight to the runtime.
- While a call for the version is under way, a batch whose time is up stays open and keeps
  taking requests until that call returns (or it is full): under load batches grow instead of
  calls piling up, as Triton's scheduler holds requests while its instances are busy.
- A joined call runs on a worker thread where the runtime offers one (`infer_off_loop`):
  the loop goes on reading requests, which fill the next batch.
- The joined call gets the inputs concatenated along the batch axis; each request gets back
  exactly its own rows of every output (and of a classifier's label maps).
- A runtime failure (5xx) fails every request of the batch with that error. A refusal of the
  joined input (4xx: ONNX Runtime's shape or type check) may be one request's fault: each
  request is then run alone, so only the one at fault fails. An output that is not one row
  per input row cannot be split: each request is then run alone too.
- A request whose deadline passes stops waiting (504); the others still get their answers.
- The requests waiting for a version (in its open batch and in its joined calls under way)
  are at most `max_queue` (`SLUICE_BATCHING_MAX_QUEUE`): past it a request is refused at once
  (503 `overloaded`, with Retry-After) rather than queued behind them.

It joins requests that one process serves at the same time (`sluice serve`, its gRPC and
WebSocket servers); a Lambda execution environment serves one request at a time, so there
the setting is left aside and nothing waits (`enabled=False`).
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.counting import count_down
from sluice.domain.errors import Overloaded, SluiceError
from sluice.domain.results import InferenceResult

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.domain import BatchingSettings, ModelVersion
    from sluice.runtimes import Runtime


RETRY_AFTER_S = 1  # a joined call takes milliseconds: a second is plenty


@dataclass(slots=True)
class _Member:
    inputs: dict[str, np.ndarray]
    rows: int
    answer: asyncio.Future[InferenceResult]


@dataclass(slots=True)
class _Batch:
    runtime: Runtime
    version: ModelVersion
    outputs: Sequence[str] | None
    members: list[_Member] = field(default_factory=list)
    rows: int = 0
    timer: asyncio.Handle | None = None
    due: bool = False  # its time is up, but a call for its version is under way: it leaves after that one
    sent: bool = False


class Batcher:
    """The open batches of one process, by version (see the module's text)."""

    def __init__(self, *, enabled: bool = True, max_queue: int = 256) -> None:
        self.enabled = enabled
        self.max_queue = max_queue  # requests waiting per version, at most
        self._waiting: dict[tuple[Any, ...], int] = {}  # requests waiting, by version
        self._open: dict[tuple[Any, ...], _Batch] = {}
        self._busy: dict[tuple[Any, ...], int] = {}  # calls under way, by version
        self._running: set[asyncio.Task[None]] = set()  # batches under way: kept from the collector
        self.calls = 0  # joined runtime calls made (more than one request each)
        self.joined = 0  # requests answered by those calls

    async def infer(
        self,
        runtime: Runtime,
        version: ModelVersion,
        inputs: dict[str, np.ndarray],
        outputs: Sequence[str] | None,
        settings: BatchingSettings,
    ) -> InferenceResult:
        rows = _rows(inputs)
        if not self.enabled or rows is None or rows >= settings.max_batch_size:
            return await runtime.infer(version, inputs, outputs)
        key = (
            id(runtime),
            version.tenant,
            version.model,
            version.version,
            version.sha256,
            tuple(outputs) if outputs else None,
            tuple(sorted((name, a.dtype.str, a.shape[1:]) for name, a in inputs.items())),
        )
        waiting = self._waiting.get(key, 0)
        if waiting >= self.max_queue:
            raise Overloaded(
                f"{waiting} requests for {version.model} version {version.version} are waiting to be batched, "
                f"the most this worker queues: retry in {RETRY_AFTER_S} s",
                retry_after_s=RETRY_AFTER_S,
                limit=self.max_queue,
            )
        loop = asyncio.get_running_loop()
        batch = self._open.get(key)
        if batch is not None and batch.rows + rows > settings.max_batch_size:
            self._send(key, batch, full=True)
            batch = None
        if batch is None:
            batch = self._open[key] = _Batch(runtime, version, outputs)
            delay = settings.max_delay_us / 1e6
            batch.timer = loop.call_later(delay, self._send, key, batch) if delay > 0 else loop.call_soon(self._send, key, batch)
        answer: asyncio.Future[InferenceResult] = loop.create_future()
        batch.members.append(_Member(inputs, rows, answer))
        batch.rows += rows
        if batch.rows >= settings.max_batch_size:
            self._send(key, batch, full=True)
        self._waiting[key] = waiting + 1
        try:
            return await answer
        finally:
            count_down(self._waiting, key)

    def _send(self, key: tuple[Any, ...], batch: _Batch, *, full: bool = False) -> None:
        """The batch leaves: now if it is full or no call for its version is under way; else
        it stays open, taking more requests, until that call returns."""
        if batch.sent:
            return
        if batch.timer is not None:
            batch.timer.cancel()
            batch.timer = None
        if not full and self._busy.get(key):
            batch.due = True
            return
        batch.sent = True
        if self._open.get(key) is batch:
            del self._open[key]
        self._busy[key] = self._busy.get(key, 0) + 1
        task = asyncio.get_running_loop().create_task(self._run(key, batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, key: tuple[Any, ...], batch: _Batch) -> None:
        try:
            await self._call(batch)
        finally:
            count_down(self._busy, key)
            waiting = self._open.get(key)
            if waiting is not None and waiting.due:
                self._send(key, waiting)

    async def _call(self, batch: _Batch) -> None:
        members = [m for m in batch.members if not m.answer.done()]  # those still waiting
        if not members:
            return
        if len(members) == 1:
            await self._alone(batch, members[0])
            return
        # A runtime that can run a call on a thread does, for a joined one: the loop goes on
        # reading the next requests (and filling the next batch) while this one computes.
        infer = getattr(batch.runtime, "infer_off_loop", None) or batch.runtime.infer
        try:
            joined = {name: np.concatenate([m.inputs[name] for m in members]) for name in members[0].inputs}
            result = await infer(batch.version, joined, batch.outputs)
        except SluiceError as error:
            if error.status < 500:  # the joined input refused: find whose it was
                await asyncio.gather(*(self._alone(batch, m) for m in members))
            else:
                _fail(members, error)
            return
        except Exception as error:  # anything else fails every request, as it would have alone
            _fail(members, error)
            return
        except BaseException:  # cancelled: no request is left waiting for ever
            for member in members:
                member.answer.cancel()
            raise
        parts = split(result, [m.rows for m in members])
        if parts is None:  # not one output row per input row: each alone
            await asyncio.gather(*(self._alone(batch, m) for m in members))
            return
        self.calls += 1
        self.joined += len(members)
        for member, part in zip(members, parts, strict=True):
            if not member.answer.done():
                member.answer.set_result(part)

    async def _alone(self, batch: _Batch, member: _Member) -> None:
        try:
            result = await batch.runtime.infer(batch.version, member.inputs, batch.outputs)
        except Exception as error:
            if not member.answer.done():
                member.answer.set_exception(error)
            return
        if not member.answer.done():
            member.answer.set_result(result)


def _rows(inputs: dict[str, np.ndarray]) -> int | None:
    """The rows every input has on its batch axis; None when they differ (or one has no axis)."""
    rows = None
    for array in inputs.values():
        if array.ndim == 0 or (rows is not None and array.shape[0] != rows):
            return None
        rows = array.shape[0]
    return rows


def split(result: InferenceResult, rows: list[int]) -> list[InferenceResult] | None:
    """`result` of a joined call as each member's own: consecutive row ranges of every output
    (views, not copies) and of every label map. None when an output does not have one row
    per input row."""
    total = sum(rows)
    for array in result.outputs.values():
        if array.ndim == 0 or array.shape[0] != total:
            return None
    for maps in result.maps.values():
        if len(maps) != total:
            return None
    parts = []
    start = 0
    for n in rows:
        stop = start + n
        parts.append(
            InferenceResult(
                {name: array[start:stop] for name, array in result.outputs.items()},
                dict(result.classes),
                {name: maps[start:stop] for name, maps in result.maps.items()},
            )
        )
        start = stop
    return parts


def _fail(members: list[_Member], error: Exception) -> None:
    for member in members:
        if not member.answer.done():
            member.answer.set_exception(_own(error))


def _own(error: Exception) -> Exception:
    """A copy of `error` for one waiter (each raises its own), or `error` where it cannot be copied."""
    try:
        return copy.copy(error)
    except Exception:
        return error
