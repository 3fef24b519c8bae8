"""The capturer: a bounded queue between the request and the sink, drained by a thread."""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.capture.held import HELD, RecordAt, captured_id
from sluice.capture.records import to_record
from sluice.observability import get_logger
from sluice.observability.telemetry import emf, write

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from sluice.capture.sinks import Sink
    from sluice.domain import Deployment
    from sluice.domain.results import Answer
    from sluice.domain.signature import TensorSpec

DEFAULT_QUEUE = 10_000
BATCH = 500
GATHER_S = 0.2  # how long the writer waits for a batch to fill after its first record


@dataclass(eq=False)
class Capturer:
    """`offer` never blocks and never raises into the request: past `max_queue` waiting
    records a sampled one is dropped and counted (`dropped`). The drain thread writes in
    batches of up to `batch`, gathered for at most `gather_s` after the first; records the
    sink refuses, or all of a batch it raises on, are counted (`failed`), not retried.
    Counts go out as a log line (an EMF record with `CaptureWritten`, `CaptureDropped` and
    `CaptureFailed` where metrics are on) after each batch that changed them."""

    sink: Sink
    _: KW_ONLY
    max_queue: int = DEFAULT_QUEUE
    batch: int = BATCH
    gather_s: float = GATHER_S
    emit_metrics: bool = False
    namespace: str = "sluice"
    service: str = "sluice"
    # What it has done: records sampled, written, dropped (the queue full) and failed (the sink).
    sampled: int = field(default=0, init=False)
    written: int = field(default=0, init=False)
    dropped: int = field(default=0, init=False)
    failed: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._queue: queue.Queue[tuple[Any, ...]] = queue.Queue(self.max_queue)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._reported = (0, 0, 0)

    def offer(
        self, dep: Deployment, request_id: str, answer: Answer, arrays: dict[str, np.ndarray], latency_ms: float,
        inputs: Sequence[TensorSpec] | None = None, rows: slice | None = None,
    ) -> None:  # fmt: skip
        """One answered request of a deployment that captures: sampled, queued, never waited on.
        `inputs`: what its inputs were read as (a graph's, not its last model's: redaction
        finds the features by their names there); `rows`: the request's rows of the arrays
        and the answer, where they hold more (cut off the request path)."""
        percent = dep.capture.sample_percent  # type: ignore[union-attr]
        if percent < 100 and random.random() * 100 >= percent:
            return
        self.sampled += 1
        try:
            self._queue.put_nowait((dep, request_id, answer, arrays, latency_ms, time.time(), inputs, rows))
        except queue.Full:
            self.dropped += 1
            return
        if self._thread is None:
            self._start()

    def offer_records(
        self, dep: Deployment, ids: Sequence[Any], offsets: np.ndarray | None, answer: Answer, arrays: dict[str, np.ndarray], latency_ms: float,
        inputs: Sequence[TensorSpec] | None = None,
    ) -> None:  # fmt: skip
        """A bulk call's records (a stream's), each sampled and captured as a request of its
        own under its id, with the call's latency: `offsets`, where each one's rows start and
        the last ends (None: a row each)."""
        held = HELD.get()
        for j, rid in enumerate(ids):
            rows = slice(j, j + 1) if offsets is None else slice(int(offsets[j]), int(offsets[j + 1]))
            offer = (dep, captured_id(rid), answer, arrays, latency_ms, inputs, rows)
            if held is not None and type(rid) is RecordAt:
                held.append((self, rid.at, offer))
            else:
                self.offer(*offer)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="sluice-capture", daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            # Let a batch gather while this thread sleeps: a request's put then wakes nobody,
            # and the writer runs once per batch, not once per request.
            if self.gather_s > 0 and self._queue.qsize() < self.batch:
                time.sleep(self.gather_s)
            while len(items) < self.batch:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._write(items)

    def _write(self, items: list[tuple[Any, ...]]) -> None:
        try:
            records = [to_record(*item) for item in items]
            too_large, refused = self.sink.write(records)
            self.written += len(records) - too_large - refused
            self.dropped += too_large
            self.failed += refused
        except Exception:
            self.failed += len(items)
            get_logger().exception("capture write failed", extra={"records": len(items)})
        finally:
            for _ in items:
                self._queue.task_done()
        self._report()

    def _report(self) -> None:
        now = (self.written, self.dropped, self.failed)
        if now == self._reported:
            return
        written, dropped, failed = (a - b for a, b in zip(now, self._reported, strict=True))
        self._reported = now
        line: dict[str, Any] = {"service": self.service, "written": written, "dropped": dropped, "failed": failed}
        if self.emit_metrics:
            metrics = {"CaptureWritten": (written, "Count"), "CaptureDropped": (dropped, "Count"), "CaptureFailed": (failed, "Count")}
            line.update({name: value for name, (value, _) in metrics.items()})
            line["_aws"] = emf(self.namespace, [["service"]], metrics)
        write(logging.INFO, "capture", line)

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued record is written or failed (tests, short-lived processes)."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def counts(self) -> dict[str, int]:
        return {"sampled": self.sampled, "written": self.written, "dropped": self.dropped, "failed": self.failed, "queued": self._queue.qsize()}
