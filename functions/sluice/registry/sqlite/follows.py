"""Follow bindings in SQLite: one JSON document per (tenant, deployment), its revision and what
it watches in columns of their own so that a conditional update and a lookup by event are one
statement each."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sluice.registry.codec import FOLLOW
from sluice.registry.refusals import follow_moved, no_follow, taken
from sluice.registry.sqlite.connection import Part

if TYPE_CHECKING:
    from sluice.domain.follows import Follow


class SqliteFollows(Part):
    def create_follow(self, follow: Follow) -> Follow:
        stored = replace(follow, revision=1)
        self.insert(
            "INSERT INTO follows (tenant, name, revision, watch, doc) VALUES (?, ?, 1, ?, ?)",
            (follow.tenant, follow.deployment, follow.watch, FOLLOW.to_json(stored)),
            taken=taken("follow binding of deployment", follow.deployment, field="deployment"),
        )
        return stored

    def get_follow(self, tenant: str, deployment: str) -> Follow:
        return FOLLOW.load(self.named("follows", tenant, deployment, missing=no_follow(deployment)))

    def list_follows(self, tenant: str) -> list[Follow]:
        return [FOLLOW.load(d) for d in self.listed("follows", tenant)]

    def update_follow(self, follow: Follow, *, expected_revision: int) -> Follow:
        stored = replace(follow, revision=expected_revision + 1)
        with self.db.tx() as db:
            row = db.execute(
                "SELECT revision, json_extract(doc, '$.created_at') FROM follows WHERE tenant = ? AND name = ?",
                (follow.tenant, follow.deployment),
            ).fetchone()
            if row is None:
                raise no_follow(follow.deployment)
            # A binding made again starts at revision 1 too: its time of making tells it apart
            # (none stored: a binding kept before the time was, taken as the same).
            if row[0] != expected_revision or (row[1] is not None and row[1] != follow.created_at):
                raise follow_moved(follow.deployment, row[0], expected_revision)
            db.execute(
                "UPDATE follows SET revision = ?, watch = ?, doc = ? WHERE tenant = ? AND name = ?",
                (stored.revision, stored.watch, FOLLOW.to_json(stored), follow.tenant, follow.deployment),
            )
        return stored

    def delete_follow(self, tenant: str, deployment: str) -> None:
        with self.db.tx() as db:
            if db.execute("DELETE FROM follows WHERE tenant = ? AND name = ?", (tenant, deployment)).rowcount == 0:
                raise no_follow(deployment)

    def followers(self, watch: str | None = None) -> list[tuple[str, str]]:
        sql = "SELECT tenant, name FROM follows" + (" WHERE watch = ?" if watch is not None else "")
        rows = self.db.conn().execute(sql + " ORDER BY tenant, name", (watch,) if watch is not None else ()).fetchall()
        return [(tenant, name) for tenant, name in rows]
