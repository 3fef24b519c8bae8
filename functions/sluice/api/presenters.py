"""Domain objects as the JSON the management API returns: each wire model is built from the
domain object by pydantic (`from_attributes`), so a field is declared once, in the schema."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.domain.rollouts import endpoint_weights
from sluice.types.follows import FollowOut
from sluice.types.management import DeploymentChangeOut, DeploymentOut, KeyOut, ModelOut, VersionOut

if TYPE_CHECKING:
    from pydantic import BaseModel

    from sluice.domain import ApiKey, Deployment, DeploymentChange, Model, ModelVersion
    from sluice.domain.follows import Follow
    from sluice.domain.locations import Roots
    from sluice.domain.rollouts import Rollout


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


def rollout_status_out(deployment: Deployment, now: dict[str, Any] | None) -> dict[str, Any]:
    """A deployment's rollout and, while it runs or is paused, the numbers now
    (`RolloutService.status`): the body of `GET .../rollout` and `sluice rollout status`."""
    out: dict[str, Any] = {"deployment": deployment.name, "revision": deployment.revision, "rollout": None}
    if deployment.rollout is None:
        return out
    out["rollout"] = rollout_out(deployment.rollout)
    if now is not None:
        out["now"] = now
    return out


def rollout_out(rollout: Rollout) -> dict[str, Any]:
    return {
        "state": rollout.state,
        "to": f"{rollout.model}:{rollout.version}",
        "steps": list(rollout.steps),
        "step": rollout.step,
        "weight": rollout.weight,
        "every_s": rollout.every_s,
        "gates": rollout.gates,
        "min_requests": rollout.min_requests,
        "alarms": list(rollout.alarms),
        "routing_key": rollout.routing_key,
        "mirror_percent": rollout.mirror_percent,
        "stable": rollout.stable,
        "started_at": rollout.started_at,
        "started_by": rollout.started_by,
        "step_started_at": rollout.step_started_at,
        "updated_at": rollout.updated_at,
        "reason": rollout.reason,
        "decided": rollout.decided,
        "endpoint": rollout_endpoint_out(rollout),
    }


def rollout_endpoint_out(rollout: Rollout) -> dict[str, Any] | None:
    ep = rollout.endpoint
    if ep is None:
        return None
    return {
        "name": ep.name,
        "candidate_variant": ep.candidate,
        "candidate_version": ep.candidate_version,
        "stable_variants": ep.stable,
        "added": ep.added,
        "ready": ep.ready,
        "weights": endpoint_weights(rollout),
        "pending": ep.pending,
        "waiting_since": ep.waiting_since,
        "applied": ep.weights,
        "before": ep.before,
    }


def follow_out(follow: Follow) -> dict[str, Any]:
    return present(FollowOut, follow)
