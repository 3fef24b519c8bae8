"""The table of precomputed answers in IAM: the functions that predict read it (the API and
WebSocket functions only through their tenant role, confined to the tagged tenant), batch
scoring writes a job's answers, Finalize points the table at them, MarkFailed and
ExecutionEnded withdraw a job that then did not succeed; nobody scans, queries or
deletes; each is told where it is. And an alarm on the share of rows answered live."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.infra.synth import function_by_handler, policy_statements_of_role, properties, role_of
from tests.infra.test_registry_access import TENANT_ONLY, on_precomputed

if TYPE_CHECKING:
    from tests.infra.synth import Synthesized

READ = ["dynamodb:BatchGetItem", "dynamodb:GetItem"]
WRITE = ["dynamodb:BatchWriteItem", "dynamodb:PutItem"]
# The calls each function makes on the table, by stack and handler, on every tenant's items.
OWN = {
    ("api", "sluice.handlers.shadow.handler"): READ,
    ("batch", "sluice.handlers.batch.score"): sorted(READ + WRITE),
    ("batch", "sluice.handlers.batch.finalize"): ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem"],
    ("batch", "sluice.handlers.batch.mark_failed"): ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem"],
    ("batch", "sluice.handlers.batch.execution_ended"): ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem"],
}
TENANT_ROLE = {"sluice.handlers.api.handler", "sluice.handlers.websocket.handler"}


def _on_table(template: Any, role: str) -> list[dict[str, Any]]:
    return [s for s in policy_statements_of_role(template, role) if on_precomputed(s)]


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return sorted(action if isinstance(action, list) else [action])


def _leading(statement: dict[str, Any]) -> list[str]:
    return statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]


def test_each_function_gets_only_the_calls_it_makes_on_tenant_items(full_app: Synthesized) -> None:
    for (stack, handler), actions in OWN.items():
        template = full_app.template(stack)
        _, function = function_by_handler(template, handler)
        (statement,) = _on_table(template, role_of(function))
        assert (_actions(statement), _leading(statement)) == (actions, ["T#*"]), handler
        assert function["Environment"]["Variables"]["SLUICE_PRECOMPUTED_TABLE"] == "dynamodb://sluice-precomputed"
    _, plan = function_by_handler(full_app.template("batch"), "sluice.handlers.batch.plan")
    assert not _on_table(full_app.template("batch"), role_of(plan))  # told where it is, nothing granted
    assert "SLUICE_PRECOMPUTED_TABLE" in plan["Environment"]["Variables"]
    streams = full_app.template("streams")
    for function in properties(streams, "AWS::Lambda::Function"):
        if function.get("Handler") == "sluice.handlers.stream.handler":
            (statement,) = _on_table(streams, role_of(function))
            assert _actions(statement) == READ and len({p.split("#")[1] for p in _leading(statement)}) == 1  # its tenant's alone


def test_the_api_reads_answers_only_as_the_requests_tenant(full_app: Synthesized) -> None:
    template = full_app.template("api")
    for handler in TENANT_ROLE:
        _, function = function_by_handler(template, handler)
        assert not _on_table(template, role_of(function))  # its own credentials reach no answer
        tenant_role = function["Environment"]["Variables"]["SLUICE_TENANT_ROLE_ARN"]["Fn::GetAtt"][0]
        (statement,) = _on_table(template, tenant_role)
        assert (_actions(statement), _leading(statement)) == (READ, TENANT_ONLY)
        assert function["Environment"]["Variables"]["SLUICE_PRECOMPUTED_TABLE"] == "dynamodb://sluice-precomputed"


def test_an_alarm_watches_the_share_of_rows_answered_live(default_app: Synthesized) -> None:
    (alarm,) = [a for a in properties(default_app.template("observability"), "AWS::CloudWatch::Alarm") if "precomputed" in a["AlarmDescription"]]
    assert alarm["Threshold"] == default_app.config.alarms.precomputed_fallback_percent
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["Expression"] == "IF(stored + live > 0, 100 * live / (stored + live), 0)"
    names = {m["Id"]: m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert names == {"stored": "PrecomputedRows", "live": "LiveFallbackRows"}
