"""The WebSocket Lambda: API Gateway WebSocket API routes `$connect`, `$default`, `$disconnect`.

- `$connect` runs after the REQUEST authorizer (`sluice.handlers.authorizer.authorize_connect`)
  allowed the key; the tenant it found, and the handshake's headers (messages carry none),
  ride in `requestContext.authorizer` of every later message of the connection, where no
  client can set them. The answer accepts `sluice.v1` when the client offered it (a
  browser's `bearer.<key>` subprotocol is never echoed).
- `$default` answers one message with `sluice.api.socket.Session`, the same core as the local
  route of `sluice serve`, and posts the answer to the connection through the API Gateway
  Management API. A client that has gone (GoneException) is no error. A key revoked since the
  connection opened gets a 401 answer, and the connection is closed.
- `$disconnect` has nothing to clean up: sluice keeps no connection state.

A connection's message rate (`SLUICE_WEBSOCKET_RATE_LIMIT`) is counted in the registry in fixed
windows (`sluice.services.connection_rate`), since its messages reach many containers; the
stage's throttling caps the whole API. Messages are at most 128 KB, and so is an answer.
"""

from __future__ import annotations

from sluice.startup import pause_in_lambda, started

pause_in_lambda()  # in Lambda, the collector off until this module has loaded (`sluice.startup`)

import base64
import binascii
import json
import time
from typing import TYPE_CHECKING, Any

from sluice.inference.loop import container_loop
from sluice.observability import get_logger
from sluice.services.keys import SUBPROTOCOL, subprotocols

if TYPE_CHECKING:
    from sluice.clients import AwsClients
    from sluice.domain import Principal
    from sluice.services.connection_rate import ConnectionRate
    from sluice.wiring import Container

logger = get_logger()
MAX_ANSWER_BYTES = 128 * 1024  # what post_to_connection takes
OK = {"statusCode": 200}


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from sluice.wiring import get_container

    return route(event, container=get_container())


def route(event: dict[str, Any], *, container: Container, clients: AwsClients | None = None) -> dict[str, Any]:
    key = (event.get("requestContext") or {}).get("routeKey")
    if key == "$connect":
        return connect(event)
    if key == "$disconnect":
        return OK
    return container_loop().run_until_complete(message(event, container=container, clients=clients))


def principal_of(event: dict[str, Any]) -> Principal | None:
    """The principal the `$connect` authorizer put in the connection's context."""
    from sluice.domain import Principal

    context = (event.get("requestContext") or {}).get("authorizer") or {}
    tenant = context.get("tenant")
    if not tenant:
        return None
    scopes = str(context.get("scopes") or "").replace(",", " ").split()
    return Principal(str(tenant), frozenset(scopes), str(context.get("subject") or context.get("principalId") or ""))


def headers_of(event: dict[str, Any]) -> dict[str, str]:
    """The handshake's headers the `$connect` authorizer kept (`services.keys.handshake_headers`),
    for a message to be routed as on `sluice serve`; none where it kept none."""
    kept = ((event.get("requestContext") or {}).get("authorizer") or {}).get("headers")
    try:
        found = json.loads(kept) if kept else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def connect(event: dict[str, Any]) -> dict[str, Any]:
    if principal_of(event) is None:  # only reachable without the authorizer: refuse
        return {"statusCode": 401}
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    if SUBPROTOCOL in subprotocols(headers.get("sec-websocket-protocol")):
        return {**OK, "headers": {"Sec-WebSocket-Protocol": SUBPROTOCOL}}
    return OK


async def message(event: dict[str, Any], *, container: Container, clients: AwsClients | None = None) -> dict[str, Any]:
    from sluice.api.socket import Session, encode
    from sluice.registry.scope import use_tenant

    context = event.get("requestContext") or {}
    principal = principal_of(event) if context else None
    if principal is None:
        return {"statusCode": 401}
    if not all(isinstance(context.get(k), str) and context.get(k) for k in ("connectionId", "domainName", "stage")):
        return {"statusCode": 400}  # nowhere to answer: refused before any model runs (API Gateway always sends them)
    connection = context["connectionId"]
    body = event.get("body") or ""
    raw: bytes | str = body
    with use_tenant(principal.tenant):  # the registry acts for this tenant alone
        session = Session(
            container, principal, connection_id=connection, headers=headers_of(event), rate_limit=_rate(container, principal.tenant)
        )
        unread = None
        try:
            if event.get("isBase64Encoded"):
                raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            from sluice.domain.errors import InvalidRequest

            raw, unread = "", InvalidRequest("the message is not the base64 its event says it is (isBase64Encoded)", field="body")
        answer = await session.answer(raw, unread=unread)  # its key and rate checked first, whatever it holds
    data = encode(answer)
    if len(data) > MAX_ANSWER_BYTES:
        from sluice.api.socket import error_answer, rows_field
        from sluice.domain.errors import PayloadTooLarge

        too_large = PayloadTooLarge(
            f"the answer is over the {MAX_ANSWER_BYTES} bytes a WebSocket message may carry: ask for fewer rows or outputs",
            field=rows_field(raw),
        )
        data = encode(error_answer(too_large, answer.get("request_id")))
    management = _management(event, clients or _clients(container))
    if _post(management, connection, data) and session.revoked:
        _close(management, connection)
    container.predictions.flush_stats_if_due()
    return OK


def _rate(container: Container, tenant: str) -> ConnectionRate | None:
    """The connection's message rate, counted in the registry: each message may reach
    another container, so no container's own count would hold."""
    spec = container.settings.websocket.websocket_rate_limit
    if not spec:
        return None
    from sluice.services.connection_rate import ConnectionRate

    return ConnectionRate(container.registry, spec, tenant)


def _clients(container: Container) -> AwsClients:
    from sluice.handlers.adapters import clients

    return clients(container.settings)


def _management(event: dict[str, Any], clients: AwsClients) -> Any:
    """The Management API client of the API and stage the message came through."""
    from sluice.handlers.adapters import management_api

    context = event["requestContext"]
    return management_api(clients, context["domainName"], context["stage"])


POST_TRIES = 3  # a throttled post (LimitExceededException) tried this many times in all, 0.1 s, then 0.2 s apart


def _post(management: Any, connection: str, data: bytes) -> bool:
    """The answer sent to the connection; whether the connection is still there (False: the
    client has gone). The Management API throttling (LimitExceededException) is tried again a
    few times; a post it still refuses, or refuses otherwise (Forbidden, PayloadTooLarge), is
    logged with its code and the message's request id lost to the client, not a failed
    invocation (nothing retries a `$default` message, and its prediction is counted already)."""
    from botocore.exceptions import ClientError

    for attempt in range(POST_TRIES):
        try:
            management.post_to_connection(ConnectionId=connection, Data=data)
            return True
        except management.exceptions.GoneException:
            logger.info("websocket client gone before its answer", extra={"connection": connection})
            return False
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "LimitExceededException" and attempt + 1 < POST_TRIES:
                time.sleep(0.1 * 2**attempt)
                continue
            logger.warning("websocket answer not sent", extra={"connection": connection, "error_code": code, "bytes": len(data)})
            return True
    return True


def _close(management: Any, connection: str) -> None:
    from botocore.exceptions import ClientError

    try:
        management.delete_connection(ConnectionId=connection)
    except management.exceptions.GoneException:
        return
    except ClientError as exc:  # a revoked key's connection left open: logged, the next message is refused all the same
        logger.warning("websocket connection not closed", extra={"connection": connection, "error_code": exc.response.get("Error", {}).get("Code", "")})


started()  # the function's start-up is over: the collector back on (`sluice.startup`)
