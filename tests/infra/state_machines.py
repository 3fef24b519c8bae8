"""Get a state machine's definition out of a synthesized template, ready to run.

CDK writes `DefinitionString` as an `Fn::Join` of literal JSON and references (`Ref`,
`Fn::GetAtt`). `state_machine_definition` substitutes those — pseudo parameters, Lambda
function ARNs (by the function's name, so functions created under the same names in moto
line up), or any ARN the caller maps by logical id — and returns the parsed definition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

PSEUDO_PARAMETERS = {
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::URLSuffix": "amazonaws.com",
}


def state_machine_ids(template: Mapping[str, Any]) -> list[str]:
    return [
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::StepFunctions::StateMachine"
    ]


def function_ids_by_handler(template: Mapping[str, Any]) -> dict[str, str]:
    """`sluice.handlers.batch.plan` -> the logical id of the function running it."""
    return {
        resource["Properties"]["Handler"]: logical_id
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
        and "Handler" in resource.get("Properties", {})
    }


def _default_arn(template: Mapping[str, Any], logical_id: str, pseudo: Mapping[str, str]) -> str:
    resource = template["Resources"].get(logical_id)
    if resource is None:
        raise KeyError(f"the template has no resource {logical_id!r}")
    properties = resource.get("Properties", {})
    if resource["Type"] == "AWS::Lambda::Function" and isinstance(
        properties.get("FunctionName"), str
    ):
        return (
            f"arn:{pseudo['AWS::Partition']}:lambda:{pseudo['AWS::Region']}:"
            f"{pseudo['AWS::AccountId']}:function:{properties['FunctionName']}"
        )
    raise KeyError(f"no ARN given for {logical_id} ({resource['Type']}); pass it in `arns`")


def resolve(
    value: Any,
    template: Mapping[str, Any],
    *,
    arns: Mapping[str, str] | None = None,
    pseudo: Mapping[str, str] = PSEUDO_PARAMETERS,
) -> Any:
    """Resolve the intrinsics CDK uses in a definition: Fn::Join, Ref, Fn::GetAtt(.Arn)."""
    arns = arns or {}
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Fn::Join":
            delimiter, parts = argument
            return delimiter.join(
                str(resolve(p, template, arns=arns, pseudo=pseudo)) for p in parts
            )
        if function == "Ref":
            if argument in pseudo:
                return pseudo[argument]
            return arns.get(argument) or _default_arn(template, argument, pseudo)
        if function == "Fn::GetAtt":
            logical_id, attribute = argument
            if attribute != "Arn":
                raise ValueError(f"cannot resolve {logical_id}.{attribute}; only .Arn")
            return arns.get(logical_id) or _default_arn(template, logical_id, pseudo)
    raise ValueError(f"unsupported value in a definition: {json.dumps(value)[:200]}")


def state_machine_definition(
    template: Mapping[str, Any],
    *,
    logical_id: str | None = None,
    arns: Mapping[str, str] | None = None,
    pseudo: Mapping[str, str] = PSEUDO_PARAMETERS,
) -> dict[str, Any]:
    """The definition of the template's (only, or named) state machine, as a dict."""
    if logical_id is None:
        ids = state_machine_ids(template)
        if len(ids) != 1:
            raise ValueError(f"expected one state machine, found {ids}; name one by logical_id")
        logical_id = ids[0]
    definition = template["Resources"][logical_id]["Properties"]["DefinitionString"]
    return json.loads(resolve(definition, template, arns=arns, pseudo=pseudo))
