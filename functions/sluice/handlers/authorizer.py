"""The API Gateway REQUEST authorizer: an API key in, an IAM policy and a principal out.

The key comes from `Authorization: Bearer <key>` or, failing that, `x-api-key`. A valid key
yields an Allow policy whose context carries the principal (`tenant`, space-separated
`scopes`, `subject` = the key id) for the API function, and the usage-plan key that meters
the tenant. Anything else yields an explicit Deny, returned rather than raised so that a
wrong key is not counted as a Lambda error. The key itself is never logged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerRequestEvent,
    APIGatewayAuthorizerResponse,
)

from sluice.domain.errors import Unauthenticated
from sluice.services.keys import split_key

if TYPE_CHECKING:
    from sluice.wiring import Container

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
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> UsagePlans:
        env = os.environ if environ is None else environ
        tenants = env.get("SLUICE_USAGE_TENANTS", "")
        return cls(
            key_prefix=env.get("SLUICE_USAGE_KEY_PREFIX", ""),
            tenants=frozenset(t for t in tenants.split(",") if t),
        )

    def key_for(self, tenant: str) -> str | None:
        if not self.key_prefix:
            return None
        return f"{self.key_prefix}{tenant if tenant in self.tenants else DEFAULT_PLAN}"


def api_key_of(event: APIGatewayAuthorizerRequestEvent) -> str | None:
    """The presented key: a Bearer token first, then `x-api-key`; None when there is none."""
    headers = event.headers  # case-insensitive
    scheme, _, token = (headers.get("authorization") or "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return (headers.get("x-api-key") or "").strip() or None


def authorize(
    event: APIGatewayAuthorizerRequestEvent, *, container: Container, usage: UsagePlans
) -> dict[str, Any]:
    arn = event.parsed_arn
    key = api_key_of(event)
    principal = None
    if key is not None:
        try:
            principal = container.keys.authenticate(key)
        except Unauthenticated:
            principal = None
    if principal is None:
        from sluice.observability import get_logger

        # Only the public key id, and only when the key has the right shape.
        key_id = split_key(key) if key else None
        get_logger().info(
            "api key rejected", extra={"reason": "invalid" if key else "missing", "key_id": key_id}
        )
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
        context={
            "tenant": principal.tenant,
            "scopes": " ".join(sorted(principal.scopes)),
            "subject": principal.subject,
        },
        usage_identifier_key=usage.key_for(principal.tenant),
    )
    # Results are not cached by API Gateway (two possible headers), so one route would do;
    # all routes keeps the policy valid for whatever the FastAPI app serves.
    allowed.allow_all_routes()
    return allowed.asdict()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from sluice.wiring import get_container

    return authorize(
        APIGatewayAuthorizerRequestEvent(event),
        container=get_container(),
        usage=_usage_plans(),
    )


_usage: UsagePlans | None = None


def _usage_plans() -> UsagePlans:
    global _usage
    if _usage is None:
        _usage = UsagePlans.from_environ()
    return _usage
