"""The shared base of every wire model: serialization defaults set once."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, protected_namespaces=())


class OpenWireModel(WireModel):
    """For protocol objects whose spec allows extension fields."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, protected_namespaces=())


class ErrorOut(WireModel):
    """Every error the API answers with, whatever its status."""

    error: str = Field(description="What went wrong, for a person.")
    code: str = Field(description="A stable, machine-readable name: not_found, invalid_request, …")
    field: str | None = Field(None, description="The field at fault, dotted: policy.variants.0.weight.")
    details: dict[str, Any] | None = Field(None, description="More, by error: e.g. every problem of an invalid body.")
