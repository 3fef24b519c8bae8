"""The API Gateway REQUEST authorizer: an API key in, an IAM policy and a principal out; for
the REST API, and for the WebSocket API's `$connect` (`authorize_connect`).

The key comes from `Authorization: Bearer <key>` or, failing that, `x-api-key`. A valid key
yields an Allow policy whose context carries the principal (`tenant`, space-separated
`scopes`, `subject` = the key id) for the API function, and the usage-plan key that meters
the tenant. Anything else yields an explicit Deny, returned rather than raised so that a
wrong key is not counted as a Lambda error. The key itself is never logged.
"""

from __future__ import annotations

from sluice.startup import pause_in_lambda, started

pause_in_lambda()  # in Lambda, the collector off until this module has loaded (`sluice.startup`)

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerRequestEvent,
    APIGatewayAuthorizerResponse,
)

from sluice.domain.errors import Unauthenticated
from sluice.services.keys import handshake_headers, presented_key, split_key
from sluice.settings import get_settings

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.services.keys import KeyService
    from sluice.settings import AuthSettings

# Tenant names start with a letter or digit, so this suffix cannot collide with one.
DEFAULT_PLAN = "_default"


@dataclass(frozen=True, slots=True)
class UsagePlans:
    """Which API Gateway usage plan a tenant's requests count against.

    The REST API takes its usage-plan key from this authorizer (`ApiKeySourceType:
    AUTHORIZER`), so a key value only names a plan and is never a credential. Tenants with
    a plan of their own get `<prefix><tenant>`, every other tenant `<prefix>_default`.
    """

    key_prefix: str = ""
    tenants: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, auth: AuthSettings) -> UsagePlans:
        """The plans the stack configured (`SLUICE_USAGE_KEY_PREFIX`, `SLUICE_USAGE_TENANTS`)."""
        return cls(key_prefix=auth.usage_key_prefix, tenants=frozenset(t.strip() for t in auth.usage_tenants.split(",") if t.strip()))  # "acme, globex" names globex too

    def key_for(self, tenant: str) -> str | None:
        if not self.key_prefix:
            return None
        return f"{self.key_prefix}{tenant if tenant in self.tenants else DEFAULT_PLAN}"


def api_key_of(event: APIGatewayAuthorizerRequestEvent, *, handshake: bool = False) -> str | None:
    """The presented key: a Bearer token first, then `x-api-key` (then, opening a WebSocket
    (`handshake`), a `bearer.<key>` subprotocol); None when there is none."""
    return presented_key(event.headers, handshake=handshake)  # case-insensitive


def _principal_of(key: str | None, keys: KeyService) -> Principal | None:
    principal = None
    if key is not None:
        try:
            principal = keys.authenticate(key)
        except Unauthenticated:
            principal = None
    if principal is None:
        from sluice.observability import get_logger

        # Only the public key id, and only when the key has the right shape.
        key_id = split_key(key) if key else None
        get_logger().info(
            "api key rejected", extra={"reason": "invalid" if key else "missing", "key_id": key_id}
        )
    return principal


def _context(principal: Principal) -> dict[str, str]:
    return {
        "tenant": principal.tenant,
        "scopes": " ".join(sorted(principal.scopes)),
        "subject": principal.subject,
    }


def authorize_connect(event: APIGatewayAuthorizerRequestEvent, *, keys: KeyService) -> dict[str, Any]:
    """A WebSocket API's `$connect`: allowed or denied on that route alone (its method ARN ends
    in `$connect`, with no HTTP method); the context, with the handshake's headers as JSON
    (`handshake_headers`), rides along with every later message of the connection as
    `requestContext.authorizer`."""
    principal = _principal_of(api_key_of(event, handshake=True), keys)
    allowed = principal is not None
    context: dict[str, str] = {}
    if principal is not None:  # messages carry no headers: the handshake's ride with the principal
        context = {**_context(principal), "headers": json.dumps(handshake_headers(event.headers), ensure_ascii=False)}
    return {
        "principalId": principal.subject if principal is not None else "anonymous",
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {"Action": "execute-api:Invoke", "Effect": "Allow" if allowed else "Deny", "Resource": event["methodArn"]}
            ],
        },
        **({"context": context} if context else {}),
    }


def authorize(
    event: APIGatewayAuthorizerRequestEvent, *, keys: KeyService, usage: UsagePlans
) -> dict[str, Any]:
    arn = event.parsed_arn
    principal = _principal_of(api_key_of(event), keys)
    if principal is None:
        denied = APIGatewayAuthorizerResponse(
            principal_id="anonymous",
            region=arn.region,
            aws_account_id=arn.aws_account_id,
            api_id=arn.api_id,
            stage=arn.stage,
            partition=arn.partition,
        )
        denied.deny_all_routes()
        return denied.asdict()

    allowed = APIGatewayAuthorizerResponse(
        principal_id=principal.subject,
        region=arn.region,
        aws_account_id=arn.aws_account_id,
        api_id=arn.api_id,
        stage=arn.stage,
        partition=arn.partition,
        context=_context(principal),
        usage_identifier_key=usage.key_for(principal.tenant),
    )
    # Results are not cached by API Gateway (two possible headers), so one route would do;
    # all routes keeps the policy valid for whatever the FastAPI app serves.
    allowed.allow_all_routes()
    return allowed.asdict()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from sluice.wiring import get_container

    container = get_container()
    if (event.get("requestContext") or {}).get("eventType") == "CONNECT":  # a WebSocket API
        return authorize_connect(APIGatewayAuthorizerRequestEvent(event), keys=container.keys)
    usage = UsagePlans.from_settings(container.settings.auth)
    return authorize(APIGatewayAuthorizerRequestEvent(event), keys=container.keys, usage=usage)


# The settings are read as the function starts, as every other handler's are: one that does
# not read stops the start-up, naming it, rather than every request's authorization.
get_settings()

started()  # the function's start-up is over: the collector back on (`sluice.startup`)
