"""Which CloudWatch alarms a tenant's rollout may watch: the controller reads alarms with a
role of its own, across the account, so a rollout names only its tenant's (a tenant watching
another's alarm would learn when it fires)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sluice.registry import Registry


def tenants_alarms(tenant: str, deployments: Iterable[str]) -> frozenset[str]:
    """The CloudWatch alarms sluice made for `tenant`'s deployments' endpoints (scaling from
    zero): alarms a rollout of `tenant`'s may watch, beside those named `<tenant>/…`."""
    from sluice.endpoints.names import endpoint_name
    from sluice.endpoints.scaling import BACKLOG

    assert BACKLOG.from_zero is not None
    return frozenset(BACKLOG.from_zero.alarm_name(endpoint_name(tenant, name)) for name in deployments)


def foreign_alarms(registry: Registry, tenant: str, names: Iterable[str]) -> list[str]:
    """Those of `names` that are not `tenant`'s: neither named `<tenant>/…` (how an operator
    names the alarms it makes for a tenant; no tenant's name holds a `/`) nor made by sluice
    for one of its deployments (the registry asked only where needed). The controller reads
    alarms with its own role, across the account: a tenant watching another's alarm would
    learn when it fires."""
    left = [name for name in names if not name.startswith(f"{tenant}/")]
    if not left:
        return []
    own = tenants_alarms(tenant, (d.name for d in registry.list_deployments(tenant)))
    return [name for name in left if name not in own]
