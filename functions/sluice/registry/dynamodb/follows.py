"""Follow bindings in DynamoDB: one item per binding in the tenant's partition
(`pk=T#<tenant>`, `sk=F#<deployment>`), created only if absent, each update a put conditional
on the `revision` read. Who follows what, across tenants, is a scan that reads the keys and
`watch` alone (as the rollout controller's scan reads the keys and `rollout`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.registry.codec import FOLLOW
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import Part, Refused, condition, item
from sluice.registry.refusals import follow_moved, no_follow, taken

if TYPE_CHECKING:
    from sluice.domain.follows import Follow

# What the scan of `followers` reads: what the event handler's IAM policy allows it.
SCAN_ATTRIBUTES = ("pk", "sk", "watch")


class DynamoFollows(Part):
    def create_follow(self, follow: Follow) -> Follow:
        stored = replace(follow, revision=1)
        self.put_new(self._follow_item(stored), taken=taken("follow binding of deployment", follow.deployment, field="deployment"))
        return stored

    def get_follow(self, tenant: str, deployment: str) -> Follow:
        return FOLLOW.load(self.found(layout.tenant(tenant), layout.follow_sk(deployment), missing=no_follow(deployment)))

    def list_follows(self, tenant: str) -> list[Follow]:
        return [FOLLOW.load(d) for d in self.table.query(layout.tenant(tenant), layout.FOLLOW)]

    def update_follow(self, follow: Follow, *, expected_revision: int) -> Follow:
        stored = replace(follow, revision=expected_revision + 1)
        try:
            self.table.send(
                "put_item", TableName=self.table.name, Item=self._follow_item(stored),
                # the same binding at the revision read: one made again starts at 1 too, its time of
                # making tells it apart (none stored: a binding kept before the time was)
                **condition(
                    "#r = :r AND (attribute_not_exists(#c) OR #c = :c)", {"#r": "revision", "#c": "created_at"},
                    {":r": expected_revision, ":c": follow.created_at},
                ),
            )  # fmt: skip
        except Refused:
            now = self.table.get(layout.tenant(follow.tenant), layout.follow_sk(follow.deployment))
            if now is None:
                raise no_follow(follow.deployment) from None
            raise follow_moved(follow.deployment, int(now["revision"]), expected_revision) from None
        return stored

    def delete_follow(self, tenant: str, deployment: str) -> None:
        self.delete_found(layout.tenant(tenant), layout.follow_sk(deployment), missing=no_follow(deployment))

    def followers(self, watch: str | None = None) -> list[tuple[str, str]]:
        wanted = {":f": {"S": layout.FOLLOW}} | ({":w": {"S": watch}} if watch is not None else {})
        params: dict[str, Any] = {
            "TableName": self.table.name,
            "FilterExpression": "begins_with(sk, :f)" + (" AND #w = :w" if watch is not None else ""),
            "ExpressionAttributeNames": {"#w": "watch"}, "ExpressionAttributeValues": wanted,
            "ProjectionExpression": "pk, sk, #w", "Select": "SPECIFIC_ATTRIBUTES",  # what the handler's policy allows
        }  # fmt: skip
        return self.scan_names(params, layout.in_tenant(layout.FOLLOW))

    def _follow_item(self, follow: Follow) -> dict[str, object]:
        return item(layout.tenant(follow.tenant), layout.follow_sk(follow.deployment), FOLLOW.dump(follow))
