"""Log groups and access logs: how long they keep, whether they outlive their stack, and
what one access-log line holds.

Every log group sluice makes (functions, the state machine, the API stages, the capture
stream's delivery errors) keeps its logs for `log_retention_days` and is retained with the
data (`storage.retain_data`); log groups CDK makes on its own get the same retention from
an Aspect (infra.aspects).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import LOG_RETENTION

# What every access-log line starts with, and how it ends: who called (the tenant and key id
# come from the authorizer, never the key) and what went wrong. The stages add their own.
REQUEST_FIELDS = {
    "requestId": "$context.requestId",
    "requestTime": "$context.requestTime",
    "ip": "$context.identity.sourceIp",
}
CALLER_FIELDS = {
    "tenant": "$context.authorizer.tenant",
    "subject": "$context.authorizer.principalId",
    "error": "$context.error.message",
}


def access_log_format(fields: dict[str, str]) -> apigw.AccessLogFormat:
    """One JSON object per request (or WebSocket message)."""
    return apigw.AccessLogFormat.custom(json.dumps(fields))


def removal_policy(retain: bool) -> RemovalPolicy:
    return RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY


def retention(days: int) -> logs.RetentionDays:
    return logs.RetentionDays[LOG_RETENTION[days]]


@dataclass(frozen=True)
class LogRetention:
    """How long log groups keep their logs, and whether they stay when their stack goes."""

    days: int
    retain: bool

    def group(self, scope: Construct, id: str, *, name: str | None = None) -> logs.LogGroup:
        """A log group; `name`: the one a service would otherwise create itself (and keep forever)."""
        return logs.LogGroup(
            scope,
            id,
            log_group_name=name,
            retention=retention(self.days),
            removal_policy=removal_policy(self.retain),
        )
