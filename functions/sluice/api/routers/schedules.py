"""Batch schedules (predict scope): a deployment, an input templated by the scheduled time,
a cron or rate expression; each run is a batch job that names its schedule."""

from __future__ import annotations

from fastapi import APIRouter, Response

from sluice.api.deps import PrincipalDep, RootsDep, SchedulesDep
from sluice.api.responses import MANAGEMENT, JSONResponse, answers, errors
from sluice.batch.schedule_wire import (
    ScheduleCreate,
    ScheduleDetail,
    ScheduleOut,
    schedule_detail,
    schedule_out,
)
from sluice.batch.wire import job_fields

router = APIRouter(prefix="/api/v1/batch-schedules", tags=["batch"], responses=errors(*MANAGEMENT, 502, 503), default_response_class=JSONResponse)


@router.post("", status_code=201, summary="Create a batch schedule")
@answers(ScheduleOut)
def create_schedule(body: ScheduleCreate, principal: PrincipalDep, schedules: SchedulesDep, roots: RootsDep) -> JSONResponse:
    schedule = schedules.create(
        principal,
        name=body.name,
        expression=body.expression,
        timezone=body.timezone,
        overlap=body.overlap,
        state="PAUSED" if body.paused else "ENABLED",
        **job_fields(body),
    )
    return JSONResponse(schedule_out(schedule, roots), status_code=201)


@router.get("", summary="List your batch schedules")
@answers(list[ScheduleOut])
def list_schedules(principal: PrincipalDep, schedules: SchedulesDep, roots: RootsDep) -> JSONResponse:
    return JSONResponse([schedule_out(s, roots) for s in schedules.list(principal)])


@router.get("/{name}", summary="A schedule, its next run and its recent runs")
@answers(ScheduleDetail)
def get_schedule(name: str, principal: PrincipalDep, schedules: SchedulesDep, roots: RootsDep) -> JSONResponse:
    return JSONResponse(schedule_detail(schedules.show(principal, name), roots))


@router.post("/{name}/pause", summary="Pause a schedule")
@answers(ScheduleOut)
def pause_schedule(name: str, principal: PrincipalDep, schedules: SchedulesDep, roots: RootsDep) -> JSONResponse:
    return JSONResponse(schedule_out(schedules.pause(principal, name), roots))


@router.post("/{name}/resume", summary="Resume a schedule (what it missed is not run)")
@answers(ScheduleOut)
def resume_schedule(name: str, principal: PrincipalDep, schedules: SchedulesDep, roots: RootsDep) -> JSONResponse:
    return JSONResponse(schedule_out(schedules.resume(principal, name), roots))


@router.delete("/{name}", status_code=204, summary="Delete a schedule (its jobs stay)")
def delete_schedule(name: str, principal: PrincipalDep, schedules: SchedulesDep) -> Response:
    schedules.delete(principal, name)
    return Response(status_code=204)
