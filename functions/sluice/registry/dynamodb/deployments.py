"""Deployments and their change history in DynamoDB.

Every deployment write (create, update, delete) is one transaction over the deployment item,
the history counter and the new history entry, conditioned on the counter value read just
before (and on the entry's key being free); writes to one deployment therefore serialize,
history order is commit order even across a delete and re-create, and a write that lost a race
is decided again from a fresh read.

A write that rests on other deployments read before it (`refs_read`) carries, in the same
transaction, a ConditionCheck on each: still there, at the revision and with the time of last
write that were read. Two writes that each read what the other changes (p -> q and q -> p)
cannot both commit; the one cancelled raises StaleRead, as the registry cannot decide again
on its own what its caller's check would say now.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.domain import DeploymentChange, now
from sluice.registry.codec import CHANGE, DEPLOYMENT
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import (
    Part,
    Refused,
    absent,
    catalog_step,
    condition,
    item,
    key,
    marshal,
    unmarshal,
)
from sluice.registry.guards import Catalog, catalog_changed, changed_meanwhile, others_read
from sluice.registry.refusals import no_deployment, not_at_revision, taken

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sluice.domain import Deployment


class DynamoDeployments(Part):
    def catalog_read(self, tenant: str) -> Catalog:
        found = self.table.get(layout.tenant(tenant), layout.CATALOG) or {}
        return Catalog(int(found.get("writes", 0)), int(found.get("deletes", 0)))

    def create_deployment(self, deployment: Deployment, *, refs_read: Iterable[Deployment] = (), catalog: Catalog | None = None) -> Deployment:
        written = [deployment]

        def change(current: Deployment | None, generation: int) -> tuple[dict[str, Any], DeploymentChange]:
            if current is not None:
                raise taken("deployment", deployment.name, field="name")
            stored = written[0] = replace(deployment, revision=generation, generation=generation)  # a name's revisions never repeat (`Deployment.revision`)
            put = {"Put": {"TableName": self.table.name, "Item": self._item(stored), **absent()}}
            return put, DeploymentChange.written(stored, None)

        self._change(deployment.tenant, deployment.name, change, others_read(deployment.name, refs_read), catalog)
        return written[0]

    def get_deployment(self, tenant: str, name: str) -> Deployment:
        return DEPLOYMENT.load(self.found(layout.tenant(tenant), layout.deployment_sk(name), missing=no_deployment(name)))

    def list_deployments(self, tenant: str) -> list[Deployment]:
        found = self.table.query(layout.tenant(tenant), layout.DEPLOYMENT)
        return [DEPLOYMENT.load(d) for d in found]

    def update_deployment(
        self,
        deployment: Deployment,
        *,
        expected_revision: int,
        note: dict[str, Any] | None = None,
        refs_read: Iterable[Deployment] = (),
        catalog: Catalog | None = None,
    ) -> Deployment:
        written = [replace(deployment, revision=expected_revision + 1, updated_at=now())]

        def change(current: Deployment | None, generation: int) -> tuple[dict[str, Any], DeploymentChange]:
            if current is None:
                raise no_deployment(deployment.name)
            if current.revision != expected_revision:
                raise not_at_revision(deployment.name, current.revision, expected_revision)
            stored = written[0] = replace(written[0], generation=generation)
            put = {
                "Put": {
                    "TableName": self.table.name,
                    "Item": self._item(stored),
                    **condition("#rev = :rev", {"#rev": "revision"}, {":rev": expected_revision}),
                }
            }
            return put, DeploymentChange.written(stored, current, note)

        self._change(deployment.tenant, deployment.name, change, others_read(deployment.name, refs_read), catalog)
        return written[0]

    def delete_deployment(self, tenant: str, name: str, *, by: str = "", catalog: Catalog | None = None) -> None:
        def change(current: Deployment | None, generation: int) -> tuple[dict[str, Any], DeploymentChange]:
            if current is None:
                raise no_deployment(name)
            delete = {
                "Delete": {
                    "TableName": self.table.name,
                    "Key": key(layout.tenant(tenant), layout.deployment_sk(name)),
                    **condition("#rev = :rev", {"#rev": "revision"}, {":rev": current.revision}),
                }
            }
            return delete, DeploymentChange.deleted(current, by)

        self._change(tenant, name, change, catalog=catalog, counted="deletes")

    def deployment_history(self, tenant: str, name: str) -> list[DeploymentChange]:
        found = self.table.query(layout.deployment_pk(tenant, name), layout.HISTORY)
        return [CHANGE.load(d) for d in found]

    def running_rollouts(self) -> list[tuple[str, str]]:
        """A scan of deployment items with a running rollout, or one whose endpoint weights
        wait (the controller's own credentials; it reads the keys alone). Its cost grows with
        the table: once a minute."""
        params: dict[str, Any] = {
            "TableName": self.table.name,
            "FilterExpression": "begins_with(sk, :d) AND (#r.#s = :running OR #r.#e.#p = :yes)",
            "ExpressionAttributeNames": {"#r": "rollout", "#s": "state", "#e": "endpoint", "#p": "pending"},
            "ExpressionAttributeValues": {
                ":d": {"S": layout.DEPLOYMENT},
                ":running": {"S": "running"},
                ":yes": {"BOOL": True},
            },
            "ProjectionExpression": "pk, sk",
            "Select": "SPECIFIC_ATTRIBUTES",  # what the controller's IAM policy allows
        }
        return self.scan_names(params, layout.in_tenant(layout.DEPLOYMENT))

    def _item(self, dep: Deployment) -> dict[str, Any]:
        return item(layout.tenant(dep.tenant), layout.deployment_sk(dep.name), DEPLOYMENT.dump(dep))

    def _change(
        self,
        tenant: str,
        name: str,
        change: Callable[[Deployment | None, int], tuple[dict[str, Any], DeploymentChange]],
        refs_read: list[Deployment] | None = None,
        catalog: Catalog | None = None,
        counted: str = "writes",
    ) -> None:
        """Write a deployment and its history entry at once; `change` decides from the current
        deployment (or None) and the write's generation (its history entry's number), and raises
        NotFound/Conflict when the write must not happen.
        Each of `refs_read` must be stored still as it was read, and the tenant's catalog counter
        of the other kind than `counted` (a write's, or a delete's) still as in `catalog` (the
        write moves `counted` on; None: not looked at), or StaleRead."""
        history_pk = layout.deployment_pk(tenant, name)
        deployment_key = key(layout.tenant(tenant), layout.deployment_sk(name))
        counter_key = key(history_pk, layout.HISTORY_COUNTER)
        unchanged = [self._as_read(tenant, seen) for seen in refs_read or ()]

        def step() -> None:
            read = self.table.send(
                "transact_get_items",
                TransactItems=[
                    {"Get": {"TableName": self.table.name, "Key": deployment_key}},
                    {"Get": {"TableName": self.table.name, "Key": counter_key}},
                ],
            )
            found, counter = (r.get("Item") for r in read["Responses"])
            current = DEPLOYMENT.load(unmarshal(found)) if found else None
            seq = int(unmarshal(counter)["last_seq"]) if counter else 0
            write, entry = change(current, seq + 1)
            counter_write = {
                "TableName": self.table.name,
                "Item": marshal({"pk": history_pk, "sk": layout.HISTORY_COUNTER, "last_seq": seq + 1}),
                **(condition("#seq = :seq", {"#seq": "last_seq"}, {":seq": seq}) if seq else absent()),
            }
            entry_write = {
                "TableName": self.table.name,
                "Item": item(history_pk, layout.history_sk(seq + 1), CHANGE.dump(entry)),
                **absent(),
            }
            own = [write, {"Put": counter_write}, {"Put": entry_write}]
            if catalog is not None:
                own.append(catalog_step(self.table.name, layout.tenant(tenant), catalog, counted))
            try:
                self.table.send("transact_write_items", TransactItems=[*own, *unchanged])
            except Refused as refused:
                # Cancellation reasons come item by item, in the order sent.
                if catalog is not None and refused.reasons[3:4] == ["ConditionalCheckFailed"]:
                    raise catalog_changed("policy" if counted == "writes" else "deployment") from None
                for seen, reason in zip(refs_read or (), refused.reasons[len(own) :], strict=False):
                    if reason == "ConditionalCheckFailed":
                        raise changed_meanwhile(seen.name) from None
                raise

        self.table.optimistic(step)

    def _as_read(self, tenant: str, seen: Deployment) -> dict[str, Any]:
        """A transaction's check that `seen` is stored still as it was read: the same write of
        its name (`generation`, which never repeats), or for one written before generations were
        kept, the same revision and time of last write (`sluice.registry.guards.same_write`)."""
        if seen.generation:
            check = condition("#gen = :gen", {"#gen": "generation"}, {":gen": seen.generation})
        else:
            check = condition(
                "#rev = :rev AND #at = :at AND attribute_not_exists(#gen)",
                {"#rev": "revision", "#at": "updated_at", "#gen": "generation"},
                {":rev": seen.revision, ":at": seen.updated_at},
            )
        return {
            "ConditionCheck": {
                "TableName": self.table.name,
                "Key": key(layout.tenant(tenant), layout.deployment_sk(seen.name)),
                **check,
            }
        }

