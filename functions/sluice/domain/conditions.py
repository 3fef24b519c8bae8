"""A switch's conditions: data, never code. A condition compares one field of a request with a
value by a typed operator, or joins conditions with `all` / `any`:

    {"field": "headers.x-region", "op": "==", "value": "eu"}
    {"field": "inputs.input", "column": "petal_length", "op": "<", "value": 2.5}
    {"any": [{"field": "routing_key", "op": "in", "value": ["a", "b"]}, {"field": "headers.x-beta", "op": "exists"}]}
    {"field": "parameters.tier", "op": "==", "value": "gold"}

Fields: `routing_key` (the request's routing key), `headers.<name>` (a request header),
`parameters.<name>` (a request parameter: the v2 request's `parameters`, simple JSON's), and
`inputs.<name>` (an input tensor; `column` picks a column of its last axis, by index or by
the signature's feature name). Request-level fields hold for every row of a request; an input's
value is read row by row, so each row takes the case it would take alone (see `inference.graphs`).
Evaluated by `sluice.routing.conditions`; checked against the signatures when a policy is saved.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    field_validator,
    model_validator,
)

from sluice.domain.parts import HEADER_NAME, Part, ReadsRequest

TAGS = ("comparison", "all-of", "any-of")  # the union's tags: not fields, left out of error locations
MAX_CONDITION_DEPTH = 4
MAX_TERMS = 16
MAX_IN_VALUES = 256
ORDERING = ("<", "<=", ">", ">=")
Op = Literal["==", "!=", "in", "<", "<=", ">", ">=", "exists"]
Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]  # noqa: UP007  (bool first: true is not 1)
FIELD_PATTERN = rf"^(routing_key|headers\.{HEADER_NAME}|parameters\.[A-Za-z0-9_.-]{{1,64}}|inputs\.[^\s]{{1,128}})$"
# Parameters sluice reads itself, never a switch's: the routing key has its own field.
RESERVED_PARAMETERS = {
    "routing_key": "read the routing key as the field 'routing_key'",
    "variant": "it asks a split for a variant",
    "upload_id": "it names an upload that holds the inputs",
    "binary_data_output": "it asks for outputs in binary",
}


class Compare(ReadsRequest, Part):
    path_field: ClassVar[str] = "field"

    field: str = Field(description="routing_key, headers.<name>, parameters.<name> or inputs.<name>.")
    column: Annotated[StrictInt, Field(ge=0)] | Annotated[str, Field(min_length=1, max_length=128)] | None = Field(
        None, description="inputs only: a column of the input's last axis, by index or feature name."
    )
    op: Op
    value: Scalar | list[Scalar] | None = None

    @field_validator("field")
    @classmethod
    def _known(cls, value: str) -> str:
        if not re.fullmatch(FIELD_PATTERN, value):
            raise ValueError("a condition reads routing_key, headers.<name>, parameters.<name> (letters, digits, '_', '.', '-') or inputs.<name>")
        name = value.removeprefix("parameters.")
        if name != value and name in RESERVED_PARAMETERS:
            raise ValueError(f"sluice reads the parameter '{name}' itself ({RESERVED_PARAMETERS[name]}): a condition cannot")
        return value

    @model_validator(mode="after")
    def _typed(self) -> Compare:
        value, op = self.value, self.op
        if op == "exists":
            if value is not None:
                raise ValueError("'exists' takes no value")
        elif op == "in":
            if not isinstance(value, list) or not 1 <= len(value) <= MAX_IN_VALUES:
                raise ValueError(f"'in' takes a list of 1 to {MAX_IN_VALUES} values")
            strings = [isinstance(v, str) for v in value]
            if any(strings) and not all(strings):
                raise ValueError("the values of 'in' are all strings or all numbers")
        elif op in ORDERING:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"'{op}' compares with a number")
        elif value is None or isinstance(value, list):
            raise ValueError(f"'{op}' compares with one value (a string, a number or a boolean)")
        if self.column is not None and not self.field.startswith("inputs."):
            raise ValueError("'column' is only for inputs.<name> fields")
        return self


class AllOf(Part):
    all: tuple[Condition, ...] = Field(min_length=1, max_length=MAX_TERMS)


class AnyOf(Part):
    any: tuple[Condition, ...] = Field(min_length=1, max_length=MAX_TERMS)


def _form(value: Any) -> str:
    if isinstance(value, dict):
        return "all-of" if "all" in value else "any-of" if "any" in value else "comparison"
    return "all-of" if isinstance(value, AllOf) else "any-of" if isinstance(value, AnyOf) else "comparison"


Condition = Annotated[
    Union[Annotated[Compare, Tag("comparison")], Annotated[AllOf, Tag("all-of")], Annotated[AnyOf, Tag("any-of")]],  # noqa: UP007
    Discriminator(_form),
]

for _model in (AllOf, AnyOf):
    _model.model_rebuild()


def comparisons(condition: Condition, depth: int = 1) -> list[tuple[Compare, int]]:
    """Every comparison in a condition, with how deep it sits."""
    if isinstance(condition, Compare):
        return [(condition, depth)]
    terms = condition.all if isinstance(condition, AllOf) else condition.any
    return [found for term in terms for found in comparisons(term, depth + 1)]


def reads_inputs(condition: Condition) -> bool:
    """True when the condition reads input values (it is then decided row by row)."""
    return any(c.source == "inputs" for c, _ in comparisons(condition))

