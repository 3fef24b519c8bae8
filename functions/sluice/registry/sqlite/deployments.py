"""Deployments and their change history in SQLite: a deployment and its history entry are
written in one transaction, so history order is commit order; the deployments a write rests
on (`refs_read`) are compared with what is stored in that same transaction."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.domain import DeploymentChange, now
from sluice.registry.codec import CHANGE, DEPLOYMENT
from sluice.registry.guards import changed_meanwhile, others_read, same_write
from sluice.registry.refusals import no_deployment, not_at_revision, taken
from sluice.registry.sqlite.connection import Part, advance_catalog, read_catalog

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sluice.domain import Deployment
    from sluice.registry.guards import Catalog


class SqliteDeployments(Part):
    def catalog_read(self, tenant: str) -> Catalog:
        return read_catalog(self.db.conn(), tenant)

    def create_deployment(self, deployment: Deployment, *, refs_read: Iterable[Deployment] = (), catalog: Catalog | None = None) -> Deployment:
        others = others_read(deployment.name, refs_read)
        try:
            with self.db.tx() as db:
                _unchanged(db, deployment.tenant, others)
                advance_catalog(db, deployment.tenant, catalog, "writes", "policy")
                generation = _next_generation(db, deployment.tenant, deployment.name)
                stored = replace(deployment, revision=generation, generation=generation)  # a name's revisions never repeat (`Deployment.revision`)
                db.execute(
                    "INSERT INTO deployments (tenant, name, revision, doc) VALUES (?, ?, ?, ?)",
                    (stored.tenant, stored.name, stored.revision, DEPLOYMENT.to_json(stored)),
                )
                _append(db, DeploymentChange.written(stored, None))
        except sqlite3.IntegrityError:
            raise taken("deployment", deployment.name, field="name") from None
        return stored

    def get_deployment(self, tenant: str, name: str) -> Deployment:
        return DEPLOYMENT.load(self.named("deployments", tenant, name, missing=no_deployment(name)))

    def list_deployments(self, tenant: str) -> list[Deployment]:
        return [DEPLOYMENT.load(d) for d in self.listed("deployments", tenant)]

    def update_deployment(
        self,
        deployment: Deployment,
        *,
        expected_revision: int,
        note: dict[str, Any] | None = None,
        refs_read: Iterable[Deployment] = (),
        catalog: Catalog | None = None,
    ) -> Deployment:
        stored = replace(deployment, revision=expected_revision + 1, updated_at=now())
        others = others_read(stored.name, refs_read)
        with self.db.tx() as db:
            old = _current(db, deployment.tenant, deployment.name)
            if old.revision != expected_revision:
                raise not_at_revision(deployment.name, old.revision, expected_revision)
            _unchanged(db, stored.tenant, others)
            advance_catalog(db, stored.tenant, catalog, "writes", "policy")
            stored = replace(stored, generation=_next_generation(db, stored.tenant, stored.name))
            db.execute(
                "UPDATE deployments SET revision = ?, doc = ? WHERE tenant = ? AND name = ?",
                (stored.revision, DEPLOYMENT.to_json(stored), stored.tenant, stored.name),
            )
            _append(db, DeploymentChange.written(stored, old, note))
        return stored

    def delete_deployment(self, tenant: str, name: str, *, by: str = "", catalog: Catalog | None = None) -> None:
        with self.db.tx() as db:
            old = _current(db, tenant, name)
            advance_catalog(db, tenant, catalog, "deletes", "deployment")
            db.execute("DELETE FROM deployments WHERE tenant = ? AND name = ?", (tenant, name))
            _append(db, DeploymentChange.deleted(old, by))

    def deployment_history(self, tenant: str, name: str) -> list[DeploymentChange]:
        docs = self.db.all(
            "SELECT doc FROM deployment_history WHERE tenant = ? AND name = ? ORDER BY seq", tenant, name
        )
        return [CHANGE.load(d) for d in docs]

    def running_rollouts(self) -> list[tuple[str, str]]:
        rows = self.db.conn().execute(
            "SELECT tenant, name FROM deployments WHERE json_extract(doc, '$.rollout.state') = 'running' "
            "OR json_extract(doc, '$.rollout.endpoint.pending') = 1 ORDER BY tenant, name"
        ).fetchall()
        return [(tenant, name) for tenant, name in rows]


def _unchanged(db: sqlite3.Connection, tenant: str, refs_read: list[Deployment]) -> None:
    """StaleRead unless each deployment read is stored still as it was: the same write of its
    name (`generation`, which never repeats)."""
    for seen in refs_read:
        row = db.execute(
            "SELECT revision, doc FROM deployments WHERE tenant = ? AND name = ?", (tenant, seen.name)
        ).fetchone()
        if row is None or not same_write(DEPLOYMENT.from_json(row[1]), seen):
            raise changed_meanwhile(seen.name)


def _next_generation(db: sqlite3.Connection, tenant: str, name: str) -> int:
    """The number of the write about to be recorded among every write of the name."""
    (count,) = db.execute(
        "SELECT COUNT(*) FROM deployment_history WHERE tenant = ? AND name = ?", (tenant, name)
    ).fetchone()
    return int(count) + 1


def _current(db: sqlite3.Connection, tenant: str, name: str) -> Deployment:
    row = db.execute(
        "SELECT doc FROM deployments WHERE tenant = ? AND name = ?", (tenant, name)
    ).fetchone()
    if row is None:
        raise no_deployment(name)
    return DEPLOYMENT.from_json(row[0])


def _append(db: sqlite3.Connection, change: DeploymentChange) -> None:
    db.execute(
        "INSERT INTO deployment_history (tenant, name, doc) VALUES (?, ?, ?)",
        (change.tenant, change.name, CHANGE.to_json(change)),
    )
