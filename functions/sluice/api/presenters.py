"""Domain objects as the JSON the management API returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.domain import ApiKey, Deployment, DeploymentChange, Model, ModelVersion


def model_out(model: Model, latest: int | None = None) -> dict[str, Any]:
    return {
        "name": model.name,
        "description": model.description,
        "created_at": model.created_at,
        "created_by": model.created_by,
        "latest_version": latest,
    }


def version_out(version: ModelVersion) -> dict[str, Any]:
    signature = version.signature.to_dict()
    signature.pop("metadata", None)
    return {
        "model": version.model,
        "version": version.version,
        "runtime": version.runtime,
        "artifact_uri": version.artifact_uri,
        "sha256": version.sha256,
        "size_bytes": version.size_bytes,
        "signature": signature,
        "created_at": version.created_at,
        "created_by": version.created_by,
    }


def deployment_out(deployment: Deployment) -> dict[str, Any]:
    return {
        "name": deployment.name,
        "policy": deployment.policy,
        "revision": deployment.revision,
        "description": deployment.description,
        "created_at": deployment.created_at,
        "updated_at": deployment.updated_at,
        "updated_by": deployment.updated_by,
    }


def change_out(change: DeploymentChange) -> dict[str, Any]:
    return {
        "revision": change.revision,
        "at": change.at,
        "by": change.by,
        "old_policy": change.old_policy,
        "new_policy": change.new_policy,
    }


def key_out(key: ApiKey, plain: str | None = None) -> dict[str, Any]:
    body = {
        "key_id": key.key_id,
        "tenant": key.tenant,
        "scopes": sorted(key.scopes),
        "name": key.name,
        "created_at": key.created_at,
        "revoked_at": key.revoked_at,
    }
    if plain is not None:
        body["key"] = plain
    return body
