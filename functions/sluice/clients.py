"""The one place boto3 clients are built: one session per process, the same retry mode and
timeouts for every adapter, and endpoint URLs from settings (a local stand-in per service).

Adapters take an `AwsClients` (or a ready client, in tests) and ask it for what they need on
first use, so a Lambda that never touches a service never imports or builds its client.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping


class AwsClients:
    """Builds and keeps boto3 clients, one per service and configuration.

    boto3's default session is not thread-safe, so clients come from one session of our own,
    built under a lock; the clients themselves are safe to share between threads."""

    def __init__(
        self,
        *,
        region: str | None = None,
        endpoint_urls: Mapping[str, str] | None = None,
        retry_mode: str = "standard",
        max_attempts: int | None = None,
    ) -> None:
        self.region = region
        self.endpoint_urls = dict(endpoint_urls or {})
        self.retry_mode = retry_mode
        self.max_attempts = max_attempts
        self._lock = threading.Lock()
        self._session: Any = None
        self._clients: dict[tuple[Any, ...], Any] = {}

    def client(
        self,
        service: str,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        max_pool_connections: int | None = None,
        total_max_attempts: int | None = None,
        unsigned: bool = False,
        presigning: bool = False,
    ) -> Any:
        """A client for `service`, built once per distinct set of options. `presigning`: one
        for presigned S3 URLs and POSTs (SigV4, the bucket's regional virtual-hosted address:
        botocore would otherwise sign them with the retired SigV2 or address the global
        endpoint, which a bucket outside us-east-1 answers with a redirect)."""
        key = (service, region, endpoint_url, connect_timeout, read_timeout, max_pool_connections, total_max_attempts, unsigned, presigning)
        found = self._clients.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                found = self._clients[key] = self._build(service, *key[1:])
        return found

    def _build(
        self,
        service: str,
        region: str | None,
        endpoint_url: str | None,
        connect_timeout: float | None,
        read_timeout: float | None,
        max_pool_connections: int | None,
        total_max_attempts: int | None,
        unsigned: bool,
        presigning: bool,
    ) -> Any:
        import boto3
        from botocore.config import Config

        retries: dict[str, Any] = {"mode": self.retry_mode}
        if total_max_attempts is not None:
            retries["total_max_attempts"] = total_max_attempts
        elif self.max_attempts is not None:
            retries["max_attempts"] = self.max_attempts
        options: dict[str, Any] = {"retries": retries}
        if connect_timeout is not None:
            options["connect_timeout"] = connect_timeout
        if read_timeout is not None:
            options["read_timeout"] = read_timeout
        if max_pool_connections is not None:
            options["max_pool_connections"] = max_pool_connections
        if unsigned:
            from botocore import UNSIGNED

            options["signature_version"] = UNSIGNED
        elif presigning:
            options["signature_version"] = "s3v4"
            options["s3"] = {"addressing_style": "virtual", "us_east_1_regional_endpoint": "regional"}
        if self._session is None:
            self._session = boto3.session.Session()
        return self._session.client(
            service,
            region_name=region or self.region,
            endpoint_url=endpoint_url or self.endpoint_urls.get(service),
            config=Config(**options),
        )


_defaults: dict[str | None, AwsClients] = {}
_defaults_lock = threading.Lock()


def default_clients(region: str | None = None) -> AwsClients:
    """The process's factory for a region, for adapters no wiring gave one (scripts, tools).
    boto3's own `AWS_ENDPOINT_URL_<SERVICE>` variables still apply to every client."""
    with _defaults_lock:
        found = _defaults.get(region)
        if found is None:
            found = _defaults[region] = AwsClients(region=region)
        return found


def client_from(clients: AwsClients | None, region: str | None, service: str, /, **options: Any) -> Any:
    """`service`'s client from the factory wiring gave an adapter, else from the process's
    factory for `region`: what an adapter's lazily built `client` asks for on first use."""
    return (clients if clients is not None else default_clients(region)).client(service, **options)


class LazyClient:
    """An adapter's client: the one it was given (a test's), else `client_from(clients,
    region, service, **options)`, asked for on first use and kept. Call it for the client."""

    __slots__ = ("_build", "_client")

    def __init__(self, given: Any, clients: AwsClients | None, region: str | None, service: str, /, **options: Any) -> None:
        self._client = given
        self._build = functools.partial(client_from, clients, region, service, **options)

    def __call__(self) -> Any:
        if self._client is None:  # the factory builds it once, under its lock: racing threads get the same one
            self._client = self._build()
        return self._client


def forget_default_clients() -> None:
    """Drops every factory `default_clients` made, with its session and clients: the next
    adapter that asks builds new ones, with fresh credentials and connections (after a
    SnapStart restore, the snapshot's may be expired or closed)."""
    with _defaults_lock:
        _defaults.clear()
