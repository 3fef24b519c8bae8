"""A `function` node: a step of a sequence that runs the tenant's own code, with a declared
signature, as KServe's transformer container or SageMaker's extra pipeline container would.

    {"kind": "function",
     "function": "arn:aws:lambda:eu-west-1:123456789012:function:enrich",   # or "features:enrich" locally
     "inputs":  [{"name": "raw", "datatype": "FP32", "shape": [-1, 4]}],
     "outputs": [{"name": "features", "datatype": "FP32", "shape": [-1, 8]}],
     "timeout_s": 2, "deterministic": false}

`function` is a Lambda function's ARN (called by `lambda:InvokeFunction`, held to the
operator's allowlist for the tenant) or, in local mode only, `module:callable` from the folder
the operator names. Its `inputs` are taken from the previous step's outputs (by name, or
through the step's `map`) or, as a first step, from the caller; its answer is checked against
its `outputs` (names, datatypes, shapes and the number of rows). `deterministic` says the same
rows always get the same answer, so a graph running it may be cached.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextvars import ContextVar
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from sluice.domain.parts import Part
from sluice.domain.signature import OutputRole, Signature, TensorSpec
from sluice.domain.transforms import InputSpec

# Whether the work under way is a shadow mirror's (`ShadowRunner` sets it for its job): a
# function step's calls then wait on the tenant's mirror threads, so mirrors whose calls hang
# never hold up their primary's steps (a thread a call left running stays taken until it ends).
FOR_MIRROR: ContextVar[bool] = ContextVar("sluice_for_mirror", default=False)

MAX_TIMEOUT_S = 60.0
ARN_PATTERN = re.compile(
    r"arn:aws(?:-cn|-us-gov)?:lambda:(?P<region>[a-z]{2}(?:-[a-z]+)+-\d):\d{12}:function:[A-Za-z0-9_-]{1,64}(?::(?:\$LATEST|[A-Za-z0-9_-]{1,128}))?"
)
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]{0,99}"
MODULE_PATTERN = re.compile(rf"(?P<module>{_IDENTIFIER}(?:\.{_IDENTIFIER}){{0,7}}):(?P<callable>{_IDENTIFIER})")


def _target(value: str) -> str:
    if not (ARN_PATTERN.fullmatch(value) or MODULE_PATTERN.fullmatch(value)):
        raise ValueError("give a Lambda function ARN (arn:aws:lambda:REGION:ACCOUNT:function:NAME) or module:callable")
    return value


Target = Annotated[str, Field(max_length=256), AfterValidator(_target)]


class OutputSpec(InputSpec):
    role: OutputRole | None = Field(None, description="How plain JSON presents it, where this step answers last.")

    def spec(self) -> TensorSpec:
        return TensorSpec(self.name, self.datatype, tuple(self.shape), role=self.role)


class Function(Part):
    kind: Literal["function"] = "function"
    function: Target = Field(
        description="A Lambda function ARN, or `module:callable` from the operator's functions folder (local mode only).",
    )
    inputs: list[InputSpec] = Field(min_length=1, max_length=256, description="What the function takes.")
    outputs: list[OutputSpec] = Field(min_length=1, max_length=256, description="What it answers, checked on every call.")
    timeout_s: float = Field(5.0, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False, description="Its own limit, within the request's.")
    deterministic: bool = Field(False, description="The same rows always get the same answer (its graph may be cached).")

    def children(self) -> list[Any]:
        return []

    def primary_single(self, resolve_ref: Callable[[str], Any] | None = None) -> None:
        return None

    def input_specs(self) -> tuple[TensorSpec, ...]:
        return self.signature.inputs

    @property
    def on_lambda(self) -> bool:
        return self.function.startswith("arn:")

    @property
    def region(self) -> str | None:
        found = ARN_PATTERN.fullmatch(self.function)
        return found["region"] if found else None

    @cached_property
    def signature(self) -> Signature:
        return Signature(tuple(s.spec() for s in self.inputs), tuple(s.spec() for s in self.outputs))
