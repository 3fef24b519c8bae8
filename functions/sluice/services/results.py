"""Results of asynchronous predictions: what `GET /api/v1/results/{id}` answers.

A result is read only from the caller's own tenant: its record lies under the tenant's
`results/` prefix, so another tenant's id is simply not found (404), never forbidden, and the
locations the record names are checked to lie under that same prefix before they are read.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.datatypes import v2_of_numpy
from sluice.codecs.triton import decode_sagemaker_response
from sluice.domain.errors import BackendError, BadRequest, NotFound, SluiceError
from sluice.storage.results import RECORD, RESULT_ID

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import Principal
    from sluice.storage.results import ResultStore


def _tensor(name: str, array: np.ndarray) -> dict[str, Any]:
    if array.dtype == object or array.dtype.kind in "SU":
        data = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in array.reshape(-1).tolist()]
        datatype = "BYTES"
    else:
        data = array.reshape(-1).tolist()
        datatype = v2_of_numpy(array.dtype)
    return {"name": name, "datatype": datatype, "shape": list(array.shape), "data": data}


def _failure(data: bytes) -> dict[str, Any]:
    """The error SageMaker (its failure file) or the local twin wrote, for the caller."""
    try:
        found = json.loads(data)
    except ValueError:
        found = None
    if isinstance(found, dict) and "error" in found:
        return {"error": str(found["error"]), "code": str(found.get("code", "backend_error"))}
    return {"error": data[:2000].decode("utf-8", "replace"), "code": "model_error"}


class ResultService:
    def __init__(self, store: ResultStore | None, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def get(self, principal: Principal, result_id: str) -> dict[str, Any]:
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
            answer = self.store.read(tenant, record["output"])
            failure = None if answer is not None or not record.get("failure") else self.store.read(tenant, record["failure"])
        except SluiceError:
            raise BackendError("the result's record names a location outside the tenant's results") from None
        if answer is not None:
            data, content_type = answer
            try:
                outputs = decode_sagemaker_response(data, content_type)
            except SluiceError:
                return {**out, "status": "failed", "error": {"error": "the model's answer could not be decoded", "code": "backend_error"}}
            return {**out, "status": "succeeded", "outputs": [_tensor(n, a) for n, a in outputs.items()]}
        if failure is not None:
            return {**out, "status": "failed", "error": _failure(failure[0])}
        return {**out, "status": "pending"}
