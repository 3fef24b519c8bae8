"""API keys of the caller's own tenant (admin scope)."""

from __future__ import annotations

from fastapi import APIRouter

from sluice.api.deps import AdminDep, KeysDep
from sluice.api.presenters import key_out
from sluice.api.responses import MANAGEMENT, JSONResponse, answers, errors
from sluice.types.management import KeyCreate, KeyOut

router = APIRouter(prefix="/api/v1/keys", tags=["keys"], responses=errors(*MANAGEMENT), default_response_class=JSONResponse)


@router.post("", status_code=201, summary="Create a key in your tenant (shown once)")
@answers(KeyOut)
def create_key(body: KeyCreate, principal: AdminDep, keys: KeysDep) -> JSONResponse:
    key, plain = keys.create(principal.tenant, body.scopes, name=body.name, issuer=principal)
    return JSONResponse(key_out(key, plain), status_code=201)


@router.get("", summary="List your tenant's keys")
@answers(list[KeyOut])
def list_keys(principal: AdminDep, keys: KeysDep) -> JSONResponse:
    return JSONResponse([key_out(k) for k in keys.list(principal)])


@router.delete("/{key_id}", summary="Revoke a key")
@answers(KeyOut)
def revoke_key(key_id: str, principal: AdminDep, keys: KeysDep) -> JSONResponse:
    return JSONResponse(key_out(keys.revoke(principal, key_id)))
