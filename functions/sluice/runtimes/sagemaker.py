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
twin started and that still runs):
the request is rewritten from `/endpoints/<name>/invocations` to the container's
`/invocations`, and the container's errors are framed as SageMaker frames them (ModelError),
so the bytes sluice sends, and the errors it maps, are the ones it would meet on AWS.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from sluice.codecs.triton import (
    BINARY_JSON_CONTENT_TYPE,
    JSON_CONTENT_TYPE,
    batchable,
    decode_sagemaker_response,
    encode_request,
    inputs_for_wire,
    outputs_from_wire,
)
from sluice.domain.errors import (
    Accepted,
    BackendError,
    BadRequest,
    DeadlineExceeded,
    InvalidInput,
    PayloadTooLarge,
    SluiceError,
    Unavailable,
)
from sluice.domain.origins import check_origin, parse_allowlist
from sluice.domain.results import InferenceResult

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sluice.clients import AwsClients
    from sluice.domain import ModelVersion
    from sluice.domain.signature import Signature
    from sluice.domain.uploads import Upload
    from sluice.storage.results import ResultStore

log = logging.getLogger(__name__)

MiB = 1024 * 1024
MAX_SYNC_PAYLOAD_BYTES = 6 * MiB  # InvokeEndpoint's request and response limit
_THROTTLING = frozenset({"ThrottlingException", "Throttling", "TooManyRequestsException"})
_INPUT_NAME = re.compile(r"input '([^']+)'")


@dataclass(frozen=True, slots=True)
class EndpointTarget:
    endpoint_name: str
    target_model: str | None
    variant: str | None
    batched: bool
    max_batch_size: int | None  # known when sluice built the repository: requests split to fit
    endpoint_url: str | None = None  # a local twin's SageMaker port; None: the runtime's own
    asynchronous: bool = False  # the endpoint is asynchronous: every request goes through S3
    async_endpoint: str | None = None  # where requests above the synchronous limit go
    inference_component: str | None = None  # InvokeEndpoint's InferenceComponentName
    fallback: bool = False  # in process (the version's ONNX artifact) while the component has no copy

    @property
    def takes_async(self) -> bool:
        return self.asynchronous or self.async_endpoint is not None

    @classmethod
    def of(cls, version: ModelVersion) -> EndpointTarget:
        config = version.config or {}
        name = config.get("endpoint_name")
        if not isinstance(name, str) or not name:
            raise BadRequest("a sagemaker version needs config.endpoint_name", field="config.endpoint_name")
        max_batch = config.get("max_batch_size")
        batched = batchable(version.signature) if max_batch is None else int(max_batch) > 0
        limit = int(max_batch) if max_batch is not None and int(max_batch) > 0 else None
        url = config.get("endpoint_url") or None
        invocation = config.get("invocation", "sync")
        if invocation not in ("sync", "async"):
            raise BadRequest("config.invocation is sync or async", field="config.invocation")
        async_endpoint = config.get("async_endpoint_name") or None
        if async_endpoint is not None and not isinstance(async_endpoint, str):
            raise BadRequest("config.async_endpoint_name must be an endpoint name", field="config.async_endpoint_name")
        fallback = config.get("fallback")
        if fallback not in (None, "in_process"):
            raise BadRequest("config.fallback is in_process (or left out)", field="config.fallback")
        return cls(
            name, config.get("target_model") or None, config.get("variant") or None, batched, limit, url,
            asynchronous=invocation == "async", async_endpoint=async_endpoint,
            inference_component=config.get("inference_component") or None, fallback=fallback == "in_process",
        )  # fmt: skip


def build_client(
    clients: AwsClients | None = None,
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    timeout_s: float = 60.0,
    connections: int = 32,
) -> Any:
    """A `sagemaker-runtime` client; with `endpoint_url`, one that talks to a local container."""
    if clients is None:
        from sluice.clients import default_clients

        clients = default_clients(region)
    client = clients.client(
        "sagemaker-runtime",
        region=region or ("us-east-1" if endpoint_url else None),
        endpoint_url=endpoint_url,
        connect_timeout=min(timeout_s, 5.0),
        read_timeout=timeout_s,
        max_pool_connections=connections,
        total_max_attempts=1,  # retried here, on throttling only
        unsigned=bool(endpoint_url),
    )
    if endpoint_url:
        attach_local_container(client, endpoint_url)
    return client


