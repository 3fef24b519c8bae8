"""Models and their versions in SQLite. A model row counts its versions (`next_version`), so
numbers are assigned in the same transaction that stores the version, and never reused: not
even by a model of the same name made after it is deleted (`version_numbers` keeps where the
count stood), so that a version a batch job, a rollout or a kept answer names is always the
one artifact it named."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from sluice.registry.codec import MODEL, VERSION
from sluice.registry.refusals import missing_version, no_model, no_version, no_versions, taken
from sluice.registry.sqlite.connection import Part, advance_catalog

if TYPE_CHECKING:
    from sluice.domain import Model, ModelVersion
    from sluice.registry.guards import Catalog


class SqliteModels(Part):
    def create_model(self, model: Model) -> Model:
        try:
            with self.db.tx() as db:
                db.execute(
                    "INSERT INTO models (tenant, name, doc, next_version) VALUES (?, ?, ?, "
                    "COALESCE((SELECT next_version FROM version_numbers WHERE tenant = ? AND model = ?), 1))",
                    (model.tenant, model.name, MODEL.to_json(model), model.tenant, model.name),
                )
        except sqlite3.IntegrityError:
            raise taken("model", model.name, field="name") from None
        return model

    def get_model(self, tenant: str, name: str) -> Model:
        return MODEL.load(self.named("models", tenant, name, missing=no_model(name)))

    def list_models(self, tenant: str) -> list[Model]:
        return [MODEL.load(d) for d in self.listed("models", tenant)]

    def delete_model(self, tenant: str, name: str, *, catalog: Catalog | None = None) -> None:
        with self.db.tx() as db:
            advance_catalog(db, tenant, catalog, "deletes", "model")
            db.execute(  # where its count stood: a model made again under its name numbers on from there
                "INSERT INTO version_numbers (tenant, model, next_version) SELECT tenant, name, next_version FROM models "
                "WHERE tenant = ? AND name = ? ON CONFLICT (tenant, model) DO UPDATE SET next_version = MAX(next_version, excluded.next_version)",
                (tenant, name),
            )
            gone = db.execute("DELETE FROM models WHERE tenant = ? AND name = ?", (tenant, name))
            if gone.rowcount == 0:
                raise no_model(name)
            db.execute("DELETE FROM versions WHERE tenant = ? AND model = ?", (tenant, name))

    def add_version(self, version: ModelVersion) -> ModelVersion:
        with self.db.tx() as db:
            row = db.execute(
                "UPDATE models SET next_version = next_version + 1 WHERE tenant = ? AND name = ? "
                "RETURNING next_version - 1",
                (version.tenant, version.model),
            ).fetchone()
            if row is None:
                raise no_model(version.model)
            stored = version.with_version(int(row[0]))
            db.execute(
                "INSERT INTO versions (tenant, model, version, doc) VALUES (?, ?, ?, ?)",
                (stored.tenant, stored.model, stored.version, VERSION.to_json(stored)),
            )
        return stored

    def get_version(self, tenant: str, model: str, version: int) -> ModelVersion:
        doc = self.db.one(
            "SELECT doc FROM versions WHERE tenant = ? AND model = ? AND version = ?",
            tenant, model, int(version),
        )  # fmt: skip
        if doc is None:
            raise missing_version(self, tenant, model, no_version(model, version))
        return VERSION.load(doc)

    def latest_version(self, tenant: str, model: str) -> ModelVersion:
        doc = self.db.one(
            "SELECT doc FROM versions WHERE tenant = ? AND model = ? ORDER BY version DESC LIMIT 1",
            tenant, model,
        )  # fmt: skip
        if doc is None:
            raise missing_version(self, tenant, model, no_versions(model))
        return VERSION.load(doc)

    def list_versions(self, tenant: str, model: str) -> list[ModelVersion]:
        self.get_model(tenant, model)
        docs = self.db.all(
            "SELECT doc FROM versions WHERE tenant = ? AND model = ? ORDER BY version", tenant, model
        )
        return [VERSION.load(d) for d in docs]

    def delete_version(self, tenant: str, model: str, version: int, *, catalog: Catalog | None = None) -> None:
        with self.db.tx() as db:
            advance_catalog(db, tenant, catalog, "deletes", "version")
            gone = db.execute(
                "DELETE FROM versions WHERE tenant = ? AND model = ? AND version = ?",
                (tenant, model, int(version)),
            )
        if gone.rowcount == 0:
            raise no_version(model, version)

    def replace_version(self, version: ModelVersion) -> ModelVersion:
        with self.db.tx() as db:
            done = db.execute(
                "UPDATE versions SET doc = ? WHERE tenant = ? AND model = ? AND version = ? AND json_extract(doc, '$.sha256') = ?",
                (VERSION.to_json(version), version.tenant, version.model, int(version.version), version.sha256),
            )
        if done.rowcount == 0:
            raise no_version(version.model, version.version)
        return version

    def uses_runtime(self, runtime: str) -> bool:
        row = self.db.conn().execute("SELECT 1 FROM versions WHERE json_extract(doc, '$.runtime') = ? LIMIT 1", (runtime,)).fetchone()
        return row is not None
