"""Sluice's own JSON API: simple predictions (management lives in `sluice.types.management`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictInt

from sluice.domain.requests import MAX_REQUEST_ID
from sluice.domain.values import VersionNumber
from sluice.types.base import RequestParameters, WireModel


class PredictionOptions(WireModel):
    return_probabilities: bool = Field(True, description="Include per-class probabilities for classifiers.")


class PredictionRequest(WireModel):
    deployment: str = Field(description="The deployment to call.")
    inputs: list[Any] | dict[str, Any] | None = Field(
        None, description="Rows for a single-input model (a 2-D list), or named tensors {input: rows}."
    )
    features: dict[str, Any] | None = Field(
        None, description="One row as {feature: value}, ordered by the version's signature."
    )
    batch: list[Any] | None = Field(None, description="Several rows: feature objects or lists.")
    upload_id: str | None = Field(
        None, max_length=64, description="Predict from an upload (`POST /api/v1/uploads`) holding inputs, features or batch, instead of them."
    )
    version: VersionNumber | None = Field(None, description="Pin a version of the deployment's model.")
    request_id: str | None = Field(None, max_length=MAX_REQUEST_ID)
    routing_key: str | None = Field(
        None, max_length=256, description="Sticky routing for splits (e.g. a user id); also read from the header the policy names."
    )
    variant: str | None = Field(None, max_length=64, description="Ask for a split's variant by name.")
    parameters: RequestParameters | None = Field(
        None, description="Request parameters (strings, numbers, booleans) a switch's conditions may read (`parameters.<name>`)."
    )
    options: PredictionOptions = Field(default_factory=PredictionOptions)

    model_config = {
        "json_schema_extra": {
            "examples": [
                {"deployment": "iris", "features": {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}},
                {"deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]},
            ]
        },
        "extra": "forbid",
    }


class RowPrediction(WireModel):
    prediction: Any = None
    probabilities: dict[str, float] | None = None
    confidence: float | None = None


class MemberReport(WireModel):
    name: str
    ok: bool
    latency_ms: float
    model: str | None = None
    version: int | None = None
    error: str | None = None


class PredictionResponse(WireModel):
    request_id: str
    deployment: str
    model: str
    version: int
    latency_ms: float
    variant: str | None = Field(None, description="The split variant(s) that answered, outermost first.")
    members: list[MemberReport] | None = Field(None, description="An ensemble's members: who answered, and how fast.")
    case: str | list[str] | None = Field(None, description="The switch case taken; one per row where rows took different cases.")
    models: list[str] | None = Field(
        None, description="Where rows took different switch cases: the version that answered each row ('model:version'); model and version are the first row's."
    )
    steps: list[dict[str, Any]] | None = Field(None, description="A sequence's steps, in order: name, model, version (or kind transform) and latency.")
    cached: bool | None = Field(None, description="True when the prediction cache answered (nothing was computed).")
    prediction: Any = None
    probabilities: dict[str, float] | None = None
    confidence: float | None = None
    predictions: list[RowPrediction] | None = Field(
        None, description="Present instead of prediction/probabilities/confidence when several rows were sent."
    )


class UploadRequest(WireModel):
    """`POST /api/v1/uploads`: a body to send outside the API's request limit."""

    deployment: str = Field(description="The deployment the body is for (of the caller's tenant).")
    content_type: str = Field(
        "application/json",
        description="application/json (a simple-JSON prediction's inputs, or a v2 inference request), "
        "application/octet-stream (the v2 binary extension: a JSON header, then raw tensors; give header_size) "
        "or application/vnd.sagemaker-triton.binary+json;json-header-size=N.",
    )
    size: StrictInt = Field(ge=1, description="The body's length in bytes: the most the upload takes.")
    header_size: StrictInt | None = Field(None, ge=1, description="A binary body's JSON header length (Inference-Header-Content-Length).")

    model_config = {
        "json_schema_extra": {"examples": [{"deployment": "segmenter", "content_type": "application/json", "size": 52428800}]},
        "extra": "forbid",
    }


class UploadOut(WireModel):
    upload_id: str
    deployment: str
    url: str = Field(description="Where to send the body: as multipart/form-data, `fields` first, the body last as `file`.")
    method: str = Field(description="POST.")
    fields: dict[str, str] = Field(description="The form's fields, sent as they are (an S3 presigned POST's policy and signature on AWS).")
    content_type: str = Field(description="The body's type as stored (binary bodies: SageMaker Triton's binary+json).")
    max_bytes: int = Field(description="The most bytes the body may have.")
    expires_at: float = Field(description="Epoch seconds until which the form may be posted.")
    usable_until: float = Field(description="Epoch seconds until which predictions may name the upload.")