def attach_local_container(client: Any, endpoint_url: str) -> None:
    """Make `client.invoke_endpoint` reach a Triton container's own SageMaker port."""
    base = urlsplit(endpoint_url)
    prefix = base.path.rstrip("/")

    def to_invocations(request: Any, **_: Any) -> None:
        parts = urlsplit(request.url)
        request.url = urlunsplit((base.scheme, base.netloc, f"{prefix}/invocations", parts.query, ""))

    def as_sagemaker_error(response_dict: dict[str, Any], **_: Any) -> None:
        # SageMaker answers a container's non-2xx with a 424 ModelError carrying the original.
        status = response_dict.get("status_code", 200)
        headers = response_dict["headers"]
        if status < 400 or "x-amzn-errortype" in headers:
            return
        body = response_dict.get("body") or b""
        original = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else str(body)
        response_dict["status_code"] = 424
        headers["x-amzn-ErrorType"] = "ModelError:"  # botocore's own case-insensitive dict
        headers["Content-Type"] = "application/json"
        response_dict["body"] = json.dumps(
            {
                "ErrorCode": "CLIENT_ERROR_FROM_MODEL" if status < 500 else "SERVER_ERROR_FROM_MODEL",
                "Message": f"Received {'client' if status < 500 else 'server'} error ({status}) from primary with message \"{original}\".",
                "OriginalMessage": original,
                "OriginalStatusCode": status,
            }
        ).encode()

    events = client.meta.events  # the factory shares clients: attach once per client
    events.register("before-send.sagemaker-runtime.InvokeEndpoint", to_invocations, unique_id="sluice-local-invocations")
    events.register("before-parse.sagemaker-runtime.InvokeEndpoint", as_sagemaker_error, unique_id="sluice-local-model-error")


