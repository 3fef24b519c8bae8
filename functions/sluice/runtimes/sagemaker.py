"""SageMaker endpoints running NVIDIA's Triton container, called through `sagemaker-runtime`.

A version names its endpoint in `version.config`:
`{"endpoint_name": ..., "target_model"?: ..., "variant"?: ..., "max_batch_size"?: ...}`.
Bodies are Triton's: v2 JSON for small requests, `binary+json` (a JSON header, then raw
tensor bytes) above a size threshold. InvokeEndpoint takes at most 6 MB. Larger requests go
through SageMaker asynchronous inference when the version names an asynchronous endpoint
(`async_endpoint_name`), and every request does when the version's endpoint is asynchronous
(`"invocation": "async"`): the body is written to the result store under the tenant's
`results/` prefix, `InvokeEndpointAsync` is called with its location, and `Accepted` (202)
carries the result the caller polls. Without either, they are refused with 413.

`inference_component` names the SageMaker inference component to invoke. While it has no copy
(scaled to zero) SageMaker answers "no capacity": 503, or, with `"fallback": "in_process"`,
the version's own ONNX artifact answers through the ONNX runtime while a copy starts.

`endpoint_url` points the same client at a local Triton's SageMaker port instead of AWS
(for every version; or for one, as its config's `endpoint_url`, which the local endpoints
twin sets on the versions it binds, and which must be a server of `local_servers` or one the
twin started and that still runs): `sluice.runtimes.sagemaker_client`.

Here: the synchronous invoke. Asynchronous inference is `sluice.runtimes.sagemaker_async`;
SageMaker's errors in sluice's words, and the retries on throttling,
`sluice.runtimes.sagemaker_errors`.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from sluice.codecs.triton import (
    JSON_CONTENT_TYPE,
    decode_sagemaker_response,
    encode_request,
    inputs_for_wire,
    outputs_from_wire,
)
from sluice.domain.errors import BackendError, PayloadTooLarge, SluiceError, Unprocessable
from sluice.domain.origins import check_origin, parse_allowlist
from sluice.domain.results import ANSWERS_IN_PLACE, InferenceResult, rows_of
from sluice.runtimes.sagemaker_async import AsyncInference
from sluice.runtimes.sagemaker_client import build_client
from sluice.runtimes.sagemaker_errors import NoCapacity, retrying, too_large
from sluice.runtimes.sagemaker_target import EndpointTarget

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from typing import Unpack

    from sluice.clients import AwsSource
    from sluice.domain import ModelVersion
    from sluice.domain.signature import Signature
    from sluice.storage.results import ResultStore

log = logging.getLogger(__name__)

MiB = 1024 * 1024
MAX_SYNC_PAYLOAD_BYTES = 6 * MiB  # InvokeEndpoint's request and response limit
T = TypeVar("T")


class SageMakerRuntime(AsyncInference):
    """Runs versions on SageMaker Triton endpoints (or a local Triton's SageMaker port);
    asynchronous inference is `AsyncInference`'s."""

    kind = "sagemaker"

    def __init__(
        self,
        client: Any | None = None,
        *,
        endpoint_url: str | None = None,
        local_servers: Sequence[str] = (),
        started_servers: Callable[[], Sequence[str]] | None = None,
        binary_threshold_bytes: int = 64 * 1024,
        max_payload_bytes: int = MAX_SYNC_PAYLOAD_BYTES,
        timeout_s: float = 60.0,
        throttle_retries: int = 3,
        backoff_s: float = 0.1,
        concurrency: int = 32,
        sleep: Callable[[float], Any] | None = None,
        results: ResultStore | None = None,
        result_ttl_s: int = 7 * 24 * 3600,
        async_timeout_s: int = 900,
        local_async_workers: int = 2,
        fallback: Callable[[], Any] | None = None,
        **aws: Unpack[AwsSource],
    ) -> None:
        self._client = client
        self._clients, self.region = aws.get("clients"), aws.get("region")
        self.endpoint_url = endpoint_url
        self.local_servers = parse_allowlist(list(local_servers), field="triton_url_prefixes")
        # The local endpoints twin's servers that run now: their ports are not known in advance.
        self.started_servers = started_servers
        self._local: dict[str, Any] = {}
        self.binary_threshold_bytes = binary_threshold_bytes
        self.max_payload_bytes = max_payload_bytes
        self.timeout_s = timeout_s
        self.throttle_retries = throttle_retries
        self.backoff_s = backoff_s
        self.concurrency = concurrency
        self._sleep = sleep or asyncio.sleep
        self._pool: ThreadPoolExecutor | None = None
        self.results = results
        self.result_ttl_s = result_ttl_s
        self.async_timeout_s = async_timeout_s
        self.local_async_workers = local_async_workers
        self._queue: ThreadPoolExecutor | None = None  # the local twin's asynchronous queue
        self._fallback = fallback  # the ONNX runtime, for components scaled to zero

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = build_client(
                self._clients, region=self.region, endpoint_url=self.endpoint_url, timeout_s=self.timeout_s, connections=self.concurrency
            )
        return self._client

    def client_for(self, target: EndpointTarget) -> Any:
        """The runtime's client, or one for the local server a version names."""
        url = target.endpoint_url
        if url is None or url == self.endpoint_url:
            return self.client
        # Versions are written by sluice's endpoint service; a server outside the allowlist and
        # not started by the local twin (checked as scheme, host and port, not as a string
        # prefix) is refused: on every call, as the servers the twin started come and go (a
        # port a stopped one gave up may be another's by now). The client is kept.
        allowed = self.local_servers
        if self.started_servers is not None:
            allowed += parse_allowlist(list(self.started_servers()), field="config.endpoint_url")
        try:
            url = check_origin(url, allowed, field="config.endpoint_url").url()
        except SluiceError:
            raise BackendError(f"endpoint {target.endpoint_name} names a server that is not a local one") from None
        found = self._local.get(target.endpoint_url)
        if found is None:
            found = self._local[target.endpoint_url] = build_client(
                self._clients, region=self.region, endpoint_url=url, timeout_s=self.timeout_s, connections=self.concurrency
            )
        return found

    def _executor(self) -> ThreadPoolExecutor:
        # boto3 blocks; a pool of its own keeps `concurrency` calls in flight at once.
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="sagemaker")
        return self._pool

    def encode(
        self, version: ModelVersion, inputs: dict[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> tuple[bytes, str]:
        """The request body and content type sluice sends for these inputs."""
        target = EndpointTarget.of(version)
        wire = inputs_for_wire(inputs, version.signature, batched=target.batched)
        self._check_size(sum(a.nbytes for a in wire.values()))
        return self._encode(wire, outputs)

    def _check_size(self, raw_bytes: int) -> None:
        if raw_bytes > self.max_payload_bytes:
            raise too_large(raw_bytes, self.max_payload_bytes)

    def path_for(self, version: ModelVersion, inputs: dict[str, np.ndarray]) -> str:
        """How a request with these inputs travels: `json`, `binary+json` or `async`."""
        target = EndpointTarget.of(version)
        wire = inputs_for_wire(inputs, version.signature, batched=target.batched)
        if target.asynchronous:
            return "async"
        try:
            _, content_type = self._encode(wire, None)
        except PayloadTooLarge:
            if target.takes_async:
                return "async"
            raise
        return "json" if content_type == JSON_CONTENT_TYPE else "binary+json"

    def _encode(self, wire: dict[str, np.ndarray], outputs: Sequence[str] | None) -> tuple[bytes, str]:
        raw = sum(a.nbytes for a in wire.values())
        if raw > self.max_payload_bytes:
            raise too_large(raw, self.max_payload_bytes)
        binary = raw >= self.binary_threshold_bytes
        body = encode_request(wire, outputs=outputs, binary_inputs=binary, binary_outputs=binary)
        if not binary and len(body.body) > self.max_payload_bytes:
            # JSON spells numbers out; the same tensors may still fit as raw bytes.
            body = encode_request(wire, outputs=outputs, binary_inputs=True, binary_outputs=True)
        if len(body.body) > self.max_payload_bytes:
            raise too_large(len(body.body), self.max_payload_bytes)
        return body.body, body.content_type

    def _invoke(self, target: EndpointTarget, body: bytes, content_type: str) -> tuple[bytes, str | None]:
        params: dict[str, Any] = {"EndpointName": target.endpoint_name, "Body": body, "ContentType": content_type}
        if target.target_model:
            params["TargetModel"] = target.target_model
        if target.variant:
            params["TargetVariant"] = target.variant
        if target.inference_component:
            params["InferenceComponentName"] = target.inference_component
        response = self.client_for(target).invoke_endpoint(**params)
        return response["Body"].read(), response.get("ContentType")

    async def _invoke_with_retries(self, target: EndpointTarget, body: bytes, content_type: str) -> dict[str, np.ndarray]:
        loop = asyncio.get_running_loop()

        async def once() -> dict[str, np.ndarray]:
            raw, answered_type = await loop.run_in_executor(self._executor(), self._invoke, target, body, content_type)
            return decode_sagemaker_response(raw, answered_type)

        return await self._retrying(target, once)

    def _retrying(self, target: EndpointTarget, once: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        return retrying(target, once, retries=self.throttle_retries, backoff_s=self.backoff_s, sleep=self._sleep)

    async def infer(
        self,
        version: ModelVersion,
        inputs: dict[str, np.ndarray],
        outputs: Sequence[str] | None = None,
    ) -> InferenceResult:
        target = EndpointTarget.of(version)
        try:
            return await self._infer(version, target, inputs, outputs)
        except NoCapacity:
            if not target.fallback or self._fallback is None or version.artifact_uri.endswith((".tar.gz", ".tgz")):
                raise
            # The component has scaled to zero; SageMaker counted this call (the alarm on
            # NoCapacityInvocationFailures starts a copy). Meanwhile the same ONNX artifact
            # answers in process.
            log.info("sagemaker: no capacity, answered in process", extra={"endpoint": target.endpoint_name, "model": version.ref})
            return await self._fallback().infer(replace(version, runtime="onnx", config={}), inputs, outputs)

    async def _infer(
        self,
        version: ModelVersion,
        target: EndpointTarget,
        inputs: dict[str, np.ndarray],
        outputs: Sequence[str] | None,
    ) -> InferenceResult:
        wire = inputs_for_wire(inputs, version.signature, batched=target.batched)
        queues = target.takes_async and not ANSWERS_IN_PLACE.get()  # a batch job or a stream reads no queued answer
        if target.asynchronous:
            if not queues:
                raise Unprocessable(
                    f"version {version.ref} is served by an asynchronous endpoint ({target.endpoint_name}): its answers "
                    "are queued, and this caller reads answers in place",
                    field="deployment",
                )
            await self._defer(version, target, wire, outputs)
        if not queues:
            self._check_size(sum(a.nbytes for a in wire.values()))
        rows = rows_of(wire) if target.batched else 0
        limit = target.max_batch_size
        if limit is None or rows <= limit:
            try:
                encoded = self._encode(wire, outputs)
            except PayloadTooLarge:
                if not queues:
                    raise
                await self._defer(version, target, wire, outputs)
            decoded = await self._invoke_with_retries(target, *encoded)
        else:
            # More rows than the endpoint's model batches: one invocation per slice.
            slices = [{k: v[i : i + limit] for k, v in wire.items()} for i in range(0, rows, limit)]
            parts = await asyncio.gather(
                *(self._invoke_with_retries(target, *self._encode(part, outputs)) for part in slices)
            )
            decoded = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        return InferenceResult(outputs_from_wire(decoded, version.signature))

    async def load(self, version: ModelVersion) -> None:
        EndpointTarget.of(version)  # endpoints are created by `sluice.endpoints`, not here

    async def unload(self, version: ModelVersion) -> None:
        return None

    async def metadata(self, version: ModelVersion) -> Signature:
        # InvokeEndpoint reaches /invocations only: the registered signature is what there is.
        return version.signature

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        if self._queue is not None:
            self._queue.shutdown(wait=False)
            self._queue = None
