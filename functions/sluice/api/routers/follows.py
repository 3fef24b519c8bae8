"""Follow bindings (admin scope): a deployment that follows a model registry, each new version
pushed and rolled out by the binding's plan; what became of each version, with its reason."""

from __future__ import annotations

from fastapi import APIRouter, Response

from sluice.api.deps import AdminDep, FollowsDep
from sluice.api.presenters import follow_out
from sluice.api.responses import MANAGEMENT, JSONResponse, answers, errors
from sluice.types.follows import FollowOut, FollowStart

router = APIRouter(prefix="/api/v1", tags=["follows"], responses=errors(*MANAGEMENT), default_response_class=JSONResponse)


@router.post("/deployments/{name}/follow", status_code=201, summary="Follow a model registry")
@answers(FollowOut)
def follow(name: str, body: FollowStart, principal: AdminDep, follows: FollowsDep) -> JSONResponse:
    made = follows.follow(
        principal, name, source=body.registry, rollout=body.rollout, model=body.model,
        tracking_uri=body.tracking_uri, tag_back=body.tag_back,
    )  # fmt: skip
    return JSONResponse(follow_out(made), status_code=201)


@router.get("/deployments/{name}/follow", summary="The binding, and what became of each version")
@answers(FollowOut)
def show_follow(name: str, principal: AdminDep, follows: FollowsDep) -> JSONResponse:
    return JSONResponse(follow_out(follows.get(principal, name)))


@router.delete("/deployments/{name}/follow", status_code=204, summary="Stop following (a running rollout goes on)")
def unfollow(name: str, principal: AdminDep, follows: FollowsDep) -> Response:
    follows.unfollow(principal, name)
    return Response(status_code=204)


@router.get("/follows", summary="Every binding of your deployments")
@answers(list[FollowOut])
def list_follows(principal: AdminDep, follows: FollowsDep) -> JSONResponse:
    return JSONResponse([follow_out(f) for f in follows.list(principal)])
