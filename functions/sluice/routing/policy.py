"""A deployment's policy as a small tree of nodes, parsed and validated from plain dicts.

Node kinds: `single` (one model version). The traffic-policy work adds `split`, `shadow`,
`ensemble` and references to other deployments on the same shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluice.domain import check_name
from sluice.errors import BadRequest


@dataclass(frozen=True, slots=True)
class Target:
    """One model version chosen to answer."""

    model: str
    version: int


@dataclass(frozen=True, slots=True)
class Single:
    model: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "single", "model": self.model, "version": self.version}


Node = Single


def parse_policy(data: Any, *, field: str = "policy") -> Node:
    if not isinstance(data, dict):
        raise BadRequest("a policy is an object with a 'kind'", field=field)
    kind = data.get("kind", "single")
    if kind == "single":
        model = check_name(data.get("model"), field=f"{field}.model")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise BadRequest("version must be a positive integer", field=f"{field}.version")
        return Single(model, version)
    raise BadRequest(f"unknown policy kind {kind!r}; expected 'single'", field=f"{field}.kind")


def pick_target(node: Node, *, version: int | None = None) -> Target:
    """Choose who answers. `version` pins a version of the node's model."""
    return Target(node.model, version if version is not None else node.version)


def referenced_versions(node: Node) -> list[Target]:
    """Every model version the policy can route to, for validation when it is saved."""
    return [Target(node.model, node.version)]
