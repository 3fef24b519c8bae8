"""Registry access in IAM: which functions may touch which partitions of the table, with
which calls; and the tenant role whose credentials reach one tenant's items only."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.synth import (
    REPO,
    Synthesized,
    function_by_handler,
    policy_statements_of_role,
    role_of,
)

TENANT_ONLY = ["T#${aws:PrincipalTag/tenant}", "T#${aws:PrincipalTag/tenant}#*"]
NEVER = {
    "dynamodb:Scan",
    "dynamodb:PartiQLSelect",
    "dynamodb:DeleteTable",
    "dynamodb:UpdateTable",
    "dynamodb:ExportTableToPointInTime",
    "dynamodb:RestoreTableToPointInTime",
    "dynamodb:*",
}
BATCH = [
    "sluice.handlers.batch.plan",
    "sluice.handlers.batch.score",
    "sluice.handlers.batch.finalize",
    "sluice.handlers.batch.mark_failed",
    "sluice.handlers.batch.on_upload",
]


def _actions(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return set(action if isinstance(action, list) else [action])


def lookup_source(statement: dict[str, Any]) -> bool:
    """A lookup step's read of a tenant's own table (`graphs.lookups`), no registry item."""
    return str(statement.get("Sid", "")).startswith("LookupSource")


def on_precomputed(statement: dict[str, Any]) -> bool:
    """A statement on the table of precomputed answers (tests/infra/test_precomputed_table.py)."""
    return "table/sluice-precomputed" in json.dumps(statement.get("Resource"))


def _table_statements(app: Synthesized, component: str, handler: str) -> list[dict[str, Any]]:
    """The role's statements on the registry table."""
    template = app.template(component)
    _, props = function_by_handler(template, handler)
    return [
        s
        for s in policy_statements_of_role(template, role_of(props))
        if any(a.startswith("dynamodb:") for a in _actions(s)) and not on_precomputed(s)
    ]


def _partitions(statement: dict[str, Any]) -> list[str]:
    return statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]


def test_the_authorizer_may_only_get_api_key_items(default_app: Synthesized) -> None:
    (statement,) = _table_statements(default_app, "api", "sluice.handlers.authorizer.handler")
    assert statement["Action"] == "dynamodb:GetItem"
    assert statement["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["K#*"]}}


def test_batch_and_shadow_reach_tenant_items_only_and_never_delete(
    default_app: Synthesized,
) -> None:
    for component, handler in [("api", "sluice.handlers.shadow.handler")] + [
        ("batch", h) for h in BATCH
    ]:
        (statement,) = _table_statements(default_app, component, handler)
        assert _partitions(statement) == ["T#*"], handler
        assert not _actions(statement) & {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}
        assert {"dynamodb:GetItem", "dynamodb:UpdateItem"} <= _actions(statement), handler


def test_the_api_reaches_key_items_itself_and_tenant_items_only_through_the_tenant_role(
    default_app: Synthesized,
) -> None:
    from aws_cdk.assertions import Match

    (statement,) = _table_statements(default_app, "api", "sluice.handlers.api.handler")
    assert _partitions(statement) == ["K#*"]  # no T#*: another tenant's items are out of reach
    template = default_app.template("api")
    _, api = function_by_handler(template, "sluice.handlers.api.handler")
    tenant_role = api["Environment"]["Variables"]["SLUICE_TENANT_ROLE_ARN"]["Fn::GetAtt"][0]
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": role_of(api)}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": ["sts:AssumeRole", "sts:TagSession"],
                                "Resource": {"Fn::GetAtt": [tenant_role, "Arn"]},
                                "Condition": Match.object_like(
                                    {
                                        "ForAllValues:StringEquals": {"aws:TagKeys": ["tenant"]},
                                        "StringLike": {"aws:RequestTag/tenant": "?*"},
                                    }
                                ),
                            }
                        )
                    ]
                )
            },
        },
    )


