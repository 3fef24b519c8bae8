"""Readiness of the process: whether the registry answers. The one check behind `/readyz`,
`/v2/health/ready` and the gRPC service's ServerReady."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.registry import Registry


def registry_answers(registry: Registry) -> bool:
    """A read of a key no one has: any answer, found or not, is the registry answering."""
    try:
        registry.get_api_key("readiness-probe")
    except Exception:
        return False
    return True
