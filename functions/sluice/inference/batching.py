"""Adaptive batching: concurrent requests for the same model version joined into one runtime
call, for the deployments that turn it on (`batching: {max_batch_size, max_delay_us, …}`), in
the manner of Triton's dynamic batcher.

It sits below the one prediction call: each request has been authenticated, resolved,
decoded and checked against the signature, and routed, by `PredictionService.predict`, which
also records its statistics and its log line afterwards, as for any request. Only the call to
the runtime is shared, at the version level (`PolicyRunner._single`):

- Requests queue by version, per event loop, in queues of those that can join one call (same
  outputs asked for, in any order; same input dtypes and shapes past the batch axis; same
  batching settings, so one deployment's delay never holds another's requests). A version runs
  at most `instances` calls at once (1 by default, as one Triton model instance), whichever
  queues they come from: while they are all under way, requests queue, and when one returns
  the next call takes at once, in arrival order, what queued meanwhile in the queue whose
  request has waited longest (up to `max_batch_size` rows): under load the model runs back to
  back on batches that grew while it was busy, and nothing waits for a timer.
- A queue belongs to one event loop, and its calls run and answer there: a request is only
  ever answered on its own loop (a local batch job's scoring threads each run one, and batch
  apart; an answer set from another thread would never wake its loop).
- A request that finds an instance free opens a batch that waits for company at most
  `max_delay_us` (0: until the end of the event loop's current turn, with the requests
  already read); it leaves sooner when it holds `max_batch_size` rows, when the next request
  would not fit, or when it reaches one of `preferred_batch_sizes`. A request as large as the
  batch on its own is a call of its own, in its turn. The delay is waited in whole milliseconds,
  rounded (the loop's timers count no finer). With no delay the opening request waits
  out the turn itself and, where nobody joined it, calls the model in its own task: a lone
  request pays one turn of the loop, not a task, a timer and a future.
- A call runs where the runtime runs any request of its size (`Runtime.infer`; ONNX: on the
  event loop when small, since under load a thread hop waits milliseconds for the GIL while
  the loop is busy, else on a worker thread).
- The joined call gets the inputs concatenated along the batch axis; each request gets back
  exactly its own rows of every output (and of a classifier's label maps).
- A runtime failure (5xx) fails every request of the batch with that error. A refusal of the
  joined input (4xx: ONNX Runtime's shape or type check) may be one request's fault: each
  request is then run alone, so only the one at fault fails. An output that is not one row
  per input row cannot be split: each request is then run alone too.
- A request whose deadline passes stops waiting (504) and leaves the queue; the others still
  get their answers.
- The requests waiting for a version (queued in any of its queues, and in its calls under way)
  are at most `max_queue` (`SLUICE_BATCHING_MAX_QUEUE`): past it a request is refused at once
  (503 `overloaded`, with Retry-After) rather than queued behind them.

It joins requests that one process serves at the same time (`sluice serve`, its gRPC and
WebSocket servers); a Lambda execution environment serves one request at a time, so there
the setting is left aside and nothing waits (`enabled=False`).
"""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from dataclasses import dataclass, field
from itertools import accumulate, count
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.errors import Overloaded, SluiceError
from sluice.domain.results import ANSWERS_IN_PLACE, InferenceResult, answering_in_place

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.domain import BatchingSettings, ModelVersion
    from sluice.runtimes import Runtime


RETRY_AFTER_S = 1  # a joined call takes milliseconds: a second is plenty


@dataclass(slots=True, eq=False)  # one by identity: the queue finds a request by itself, not by its arrays
class _Member:
    inputs: dict[str, np.ndarray]
    rows: int
    answer: asyncio.Future[InferenceResult]
    outputs: Sequence[str] | None  # as its caller asked: its answer's outputs in that order
    arrival: int  # its place in its version's arrival order, across the version's queues
    taken: bool = False  # in a call: no longer in its queue
    in_place: bool = False  # its caller reads answers in place (`ANSWERS_IN_PLACE` where it asked)


@dataclass(slots=True, eq=False)
class _Version:
    """One version's requests on one event loop: what `max_queue` and `instances` count,
    whichever of its queues a request is in."""

    key: tuple[Any, ...]
    queues: dict[tuple[Any, ...], _Queue] = field(default_factory=dict)
    waiting: int = 0  # requests not answered yet: queued and in calls under way
    running: int = 0  # calls under way


@dataclass(slots=True, eq=False)
class _Queue:
    """A version's requests that can join one call (the same outputs, input shapes and settings)."""

    key: tuple[Any, ...]
    load: _Version
    runtime: Runtime
    version: ModelVersion
    outputs: Sequence[str] | None  # its first request's: what its joined calls ask for
    settings: BatchingSettings
    members: deque[_Member] = field(default_factory=deque)
    timer: asyncio.Handle | None = None  # the open batch's delay (an instance is free)
    leading: bool = False  # a request that opened the batch waits out this turn of the loop (`Batcher._lead`)


