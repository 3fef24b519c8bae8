"""Deployments: the names clients call, each routing by a validated policy."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.domain import Deployment, check_name, now
from sluice.errors import Conflict
from sluice.routing import parse_policy, referenced_versions
from sluice.services.models import require_found

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import Principal
    from sluice.registry import DeploymentChange, Registry


def single_policy(model: str, version: int) -> dict[str, Any]:
    return {"kind": "single", "model": model, "version": version}


class DeploymentService:
    def __init__(self, registry: Registry, on_change: Callable[[str, str], None] | None = None) -> None:
        self.registry = registry
        self._on_change = on_change or (lambda tenant, name: None)

    def _validated(self, tenant: str, policy: Any) -> dict[str, Any]:
        node = parse_policy(policy)
        for target in referenced_versions(node):
            require_found(
                self.registry.get_version, tenant, target.model, target.version, field="policy"
            )
        return node.to_dict()

    def resolve_shorthand(self, principal: Principal, model: str, version: int | None) -> dict[str, Any]:
        """`model` (+ optional `version`, default latest) as a single-version policy."""
        if version is None:
            latest = require_found(self.registry.latest_version, principal.tenant, model, field="model")
            version = latest.version
        return single_policy(model, version)

    def create(
        self, principal: Principal, name: str, policy: dict[str, Any], *, description: str = ""
    ) -> Deployment:
        principal.require("admin")
        check_name(name, field="name")
        stored = self.registry.create_deployment(
            Deployment(
                tenant=principal.tenant,
                name=name,
                policy=self._validated(principal.tenant, policy),
                description=description,
                updated_by=principal.subject,
            )
        )
        self._on_change(principal.tenant, name)
        return stored

    def update(
        self,
        principal: Principal,
        name: str,
        policy: dict[str, Any],
        *,
        expected_revision: int | None = None,
    ) -> Deployment:
        principal.require("admin")
        current = self.registry.get_deployment(principal.tenant, name)
        if expected_revision is not None and expected_revision != current.revision:
            raise Conflict(
                f"deployment '{name}' is at revision {current.revision}, not {expected_revision}",
                field="revision",
            )
        updated = replace(
            current,
            policy=self._validated(principal.tenant, policy),
            updated_at=now(),
            updated_by=principal.subject,
        )
        stored = self.registry.update_deployment(updated, expected_revision=current.revision)
        self._on_change(principal.tenant, name)
        return stored

    def get(self, principal: Principal, name: str) -> Deployment:
        return self.registry.get_deployment(principal.tenant, name)

    def list(self, principal: Principal) -> list[Deployment]:
        return self.registry.list_deployments(principal.tenant)

    def delete(self, principal: Principal, name: str) -> None:
        principal.require("admin")
        self.registry.delete_deployment(principal.tenant, name, by=principal.subject)
        self._on_change(principal.tenant, name)

    def history(self, principal: Principal, name: str) -> list[DeploymentChange]:
        changes = self.registry.deployment_history(principal.tenant, name)
        if not changes:
            self.registry.get_deployment(principal.tenant, name)
        return changes

