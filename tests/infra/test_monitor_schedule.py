"""Model monitoring's scheduled check on AWS: EventBridge Scheduler invokes it past every hour
with the time it was scheduled for, through a role that may invoke it alone; the function may
read the tenant partitions and scan the keys, write nothing to the registry and its results
under `monitor/` in the batch bucket alone; the observability stack has
an alarm on `MonitorAlerts` for each deployment the config names."""

from __future__ import annotations

import json

import pytest
from infra.config import SluiceConfig
from pydantic import ValidationError

from tests.infra.synth import (
    FULL_CONFIG,
    Synthesized,
    function_arn,
    function_by_handler,
    policy_statements_of_role,
    properties,
    schedule_invoking,
    statements_of_function,
)

HANDLER = "sluice.handlers.monitor.handler"


def test_the_schedule_invokes_the_check_past_every_hour_with_its_time(full_app: Synthesized) -> None:
    template = full_app.resolved("api")
    arn = function_arn(full_app, HANDLER)
    schedule = schedule_invoking(full_app, HANDLER)
    assert schedule["ScheduleExpression"] == "cron(5 * * * ? *)" and schedule["ScheduleExpressionTimezone"] == "UTC"
    assert json.loads(schedule["Target"]["Input"]) == {"time": "<aws.scheduler.scheduled-time>"}
    role_id = schedule["Target"]["RoleArn"].rsplit("/", 1)[-1]
    assert policy_statements_of_role(template, role_id) == [{"Action": "lambda:InvokeFunction", "Effect": "Allow", "Resource": arn}]


def test_the_check_reads_tenant_partitions_and_scans_keys_alone(full_app: Synthesized) -> None:
    from infra.constructs.registry_access import READ

    statements = statements_of_function(full_app, HANDLER)
    dynamodb = [s for s in statements if any(a.startswith("dynamodb:") for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))]
    assert len(dynamodb) == 2
    read, scan = sorted(dynamodb, key=lambda s: s["Action"] == "dynamodb:Scan")
    assert sorted(read["Action"]) == sorted(READ)  # no write, no delete
    assert read["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["T#*"]}}
    assert scan["Action"] == "dynamodb:Scan"
    assert scan["Condition"] == {
        "StringEquals": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
        "ForAllValues:StringEquals": {"dynamodb:Attributes": ["pk", "sk"]},
    }
    s3 = [s for s in statements if s not in dynamodb and "lambda" not in json.dumps(s["Action"])]
    objects = [s for s in s3 if "s3:PutObject" in s["Action"]]
    assert len(objects) == 1 and json.dumps(objects[0]["Resource"]).endswith('/monitor/*"'), objects
    assert "s3:DeleteObject" not in json.dumps(s3)
    _, function = function_by_handler(full_app.template("api"), HANDLER)
    assert function["Environment"]["Variables"]["SLUICE_BATCH_BUCKET"]


def test_an_alarm_on_monitor_alerts_per_configured_deployment(full_app: Synthesized) -> None:
    alarms = [a for a in properties(full_app.template("observability"), "AWS::CloudWatch::Alarm") if a.get("MetricName") == "MonitorAlerts"]
    assert len(alarms) == len(FULL_CONFIG["alarms"]["monitor_deployments"]) == 1
    (alarm,) = alarms
    assert alarm["Namespace"] == "sluice" and alarm["Statistic"] == "Maximum" and alarm["Period"] == 3600
    assert sorted((d["Name"], d["Value"]) for d in alarm["Dimensions"]) == [("deployment", "iris"), ("service", "sluice"), ("tenant", "acme")]
    assert alarm["Threshold"] == 1 and alarm["TreatMissingData"] == "notBreaching" and alarm["AlarmActions"]


@pytest.mark.parametrize("entry", ["iris", "acme/", "acme/iris/2", "Acme/iris"])
def test_monitor_deployments_are_tenant_slash_deployment(entry: str) -> None:
    with pytest.raises(ValidationError, match="tenant/deployment"):
        SluiceConfig.model_validate({**FULL_CONFIG, "alarms": {"monitor_deployments": [entry]}})
