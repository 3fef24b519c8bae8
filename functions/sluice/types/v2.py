"""Open Inference Protocol v2 (REST) schema, written by hand from the KServe/Triton spec:
https://github.com/kserve/open-inference-protocol (rest_predict_v2.yaml)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictInt

from sluice.domain.requests import MAX_REQUEST_ID
from sluice.types.base import OpenWireModel, RequestParameters, WireModel

Parameters = dict[str, Any]


class MetadataServerResponse(WireModel):
    name: str
    version: str
    extensions: list[str] = Field(default_factory=list)


class MetadataTensor(WireModel):
    name: str
    datatype: str
    shape: list[int]
    parameters: Parameters | None = None


class MetadataModelResponse(WireModel):
    name: str
    versions: list[str] | None = None
    platform: str
    inputs: list[MetadataTensor] = Field(default_factory=list)
    outputs: list[MetadataTensor] = Field(default_factory=list)
    parameters: Parameters | None = None


class RequestInput(OpenWireModel):
    name: str
    shape: list[StrictInt]  # JSON integers: `true` is not 1, "4" not 4
    datatype: str
    parameters: Parameters | None = None
    # Any: values are checked and converted in one NumPy call, not one pydantic call each.
    # Absent when the tensor's bytes follow the JSON (`parameters.binary_data_size`).
    data: Any = None


class RequestOutput(OpenWireModel):
    name: str
    parameters: Parameters | None = None


class InferenceRequest(OpenWireModel):
    id: str | None = Field(None, max_length=MAX_REQUEST_ID)  # as simple JSON's request_id
    parameters: RequestParameters | None = None  # as Triton takes them, and simple JSON's
    inputs: list[RequestInput]
    outputs: list[RequestOutput] | None = None


class ResponseOutput(WireModel):
    name: str
    shape: list[int]
    datatype: str
    parameters: Parameters | None = None
    data: list[Any]


class InferenceResponse(WireModel):
    model_name: str
    model_version: str | None = None
    id: str | None = None
    parameters: Parameters | None = None
    outputs: list[ResponseOutput]


class ModelReadyResponse(WireModel):
    name: str
    ready: bool
