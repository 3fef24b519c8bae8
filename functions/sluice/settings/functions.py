"""The group of `function` steps: a tenant's own code as a step of a sequence, a Lambda
function (held to an allowlist per tenant) or, locally, a Python callable from a folder."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from sluice.settings.process import Group, MiB


class FunctionSettings(Group):
    """Read by the function steps (`sluice.runtimes.functions`): the deployment service, which
    refuses a policy naming a function its tenant may not call, and the prediction service,
    which checks again at call time"""

    title: ClassVar[str] = "Function steps"

    function_arns: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            "The Lambda functions each tenant's `function` steps may call: `{tenant: [ARN, ...]}`, JSON in "
            "the environment. An ARN is compared whole (a qualified ARN, `...:function:name:alias`, is "
            "another function). Set by the CDK app from `graphs.functions` in `infra/sluice.yaml`, with one "
            "grant of `lambda:InvokeFunction` per ARN; empty: no tenant may call one."
        ),
    )
    functions_dir: str = Field(
        default="",
        description=(
            "A folder of Python modules whose callables `function` steps may name as `module:function` "
            "(local mode only: on AWS sluice never runs a tenant's code in its own process). `{tenant}` "
            "stands for the policy's tenant (e.g. `./functions/{tenant}`), so each tenant has its own; "
            "empty: module steps are off."
        ),
    )
    function_arrow_min_bytes: int = Field(
        default=64 * 1024,
        ge=0,
        description=(
            "A Lambda step's rows travel as Arrow IPC (base64 in the JSON event) from this many bytes of "
            "raw tensor data up, as JSON tensors below it."
        ),
    )
    function_threads: int = Field(
        default=8,
        gt=0,
        description=(
            "Threads each tenant's function steps run in (a module's callable, or the wait on a Lambda "
            "function), apart from those that check keys and run models: a tenant whose calls never "
            "return waits on its own threads only (its later calls time out), never another's; a tenant's "
            "shadow mirrors have as many threads of their own, so a mirror whose calls hang never holds up "
            "its primary's."
        ),
    )
    function_max_payload_bytes: int = Field(
        default=6 * MiB,
        gt=0,
        description="Largest event sent to a Lambda step (Lambda's synchronous limit): a larger one fails the step (413).",
    )

    @model_validator(mode="after")
    def _parse_arns(self) -> FunctionSettings:
        if not self.function_arns:  # the pattern's module (the function step's models) unimported
            return self
        from sluice.domain.functions import ARN_PATTERN

        self._check_allowlist("function_arns", lambda arn: ARN_PATTERN.fullmatch(arn) is not None, "a Lambda function ARN")
        return self
