"""Where sluice keeps what it knows: SQLite locally, DynamoDB on AWS, behind one protocol."""

from sluice.registry.base import DeploymentChange, Registry

__all__ = ["DeploymentChange", "Registry"]
