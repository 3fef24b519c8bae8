"""Where sluice keeps what it knows: SQLite locally, DynamoDB on AWS, behind one port per
aggregate (`sluice.registry.ports`)."""

from sluice.domain import DeploymentChange
from sluice.registry.ports import (
    AnswerRegistry,
    DeploymentRegistry,
    FollowRegistry,
    JobRegistry,
    KeyRegistry,
    ModelRegistry,
    MonitorRegistry,
    OptimizeJobRegistry,
    Registry,
    StatsRegistry,
)

__all__ = [
    "AnswerRegistry",
    "DeploymentChange",
    "DeploymentRegistry",
    "FollowRegistry",
    "JobRegistry",
    "KeyRegistry",
    "ModelRegistry",
    "MonitorRegistry",
    "OptimizeJobRegistry",
    "Registry",
    "StatsRegistry",
]
