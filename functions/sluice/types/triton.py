"""Triton's own REST extensions (model configuration, statistics, repository), written by hand
from Triton's protocol documents (extension_model_configuration.md, extension_statistics.md,
extension_model_repository.md). Only the fields sluice fills are described; Triton's config
has many more, which a `triton` version's server may send and which pass through."""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictBool

from sluice.types.base import OpenWireModel, WireModel


class ConfigTensor(OpenWireModel):
    name: str
    data_type: str = Field(description="TYPE_FP32, TYPE_INT64, TYPE_STRING, ...")
    dims: list[int] = Field(description="The shape less the batch axis when max_batch_size > 0.")
    reshape: dict[str, Any] | None = None


class ModelConfigResponse(OpenWireModel):
    name: str
    platform: str = ""
    backend: str = ""
    max_batch_size: int = Field(0, description="0: the model takes no batch axis.")
    input: list[ConfigTensor] = Field(default_factory=list)
    output: list[ConfigTensor] = Field(default_factory=list)


class StatDuration(WireModel):
    count: int
    ns: int


class InferStatistics(WireModel):
    success: StatDuration
    fail: StatDuration
    queue: StatDuration
    compute_input: StatDuration
    compute_infer: StatDuration
    compute_output: StatDuration
    cache_hit: StatDuration
    cache_miss: StatDuration


class ModelStatistics(WireModel):
    name: str
    version: str
    last_inference: int
    inference_count: int = Field(description="Rows inferred.")
    execution_count: int = Field(description="Requests answered.")
    inference_stats: InferStatistics
    batch_stats: list[Any] = Field(default_factory=list)


class ModelStatsResponse(WireModel):
    model_stats: list[ModelStatistics]


class RepositoryIndexRequest(OpenWireModel):
    ready: StrictBool = False  # JSON true or false: "yes" or 1 is refused, not read as true


class RepositoryIndexEntry(WireModel):
    name: str
    version: str
    state: str
    reason: str = ""
