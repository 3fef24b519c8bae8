"""SageMaker asynchronous inference, for `SageMakerRuntime` (`sluice.runtimes.sagemaker`).

A request above InvokeEndpoint's 6 MB goes through asynchronous inference when the version
names an asynchronous endpoint (`async_endpoint_name`), and every request does when the
version's endpoint is asynchronous (`"invocation": "async"`): the body is written to the
result store under the tenant's `results/` prefix (an upload's body is used where it lies),
`InvokeEndpointAsync` is called with its location, and `Accepted` (202) carries the result the
caller polls. The local twin (a version whose endpoint is a local Triton's SageMaker port) has
a queue of its own: a thread pool that reads the input, invokes the container and writes the
answer, or the error, where SageMaker would.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NoReturn

from sluice.codecs.triton import BINARY_JSON_CONTENT_TYPE, JSON_CONTENT_TYPE, encode_request
from sluice.domain.errors import Accepted, BackendError, BadRequest, InvalidInput, PayloadTooLarge
from sluice.domain.results import rows_of
from sluice.runtimes.sagemaker_errors import mapped
from sluice.runtimes.sagemaker_target import EndpointTarget

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy as np

    from sluice.domain import ModelVersion
    from sluice.domain.uploads import Upload
    from sluice.storage.results import ResultStore

log = logging.getLogger(__name__)


class AsyncInference:
    """Asynchronous inference, mixed into `SageMakerRuntime`: it uses the runtime's client,
    thread pool, throttling retries and synchronous invoke (for the local twin's queue)."""

    results: ResultStore | None  # where bodies and answers lie; None: no asynchronous inference
    result_ttl_s: int
    async_timeout_s: int
    local_async_workers: int
    _queue: ThreadPoolExecutor | None  # the local twin's queue, started on first use

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
        rows = rows_of(wire) if target.batched else 0
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

    async def submit_upload(self, version: ModelVersion, upload: Upload, *, beside: str | None = None) -> None:
        """Queue an upload's body for asynchronous inference as it lies in the store (its URI is
        `InvokeEndpointAsync`'s `InputLocation`: nothing is copied) and raise `Accepted`. Returns
        without doing anything when the version's endpoint takes no asynchronous requests: the
        caller then reads the body and scores it as any other request.

        The body goes to the container unchanged, so it must be what Triton takes (v2 JSON, or
        binary+json). Of a binary body the JSON header alone is read and checked first: its
        inputs must be the signature's, its tensors' bytes must add up to the body, and no output
        may be asked for in binary (an answer in S3 carries no header size to decode it by).
        `beside`: the field of the request naming the upload that asks for something in the
        answer (outputs, classification, binary outputs), refused here: nothing but the body
        reaches the endpoint, so it would be dropped."""
        target = EndpointTarget.of(version)
        if not target.takes_async:
            return
        if beside is not None:
            raise BadRequest(
                f"{beside}: an upload queued for asynchronous inference is answered as its own body asks; "
                "name the outputs and their parameters in the uploaded request, not beside upload_id",
                field=beside,
            )
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
            check_upload_header(header, upload, version, max_rows=target.max_batch_size if target.batched else None)
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

        async def once() -> Any:
            return await loop.run_in_executor(self._executor(), lambda: self.client.invoke_endpoint_async(**params))

        response = await self._retrying(target, once)
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
            error = mapped(exc, target)
            payload = json.dumps({"error": error.message, "code": error.code, "status": error.status}).encode()
            self.results.put(tenant, result_id, "error", payload, content_type=JSON_CONTENT_TYPE)
            return
        self.results.put(tenant, result_id, "output", raw, content_type=answered_type)


def check_upload_header(header: bytes, upload: Upload, version: ModelVersion, *, max_rows: int | None = None) -> None:
    """An uploaded binary+json body's JSON header, checked before the body is handed on. The
    header is the caller's, any JSON at all: whatever is wrong with it is bad input, a 400
    naming `upload_id` and saying what, never a member of another shape read as if it were
    the one a v2 request has. An input of more rows than `max_rows` (the endpoint's
    `max_batch_size`) is refused as a request's would be: one result is one invocation."""
    try:
        found = json.loads(header)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the stack reads
        raise _bad_header(f"(its first {len(header)} bytes, header_size) is not JSON that can be read") from None
    inputs = found.get("inputs") if isinstance(found, dict) else None
    if not isinstance(inputs, list) or not all(isinstance(i, dict) for i in inputs):
        raise _bad_header("is not a v2 inference request with an inputs list")
    known = {spec.name for spec in version.signature.inputs}
    tail = 0
    for tensor in inputs:
        name = tensor.get("name")
        if not isinstance(name, str):
            raise _bad_header(f"has an input whose name is not a string; this version takes {sorted(known)}")
        shown = _shown(name)
        if name not in known:
            raise InvalidInput(f"the upload names input '{shown}'; this version takes {sorted(known)}", field="upload_id")
        params = _object(tensor.get("parameters"), f"input '{shown}'")
        size = params.get("binary_data_size")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
            raise _bad_header(f"gives input '{shown}' a binary_data_size that is not a whole number of bytes")
        tail += size or 0
        shape = tensor.get("shape")
        rows = shape[0] if isinstance(shape, list) and shape and isinstance(shape[0], int) and not isinstance(shape[0], bool) else None
        if max_rows is not None and rows is not None and rows > max_rows:
            raise InvalidInput(
                f"an asynchronous request takes at most {max_rows} rows (the endpoint's max_batch_size); the upload's input "
                f"'{shown}' has {rows}: send a batch job instead",
                field="upload_id",
            )
    if (upload.header_size or 0) + tail != upload.size:
        raise InvalidInput(
            f"the upload is {upload.size} bytes but its header and binary_data_size add up to {(upload.header_size or 0) + tail}",
            field="upload_id",
        )
    outputs = found.get("outputs")
    if outputs is not None and (not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs)):
        raise _bad_header("has outputs that are not a list of objects")
    wanted = [_object(found.get("parameters"), "the request"), *(_object(o.get("parameters"), "an output") for o in outputs or ())]
    if any(p.get("binary_data_output") or p.get("binary_data") for p in wanted):
        raise InvalidInput(
            "an asynchronous request asks for its outputs as JSON: drop binary_data_output and binary_data from the upload",
            field="upload_id",
        )


def _bad_header(what: str) -> InvalidInput:
    return InvalidInput(f"the upload's JSON header {what}", field="upload_id")


def _shown(name: str) -> str:
    """A name from the header as a message quotes it: the header may be megabytes long."""
    return name if len(name) <= 64 else name[:64] + "…"


def _object(value: Any, whose: str) -> dict[str, Any]:
    """`parameters` of the header's request, an input or an output: an object, or absent."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad_header(f"gives {whose} parameters that are not an object")
    return value