class SageMakerRuntime:
    """Runs versions on SageMaker Triton endpoints (or a local Triton's SageMaker port)."""

    kind = "sagemaker"

    def __init__(
        self,
        client: Any | None = None,
        *,
        clients: AwsClients | None = None,
        region: str | None = None,
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
    ) -> None:
        self._client = client
        self._clients = clients
        self.region = region
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
        found = self._local.get(url)
        if found is None:
            # Versions are written by sluice's endpoint service; a server outside the allowlist
            # and not started by the local twin (checked as scheme, host and port, not as a
            # string prefix) is refused.
            allowed = self.local_servers
            if self.started_servers is not None:
                allowed += parse_allowlist(list(self.started_servers()), field="config.endpoint_url")
            try:
                url = check_origin(url, allowed, field="config.endpoint_url").url()
            except SluiceError:
                raise BackendError(f"endpoint {target.endpoint_name} names a server that is not a local one") from None
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
            raise _too_large(raw_bytes, self.max_payload_bytes)

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
            raise _too_large(raw, self.max_payload_bytes)
        binary = raw >= self.binary_threshold_bytes
        body = encode_request(wire, outputs=outputs, binary_inputs=binary, binary_outputs=binary)
        if not binary and len(body.body) > self.max_payload_bytes:
            # JSON spells numbers out; the same tensors may still fit as raw bytes.
            body = encode_request(wire, outputs=outputs, binary_inputs=True, binary_outputs=True)
        if len(body.body) > self.max_payload_bytes:
            raise _too_large(len(body.body), self.max_payload_bytes)
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
        attempt = 0
        while True:
            try:
                raw, answered_type = await loop.run_in_executor(self._executor(), self._invoke, target, body, content_type)
                return decode_sagemaker_response(raw, answered_type)
            except Exception as exc:
                error = _mapped(exc, target)
                throttled = isinstance(error, _Throttled)
                if not throttled or attempt >= self.throttle_retries:
                    raise (Unavailable("the endpoint is throttling requests; retry later") if throttled else error) from None
                # Full jitter, doubling: spread retries of concurrent callers apart.
                await self._sleep(random.uniform(0, self.backoff_s * (2**attempt)))
                attempt += 1

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
        if target.asynchronous:
            await self._defer(version, target, wire, outputs)
        if not target.takes_async:
            self._check_size(sum(a.nbytes for a in wire.values()))
        rows = next(iter(wire.values())).shape[0] if wire and target.batched else 0
        limit = target.max_batch_size
        if limit is None or rows <= limit:
            try:
                encoded = self._encode(wire, outputs)
            except PayloadTooLarge:
                if not target.takes_async:
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

    # asynchronous inference -------------------------------------------------------------------
    async def _defer(
        self, version: ModelVersion, target: EndpointTarget, wire: dict[str, np.ndarray], outputs: Sequence[str] | None
    ) -> NoReturn:
        """Queue the request for asynchronous inference and raise `Accepted` (never returns).

        Inputs travel as raw bytes; outputs are asked for as JSON, so that the answer SageMaker
        writes to S3 decodes without the header size, which rides only in a response's type.
        A request of more rows than the endpoint's model batches is refused: one result is one
        invocation."""
        if self.results is None:
            raise PayloadTooLarge(
                "asynchronous inference needs a result store (S3 or the local folder); none is configured", field="inputs"
            )
        rows = next(iter(wire.values())).shape[0] if wire and target.batched else 0
        if target.max_batch_size is not None and rows > target.max_batch_size:
            raise InvalidInput(
                f"an asynchronous request takes at most {target.max_batch_size} rows (the endpoint's max_batch_size); "
                f"this one has {rows}: send a batch job instead",
                field="inputs",
            )
        body = encode_request(wire, outputs=outputs, binary_inputs=True, binary_outputs=False)
        result_id = uuid.uuid4().hex
        tenant = version.tenant
        loop = asyncio.get_running_loop()
        input_uri = await loop.run_in_executor(
            self._executor(),
            lambda: self.results.put(tenant, result_id, "input", body.body, content_type=body.content_type),  # type: ignore[union-attr]
        )
        await self._enqueue(version, target, result_id, input_uri, len(body.body), body.content_type, lambda: body.body)

    async def submit_upload(self, version: ModelVersion, upload: Upload) -> None:
        """Queue an upload's body for asynchronous inference as it lies in the store (its URI is
        `InvokeEndpointAsync`'s `InputLocation`: nothing is copied) and raise `Accepted`. Returns
        without doing anything when the version's endpoint takes no asynchronous requests: the
        caller then reads the body and scores it as any other request.

        The body goes to the container unchanged, so it must be what Triton takes (v2 JSON, or
        binary+json). Of a binary body the JSON header alone is read and checked first: its
        inputs must be the signature's, its tensors' bytes must add up to the body, and no output
        may be asked for in binary (an answer in S3 carries no header size to decode it by)."""
        target = EndpointTarget.of(version)
        if not target.takes_async:
            return
        if self.results is None:
            raise PayloadTooLarge(
                "asynchronous inference needs a result store (S3 or the local folder); none is configured", field="upload_id"
            )
        media = upload.content_type.partition(";")[0].strip().lower()
        if media not in (JSON_CONTENT_TYPE, BINARY_JSON_CONTENT_TYPE):
            raise InvalidInput(f"an asynchronous endpoint takes v2 JSON or binary+json bodies, not {media}", field="upload_id")
        loop = asyncio.get_running_loop()
        if upload.header_size:
            header = await loop.run_in_executor(self._executor(), lambda: upload.read(0, upload.header_size))
            _check_upload_header(header, upload, version)
        await self._enqueue(
            version, target, uuid.uuid4().hex, upload.uri, upload.size, upload.content_type, lambda: upload.read(), upload=upload.id
        )

    async def _enqueue(
        self,
        version: ModelVersion,
        target: EndpointTarget,
        result_id: str,
        input_uri: str,
        input_bytes: int,
        content_type: str,
        body: Callable[[], bytes],
        **extra: Any,
    ) -> NoReturn:
        """Start asynchronous inference of the input at `input_uri`, keep the result's record,
        and raise `Accepted` with the result the caller polls."""
        assert self.results is not None
        tenant = version.tenant
        loop = asyncio.get_running_loop()
        started = time.time()
        if target.endpoint_url is not None:
            output_uri = self.results.uri(tenant, result_id, "output")
            failure_uri: str | None = self.results.uri(tenant, result_id, "error")
            submit = self._local_queue().submit
            after = lambda: submit(self._run_local, tenant, result_id, target, body, content_type)  # noqa: E731
        else:
            output_uri, failure_uri = await self._invoke_async(target, tenant, result_id, input_uri, content_type)
            after = None
        record = {
            "id": result_id,
            "tenant": tenant,
            "model": version.model,
            "version": version.version,
            "endpoint": target.async_endpoint or target.endpoint_name,
            "created_at": round(started, 3),
            "expires_at": round(started + self.result_ttl_s, 3),
            "input": input_uri,
            "input_bytes": input_bytes,
            "output": output_uri,
            "failure": failure_uri,
            **extra,
        }
        from sluice.storage.results import RECORD, record_bytes

        await loop.run_in_executor(self._executor(), lambda: self.results.put(tenant, result_id, RECORD, record_bytes(record)))  # type: ignore[union-attr]
        if after is not None:
            after()  # the record is there before the answer can be
        raise Accepted(
            "queued for asynchronous inference; poll the result",
            result_id=result_id,
            location=f"/api/v1/results/{result_id}",
            model=version.model,
            version=version.version,
            expires_at=record["expires_at"],
        )

    async def _invoke_async(
        self, target: EndpointTarget, tenant: str, result_id: str, input_uri: str, content_type: str
    ) -> tuple[str, str | None]:
        params: dict[str, Any] = {
            "EndpointName": target.async_endpoint or target.endpoint_name,
            "InputLocation": input_uri,
            "ContentType": content_type,
            "Accept": JSON_CONTENT_TYPE,
            "InferenceId": result_id,
            "InvocationTimeoutSeconds": self.async_timeout_s,
        }
        # InvokeEndpointAsync takes no TargetModel or TargetVariant: an asynchronous endpoint
        # serves one model, and SageMaker picks among its variants by their weights.
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            try:
                response = await loop.run_in_executor(self._executor(), lambda: self.client.invoke_endpoint_async(**params))
                break
            except Exception as exc:
                error = _mapped(exc, target)
                if not isinstance(error, _Throttled) or attempt >= self.throttle_retries:
                    raise (Unavailable("the endpoint is throttling requests; retry later") if isinstance(error, _Throttled) else error) from None
                await self._sleep(random.uniform(0, self.backoff_s * (2**attempt)))
                attempt += 1
        output, failure = response.get("OutputLocation"), response.get("FailureLocation")
        assert self.results is not None
        for where in (output, failure):
            if where is not None and not self.results.owns(tenant, where):
                # sluice reads answers only from the tenant's own results; an endpoint whose
                # output path lies elsewhere was not made by sluice for this tenant.
                log.warning("sagemaker: asynchronous output outside the tenant's results", extra={"endpoint": params["EndpointName"]})
                raise BackendError(
                    f"endpoint {params['EndpointName']} writes its answers outside this tenant's results; "
                    "deploy it with sluice (`sluice endpoints deploy --mode async`)"
                )
        if output is None:
            raise BackendError("SageMaker accepted the request but named no output location")
        return output, failure

    def _local_queue(self) -> ThreadPoolExecutor:
        if self._queue is None:
            self._queue = ThreadPoolExecutor(max_workers=self.local_async_workers, thread_name_prefix="sagemaker-async")
        return self._queue

    def _run_local(
        self, tenant: str, result_id: str, target: EndpointTarget, body: bytes | Callable[[], bytes], content_type: str
    ) -> None:
        """The local twin of SageMaker's asynchronous queue: read the input (as SageMaker reads
        it from S3), invoke the local container, write the answer (or the error) where SageMaker
        would."""
        assert self.results is not None
        try:
            raw, answered_type = self._invoke(target, body() if callable(body) else body, content_type)
        except Exception as exc:
            error = _mapped(exc, target)
            payload = json.dumps({"error": error.message, "code": error.code, "status": error.status}).encode()
            self.results.put(tenant, result_id, "error", payload, content_type=JSON_CONTENT_TYPE)
            return
        self.results.put(tenant, result_id, "output", raw, content_type=answered_type)

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


