"""Grants of graphs' lookup steps: each function that predicts may read exactly the tables and
feature groups `graphs.lookups` lists (BatchGetItem; BatchGetRecord and GetRecord), one IAM
statement each, and is told the list per tenant; an alarm watches the share of lookups whose
store failed. A config without the key grants none and has no such alarm."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tests.infra.synth import (
    ACCOUNT,
    LOOKUP_FEATURE_GROUPS,
    LOOKUP_TABLES,
    REGION,
    policy_statements_of_role,
    role_of,
)
from tests.infra.test_function_step_grants import PREDICTING, _functions, serves_acme

if TYPE_CHECKING:
    from tests.infra.synth import Synthesized


def test_each_predicting_function_may_read_exactly_the_configured_stores_one_statement_each(full_app: Synthesized) -> None:
    expected = sorted(
        [*((("dynamodb:BatchGetItem",), f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{t}") for t in LOOKUP_TABLES),
         *((("sagemaker:BatchGetRecord", "sagemaker:GetRecord"), f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:feature-group/{g.lower()}") for g in LOOKUP_FEATURE_GROUPS)]
    )  # fmt: skip
    seen = set()
    for stack, handlers in PREDICTING.items():
        template = full_app.resolved(stack)  # the ARNs' partition, region and account filled in
        for function in _functions(full_app, stack, handlers):
            seen.add(function["Handler"])
            statements = [s for s in policy_statements_of_role(template, role_of(function)) if str(s.get("Sid", "")).startswith("LookupSource")]
            got = sorted((tuple(s["Action"]) if isinstance(s["Action"], list) else (s["Action"],), s["Resource"]) for s in statements)
            if not serves_acme(function):  # another tenant's stream: none of acme's stores
                assert got == [] and "SLUICE_LOOKUP_SOURCES" not in function["Environment"]["Variables"]
                continue
            assert got == expected
            sources = json.loads(function["Environment"]["Variables"]["SLUICE_LOOKUP_SOURCES"])
            assert sources == {"acme": [*(f"dynamodb:{t}" for t in LOOKUP_TABLES), *(f"sagemaker:{g}" for g in LOOKUP_FEATURE_GROUPS)]}
    assert seen == {h for handlers in PREDICTING.values() for h in handlers}


def test_without_the_key_no_store_is_granted_and_no_variable_set(default_app: Synthesized) -> None:
    for stack in ("api", "batch"):
        text = json.dumps(default_app.json(stack))
        # (BatchGetItem itself is granted on the precomputed answers' table: docs/features.md)
        assert "LookupSource" not in text and "SLUICE_LOOKUP_SOURCES" not in text


def test_an_alarm_watches_the_lookup_error_rate_where_stores_are_listed(full_app: Synthesized, default_app: Synthesized) -> None:
    from aws_cdk.assertions import Match

    full_app.template("observability").has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Metrics": Match.array_with([
                Match.object_like({"Expression": "IF(lookups > 0, 100 * errors / lookups, 0)"}),
                Match.object_like({"Id": "errors", "MetricStat": Match.object_like({"Metric": {"MetricName": "LookupErrors", "Namespace": "sluice"}})}),
            ]),
            "Threshold": 5,
        },
    )
    assert "LookupErrors" not in json.dumps(default_app.json("observability"))
