"""Who the presented key is: its tenant, key id and scopes (any scope). The web console asks
this once at sign-in, to name the tenant and to tell the user which actions need `admin`."""

from __future__ import annotations

from fastapi import APIRouter

from sluice.api.deps import PrincipalDep
from sluice.api.responses import AUTHENTICATED, JSONResponse, answers, errors
from sluice.types.management import SessionOut

router = APIRouter(prefix="/api/v1/session", tags=["keys"], responses=errors(*AUTHENTICATED), default_response_class=JSONResponse)


@router.get("", summary="The tenant, key id and scopes of the key presented")
@answers(SessionOut)
def session(principal: PrincipalDep) -> JSONResponse:
    return JSONResponse({"tenant": principal.tenant, "key_id": principal.subject, "scopes": sorted(principal.scopes)})
