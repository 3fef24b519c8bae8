"""Where sluice keeps what it knows: SQLite locally, DynamoDB on AWS, behind one protocol."""

from sluice.domain import DeploymentChange
from sluice.registry.base import Registry

__all__ = ["DeploymentChange", "Registry"]
