"""What a Triton server answers about a model, checked before sluice trusts it, and what its
refusals of a request say (`rejected_input`).

A remote server may answer anything: fields missing, wrong types, shapes of absurd rank or
size, tensors its config does not declare. These schemas turn every such answer into a 502
that says what was wrong, never a KeyError or a 500.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sluice.domain.errors import BackendError, InvalidInput

MAX_RANK = 8
MAX_DIM = 2**31 - 1

Datatype = Literal["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16"]
Dim = Annotated[int, Field(ge=-1, le=MAX_DIM, strict=True)]
Dims = Annotated[list[Dim], Field(max_length=MAX_RANK)]
TensorName = Annotated[str, Field(min_length=1, max_length=256)]
_INPUT_NAME = re.compile(r"input '([^']{1,256})'")  # a name as long as a tensor's may be: a server's longer text is not repeated


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class MetadataTensor(_Answer):
    name: TensorName
    datatype: Datatype
    shape: Dims = Field(default_factory=list)


class ModelMetadata(_Answer):
    """`GET /v2/models/{name}[/versions/{v}]`."""

    name: str = ""
    platform: str = ""
    inputs: list[MetadataTensor] = Field(default_factory=list, max_length=256)
    outputs: list[MetadataTensor] = Field(default_factory=list, max_length=256)


class Reshape(_Answer):
    shape: Dims = Field(default_factory=list)


class ConfigTensor(_Answer):
    name: TensorName
    data_type: str = ""
    dims: Dims = Field(default_factory=list)
    reshape: Reshape | None = None


class ModelConfig(_Answer):
    """`GET /v2/models/{name}/config` (the model's config.pbtxt as JSON)."""

    max_batch_size: Annotated[int, Field(ge=0, le=MAX_DIM)] = 0
    input: list[ConfigTensor] = Field(default_factory=list, max_length=256)
    output: list[ConfigTensor] = Field(default_factory=list, max_length=256)


def checked(schema: type[_Answer], answer: Any, *, what: str, model: str) -> Any:
    try:
        return schema.model_validate(answer)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "answer"
        raise BackendError(
            f"the Triton server's {what} for model '{model}' is malformed: {where}: {first['msg']}", field="triton"
        ) from None


def rejected_input(message: str) -> InvalidInput | None:
    """A Triton 400 (over HTTP or gRPC, or through SageMaker's port, which answers 400 for
    every failed request) as the caller's fault, where its message says which: an input it
    names, or more rows than the model batches; None where it says neither."""
    found = _INPUT_NAME.search(message)
    if found:
        return InvalidInput(
            f"the model server rejected input '{found.group(1)}' (its name, shape or datatype does not match the model)",
            field=f"inputs.{found.group(1)}",
        )
    if "batch-size" in message or "batch size" in message:
        return InvalidInput("more rows than the model takes in one request (its max_batch_size)", field="inputs")
    return None
