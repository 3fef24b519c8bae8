"""Deployments (admin scope to change): create, get, list, update target, delete, history."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from sluice.api.deps import AdminDep, DeploymentsDep, PredictionsDep, PrincipalDep
from sluice.api.presenters import change_out, deployment_out
from sluice.api.responses import MANAGEMENT, JSONResponse, answers, errors
from sluice.domain.errors import BadRequest
from sluice.domain.policy import policy_dict
from sluice.domain.values import RevisionNumber
from sluice.types.management import (
    DeploymentChangeOut,
    DeploymentCreate,
    DeploymentDetail,
    DeploymentOut,
    DeploymentUpdate,
    Feedback,
    Promote,
)

router = APIRouter(prefix="/api/v1/deployments", tags=["deployments"], responses=errors(*MANAGEMENT), default_response_class=JSONResponse)


def _policy(deployments: DeploymentsDep, principal: AdminDep, body: DeploymentCreate | DeploymentUpdate) -> dict[str, Any] | None:
    if isinstance(body, DeploymentUpdate) and body.policy is None and body.model is None and {"cache", "capture", "batching"} & body.model_fields_set:
        return None  # only the cache, the capture or batching changes
    if (body.policy is None) == (body.model is None):
        raise BadRequest("give either 'model' (and optionally 'version') or 'policy'", field="policy")
    if body.policy is not None:
        return policy_dict(body.policy)
    assert body.model is not None
    return deployments.resolve_shorthand(principal, body.model, body.version)


@router.post("", status_code=201, summary="Create a deployment")
@answers(DeploymentOut)
def create_deployment(body: DeploymentCreate, principal: AdminDep, deployments: DeploymentsDep) -> JSONResponse:
    policy = _policy(deployments, principal, body)
    assert policy is not None
    cache = body.cache.model_dump() if body.cache is not None else None
    capture = body.capture.model_dump() if body.capture is not None else None
    batching = body.batching.model_dump() if body.batching is not None else None
    deployment = deployments.create(
        principal, body.name, policy, description=body.description, cache=cache, capture=capture, batching=batching
    )
    return JSONResponse(deployment_out(deployment), status_code=201)


@router.get("", summary="List deployments")
@answers(list[DeploymentOut])
def list_deployments(principal: AdminDep, deployments: DeploymentsDep) -> JSONResponse:
    return JSONResponse([deployment_out(d) for d in deployments.list(principal)])


@router.get("/{name}", summary="Get a deployment, with the inputs a caller sends and the outputs it answers")
@answers(DeploymentDetail)
async def get_deployment(name: str, principal: AdminDep, deployments: DeploymentsDep, predictions: PredictionsDep) -> JSONResponse:
    from sluice.inference.metadata import tensors_of

    deployment = await run_in_threadpool(deployments.get, principal, name)
    return JSONResponse({**deployment_out(deployment), **await tensors_of(predictions, principal, deployment)})


@router.put("/{name}", summary="Point a deployment at a new target")
@answers(DeploymentOut)
def update_deployment(name: str, body: DeploymentUpdate, principal: AdminDep, deployments: DeploymentsDep) -> JSONResponse:
    changes: dict[str, Any] = {}
    if "cache" in body.model_fields_set:  # left out: stays as it is
        changes["cache"] = body.cache.model_dump() if body.cache is not None else None
    if "capture" in body.model_fields_set:
        changes["capture"] = body.capture.model_dump() if body.capture is not None else None
    if "batching" in body.model_fields_set:
        changes["batching"] = body.batching.model_dump() if body.batching is not None else None
    deployment = deployments.update(
        principal, name, _policy(deployments, principal, body), expected_revision=body.revision, **changes
    )
    return JSONResponse(deployment_out(deployment))


@router.delete("/{name}", status_code=204, summary="Delete a deployment")
def delete_deployment(name: str, principal: AdminDep, deployments: DeploymentsDep) -> None:
    deployments.delete(principal, name)


@router.get("/{name}/stats", summary="Verdicts: per variant and mirror, traffic, errors, latency, agreement")
def deployment_stats(name: str, principal: AdminDep, deployments: DeploymentsDep, revision: RevisionNumber | None = None) -> JSONResponse:
    return JSONResponse(deployments.stats(principal, name, revision=revision))


@router.post("/{name}/promote", summary="Make a shadow mirror the primary")
@answers(DeploymentOut)
def promote_mirror(name: str, body: Promote, principal: AdminDep, deployments: DeploymentsDep) -> JSONResponse:
    return JSONResponse(deployment_out(deployments.promote(principal, name, body.mirror)))


@router.post("/{name}/feedback", summary="Reward the variant that answered a request (bandit splits)")
def feedback(name: str, body: Feedback, principal: PrincipalDep, deployments: DeploymentsDep) -> JSONResponse:
    """`variant`: the (first) variant rewarded; `variants`: each bandit's choice the request
    took, by its path (`m1/a`: variant `a` of the split in ensemble member `m1`)."""
    variants = deployments.feedback(principal, name, body.request_id, body.reward)
    return JSONResponse({"deployment": name, "request_id": body.request_id, "variant": variants[0], "variants": list(variants), "reward": body.reward})


@router.get("/{name}/history", summary="Who changed the policy, when, old -> new")
@answers(list[DeploymentChangeOut])
def deployment_history(name: str, principal: AdminDep, deployments: DeploymentsDep) -> JSONResponse:
    return JSONResponse([change_out(c) for c in deployments.history(principal, name)])
