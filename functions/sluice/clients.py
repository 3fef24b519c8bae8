"""The one place boto3 clients are built: one session per process, the same retry mode and
timeouts for every adapter, and endpoint URLs from settings (a local stand-in per service).

Adapters take an `AwsClients` (or a ready client, in tests) and ask it for what they need on
first use, so a Lambda that never touches a service never imports or builds its client. The
keywords that say where an adapter's clients come from are declared once, `AwsSource` and
`AwsArgs`: an adapter takes them as `**aws: Unpack[AwsArgs]`.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How one client is built: `AwsClients.client`'s keywords. `presigning`: a client for
    presigned S3 URLs and POSTs (SigV4, the bucket's regional virtual-hosted address: botocore
    would otherwise sign them with the retired SigV2 or address the global endpoint, which a
    bucket outside us-east-1 answers with a redirect)."""

    region: str | None = None
    endpoint_url: str | None = None
    connect_timeout: float | None = None
    read_timeout: float | None = None
    max_pool_connections: int | None = None
    total_max_attempts: int | None = None
    unsigned: bool = False
    presigning: bool = False


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
        self._clients: dict[tuple[str, ClientOptions], Any] = {}

    def client(self, service: str, /, **options: Any) -> Any:
        """A client for `service`, built once per distinct `ClientOptions(**options)`."""
        key = (service, ClientOptions(**options))
        found = self._clients.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                found = self._clients[key] = self._build(*key)
        return found

    def _build(self, service: str, how: ClientOptions) -> Any:
        import boto3
        from botocore.config import Config

        retries: dict[str, Any] = {"mode": self.retry_mode}
        if how.total_max_attempts is not None:
            retries["total_max_attempts"] = how.total_max_attempts
        elif self.max_attempts is not None:
            retries["max_attempts"] = self.max_attempts
        options: dict[str, Any] = {"retries": retries}
        if how.connect_timeout is not None:
            options["connect_timeout"] = how.connect_timeout
        if how.read_timeout is not None:
            options["read_timeout"] = how.read_timeout
        if how.max_pool_connections is not None:
            options["max_pool_connections"] = how.max_pool_connections
        if how.unsigned:
            from botocore import UNSIGNED

            options["signature_version"] = UNSIGNED
        elif how.presigning:
            options["signature_version"] = "s3v4"
            options["s3"] = {"addressing_style": "virtual", "us_east_1_regional_endpoint": "regional"}
        if self._session is None:
            self._session = boto3.session.Session()
        return self._session.client(
            service,
            region_name=how.region or self.region,
            endpoint_url=how.endpoint_url or self.endpoint_urls.get(service),
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


class AwsSource(TypedDict, total=False):
    """Where an adapter's clients come from: `clients`, the factory the wiring gave, else the
    process's factory for `region` (`default_clients`); `region` is the adapter's too."""

    clients: AwsClients | None
    region: str | None


class AwsArgs(AwsSource, total=False):
    """`AwsSource`, or `client`: a ready client (a test's), used as it is."""

    client: Any


def aws_for(region: str | None) -> AwsSource:
    """What the wiring gives an AWS adapter: the process's factory for `region`, and `region`."""
    return {"clients": default_clients(region), "region": region}


def lazy_client(service: str, aws: AwsArgs, /, *, given: Any = None, **options: Any) -> LazyClient:
    """`service`'s client from where `aws` says, on first use (see `LazyClient`): a ready one
    (`given`, else `aws`'s `client`), else from the factory; a `region` among the client's
    `options` is the one the process's factory is for too."""
    ready = given if given is not None else aws.get("client")
    return LazyClient(ready, aws.get("clients"), options.get("region", aws.get("region")), service, **options)


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