class Batcher:
    """The batching queues of one process, by event loop and version (see the module's text)."""

    def __init__(self, *, enabled: bool = True, max_queue: int = 256) -> None:
        self.enabled = enabled
        self.max_queue = max_queue  # requests waiting per version, at most
        self._versions: dict[tuple[Any, ...], _Version] = {}
        self._arrivals = count()
        self._running: set[asyncio.Task[None]] = set()  # calls under way: kept from the collector
        self.calls = 0  # joined runtime calls made (more than one request each)
        self.joined = 0  # requests answered by those calls
        self.most_running = 0  # the most calls one version had under way at once, since start

    async def infer(
        self,
        runtime: Runtime,
        version: ModelVersion,
        inputs: dict[str, np.ndarray],
        outputs: Sequence[str] | None,
        settings: BatchingSettings,
    ) -> InferenceResult:
        rows = _rows(inputs)
        if not self.enabled or rows is None:
            return await runtime.infer(version, inputs, outputs)
        # The loop first: a request's queue, its calls and its answer are all its own loop's.
        loop = asyncio.get_running_loop()
        load_key = (loop, id(runtime), version.tenant, version.model, version.version, version.sha256)
        load = self._versions.get(load_key)
        if load is None:
            load = self._versions[load_key] = _Version(load_key)
        elif load.waiting >= self.max_queue:
            raise Overloaded(
                f"{load.waiting} requests for {version.model} version {version.version} are waiting to be batched, "
                f"the most this worker queues: retry in {RETRY_AFTER_S} s",
                retry_after_s=RETRY_AFTER_S,
                limit=self.max_queue,
            )
        key = (
            frozenset(outputs) if outputs else None,
            tuple(sorted((name, a.dtype.str, a.shape[1:]) for name, a in inputs.items())),
            settings,
        )
        queue = load.queues.get(key)
        if queue is None:
            queue = load.queues[key] = _Queue(key, load, runtime, version, outputs, settings)
        member = _Member(inputs, rows, loop.create_future(), outputs, next(self._arrivals), in_place=ANSWERS_IN_PLACE.get())
        queue.members.append(member)
        load.waiting += 1
        try:
            if len(queue.members) == 1 and load.running < settings.instances and queue.timer is None and not delay_s(settings):
                return await self._lead(queue, member)
            self._pump(queue, now=False)
            return await member.answer
        finally:
            load.waiting -= 1
            if not member.taken:  # gave up waiting (deadline, cancelled): out of the queue
                queue.members.remove(member)
            self._drop_if_idle(queue)

    async def _lead(self, queue: _Queue, member: _Member) -> InferenceResult:
        """A request that finds its version idle, with no delay: it waits out this turn of the
        event loop, in which the requests already read join it (as a timer would have had them),
        then, where none did, makes its call itself, in its own task (no task, timer or future
        of its own: what one connection's requests pay); else the batch goes as any other. A
        joined call never runs in a request's task: a request that gives up stops only itself."""
        queue.leading = True
        try:
            await asyncio.sleep(0)
        except BaseException:  # gave up in its turn: the requests that joined it go without it
            queue.leading = False
            if not member.taken:
                queue.members.remove(member)
                member.taken = True  # out of the queue already
            self._pump(queue, now=True)
            raise
        queue.leading = False
        if member.taken or len(queue.members) != 1 or queue.load.running >= queue.settings.instances:
            self._pump(queue, now=True)
            return await member.answer
        queue.members.popleft()
        member.taken = True
        self._started(queue.load)
        await self._run(queue, [member])  # its call, in its own task; the answer set as any member's
        return await member.answer

    def _pump(self, queue: _Queue, *, now: bool) -> None:
        """Start calls while an instance is free and a batch is ready: at once when `now` (the
        requests queued while every instance was busy, or the delay is up), else when full,
        when the next request would not fit, or at a preferred size; else the delay starts."""
        load, instances = queue.load, queue.settings.instances
        while queue.members and load.running < instances:
            members = _take(queue, now=now)
            if members is None:
                if queue.timer is None and not queue.leading:  # a leader takes them at its turn's end
                    loop = asyncio.get_running_loop()
                    delay = delay_s(queue.settings)
                    queue.timer = loop.call_later(delay, self._expire, queue) if delay > 0 else loop.call_soon(self._expire, queue)
                return
            if queue.timer is not None:
                queue.timer.cancel()
                queue.timer = None
            self._started(load)
            task = asyncio.get_running_loop().create_task(self._run(queue, members))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    def _started(self, load: _Version) -> None:
        load.running += 1
        self.most_running = max(self.most_running, load.running)

    def _expire(self, queue: _Queue) -> None:
        queue.timer = None
        self._pump(queue, now=True)

    def _drop_if_idle(self, queue: _Queue) -> None:
        load = queue.load
        if not queue.members and load.queues.get(queue.key) is queue:
            if queue.timer is not None:
                queue.timer.cancel()
            del load.queues[queue.key]
        if not load.waiting and not load.running and self._versions.get(load.key) is load:
            del self._versions[load.key]

    async def _run(self, queue: _Queue, members: list[_Member]) -> None:
        try:
            await self._call(queue, members)
        finally:
            load = queue.load
            load.running -= 1
            # What queued meanwhile goes at once, the queue whose request waited longest first
            # (a batch still waiting out its delay for company is left to it).
            waiting = [q for q in load.queues.values() if q.members and q.timer is None]
            if len(waiting) > 1:
                waiting.sort(key=_first_arrival)
            for next_queue in waiting:
                self._pump(next_queue, now=True)
            self._drop_if_idle(queue)

    async def _call(self, queue: _Queue, batch: list[_Member]) -> None:
        members = [m for m in batch if not m.answer.done()]  # those still waiting
        if not members:
            return
        if len(members) == 1:
            await self._alone(queue, members[0])
            return
        try:
            joined = {name: np.concatenate([m.inputs[name] for m in members]) for name in members[0].inputs}
            result = await _infer(queue, joined, queue.outputs, in_place=all(m.in_place for m in members), members=members)
        except SluiceError as error:
            if error.status < 500:  # the joined input refused: find whose it was
                await asyncio.gather(*(self._alone(queue, m) for m in members))
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
            await asyncio.gather(*(self._alone(queue, m) for m in members))
            return
        self.calls += 1
        self.joined += len(members)
        for member, part in zip(members, parts, strict=True):
            if not member.answer.done():
                if member.outputs != queue.outputs:  # the same outputs, asked in another order
                    part.outputs = {name: part.outputs[name] for name in member.outputs or () if name in part.outputs}
                member.answer.set_result(part)

    async def _alone(self, queue: _Queue, member: _Member) -> None:
        try:
            result = await _infer(queue, member.inputs, member.outputs, in_place=member.in_place, members=(member,))
        except Exception as error:
            if not member.answer.done():
                member.answer.set_exception(error)
            return
        if not member.answer.done():
            member.answer.set_result(result)


