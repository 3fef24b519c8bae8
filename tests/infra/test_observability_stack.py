"""Dashboard and alarms."""

from __future__ import annotations

import json

from tests.infra.synth import FULL_CONFIG, Synthesized, properties

FUNCTIONS = (
    "api",
    "authorizer",
    "shadow",
    "batch-create-job",
    "batch-plan",
    "batch-score",
    "batch-finalize",
    "batch-mark-failed",
    "batch-execution-ended",
    "batch-on-upload",
    "rollouts",
    "monitor",  # model monitoring's hourly check of the closed window
    "registry-events",  # SageMaker's model package approvals (deployments that follow a registry)
    "websocket",  # the full config turns the WebSocket API on
)
STREAMS = tuple(f"stream-{s['name']}" for s in FULL_CONFIG["streams"])
# Each stream: behind, dead letters, error rate; a queue the tenant brings has no DLQ of ours.
BROUGHT_QUEUES = sum(1 for s in FULL_CONFIG["streams"] if s["source"]["kind"] == "sqs" and "arn" in s["source"])


def _dashboard_body(app: Synthesized) -> str:
    """The dashboard JSON as text, with its string escaping undone for readability."""
    (dashboard,) = properties(app.template("observability"), "AWS::CloudWatch::Dashboard")
    return json.dumps(dashboard["DashboardBody"]).replace("\\\\", "").replace('\\"', '"')


def test_dashboard_shows_the_app_metrics_per_deployment(full_app: Synthesized) -> None:
    body = _dashboard_body(full_app)
    for metric in ("Predictions", "Latency", "Rows", "ClientErrors", "BackendErrors"):
        assert f'SEARCH(\'Namespace="sluice" MetricName="{metric}" tenant deployment\'' in body, metric  # deployment names are per tenant
    assert (
        "SEARCH('Namespace=\"sluice\" MetricName=\"ShadowAgreement\" tenant deployment mirror', 'Average'"
        in body
    )
    for metric in ("ModelCacheHits", "ModelCacheMisses"):
        assert f'MetricName="{metric}"' in body
    for aws_metric in (
        "AWS/ApiGateway",
        "AWS/Lambda",
        "AWS/States",
        "ExecutionTime",
        "ExecutionsFailed",
    ):
        assert aws_metric in body


def test_alarms_cover_api_functions_and_batch(full_app: Synthesized) -> None:
    from aws_cdk.assertions import Match

    template = full_app.template("observability")
    alarms = properties(template, "AWS::CloudWatch::Alarm")
    lookups = 1  # the lookup error rate: the full config lists stores lookup steps read
    monitored = len(FULL_CONFIG["alarms"]["monitor_deployments"])  # MonitorAlerts, one per deployment named
    # API 5xx and p99, errors and throttles per function, batch failures, precomputed fallback, three per stream.
    assert len(alarms) == 2 + 2 * (len(FUNCTIONS) + len(STREAMS)) + 1 + 1 + 3 * len(STREAMS) - BROUGHT_QUEUES + lookups + monitored
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "Latency",
            "Namespace": "AWS/ApiGateway",
            "ExtendedStatistic": "p99",
            "Threshold": 5000,
        },
    )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Metrics": Match.array_with(
                [Match.object_like({"Expression": "IF(requests > 0, 100 * errors / requests, 0)"})]
            ),
            "Threshold": 1,
        },
    )
    for function in FUNCTIONS:
        for metric in ("Errors", "Throttles"):
            template.has_resource_properties(
                "AWS::CloudWatch::Alarm",
                {
                    "MetricName": metric,
                    "Namespace": "AWS/Lambda",
                    "Dimensions": [{"Name": "FunctionName", "Value": f"sluice-{function}"}],
                },
            )
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Metrics": Match.array_with(
                [Match.object_like({"Expression": "failed + timedOut + aborted"})]
            )
        },
    )


def test_alarms_notify_the_topic_when_configured(
    full_app: Synthesized, default_app: Synthesized
) -> None:
    template = full_app.template("observability")
    (topic_id,) = template.find_resources("AWS::SNS::Topic")
    for alarm in properties(template, "AWS::CloudWatch::Alarm"):
        assert alarm["AlarmActions"] == [{"Ref": topic_id}]
    template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "oncall@example.com"}
    )
    (policy,) = properties(template, "AWS::SNS::TopicPolicy")
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy["PolicyDocument"]["Statement"]
    )

    default = default_app.template("observability")
    default.resource_count_is("AWS::SNS::Topic", 0)
    for alarm in properties(default, "AWS::CloudWatch::Alarm"):
        assert "AlarmActions" not in alarm


def test_every_function_the_stacks_make_has_its_alarms(full_app: Synthesized) -> None:
    """The app hands the observability stack the functions the other stacks made, not a list
    of its own: none is left without alarms."""
    made = {
        props["FunctionName"]
        for component in full_app.stacks
        for props in properties(full_app.template(component), "AWS::Lambda::Function")
        if isinstance(props.get("FunctionName"), str)  # CDK's own handlers have no name
    }
    watched = {
        alarm["Dimensions"][0]["Value"]
        for alarm in properties(full_app.template("observability"), "AWS::CloudWatch::Alarm")
        if alarm.get("Namespace") == "AWS/Lambda" and alarm.get("MetricName") == "Throttles"
    }
    assert made == watched
    assert {f"sluice-{f}" for f in FUNCTIONS + STREAMS} == made
