"""Where shadow jobs go: run in this process (local), or to the shadow Lambda (AWS)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from typing import TYPE_CHECKING, Any, Protocol

from sluice.clients import lazy_client
from sluice.observability import get_logger
from sluice.stats.held import outside

if TYPE_CHECKING:
    from typing import Unpack

    from sluice.clients import AwsArgs, AwsSource
    from sluice.inference.shadow_jobs import ShadowJob
    from sluice.inference.shadow_runner import ShadowRunner
    from sluice.storage import ArtifactStore

# Lambda takes up to 1 MB for an asynchronous invoke; leave room for the envelope.
ASYNC_PAYLOAD_LIMIT = 1_000_000 - 16_384


SHADOW_BODY_SUFFIX = ".shadow.json"  # a stored shadow body's, which only the shadow function may delete (infra)

class Mirror(Protocol):
    async def submit(self, job: ShadowJob) -> None:
        """Hand the job off. Never raises: a mirror must not touch the primary's response."""
        ...

    def drain(self, timeout_s: float = 10.0) -> None:
        """Wait for jobs handed off in this process to finish (a no-op where they run elsewhere)."""
        ...


class LocalMirror:
    """Runs mirrors in this process on a thread of their own with its own event loop, so a
    mirror never holds up the loop that answers the next request (ONNX Runtime releases the
    GIL while it computes, so a mirror mostly uses the other core)."""

    def __init__(self, runner: ShadowRunner) -> None:
        self.runner = runner
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._pending: set[concurrent.futures.Future[None]] = set()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="sluice-shadow", daemon=True).start()
                self._loop = loop
            return self._loop

    async def _run(self, job: ShadowJob) -> None:
        try:
            await self.runner.run(job)
        except Exception:
            get_logger().exception("shadow mirror failed", extra={"deployment": job.deployment, "mirror": job.mirror})

    async def submit(self, job: ShadowJob) -> None:
        # Outside a stream's held statistics (`sluice.stats.held`): the job outlives its micro-batch.
        future = outside(asyncio.run_coroutine_threadsafe, self._run(job), self._ensure_loop())
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)

    def drain(self, timeout_s: float = 10.0) -> None:
        """Wait for the mirrors already handed over (before reading their statistics, or
        before a short-lived process exits)."""
        concurrent.futures.wait(list(self._pending), timeout=timeout_s)


class LambdaMirror:
    """An asynchronous invoke of the shadow handler; bodies over the limit travel through S3."""

    def __init__(self, function_name: str, store: ArtifactStore, **aws: Unpack[AwsArgs]) -> None:
        self.function_name = function_name
        self.store = store
        self._lambda = lazy_client("lambda", aws, region=aws.get("region"))

    @classmethod
    def from_url(cls, url: str, store: ArtifactStore, **aws: Unpack[AwsSource]) -> LambdaMirror:
        return cls(url.removeprefix("lambda://"), store, **aws)

    @property
    def client(self) -> Any:
        return self._lambda()

    def payload(self, job: ShadowJob) -> bytes:
        body = json.dumps(job.to_json()).encode()
        if len(body) <= ASYNC_PAYLOAD_LIMIT:
            return body
        ref = self.store.put(job.tenant, body, suffix=SHADOW_BODY_SUFFIX)
        return json.dumps({"payload_uri": ref.uri, "sha256": ref.sha256, "tenant": job.tenant}).encode()

    def drain(self, timeout_s: float = 10.0) -> None:
        return None  # the shadow function runs them, not this process

    async def submit(self, job: ShadowJob) -> None:
        try:
            payload = self.payload(job)
            await asyncio.to_thread(
                self.client.invoke, FunctionName=self.function_name, InvocationType="Event", Payload=payload
            )
        except Exception:
            get_logger().exception("shadow invoke failed", extra={"deployment": job.deployment, "mirror": job.mirror})