async def _infer(
    queue: _Queue, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None, *, in_place: bool, members: Sequence[_Member]
) -> InferenceResult:  # fmt: skip
    """The runtime's call for these members, as their callers asked: a call runs in the task of
    whichever request started it, so whether its answer may be queued is the members' own
    (in place only where every member's caller reads answers in place). Once every member has
    given up (each request's budget spent), the call is cancelled as a request's own would be:
    the runtime then counts what it cannot stop as abandoned (`OnnxRuntime._in_thread`)."""
    task = asyncio.current_task()  # a request's own (its cancellation reaches the call) or the batcher's
    in_flight = True

    def gave_up(_: object) -> None:
        if in_flight and task is not None and all(m.answer.done() for m in members):
            task.cancel()

    for member in members:
        member.answer.add_done_callback(gave_up)
    try:
        with answering_in_place(in_place):
            return await queue.runtime.infer(queue.version, inputs, outputs)
    finally:
        in_flight = False  # a callback already scheduled finds the call over
        for member in members:
            member.answer.remove_done_callback(gave_up)


def _first_arrival(queue: _Queue) -> int:
    return queue.members[0].arrival


def delay_s(settings: BatchingSettings) -> float:
    """`max_delay_us` as the event loop's timers can wait it: whole milliseconds, rounded (below
    500 µs: 0, the end of the loop's turn), on any loop as on uvloop's."""
    return int(settings.max_delay_us / 1000 + 0.5) / 1000


def _take(queue: _Queue, *, now: bool) -> list[_Member] | None:
    """The next batch out of `queue`, in arrival order, or None while it should wait: the
    longest run of requests within `max_batch_size` rows (a first request larger alone); before
    `now`, only when it is full or the next would not fit, or else up to the largest preferred
    size it reaches."""
    limit = queue.settings.max_batch_size
    rows = 0
    sizes: list[int] = []  # the rows of the requests that fit, in order
    for member in queue.members:
        if sizes and rows + member.rows > limit:
            break
        sizes.append(member.rows)
        rows += member.rows
        if rows >= limit:
            break
    count = len(sizes)
    full = rows >= limit or count < len(queue.members)  # full, or the next does not fit
    if not (now or full):
        preferred = queue.settings.preferred_batch_sizes
        reached = [n for n, total in enumerate(accumulate(sizes), 1) if total in preferred]
        if not reached:
            return None
        count = reached[-1]
    taken = []
    for _ in range(count):
        member = queue.members.popleft()
        member.taken = True
        taken.append(member)
    return taken


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
    parts[0].loaded = result.loaded  # the joined call's one session lookup: its first member's
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
