"""Progressive rollouts of a deployment (admin scope): start, status, pause, resume, abort;
and replay of its captured requests against a candidate."""

from __future__ import annotations

from fastapi import APIRouter

from sluice.api.deps import AdminDep, ReplayDep, RolloutsDep
from sluice.api.presenters import deployment_out, rollout_status_out
from sluice.api.responses import MANAGEMENT, JSONResponse, answers, errors
from sluice.types.management import DeploymentOut
from sluice.types.rollouts import ReplayStart, RolloutStart, RolloutStatus

router = APIRouter(prefix="/api/v1/deployments", tags=["rollouts"], responses=errors(*MANAGEMENT), default_response_class=JSONResponse)


@router.post(
    "/{name}/rollout",
    status_code=201,
    summary="Start a progressive rollout",
)
@answers(DeploymentOut)
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
    summary="The rollout: its step, gates, and the numbers now",
)
@answers(RolloutStatus)
def rollout_status(name: str, principal: AdminDep, rollouts: RolloutsDep) -> JSONResponse:
    return JSONResponse(rollout_status_out(*rollouts.status(principal, name)))


def _rollout_action(action: str, summary: str) -> None:
    """`POST /{name}/rollout/<action>`: the rollout service's `action` (pause, resume or abort)
    on the deployment's rollout, answered with the deployment after it."""

    def act(name: str, principal: AdminDep, rollouts: RolloutsDep) -> JSONResponse:
        return JSONResponse(deployment_out(getattr(rollouts, action)(principal, name)))

    router.add_api_route(f"/{{name}}/rollout/{action}", answers(DeploymentOut)(act), methods=["POST"], summary=summary, name=f"{action}_rollout")


_rollout_action("pause", "Hold the rollout at its step")
_rollout_action("resume", "Go on from the step it was paused at")
_rollout_action("abort", "Stop and go back to the stable policy")


@router.post("/{name}/replay", summary="Run captured requests against a candidate and compare (an offline shadow)")
def replay(name: str, body: ReplayStart, principal: AdminDep, replays: ReplayDep) -> JSONResponse:
    return JSONResponse(replays.replay(principal, name, since=body.since, until=body.until, against=body.against))
