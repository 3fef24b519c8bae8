"""Predictions over a WebSocket: one message in, one answer out, whatever carries them.

`Session.answer(raw)` is the whole of it, shared by the local route of `sluice serve`
(`sluice.api.websocket`) and the API Gateway WebSocket Lambda (`sluice.handlers.websocket`):
the principal is fixed when the connection opens; each message is checked (the key still
active, the rate, which counts every message, then size, JSON, the schema), turned into the
core's request, passed to the one prediction call, and presented as the simple JSON API (or
the v2 API) presents it. Every
failure is an answer in the HTTP API's error body with the message's `request_id` and the
`status` the HTTP API would have answered: a bad message never costs the connection.

A message is a simple JSON prediction body (`deployment`, `features` | `inputs` | `batch`, ...
plus `request_id`), or `{"request_id", "deployment", "version"?, "v2": <v2 inference request>}`.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from pydantic import Field
from pydantic_core import from_json

from sluice.api.errors import error_content
from sluice.api.present import plain_body, v2_body
from sluice.codecs.binary import binary_outputs, json_tensors
from sluice.codecs.classification import asked
from sluice.domain.errors import (
    BadRequest,
    InvalidRequest,
    PayloadTooLarge,
    RateLimited,
    SluiceError,
)
from sluice.domain.requests import (
    MAX_REQUEST_ID,
    PredictionRequest,
    RowInputs,
    TensorInputs,
    routing_key_of,
)
from sluice.domain.values import VersionNumber
from sluice.services.keys import UNCHECKED, HeldKey
from sluice.types.api import PredictionRequest as PredictionBody
from sluice.types.base import WireModel
from sluice.types.v2 import InferenceRequest

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sluice.domain import Principal
    from sluice.services.admission import Admission
    from sluice.wiring import Container

UPLOADS_ARE_FOR_HTTP = "upload_id: uploads are for the HTTP API; over a WebSocket, send the inputs in the message"


class MessageRate(Protocol):
    """A connection's message rate: in memory on `sluice serve` (`services.ratelimit.RateLimit`),
    in the registry on Lambda (`services.connection_rate.ConnectionRate`)."""

    async def check(self, subject: str) -> None:
        """Count one message of the connection `subject`; RateLimited when it is over."""
        ...


class V2Message(WireModel):
    """An Open Inference Protocol request, wrapped: its `id` may stand for `request_id`."""

    deployment: str = Field(description="The deployment to call.")
    request_id: str | None = Field(None, max_length=MAX_REQUEST_ID)
    version: VersionNumber | None = Field(None, description="Pin a version of the deployment's model.")
    v2: InferenceRequest

    model_config = {"extra": "forbid"}


def error_answer(exc: Exception, request_id: str | None) -> dict[str, Any]:
    status, body, _ = error_content(exc, "websocket")
    return {"request_id": request_id, "status": status, **body}


def encode(answer: dict[str, Any]) -> bytes:
    return orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


class Session:
    """One connection: its principal (fixed at connect), its rate, and whether its key still
    works (`checked_at`: the revocation signal's reading taken before the key was
    authenticated at connect; none: the key is checked before the first answer). `answer`
    never raises; `revoked` turns true once the key was found revoked, and the transport then
    closes the connection after sending the answer that says so."""

    def __init__(
        self,
        container: Container,
        principal: Principal,
        *,
        connection_id: str,
        headers: Mapping[str, str] | None = None,
        rate_limit: MessageRate | None = None,
        admission: Admission | None = None,
        max_message_bytes: int | None = None,
        checked_at: object = UNCHECKED,
    ) -> None:
        self.container = container
        self.principal = principal
        self.connection_id = connection_id
        self.headers = headers or {}
        self.rate_limit = rate_limit
        self.admission = admission  # the key's requests and the process's predictions in flight (`sluice serve`)
        self.max_message_bytes = max_message_bytes or container.settings.websocket.websocket_max_message_bytes
        # A key checked at connect still works until the revocation signal moves from the
        # reading taken before that check (a revoke during it is seen at the first message); a
        # session made per message (Lambda) checks its key before the first answer.
        self.key = HeldKey(container.keys, principal.subject, checked_at)

    async def answer(self, raw: bytes | str, *, unread: SluiceError | None = None) -> dict[str, Any]:
        """The answer to one message; `unread`: why the message could not be read off its frame
        (answered as any refusal, once its key and rate are checked, as every message's are)."""
        request_id: str | None = None
        message: Any = None
        try:
            try:
                await self.key.check()  # first: a revoked key's next message is refused, whatever it holds
                if self.rate_limit is not None:  # then every message counts, whether it reads or not
                    try:
                        await self.rate_limit.check(self.connection_id)
                    except RateLimited as exc:  # told as every door's refusals are: counted each, logged together
                        self.container.telemetry.refused(tenant=self.principal.tenant, code=exc.code)
                        raise
            except SluiceError:
                request_id = self._request_id_of(raw)  # the refusal carries the message's id where it has one
                raise
            if unread is not None:
                raise unread
            if message_size(raw, self.max_message_bytes) > self.max_message_bytes:
                raise PayloadTooLarge(
                    f"message is over {self.max_message_bytes} bytes: send large inputs as a batch job",
                    field="body",
                )
            message = _parse(raw)
            request_id = _request_id(message)  # before any refusal of what it says: the refusal carries it
            if message.get("action") == "auth":
                raise BadRequest("this connection is authenticated already; its tenant was fixed when it opened", field="action")
            with self.admission.held(self.principal) if self.admission is not None else contextlib.nullcontext():
                return await self._predict(message, request_id)
        except Exception as exc:
            if self.principal is not None:  # counted once, as answered (`sluice.inference.outcomes`)
                name = message.get("deployment") if isinstance(message, dict) else None
                await self.container.predictions.outcomes.failed(self.principal.tenant, name, exc)
            return error_answer(exc, request_id)

    def _request_id_of(self, raw: bytes | str) -> str | None:
        """The message's own request id, where it is within the size limit and reads."""
        if message_size(raw, self.max_message_bytes) > self.max_message_bytes:
            return None
        try:
            return _request_id(_parse(raw))
        except SluiceError:
            return None

    @property
    def revoked(self) -> bool:
        return self.key.revoked

    async def _predict(self, message: dict[str, Any], request_id: str) -> dict[str, Any]:
        principal = self.principal
        if "v2" in message:
            wrapped = V2Message.model_validate(message)
            body = wrapped.v2
            params = body.parameters or {}
            if params.get("upload_id") is not None:
                raise BadRequest(UPLOADS_ARE_FOR_HTTP, field="upload_id")
            if binary_outputs(params, body.outputs):  # a bad flag is refused there, naming it, as over HTTP
                binary = "parameters.binary_data_output" if params.get("binary_data_output") else "outputs.parameters.binary_data"
                raise BadRequest(f"{binary}: binary outputs are for the HTTP API; a WebSocket message answers JSON", field=binary)
            wanted = tuple(out.name for out in body.outputs) if body.outputs else None
            classify = asked((out.name, out.parameters) for out in body.outputs) if body.outputs else None
            request = PredictionRequest(
                deployment=wrapped.deployment,
                inputs=TensorInputs(json_tensors(body.inputs)),
                version=wrapped.version,
                outputs=wanted,
                classify=classify,
                variant=params.get("variant"),
                routing_key=routing_key_of(params),
                headers=self.headers,
                request_id=request_id,
                log_fields={"request_id": request_id, "tenant": principal.tenant, "connection": self.connection_id},
                parameters=params,
            )
            prediction = await self.container.predictions.predict(principal, request)
            return {"request_id": request_id, **v2_body(prediction, request_id=body.id, wanted=wanted, classify=classify)}
        simple = PredictionBody.model_validate(message)
        if simple.upload_id is not None:
            raise BadRequest(UPLOADS_ARE_FOR_HTTP, field="upload_id")
        request = PredictionRequest(
            deployment=simple.deployment,
            inputs=RowInputs(inputs=simple.inputs, features=simple.features, batch=simple.batch),
            version=simple.version,
            variant=simple.variant,
            routing_key=simple.routing_key,
            headers=self.headers,
            request_id=request_id,
            log_fields={"request_id": request_id, "tenant": principal.tenant, "connection": self.connection_id},
            parameters=simple.parameters,
        )
        prediction = await self.container.predictions.predict(principal, request)
        shaped = plain_body(prediction, several=prediction.batch, return_probabilities=simple.options.return_probabilities)
        return {"request_id": request_id, **shaped}

    def stats_due(self) -> bool:
        """Whether statistics are due a flush (`container.predictions.flush_stats_if_due`),
        which the transport runs after the answer has gone out."""
        return self.container.predictions.stats_due()


def rows_field(raw: bytes | str) -> str:
    """The field a message carries its rows in, named as the HTTP API names it when an answer
    is too large to send (`v2.inputs` for a v2 message; `body` for one that is no prediction)."""
    from sluice.api.predict import rows_field as simple_rows

    try:
        message = _parse(raw)
        return "v2.inputs" if "v2" in message else simple_rows(PredictionBody.model_validate(message))
    except (SluiceError, ValueError):  # pydantic's ValidationError is a ValueError
        return "body"


def message_size(raw: bytes | str, most: int) -> int:
    """A message's size in bytes: a text frame's as UTF-8 carried it (up to 4 bytes a
    character), counted only where its characters alone could not settle it."""
    if type(raw) is bytes or len(raw) > most or len(raw) * 4 <= most:
        return len(raw)
    return len(raw.encode("utf-8", "surrogatepass"))


def _parse(raw: bytes | str) -> dict[str, Any]:
    """A message read by the parser that reads an HTTP body (pydantic's): what one takes (NaN,
    Infinity, integers past 64 bits), the other takes, for the same checks to refuse or answer."""
    try:
        message = from_json(raw)
    except ValueError as exc:
        raise InvalidRequest(f"body: not valid JSON ({exc})", field="body") from None
    if not isinstance(message, dict):
        raise InvalidRequest("body: a message is a JSON object", field="body")
    return message


def _request_id(message: dict[str, Any]) -> str:
    """The message's own id (a v2 request's `id` will do), else a fresh one. An id that is not
    one is refused, naming it, with no id: a fresh one would match nothing the client sent."""
    field, given = "request_id", message.get("request_id")
    if given is None and isinstance(message.get("v2"), dict):
        field, given = "v2.id", message["v2"].get("id")
    if given is None or given == "":
        return os.urandom(16).hex()
    if not isinstance(given, str) or len(given) > MAX_REQUEST_ID:
        raise InvalidRequest(f"{field}: a string of at most {MAX_REQUEST_ID} characters", field=field)
    return given
