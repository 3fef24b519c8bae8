"""The shared base of every wire model: serialization defaults set once."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema


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


def _scalar(value: Any) -> Any:
    """A request parameter's value: a string, a number or a boolean (one error naming the
    parameter, not one per type a value might have been)."""
    if isinstance(value, str | bool | int) or (isinstance(value, float) and math.isfinite(value)):
        return value
    raise ValueError("a parameter is a string, a number or a boolean")


ParameterValue = Annotated[Any, AfterValidator(_scalar), WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]})]
# A request's parameters (simple JSON's, a v2 request's): strings, numbers and booleans, as
# Triton takes them, at most 32 (`RequestParameters`' field bounds them), named in 64 characters.
RequestParameters = dict[Annotated[str, Field(max_length=64)], ParameterValue]
