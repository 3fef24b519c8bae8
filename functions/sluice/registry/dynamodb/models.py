"""Models and their versions in DynamoDB.

- `add_version` bumps the model's `last_version` with an atomic ADD, then puts the version in a
  transaction that checks the model is still the same incarnation (`uid`, new on every create).
- Version numbers are never reused, not even by a model made again under a deleted one's name:
  the delete leaves where its count stood (`layout.NUMBERS`, in the same transaction), and a
  create starts from it (in a transaction that finds it as it read it).
- `delete_model` removes the versions while the model still exists, then deletes the model only
  if no version was added meanwhile; a failure half-way leaves the model to delete again. Given
  the tenant's counters its caller read before its check (`sluice.registry.guards.Catalog`),
  each of those deletes is a transaction that finds no deployment written since, as
  `delete_version`'s is.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import Conflict, SluiceError
from sluice.registry.codec import MODEL, VERSION
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import (
    Part,
    Refused,
    absent,
    catalog_step,
    condition,
    item,
    key,
    unmarshal,
)
from sluice.registry.guards import Catalog, catalog_changed
from sluice.registry.refusals import missing_version, no_model, no_version, no_versions, taken

if TYPE_CHECKING:
    from sluice.domain import Model, ModelVersion

MAX_MODEL_DELETE_ROUNDS = 8  # looks at a model's versions while versions are added to it as it is deleted
VERSIONS_PER_DELETE = 99  # a transaction's 100 items, less the counters'


class DynamoModels(Part):
    def create_model(self, model: Model) -> Model:
        numbers_key = key(layout.versions_pk(model.tenant, model.name), layout.NUMBERS)

        def step() -> None:
            numbers = self.table.get(layout.versions_pk(model.tenant, model.name), layout.NUMBERS)
            last = None if numbers is None else numbers.get("last_version")
            record = item(
                layout.tenant(model.tenant), layout.model_sk(model.name), MODEL.dump(model),
                uid=uuid.uuid4().hex, **({"last_version": last} if last is not None else {}),
            )  # fmt: skip
            found = absent() if numbers is None else condition("#last = :last", {"#last": "last_version"}, {":last": last})
            try:
                self.table.send(
                    "transact_write_items",
                    TransactItems=[
                        {"Put": {"TableName": self.table.name, "Item": record, **absent()}},
                        {"ConditionCheck": {"TableName": self.table.name, "Key": numbers_key, **found}},
                    ],
                )
            except Refused as refused:
                if refused.reasons[:1] == ["ConditionalCheckFailed"]:
                    raise taken("model", model.name, field="name") from None
                raise  # the count moved on (a delete of the name meanwhile): read again

        self.table.optimistic(step)
        return model

    def _model_gone(self, tenant: str, name: str, found: dict[str, Any]) -> list[dict[str, Any]]:
        """The writes that delete the model `found` (where no version was added since it was
        read) and leave where its count of versions stood."""
        last = found.get("last_version")
        same = "#last = :last" if last is not None else "attribute_not_exists(#last)"
        values = {":uid": found["uid"]} | ({":last": last} if last is not None else {})
        model = {"Delete": {"TableName": self.table.name, "Key": key(layout.tenant(tenant), layout.model_sk(name)),
                            **condition(f"#uid = :uid AND {same}", {"#uid": "uid", "#last": "last_version"}, values)}}  # fmt: skip
        if last is None:
            return [model]
        numbers = item(layout.versions_pk(tenant, name), layout.NUMBERS, {}, last_version=last)
        return [model, {"Put": {"TableName": self.table.name, "Item": numbers}}]

    def get_model(self, tenant: str, name: str) -> Model:
        return MODEL.load(self.found(layout.tenant(tenant), layout.model_sk(name), missing=no_model(name)))

    def list_models(self, tenant: str) -> list[Model]:
        return [MODEL.load(d) for d in self.table.query(layout.tenant(tenant), layout.MODEL)]

    def delete_model(self, tenant: str, name: str, *, catalog: Catalog | None = None) -> None:
        if catalog is not None:
            self._delete_counted(tenant, name, catalog)
            return

        def step() -> None:
            found = self.table.get(layout.tenant(tenant), layout.model_sk(name))
            if found is None:
                raise no_model(name)
            self.table.delete_all(layout.versions_pk(tenant, name), layout.VERSION)
            self.table.send("transact_write_items", TransactItems=self._model_gone(tenant, name, found))

        self.table.optimistic(step)

    def add_version(self, version: ModelVersion) -> ModelVersion:
        model_key = key(layout.tenant(version.tenant), layout.model_sk(version.model))
        try:
            updated = self.table.send(
                "update_item",
                TableName=self.table.name,
                Key=model_key,
                UpdateExpression="ADD #last :one",
                ReturnValues="ALL_NEW",
                **condition("attribute_exists(pk)", {"#last": "last_version"}, {":one": 1}),
            )
        except Refused:
            raise no_model(version.model) from None
        model = unmarshal(updated["Attributes"])
        stored = version.with_version(int(model["last_version"]))
        record = item(
            layout.versions_pk(stored.tenant, stored.model), layout.version_sk(stored.version),
            VERSION.dump(stored),
        )  # fmt: skip
        try:
            self.table.send(
                "transact_write_items",
                TransactItems=[
                    {
                        "ConditionCheck": {
                            "TableName": self.table.name,
                            "Key": model_key,
                            **condition("#uid = :uid", {"#uid": "uid"}, {":uid": model["uid"]}),
                        }
                    },
                    {"Put": {"TableName": self.table.name, "Item": record, **absent()}},
                ],
            )
        except Refused as refused:
            if refused.reasons[:1] == ["ConditionalCheckFailed"]:
                raise no_model(version.model) from None
            raise Conflict(
                f"model '{stored.model}' already has a version {stored.version}", field="version"
            ) from None
        return stored

    def get_version(self, tenant: str, model: str, version: int) -> ModelVersion:
        found = self.table.get(layout.versions_pk(tenant, model), layout.version_sk(int(version)))
        if found is None:
            raise missing_version(self, tenant, model, no_version(model, version))
        return VERSION.load(found)

    def latest_version(self, tenant: str, model: str) -> ModelVersion:
        versions = self.table.query(
            layout.versions_pk(tenant, model), layout.VERSION, newest_first=True, limit=1
        )
        newest = next(versions, None)
        if newest is None:
            raise missing_version(self, tenant, model, no_versions(model))
        return VERSION.load(newest)

    def list_versions(self, tenant: str, model: str) -> list[ModelVersion]:
        self.get_model(tenant, model)
        found = self.table.query(layout.versions_pk(tenant, model), layout.VERSION)
        return [VERSION.load(d) for d in found]

    def delete_version(self, tenant: str, model: str, version: int, *, catalog: Catalog | None = None) -> None:
        if catalog is None:
            self.delete_found(layout.versions_pk(tenant, model), layout.version_sk(int(version)), missing=no_version(model, version))
            return
        gone = {"Delete": {"TableName": self.table.name, "Key": key(layout.versions_pk(tenant, model), layout.version_sk(int(version))), **condition("attribute_exists(pk)")}}
        self._counted(tenant, catalog, [gone], "version", missing=no_version(model, version))

    def _counted(self, tenant: str, catalog: Catalog, writes: list[dict[str, Any]], field: str, *, missing: SluiceError | None = None) -> bool:
        """`writes` (deletes, up to 99) made in one transaction with the tenant's counter of
        deletes moved on (`sluice.registry.guards`): StaleRead where a deployment was written
        since `catalog` was read; `missing` raised (or False returned, without it) where a
        write's own condition failed."""
        try:
            self.table.send("transact_write_items", TransactItems=[catalog_step(self.table.name, layout.tenant(tenant), catalog, "deletes"), *writes])
        except Refused as refused:
            if refused.reasons[:1] == ["ConditionalCheckFailed"]:
                raise catalog_changed(field) from None
            if missing is not None:
                raise missing from None
            return False
        return True

    def _delete_counted(self, tenant: str, name: str, catalog: Catalog) -> None:
        """`delete_model` on the counters read before the caller's check: its versions deleted
        in transactions (of up to 99) that each find no deployment written since, then the model
        item in one that also finds no version added meanwhile (else its versions are looked at
        again). A deployment written in between refuses the next step: StaleRead."""
        for _ in range(MAX_MODEL_DELETE_ROUNDS):
            found = self.table.get(layout.tenant(tenant), layout.model_sk(name))
            if found is None:
                raise no_model(name)
            gone = [
                {"Delete": {"TableName": self.table.name, "Key": key(layout.versions_pk(tenant, name), doc["sk"])}}
                for doc in self.table.query(layout.versions_pk(tenant, name), layout.VERSION)
            ]
            for at in range(0, len(gone), VERSIONS_PER_DELETE):  # a transaction holds 100 items: the counter's and 99
                self._counted(tenant, catalog, gone[at : at + VERSIONS_PER_DELETE], "model")
            if self._counted(tenant, catalog, self._model_gone(tenant, name, found), "model"):
                return
            # The model item changed (a version added meanwhile): its versions are looked at again.
        raise Conflict(f"model '{name}' kept changing while it was deleted; try again", field="model")

    def replace_version(self, version: ModelVersion) -> ModelVersion:
        record = item(
            layout.versions_pk(version.tenant, version.model), layout.version_sk(int(version.version)),
            VERSION.dump(version),
        )  # fmt: skip
        try:
            self.table.send(
                "put_item", TableName=self.table.name, Item=record,
                **condition("attribute_exists(pk) AND #sha = :sha", {"#sha": "sha256"}, {":sha": version.sha256}),
            )  # fmt: skip
        except Refused:
            raise no_version(version.model, version.version) from None
        return version

    def uses_runtime(self, runtime: str) -> bool:
        """A scan of version items on that runtime, their keys alone, until one is found: its
        cost grows with the table (`sluice serve` asks once per worker, as it starts)."""
        params: dict[str, Any] = {
            "TableName": self.table.name,
            "FilterExpression": "begins_with(sk, :v) AND #r = :r",
            "ExpressionAttributeNames": {"#r": "runtime"},
            "ExpressionAttributeValues": {":v": {"S": layout.VERSION}, ":r": {"S": runtime}},
            "ProjectionExpression": "pk, sk", "Select": "SPECIFIC_ATTRIBUTES",
        }  # fmt: skip
        while True:
            page = self.table.send("scan", **params)
            if page.get("Items"):
                return True
            if "LastEvaluatedKey" not in page:
                return False
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]
