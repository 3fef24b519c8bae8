"""Cross-cutting policy, applied once at the app: tags, and defaults as Aspects."""

from __future__ import annotations

from collections.abc import Mapping

import jsii
from aws_cdk import App, Aspects, IAspect, Tags
from aws_cdk import aws_logs as logs
from constructs import IConstruct


@jsii.implements(IAspect)
class LogRetentionDefault:
    """Gives every log group that was made without a retention (for instance by a CDK
    construct) the configured one: CloudWatch would otherwise keep its logs forever."""

    def __init__(self, days: int) -> None:
        self.days = days

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, logs.CfnLogGroup) and node.retention_in_days is None:
            node.retention_in_days = self.days


def apply_defaults(
    app: App, *, name: str, tags: Mapping[str, str], log_retention_days: int
) -> None:
    """The tags every resource carries (`project`, `sluice:app`, the config's own), and the
    log retention of log groups made without one."""
    applied = Tags.of(app)
    applied.add("project", "sluice")
    applied.add("sluice:app", name)
    for key, value in sorted(tags.items()):
        applied.add(key, value)
    Aspects.of(app).add(LogRetentionDefault(log_retention_days))
