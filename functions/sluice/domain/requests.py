"""A prediction request as the core takes it, whichever door it came through.

The HTTP API (simple JSON or the Open Inference Protocol), the CLI, batch scoring and every
Lambda handler build one of these and make one call, `PredictionService.predict`. Inputs come
in one of three forms; the core decodes and checks each against the answering version's
signature.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import BadRequest

if TYPE_CHECKING:
    import numpy as np

# A caller's request id, whatever door it came through: it is part of a registry key (a split's
# assignment, a kept prediction), which DynamoDB holds to 2 KB.
MAX_REQUEST_ID = 128


ROW_FIELDS = ("inputs", "features", "batch")  # where a simple-JSON request carries its rows: exactly one of them


@dataclass(frozen=True, slots=True)
class RowInputs:
    """Simple JSON: exactly one of named tensors or a 2-D list (`inputs`), one row of
    `features`, or a `batch` of rows."""

    inputs: Any = None
    features: dict[str, Any] | None = None
    batch: list[Any] | None = None


@dataclass(frozen=True, slots=True)
class Tensor:
    """One Open Inference Protocol input tensor, as sent."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: Any


@dataclass(frozen=True, slots=True)
class TensorInputs:
    tensors: tuple[Tensor, ...]


@dataclass(frozen=True, slots=True)
class ArrayInputs:
    """Arrays already decoded (batch columns, stream records, binary v2 tensors), batch axis
    first. `datatypes`: the v2 datatype a client declared per input, held to the signature's."""

    arrays: Mapping[str, np.ndarray]
    datatypes: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class UploadInputs:
    """The inputs are an upload's body (`POST /api/v1/uploads`), read as the body of the
    route that names it: `plain` a simple-JSON prediction's, `v2` an Open Inference Protocol
    request's (JSON, or a JSON header then binary tensors). The core resolves it."""

    upload_id: str
    form: str = "plain"  # plain | v2


Inputs = RowInputs | TensorInputs | ArrayInputs | UploadInputs


def header_of(headers: Mapping[str, str], name: str) -> str | None:
    """A request's header `name` however a policy spells it: every door hands headers over
    as a mapping that ignores case (HTTP) or with names lower-cased (a WebSocket handshake's,
    gRPC metadata). Text as the client wrote it: ASGI's headers (those with `raw` bytes) are
    read as Latin-1, so a value sent as UTF-8 is read again as UTF-8 (as Latin-1 where it is not)."""
    found = headers.get(name)
    if found is None:
        found = headers.get(name.lower())
    if found is not None and getattr(headers, "raw", None) is not None:
        return as_sent(found)
    return found


MAX_ROUTING_KEY = 256  # as the simple-JSON body's `routing_key`


def routing_key_of(parameters: Mapping[str, Any]) -> str | None:
    """An Open Inference Protocol request's `parameters.routing_key` (REST, gRPC, a WebSocket
    message) as routing reads it (`routing_key_text`)."""
    return routing_key_text(parameters.get("routing_key"), "parameters.routing_key")


def routing_key_text(key: Any, field: str) -> str | None:
    """A routing key given as any JSON value (a v2 parameter, a stream record's field) as
    routing reads it: text, or a whole number as its digits (a user id sent as a number); ""
    none. Any other value, or text past 256 characters, is refused naming `field`, never read
    as its Python spelling (`{'a': 1}`, `True`)."""
    if key is None or type(key) is str:
        text = key
    elif type(key) is int:
        text = str(key)
    else:
        raise BadRequest(f"{field} is text (a user id, say), not {type(key).__name__}", field=field)
    if text is not None and len(text) > MAX_ROUTING_KEY:
        raise BadRequest(f"{field} is at most {MAX_ROUTING_KEY} characters, not {len(text)}", field=field)
    return text or None


def as_sent(value: str) -> str:
    """An ASGI header's value (its bytes read as Latin-1) as the client wrote it: UTF-8 where
    the bytes are that, else Latin-1 as read."""
    if not value.isascii():
        with contextlib.suppress(UnicodeError):
            return value.encode("latin-1").decode("utf-8")
    return value


@dataclass(slots=True)  # built on every request: a frozen dataclass's __init__ costs more
class PredictionRequest:
    deployment: str
    inputs: Inputs
    version: int | None = None  # pin a version of the deployment's primary model
    outputs: tuple[str, ...] | None = None  # only these outputs (v2 `outputs`)
    classify: Mapping[str, int] | None = None  # outputs asked as their top k classes: checked rankable before the model runs
    variant: str | None = None  # ask a split for a variant by name
    routing_key: str | None = None  # sticky routing; else the header the policy names
    headers: Mapping[str, str] = field(default_factory=dict)
    request_id: str = ""
    mirrors: bool = True  # False offline: a batch job does not run shadow mirrors
    log_fields: Mapping[str, Any] = field(default_factory=dict)
    json_bools: bool = True  # False: the JSON body holds no true/false (decoding need not look for them)
    parameters: Mapping[str, Any] | None = None  # the request's parameters (v2 `parameters`, simple JSON's): a switch may read them
    # A bulk call's records (a stream's): each one's id, and where each one's rows start and the
    # last ends (None: a row each). Capture keeps each record apart, under its id.
    record_ids: Sequence[Any] | None = None
    record_offsets: np.ndarray | None = None
    revision: int | None = None  # the deployment's policy as it stood at this revision (a batch job's, pinned)
    refs: Mapping[str, int] | None = None  # the deployments its policy references, at these revisions (pinned with `revision`)

    @property
    def as_batch(self) -> bool:
        """Whether the rows came as a simple-JSON `batch` (a list answers them, one row or many),
        in the request or in the upload it named."""
        return isinstance(self.inputs, RowInputs) and self.inputs.batch is not None

    def routing_value(self, name: str) -> str | None:
        """The key a split naming header `name` routes by: the request's own, else that header
        (held to the length the others are)."""
        if self.routing_key:
            return self.routing_key
        found = header_of(self.headers, name)
        if found and len(found) > MAX_ROUTING_KEY:
            raise BadRequest(f"header {name}, a routing key, is at most {MAX_ROUTING_KEY} characters, not {len(found)}", field=f"headers.{name}")
        return found or None
