"""Cross-cutting policy, applied once at the app: tags, and defaults as Aspects."""

from __future__ import annotations

import jsii
from aws_cdk import App, Aspects, IAspect, Tags
from aws_cdk import aws_logs as logs
from constructs import IConstruct

from infra.config import SluiceConfig


@jsii.implements(IAspect)
class LogRetentionDefault:
    """Gives every log group that was made without a retention (for instance by a CDK
    construct) the configured one: CloudWatch would otherwise keep its logs forever."""

    def __init__(self, days: int) -> None:
        self.days = days

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, logs.CfnLogGroup) and node.retention_in_days is None:
            node.retention_in_days = self.days


def apply_defaults(app: App, config: SluiceConfig) -> None:
    tags = Tags.of(app)
    tags.add("project", "sluice")
    tags.add("sluice:app", config.name)
    for key, value in sorted(config.tags.items()):
        tags.add(key, value)
    Aspects.of(app).add(LogRetentionDefault(config.log_retention_days))
