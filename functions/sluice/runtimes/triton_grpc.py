"""Triton's gRPC protocol for `sluice.runtimes.triton`: the same calls as its HTTP transport,
with `tritonclient.grpc.aio` (imported on first use: Lambda pays for every import)."""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING, Any

from sluice.codecs.datatypes import v2_of_numpy
from sluice.domain.errors import InvalidInput
from sluice.inline import timeout

if TYPE_CHECKING:
    import numpy as np

    from sluice.runtimes.triton import TritonRuntime
    from sluice.runtimes.triton_layout import TritonTarget

# gRPC status -> the HTTP status Triton answers for the same failure, so both protocols map to
# the same sluice errors. UNAVAILABLE is also what a channel that cannot connect reports.
_AS_HTTP = {
    "StatusCode.INVALID_ARGUMENT": "400",
    "StatusCode.NOT_FOUND": "404",
    "StatusCode.RESOURCE_EXHAUSTED": "429",
    "StatusCode.UNAVAILABLE": "unreachable",
    "StatusCode.DEADLINE_EXCEEDED": "504",
}


def wire_datatype(name: str, array: np.ndarray) -> str:
    try:
        return v2_of_numpy(array.dtype)
    except TypeError:
        raise InvalidInput(f"input '{name}' has dtype {array.dtype}, which Triton cannot take", field=f"inputs.{name}") from None


class GrpcTransport:
    """One `tritonclient.grpc.aio` client per event loop and server: a gRPC aio channel
    belongs to the loop that made it."""

    def __init__(self, runtime: TritonRuntime) -> None:
        self.runtime = runtime
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, bool], Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._grpc: Any = None

    def client(self, target: TritonTarget) -> Any:
        import tritonclient.grpc.aio as grpc_aio  # heavy: imported on first use

        clients = self._clients.setdefault(asyncio.get_running_loop(), {})
        key = (target.url, target.ssl)
        client = clients.get(key)
        if client is None:
            client = clients[key] = grpc_aio.InferenceServerClient(target.url, ssl=target.ssl)
        return client

    async def config(self, target: TritonTarget) -> Any:
        return await self.client(target).get_model_config(
            target.model, target.model_version, as_json=True, client_timeout=self.runtime.timeout_s
        )

    async def ready(self, target: TritonTarget) -> bool:
        client = self.client(target)
        return bool(await client.is_model_ready(target.model, target.model_version, client_timeout=self.runtime.timeout_s))

    async def metadata(self, target: TritonTarget) -> Any:
        return await self.client(target).get_model_metadata(
            target.model, target.model_version, as_json=True, client_timeout=self.runtime.timeout_s
        )

    async def infer(self, target: TritonTarget, inputs: dict[str, np.ndarray], names: list[str]) -> Any:
        grpc = self._grpc
        if grpc is None:
            import tritonclient.grpc as grpc

            self._grpc = grpc
        request = []
        for name, wire in inputs.items():
            tensor = grpc.InferInput(name, list(wire.shape), wire_datatype(name, wire))
            tensor.set_data_from_numpy(wire)  # raw bytes: gRPC has no JSON form to choose
            request.append(tensor)
        requested = [grpc.InferRequestedOutput(name) for name in names]
        call = self.client(target).infer(target.model, request, model_version=target.model_version, outputs=requested)
        # The aio client's infer takes no client deadline: the deadline is kept here.
        async with timeout(self.runtime.timeout_s):
            return await call

    def failure(self, exc: Exception) -> tuple[str, str] | None:
        from tritonclient.utils import InferenceServerException

        if isinstance(exc, InferenceServerException):
            status = str(exc.status() or "")
            return _AS_HTTP.get(status, status), str(exc.message() or "")
        return None

    def unreachable(self, exc: Exception) -> bool:
        return isinstance(exc, ConnectionError | OSError)

    async def close(self) -> None:
        for client in self._clients.pop(asyncio.get_running_loop(), {}).values():
            await client.close()
