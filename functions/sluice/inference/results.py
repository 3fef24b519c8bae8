"""Results of asynchronous predictions: what `GET /api/v1/results/{id}` answers.

A result is read only from the caller's own tenant: its record lies under the tenant's
`results/` prefix, so another tenant's id is simply not found (404), never forbidden, and the
locations the record names are checked to lie under that same prefix before they are read.

An answer too large to send in line (over `max_response_bytes`, Lambda's response limit) is
answered as itself instead of as the result's JSON: `LargeAnswer`, which the route sends as a
303 to a short-lived presigned S3 GET on AWS, or as the bytes locally. The same holds for the
answers a prediction from an upload keeps here when they are too large to send (`keep`).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from sluice.codecs.datatypes import v2_of_numpy
from sluice.codecs.triton import decode_sagemaker_response, header_size_of
from sluice.domain.errors import BackendError, BadRequest, NotFound, SluiceError
from sluice.storage.results import RECORD, RESULT_ID, record_bytes

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.storage.results import ResultStore


def _tensor(name: str, array: np.ndarray) -> dict[str, Any]:
    if array.dtype == object or array.dtype.kind in "SU":
        data = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in array.reshape(-1).tolist()]
        datatype = "BYTES"
    else:
        from sluice.codecs.tensors import json_data

        datatype = v2_of_numpy(array.dtype)
        flat = array.reshape(-1)
        # as a v2 answer writes it: NaN and ±Inf as Triton's tokens (as a list, orjson wrote null)
        data = json_data(name, datatype, flat) if datatype != "BF16" else flat.tolist()
        data = data.tolist() if isinstance(data, np.ndarray) else data
    return {"name": name, "datatype": datatype, "shape": list(array.shape), "data": data}


def _failure(data: bytes) -> dict[str, Any]:
    """The error SageMaker (its failure file) or the local twin wrote, for the caller."""
    try:
        found = json.loads(data)
    except ValueError:
        found = None
    if isinstance(found, dict) and "error" in found:
        return {"error": str(found["error"])[:2000], "code": str(found.get("code", "backend_error"))[:64]}
    return {"error": data[:2000].decode("utf-8", "replace"), "code": "model_error"}


@dataclass(frozen=True, slots=True)
class LargeAnswer:
    """A result's answer, to be sent as itself: from `url` (a presigned GET, short-lived) or,
    where the store is a folder, from `path`."""

    url: str | None
    path: Path | None
    content_type: str | None
    size: int

    @property
    def header_size(self) -> int | None:
        """A binary v2 answer's JSON header length, which its content type carries (a presigned
        GET answers no header of ours); None for any other answer."""
        return header_size_of(self.content_type)


@dataclass(eq=False, slots=True)
class ResultService:
    store: ResultStore | None
    _: KW_ONLY
    clock: Callable[[], float] = time.time
    max_response_bytes: int = 6 * 1024 * 1024 - 64 * 1024
    link_ttl_s: int = 300
    ttl_s: int = 7 * 24 * 3600

    def keep(self, tenant: str, *, model: str, version: int, body: bytes, content_type: str) -> dict[str, Any]:
        """Keep an answer too large to send as a succeeded result of its own; what the caller
        is told: its id, its route and until when it is kept."""
        if self.store is None:
            raise BackendError("the answer is too large to send and there is no result store to keep it in")
        result_id = uuid.uuid4().hex
        now = self.clock()
        output = self.store.put(tenant, result_id, "output", body, content_type=content_type)
        record = {
            "id": result_id, "tenant": tenant, "model": model, "version": version, "kind": "answer",
            "created_at": round(now, 3), "expires_at": round(now + self.ttl_s, 3), "output": output, "failure": None,
        }  # fmt: skip
        self.store.put(tenant, result_id, RECORD, record_bytes(record))
        return {
            "id": result_id,
            "status": "succeeded",
            "result": f"/api/v1/results/{result_id}",
            "message": "the answer is larger than the API sends in line; it is kept as a result",
            "model": model,
            "version": version,
            "expires_at": record["expires_at"],
        }

    def _large(self, tenant: str, uri: str, content_type: str | None, size: int) -> LargeAnswer:
        assert self.store is not None
        url = self.store.link(tenant, uri, expires_in=self.link_ttl_s)
        return LargeAnswer(url, None if url else self.store.path(tenant, uri), content_type, size)

    def get(self, principal: Principal, result_id: str) -> dict[str, Any] | LargeAnswer:
        principal.require("predict")
        if not RESULT_ID.match(result_id):
            raise BadRequest("a result id is 32 lowercase hex digits", field="result_id")
        if self.store is None:
            raise NotFound(f"no result '{result_id}'", field="result_id")
        tenant = principal.tenant
        found = self.store.read(tenant, self.store.uri(tenant, result_id, RECORD))
        if found is None:
            raise NotFound(f"no result '{result_id}'", field="result_id")
        record = json.loads(found[0])
        if record.get("tenant") != tenant or record.get("id") != result_id:
            raise NotFound(f"no result '{result_id}'", field="result_id")
        if float(record.get("expires_at", 0)) <= self.clock():
            raise NotFound(f"result '{result_id}' has expired", field="result_id")
        out: dict[str, Any] = {
            "id": result_id,
            "model": record.get("model"),
            "version": record.get("version"),
            "created_at": record.get("created_at"),
            "expires_at": record.get("expires_at"),
        }
        try:
            answer = self.store.read_bounded(tenant, record["output"], self.max_response_bytes)
            failure = None if answer is not None or not record.get("failure") else self.store.read(tenant, record["failure"])
            if answer is not None:
                data, content_type, size = answer
                if data is None or record.get("kind") == "answer":
                    return self._large(tenant, record["output"], content_type, size)
        except SluiceError:
            raise BackendError("the result's record names a location outside the tenant's results") from None
        if answer is not None:
            try:
                outputs = decode_sagemaker_response(data, content_type)  # type: ignore[arg-type]
            except Exception:  # whatever the container wrote: a ragged `data`, `parameters` of text (a 500)
                return {**out, "status": "failed", "error": {"error": "the model's answer could not be decoded", "code": "backend_error"}}
            found = {**out, "status": "succeeded", "outputs": [_tensor(n, a) for n, a in outputs.items()]}
            if len(orjson.dumps(found)) > self.max_response_bytes:  # as JSON, the numbers take more room
                return self._large(tenant, record["output"], content_type, size)
            return found
        if failure is not None:
            return {**out, "status": "failed", "error": _failure(failure[0])}
        return {**out, "status": "pending"}
