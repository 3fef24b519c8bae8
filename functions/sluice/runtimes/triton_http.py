"""Triton's HTTP/REST protocol for `sluice.runtimes.triton`, spoken directly over aiohttp.

A request is the v2 binary tensor extension that `sluice.codecs.triton` builds (the JSON
header, then each tensor's raw little-endian bytes; `Inference-Header-Content-Length` says
where the header ends) and asks for every output in binary; the answer is read with the same
codec, numbers as read-only arrays over the body's own bytes. `tritonclient.http.aio` did the
same with more Python per request, and let aiohttp ask for gzip'd answers, which Triton then
compresses: here the answer is asked for uncompressed (`Accept-Encoding: identity`).

One aiohttp session per event loop and server (a session belongs to the loop that made it),
no redirect followed (the allowlist names the server a version may reach), and the runtime's
`timeout_s` the total deadline of each call, as before. aiohttp is imported on first use:
Lambda pays for every import.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import TYPE_CHECKING, Any

import orjson

from sluice.codecs.datatypes import V2_TO_NUMPY, answer_dtypes
from sluice.codecs.triton import decode_response, encode_request
from sluice.domain.errors import BackendError
from sluice.domain.values import decimal

if TYPE_CHECKING:
    import numpy as np

    from sluice.runtimes.triton import TritonRuntime
    from sluice.runtimes.triton_layout import TritonTarget

HEADER_LENGTH = "Inference-Header-Content-Length"
# Triton compresses its answer when asked to (and aiohttp asks by default): tensors barely
# compress, and both ends would pay for it on every request.
_SESSION_HEADERS = {"Accept-Encoding": "identity"}
_ERROR_TEXT_LIMIT = 2000


def preload() -> None:
    """Import aiohttp now, where it is installed: a server about to take requests (a worker of
    `sluice serve`) pays for it as it starts rather than on its first call to Triton, where the
    import (half a second on a small machine) would hold up every request on its event loop
    and make a burst's requests of that worker miss the server's batch."""
    with contextlib.suppress(ImportError):
        import aiohttp  # noqa: F401


class TritonHttpError(Exception):
    """The server answered with a status other than 200: the status and the `error` its JSON
    body gives (or the body itself, cut short, when it is not Triton's JSON)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def error_text(body: bytes) -> str:
    if not body:
        return "client received an empty response from the server."
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        return answer["error"]
    return body[:_ERROR_TEXT_LIMIT].decode("utf-8", errors="replace")


class HttpAnswer(dict):  # type: ignore[type-arg]
    """An inference answer's outputs by name; `as_numpy` as tritonclient's results have it."""

    def as_numpy(self, name: str) -> np.ndarray | None:
        return self.get(name)


class HttpTransport:
    """Triton's HTTP/REST protocol: one aiohttp session per event loop and server."""

    def __init__(self, runtime: TritonRuntime) -> None:
        self.runtime = runtime
        self._sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, bool], Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._aiohttp: Any = None  # the module, once imported
        self._dtypes: dict[str, np.dtype] | None = None

    def session(self, target: TritonTarget) -> Any:
        loop = asyncio.get_running_loop()
        sessions = self._sessions.get(loop)
        if sessions is None:
            sessions = self._sessions[loop] = {}
        key = (target.url, target.ssl)
        session = sessions.get(key)
        if session is None:
            aiohttp = self._aiohttp
            if aiohttp is None:
                try:
                    import aiohttp  # imported on first use, not at cold start
                except ImportError:  # an install (or a Lambda layer) without the triton extra
                    raise BackendError(
                        "the triton runtime calls Triton over HTTP with aiohttp, which is not installed here: "
                        "install sluice[triton]"
                    ) from None
                self._aiohttp = aiohttp
            runtime = self.runtime
            session = sessions[key] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=runtime.connections),
                timeout=aiohttp.ClientTimeout(total=runtime.timeout_s),
                headers=_SESSION_HEADERS,
            )
        return session

    @staticmethod
    def _url(target: TritonTarget, tail: str = "") -> str:
        base = f"{'https' if target.ssl else 'http'}://{target.url.rstrip('/')}/v2/models/{target.model}"
        if target.model_version:
            base += f"/versions/{target.model_version}"
        return base + tail

    async def _get(self, target: TritonTarget, tail: str) -> tuple[int, bytes]:
        async with self.session(target).get(self._url(target, tail), allow_redirects=False) as response:
            return response.status, await response.read()

    async def _get_json(self, target: TritonTarget, tail: str) -> Any:
        status, body = await self._get(target, tail)
        if status != 200:
            raise TritonHttpError(status, error_text(body))
        return orjson.loads(body)

    async def config(self, target: TritonTarget) -> Any:
        return await self._get_json(target, "/config")

    async def ready(self, target: TritonTarget) -> bool:
        status, _ = await self._get(target, "/ready")
        return status == 200

    async def metadata(self, target: TritonTarget) -> Any:
        return await self._get_json(target, "")

    async def infer(self, target: TritonTarget, inputs: dict[str, np.ndarray], names: list[str]) -> HttpAnswer:
        body = encode_request(
            inputs, outputs=names, binary_outputs=True, binary_min_bytes=self.runtime.binary_threshold_bytes
        )
        headers = None if body.header_size is None else {HEADER_LENGTH: str(body.header_size)}
        async with self.session(target).post(
            self._url(target, "/infer"), data=body.body, headers=headers, allow_redirects=False
        ) as response:
            answer = await response.read()
            if response.status != 200:
                raise TritonHttpError(response.status, error_text(answer))
            declared = response.headers.get(HEADER_LENGTH)
        header_size = None
        if declared is not None:
            header_size = decimal(declared)
            if header_size is None:
                raise BackendError(f"the Triton server answered {HEADER_LENGTH}: {declared[:40]!r}, not a byte count")
        return HttpAnswer(decode_response(answer, header_size=header_size, copy=False, dtypes=self._wire_dtypes(answer, header_size)))

    def _wire_dtypes(self, answer: bytes, header_size: int | None) -> dict[str, np.dtype]:
        """The datatypes an answer may hold: the codec's, and BF16 as `ml_dtypes.bfloat16` (what
        tritonclient gives; ml_dtypes comes with it), imported only once an answer has one."""
        if self._dtypes is not None:
            return self._dtypes
        if answer.find(b'"BF16"', 0, len(answer) if header_size is None else header_size) < 0:
            return V2_TO_NUMPY
        self._dtypes = answer_dtypes()  # without ml_dtypes, BF16 stays refused, as an unusable datatype
        return self._dtypes

    def failure(self, exc: Exception) -> tuple[str, str] | None:
        """(status, message) of a failure the server answered; None for a transport failure."""
        if isinstance(exc, TritonHttpError):
            return str(exc.status), exc.message
        return None

    def unreachable(self, exc: Exception) -> bool:
        aiohttp = self._aiohttp  # None: no session was ever made, so no aiohttp error either
        if aiohttp is not None and isinstance(exc, aiohttp.ClientConnectionError):
            return True
        return isinstance(exc, ConnectionError | OSError)

    async def close(self) -> None:
        for session in self._sessions.pop(asyncio.get_running_loop(), {}).values():
            await session.close()
