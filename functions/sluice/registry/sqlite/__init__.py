"""The embedded registry: one SQLite file (`connection`), one module per aggregate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.registry.sqlite.answers import SqliteAnswers
from sluice.registry.sqlite.connection import Database, path_of_url
from sluice.registry.sqlite.connections import SqliteConnections
from sluice.registry.sqlite.deployments import SqliteDeployments
from sluice.registry.sqlite.follows import SqliteFollows
from sluice.registry.sqlite.jobs import SqliteJobs
from sluice.registry.sqlite.keys import SqliteKeys
from sluice.registry.sqlite.models import SqliteModels
from sluice.registry.sqlite.monitor import SqliteMonitor
from sluice.registry.sqlite.optimize_jobs import SqliteOptimizeJobs
from sluice.registry.sqlite.schedules import SqliteSchedules
from sluice.registry.sqlite.stats import SqliteStats

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["SqliteRegistry", "path_of_url"]


class SqliteRegistry(SqliteModels, SqliteDeployments, SqliteKeys, SqliteJobs, SqliteOptimizeJobs, SqliteSchedules, SqliteStats, SqliteMonitor, SqliteFollows, SqliteAnswers, SqliteConnections):
    """Every aggregate over one database file."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(Database(path))
        self.path = self.db.path

    @classmethod
    def from_url(cls, url: str) -> SqliteRegistry:
        return cls(path_of_url(url))
