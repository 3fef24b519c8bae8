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
    if isinstance(value, float):
        raise ValueError("a parameter's number is finite, not NaN or infinity")
    raise ValueError("a parameter is a string, a number or a boolean")


ParameterValue = Annotated[Any, AfterValidator(_scalar), WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]})]
MAX_PARAMETERS, MAX_PARAMETER_NAME = 32, 64
# A request's parameters (simple JSON's, a v2 request's; gRPC's by `check_parameters`): strings,
# numbers and booleans, as Triton takes them, at most 32, each named in 64 characters.
RequestParameters = Annotated[dict[Annotated[str, Field(max_length=MAX_PARAMETER_NAME)], ParameterValue], Field(max_length=MAX_PARAMETERS)]


def check_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    """`parameters` held to `RequestParameters`' rule where no wire model reads them (gRPC's
    typed parameters: a count, a name's length, a parameter sent with no value), the first
    problem refused naming it as REST's schema refuses it (`invalid_request`, `parameters`,
    `parameters.<name>`: one code on every door)."""
    from sluice.domain.errors import InvalidRequest

    if len(parameters) > MAX_PARAMETERS:
        raise InvalidRequest(f"a request has at most {MAX_PARAMETERS} parameters, not {len(parameters)}", field="parameters")
    for name, value in parameters.items():
        if len(name) > MAX_PARAMETER_NAME:
            raise InvalidRequest(f"a parameter's name is at most {MAX_PARAMETER_NAME} characters: {name[:40]!r}…", field="parameters")
        try:
            _scalar(value)
        except ValueError as exc:
            raise InvalidRequest(str(exc), field=f"parameters.{name}") from None
    return parameters
