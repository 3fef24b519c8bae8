"""Progressive rollouts of a deployment (admin scope): start, status, pause, resume, abort;
and replay of its captured requests against a candidate."""

from __future__ import annotations

from fastapi import APIRouter

from sluice.api.deps import AdminDep, ReplayDep, RolloutsDep
from sluice.api.presenters import deployment_out, rollout_status_out
from sluice.api.responses import MANAGEMENT, JSONResponse, errors
from sluice.types.management import DeploymentOut
from sluice.types.rollouts import ReplayStart, RolloutStart, RolloutStatus

router = APIRouter(prefix="/api/v1/deployments", tags=["rollouts"], responses=errors(*MANAGEMENT))


@router.post(
    "/{name}/rollout",
    response_model=DeploymentOut,
    status_code=201,
    summary="Start a progressive rollout",
)
def start_rollout(
    name: str, body: RolloutStart, principal: AdminDep, rollouts: RolloutsDep
) -> JSONResponse:
    dep = rollouts.start(
        principal, name, to=body.to, steps=body.steps, every=body.every, gates=body.gate,
        min_requests=body.min_requests, alarms=body.alarms, routing_key=body.routing_key,
        mirror_percent=body.mirror_percent,
    )  # fmt: skip
    return JSONResponse(deployment_out(dep), status_code=201)


@router.get(
    "/{name}/rollout",
    response_model=RolloutStatus,
    summary="The rollout: its step, gates, and the numbers now",
)
def rollout_status(name: str, principal: AdminDep, rollouts: RolloutsDep) -> JSONResponse:
    return JSONResponse(rollout_status_out(*rollouts.status(principal, name)))


@router.post(
    "/{name}/rollout/pause", response_model=DeploymentOut, summary="Hold the rollout at its step"
)
def pause_rollout(name: str, principal: AdminDep, rollouts: RolloutsDep) -> JSONResponse:
    return JSONResponse(deployment_out(rollouts.pause(principal, name)))


@router.post(
    "/{name}/rollout/resume",
    response_model=DeploymentOut,
    summary="Go on from the step it was paused at",
)
def resume_rollout(name: str, principal: AdminDep, rollouts: RolloutsDep) -> JSONResponse:
    return JSONResponse(deployment_out(rollouts.resume(principal, name)))


@router.post(
    "/{name}/rollout/abort",
    response_model=DeploymentOut,
    summary="Stop and go back to the stable policy",
)
def abort_rollout(name: str, principal: AdminDep, rollouts: RolloutsDep) -> JSONResponse:
    return JSONResponse(deployment_out(rollouts.abort(principal, name)))


@router.post("/{name}/replay", summary="Run captured requests against a candidate and compare (an offline shadow)")
def replay(name: str, body: ReplayStart, principal: AdminDep, replays: ReplayDep) -> JSONResponse:
    return JSONResponse(replays.replay(principal, name, since=body.since, until=body.until, against=body.against))