def test_the_tenant_role_reaches_the_tagged_tenants_items_only(default_app: Synthesized) -> None:
    template = default_app.template("api")
    _, api = function_by_handler(template, "sluice.handlers.api.handler")
    tenant_role = api["Environment"]["Variables"]["SLUICE_TENANT_ROLE_ARN"]["Fn::GetAtt"][0]
    statements = [s for s in policy_statements_of_role(template, tenant_role) if not on_precomputed(s)]
    assert len(statements) == 1
    assert _partitions(statements[0]) == TENANT_ONLY
    assert "dynamodb:Query" in _actions(statements[0])
    # Only the API's role may assume it, and only with a single non-wildcard tenant tag.
    trust = template.to_json()["Resources"][tenant_role]["Properties"]["AssumeRolePolicyDocument"]
    (allow,) = trust["Statement"]
    assert sorted(allow["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert allow["Principal"] == {"AWS": {"Fn::GetAtt": [role_of(api), "Arn"]}}
    assert allow["Condition"]["StringNotLike"] == {"aws:RequestTag/tenant": ["*${*}*", "*${?}*"]}
    assert allow["Condition"]["ForAllValues:StringEquals"] == {"aws:TagKeys": ["tenant"]}


ROLLOUT_SCAN = {
    "StringEquals": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
    "ForAllValues:StringEquals": {"dynamodb:Attributes": ["pk", "sk", "rollout"]},
}
FOLLOW_SCAN = {
    "StringEquals": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
    "ForAllValues:StringEquals": {"dynamodb:Attributes": ["pk", "sk", "watch"]},
}

MONITOR_SCAN = {  # which deployments have a baseline (tests/infra/test_monitor_schedule.py)
    "StringEquals": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
    "ForAllValues:StringEquals": {"dynamodb:Attributes": ["pk", "sk"]},
}


def _is_rollout_scan(statement: dict[str, Any]) -> bool:
    return _actions(statement) == {"dynamodb:Scan"} and statement.get("Condition") == ROLLOUT_SCAN


def _is_follow_scan(statement: dict[str, Any]) -> bool:
    return _actions(statement) == {"dynamodb:Scan"} and statement.get("Condition") == FOLLOW_SCAN


def _is_monitor_scan(statement: dict[str, Any]) -> bool:
    return _actions(statement) == {"dynamodb:Scan"} and statement.get("Condition") == MONITOR_SCAN


def test_no_role_may_scan_or_manage_the_table(full_app: Synthesized) -> None:
    """The three exceptions: the rollout controller's scan, confined to each item's keys and
    rollout, the registry event function's, to each item's keys and what it watches (below), and
    the monitoring function's, to each item's keys."""
    for component in ("api", "batch", "endpoints", "observability"):
        template = full_app.template(component)
        for policy in template.find_resources("AWS::IAM::Policy").values():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                if _is_rollout_scan(statement) or _is_follow_scan(statement) or _is_monitor_scan(statement) or lookup_source(statement):
                    continue
                actions = _actions(statement)
                assert not actions & NEVER, f"{component}: {actions & NEVER}"
                if any(a.startswith("dynamodb:") for a in actions):
                    assert _partitions(statement), f"{component}: {statement}"


def test_only_the_rollout_controller_scans_and_only_keys_and_rollouts(full_app: Synthesized) -> None:
    scanners = []
    for component in ("api", "batch", "endpoints", "observability"):
        template = full_app.template(component)
        for policy in template.find_resources("AWS::IAM::Policy").values():
            if any(_is_rollout_scan(s) for s in policy["Properties"]["PolicyDocument"]["Statement"]):
                scanners += [(component, r["Ref"]) for r in policy["Properties"]["Roles"]]
    _, controller = function_by_handler(full_app.template("api"), "sluice.handlers.rollouts.handler")
    assert scanners == [("api", role_of(controller))]
    statements = _table_statements(full_app, "api", "sluice.handlers.rollouts.handler")
    keyed = [s for s in statements if not _is_rollout_scan(s)]
    assert [_partitions(s) for s in keyed] == [["T#*"]]
    assert not _actions(keyed[0]) & {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}


def test_the_registry_event_function_scans_keys_and_watches_only_and_reaches_tenant_items(full_app: Synthesized) -> None:
    handler = "sluice.handlers.registry_events.handler"
    scanners = []
    for component in ("api", "batch", "endpoints", "observability"):
        for policy in full_app.template(component).find_resources("AWS::IAM::Policy").values():
            if any(_is_follow_scan(s) for s in policy["Properties"]["PolicyDocument"]["Statement"]):
                scanners += [(component, r["Ref"]) for r in policy["Properties"]["Roles"]]
    _, function = function_by_handler(full_app.template("api"), handler)
    assert scanners == [("api", role_of(function))]
    keyed = [s for s in _table_statements(full_app, "api", handler) if not _is_follow_scan(s)]
    assert [_partitions(s) for s in keyed] == [["T#*"]]


# How docs/security.md names each function whose role may Scan the registry.
NAMED_ON_THE_SECURITY_PAGE = {
    "sluice.handlers.rollouts.handler": "rollout controller",
    "sluice.handlers.monitor.handler": "monitoring check",
    "sluice.handlers.registry_events.handler": "registry events",
}


def test_the_security_page_names_every_function_that_may_scan(full_app: Synthesized) -> None:
    """The page's table of registry access is the promise an operator reads: each role granted
    a Scan of the registry is named in the row that allows one, and no row denies it to all."""
    page = (REPO / "docs" / "security.md").read_text()
    rows = [line.split("|")[1:3] for line in page.splitlines() if line.startswith("| ")]
    allowed = " ".join(who for who, access in rows if "a `Scan` of the whole table" in access)
    assert not [who for who, access in rows if who.strip() == "everyone" and "no `Scan`" in access]
    scanners = set()
    for component in ("api", "batch", "endpoints", "observability"):
        template = full_app.template(component)
        roles = {
            role_of(props): props["Handler"]
            for props in (r["Properties"] for r in template.find_resources("AWS::Lambda::Function").values())
            if "Handler" in props
        }  # fmt: skip
        for policy in template.find_resources("AWS::IAM::Policy").values():
            if any("dynamodb:Scan" in _actions(s) for s in policy["Properties"]["PolicyDocument"]["Statement"]):
                scanners |= {roles[r["Ref"]] for r in policy["Properties"]["Roles"]}
    assert scanners == set(NAMED_ON_THE_SECURITY_PAGE)
    for handler in scanners:
        assert NAMED_ON_THE_SECURITY_PAGE[handler] in allowed, handler