class _Throttled(Unavailable):
    pass


class NoCapacity(Unavailable):
    """The inference component has no copy running (scaled to zero): one is starting."""


def _check_upload_header(header: bytes, upload: Upload, version: ModelVersion) -> None:
    """An uploaded binary+json body's JSON header, checked before the body is handed on."""
    try:
        found = json.loads(header)
    except ValueError:
        found = None
    inputs = found.get("inputs") if isinstance(found, dict) else None
    if not isinstance(inputs, list) or not all(isinstance(i, dict) for i in inputs):
        raise InvalidInput("the upload's JSON header is not a v2 inference request with an inputs list", field="upload_id")
    known = {spec.name for spec in version.signature.inputs}
    tail = 0
    for tensor in inputs:
        name = tensor.get("name")
        if name not in known:
            raise InvalidInput(f"the upload names input '{name}'; this version takes {sorted(known)}", field="upload_id")
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        tail += size if isinstance(size, int) and size >= 0 else 0
    if (upload.header_size or 0) + tail != upload.size:
        raise InvalidInput(
            f"the upload is {upload.size} bytes but its header and binary_data_size add up to {(upload.header_size or 0) + tail}",
            field="upload_id",
        )
    wanted = [found.get("parameters") or {}, *((o.get("parameters") or {}) for o in found.get("outputs") or () if isinstance(o, dict))]
    if any(p.get("binary_data_output") or p.get("binary_data") for p in wanted if isinstance(p, dict)):
        raise InvalidInput(
            "an asynchronous request asks for its outputs as JSON: drop binary_data_output and binary_data from the upload",
            field="upload_id",
        )


