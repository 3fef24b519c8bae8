"""Registry credentials confined to one tenant by IAM, for the API to use per request.

The CDK app gives the API function `SLUICE_TENANT_ROLE_ARN`: a role that may only reach the
registry items whose partition key is `T#<tenant>` or `T#<tenant>#...`, where `<tenant>` is
the `tenant` session tag of whoever assumed it. `TenantCredentials` assumes it once per tenant
(tagged with that tenant) and keeps a DynamoDB client per tenant whose credentials botocore
refreshes before they expire: one STS call per tenant per container per ~45 minutes.

`TenantRoutingClient` is a DynamoDB client stand-in that sends each call with the credentials
of the tenant bound by `use_tenant` (from the authorizer's context, never from the request
body), and refuses calls made with no tenant bound rather than fall back to the function's
own role. `DynamoRegistry(table, tenant_role_arn=...)` uses it for every tenant partition and
the function's own credentials for API key items (`K#…`), which carry no tenant.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.clients import client_from
from sluice.registry.scope import bound_tenant, use_tenant

if TYPE_CHECKING:
    from sluice.clients import AwsClients

TENANT_TAG = "tenant"
# The tenant names sluice accepts: nothing IAM would read as a wildcard, no key separator.
_TENANT = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}\Z")
__all__ = ["NoTenant", "TenantCredentials", "TenantRoutingClient", "use_tenant"]


class NoTenant(RuntimeError):
    """A registry call was made with tenant-confined credentials but no tenant bound."""


@dataclass(eq=False, slots=True)
class TenantCredentials:
    """A DynamoDB client per tenant, on credentials of the tenant role tagged with it."""

    role_arn: str
    _: KW_ONLY
    clients: AwsClients | None = None
    region: str | None = None
    duration_s: int = 3600
    max_tenants: int = 256
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _by_tenant: OrderedDict[str, Any] = field(default_factory=OrderedDict, init=False, repr=False)

    def client(self, tenant: str) -> Any:
        if not isinstance(tenant, str) or not _TENANT.match(tenant):
            raise ValueError(f"not a tenant name: {tenant!r}")
        with self._lock:
            found = self._by_tenant.get(tenant)
            if found is not None:
                self._by_tenant.move_to_end(tenant)
                return found
        built = self._build(tenant)
        with self._lock:
            found = self._by_tenant.setdefault(tenant, built)
            self._by_tenant.move_to_end(tenant)
            while len(self._by_tenant) > self.max_tenants:
                self._by_tenant.popitem(last=False)
        return found

    def _build(self, tenant: str) -> Any:
        import boto3
        import botocore.session
        from botocore.config import Config
        from botocore.credentials import RefreshableCredentials

        sts = client_from(self.clients, self.region, "sts", region=self.region)

        def fetch() -> dict[str, str]:
            found = sts.assume_role(
                RoleArn=self.role_arn,
                RoleSessionName=f"sluice-{tenant}"[:64],
                DurationSeconds=self.duration_s,
                Tags=[{"Key": TENANT_TAG, "Value": tenant}],
            )["Credentials"]
            return {
                "access_key": found["AccessKeyId"],
                "secret_key": found["SecretAccessKey"],
                "token": found["SessionToken"],
                "expiry_time": found["Expiration"].isoformat(),
            }

        credentials = RefreshableCredentials.create_from_metadata(
            metadata=fetch(), refresh_using=fetch, method="sts-assume-role"
        )
        core = botocore.session.get_session()
        core._credentials = credentials  # botocore's documented-by-use hook for custom refresh
        endpoint = self.clients.endpoint_urls.get("dynamodb") if self.clients else None
        return boto3.session.Session(botocore_session=core).client(
            "dynamodb",
            region_name=self.region or sts.meta.region_name,
            endpoint_url=endpoint,
            config=Config(retries={"mode": "standard"}, connect_timeout=3, read_timeout=10),
        )


class TenantRoutingClient:
    """Looks like one DynamoDB client; each call goes out as the bound tenant."""

    def __init__(self, credentials: TenantCredentials) -> None:
        self._credentials = credentials

    def __getattr__(self, name: str) -> Any:
        tenant = bound_tenant()
        if tenant is None:
            raise NoTenant(f"registry call {name!r} with no tenant bound (use_tenant)")
        return getattr(self._credentials.client(tenant), name)
