"""Domain objects as the JSON the management API returns: each wire model is built from the
domain object by pydantic (`from_attributes`), so a field is declared once, in the schema."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.types.management import DeploymentChangeOut, DeploymentOut, KeyOut, ModelOut, VersionOut

if TYPE_CHECKING:
    from pydantic import BaseModel

    from sluice.domain import ApiKey, Deployment, DeploymentChange, Model, ModelVersion
    from sluice.domain.locations import Roots


def present(schema: type[BaseModel], obj: object, **extra: Any) -> dict[str, Any]:
    out = schema.model_validate(obj, from_attributes=True)
    if extra:
        out = out.model_copy(update=extra)
    return out.model_dump(mode="json")


def model_out(model: Model, latest: int | None = None) -> dict[str, Any]:
    return present(ModelOut, model, latest_version=latest)


def version_out(version: ModelVersion, roots: Roots | None = None) -> dict[str, Any]:
    """With `roots` (the API), the artifact named relative to the tenant's roots (`store/…`)."""
    if roots is None:
        return present(VersionOut, version)
    return present(VersionOut, version, artifact_uri=roots.shown(version.artifact_uri))


def deployment_out(deployment: Deployment) -> dict[str, Any]:
    return present(DeploymentOut, deployment)


def change_out(change: DeploymentChange) -> dict[str, Any]:
    return present(DeploymentChangeOut, change)


def key_out(key: ApiKey, plain: str | None = None) -> dict[str, Any]:
    body = present(KeyOut, key)
    if plain is None:
        body.pop("key", None)
    else:
        body["key"] = plain
    return body
