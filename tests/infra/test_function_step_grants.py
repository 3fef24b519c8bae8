"""Grants of graphs' function steps: each function that predicts may invoke exactly the ARNs
`graphs.functions` lists, one IAM statement each, and is told the allowlist per tenant; a
config without the key grants none and sets no variable."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tests.infra.synth import FUNCTION_STEP_ARNS, policy_statements_of_role, role_of

if TYPE_CHECKING:
    from tests.infra.synth import Synthesized

# The functions that predict, by stack: the API, the WebSocket and shadow functions; batch
# scoring; each stream's function.
PREDICTING = {
    "api": ("sluice.handlers.api.handler", "sluice.handlers.websocket.handler", "sluice.handlers.shadow.handler"),
    "batch": ("sluice.handlers.batch.score",),
    "streams": ("sluice.handlers.stream.handler",),
}


def _functions(app: Synthesized, stack: str, handlers: tuple[str, ...]) -> list[dict]:
    found = app.template(stack).find_resources("AWS::Lambda::Function")
    return [r["Properties"] for r in found.values() if r["Properties"].get("Handler") in handlers]


def serves_acme(function: dict) -> bool:
    """Whether a predicting function may act for acme, the tenant the full config gives function
    steps and lookup stores: every one but a stream bound to another tenant (its description,
    "Scores <source> records for <tenant>/<deployment>")."""
    if function["Handler"] != "sluice.handlers.stream.handler":
        return True
    return function["Description"].rsplit(" for ", 1)[1].split("/", 1)[0] == "acme"


def test_each_predicting_function_may_invoke_exactly_the_configured_arns_one_statement_each(full_app: Synthesized) -> None:
    seen, others = set(), 0
    for stack, handlers in PREDICTING.items():
        template = full_app.template(stack)
        for function in _functions(full_app, stack, handlers):
            seen.add(function["Handler"])
            statements = policy_statements_of_role(template, role_of(function))
            steps = [s for s in statements if str(s.get("Sid", "")).startswith("FunctionStep")]
            allowlist = function["Environment"]["Variables"].get("SLUICE_FUNCTION_ARNS")
            if not serves_acme(function):  # another tenant's stream: none of acme's functions
                others += 1
                assert steps == [] and allowlist is None
                continue
            assert sorted((s["Action"], s["Resource"]) for s in steps) == sorted(("lambda:InvokeFunction", arn) for arn in FUNCTION_STEP_ARNS)
            assert json.loads(allowlist) == {"acme": list(FUNCTION_STEP_ARNS)}
    assert seen == {h for handlers in PREDICTING.values() for h in handlers}  # every kind was there to check
    assert others  # and a stream of another tenant's


def test_without_the_key_nothing_is_granted_and_no_variable_set(default_app: Synthesized) -> None:
    for stack in ("api", "batch"):
        text = json.dumps(default_app.json(stack))
        assert "FunctionStep" not in text and "SLUICE_FUNCTION_ARNS" not in text