def _too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the request is {size} bytes encoded, above SageMaker's synchronous limit of {limit} bytes; "
        "send it as a batch job (input file in S3) or through SageMaker asynchronous inference",
        field="inputs",
    )


def _mapped(exc: Exception, target: EndpointTarget) -> SluiceError:
    """SageMaker and transport failures as sluice errors; the raw text goes to the log only."""
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    if isinstance(exc, SluiceError):
        return exc
    where = {"endpoint": target.endpoint_name}
    if isinstance(exc, ReadTimeoutError):
        return DeadlineExceeded("the endpoint did not answer within the deadline")
    if isinstance(exc, EndpointConnectionError | ConnectTimeoutError | ConnectionClosedError):
        log.warning("sagemaker: endpoint not reachable", extra={**where, "error_type": type(exc).__name__})
        return Unavailable("the SageMaker endpoint is not reachable")
    if not isinstance(exc, ClientError):
        log.warning("sagemaker: invoke failed", extra={**where, "error_type": type(exc).__name__, "error": str(exc)[:500]})
        return BackendError(f"the SageMaker client failed ({type(exc).__name__})")
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    message = str(error.get("Message", ""))
    log.warning("sagemaker: %s", code or "error", extra={**where, "error": message[:500]})
    if code in _THROTTLING:
        return _Throttled("the endpoint is throttling requests")
    if code == "ModelError":
        original = str(exc.response.get("OriginalMessage") or message)
        status = int(exc.response.get("OriginalStatusCode") or 0)
        if "timed out" in original.lower() or "timed out" in message.lower():
            return DeadlineExceeded("the model did not answer within SageMaker's 60 s limit")
        if 400 <= status < 500 and status != 429:
            # Triton's SageMaker port answers 400 for every failed request: name an input
            # only when Triton's own message does.
            found = _INPUT_NAME.search(original)
            if found:
                return InvalidInput(
                    f"the model server rejected input '{found.group(1)}' (its name, shape or datatype does not match the model)",
                    field=f"inputs.{found.group(1)}",
                )
            if "batch-size" in original or "batch size" in original:
                return InvalidInput("more rows than the model takes in one request (its max_batch_size)", field="inputs")
            if "input" in original.lower():
                return InvalidInput("the model server rejected the request's inputs", field="inputs")
            return BackendError(f"the model container refused the request ({status})")
        if status in (429, 503):
            return Unavailable("the model container is busy; retry shortly")
        return BackendError(f"the model container failed ({status or 'no status'})")
    if code in ("ServiceUnavailable", "ModelNotReadyException"):
        return Unavailable("the SageMaker endpoint is not available right now")
    if code == "ValidationError" and "no capacity" in message.lower():
        return NoCapacity("the endpoint's inference component has scaled to zero; a copy is starting (minutes): retry later")
    if code == "ValidationError" and "not found" in message.lower():
        return BackendError(f"SageMaker endpoint '{target.endpoint_name}' does not exist")
    return BackendError(f"SageMaker failed ({code or 'unknown error'})")
