"""The groups of who may ask how much: admission (each key's rate and requests in flight, each
process's predictions), API keys and usage plans, and WebSocket connections' limits."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, field_validator, model_validator

from sluice.settings.process import Group, MiB, Seconds, in_lambda


class AdmissionSettings(Group):
    """Read by the HTTP edge, the WebSocket route and the gRPC service, which count each key's
    requests and each process's predictions, and by the wiring (the batching queue's bound)."""

    title: ClassVar[str] = "Admission"

    rate_limit: str = Field(
        default="",
        description="`sluice serve`: requests one API key may make, in the `limits` package's notation: "
        "`10/second`, `600/minute`, or several joined by `;` (`600/minute;20/second`: 600 a minute "
        "with bursts of at most 20 in any second), counted in a moving window. Past it the request "
        "is answered 429 with Retry-After, after authentication and admission (a request refused for "
        "too many in flight costs none of it) and before its body is read. Empty: "
        "off. Needs the `serve` extra. Not for AWS: API Gateway usage plans throttle each tenant there "
        "(see `usage_key_prefix`).",
    )
    max_in_flight_per_key: int = Field(
        default_factory=lambda: 0 if in_lambda() else 64,
        ge=0,
        description="`sluice serve`: requests one API key may have in flight at once in one process: its HTTP "
        "requests, WebSocket messages and gRPC calls in a worker (an open stream is one). "
        "Past it a request is answered 429 with Retry-After (`too_many_in_flight`), after authentication and "
        "before its body is read; a WebSocket message gets that error message, a gRPC call RESOURCE_EXHAUSTED. "
        "Counted per process: with N workers a key may have up to N times as many. 0: off (the default in "
        "Lambda, where a container takes one request at a time and API Gateway throttles each tenant).",
    )
    max_predictions_in_flight: int = Field(
        default_factory=lambda: 0 if in_lambda() else 32,
        ge=0,
        description="`sluice serve`: predictions one process works on at once, every key and tenant together: "
        "a worker's simple-JSON and v2 predictions, WebSocket messages and gRPC inference calls. Past it a prediction is refused at once, before its body is read: 503 with Retry-After "
        "(`overloaded`), a WebSocket error answer, gRPC UNAVAILABLE. It bounds what a worker holds (memory) and "
        "how long an admitted request waits behind the others (latency); raise it for deployments whose "
        "runtime answers from another machine (Triton, SageMaker), where a request in flight mostly waits. "
        "Health, metrics, the console and management routes are never refused by it. 0: off (the default in "
        "Lambda, where a container takes one request at a time).",
    )
    tenant_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="`sluice serve`: the share of `max_predictions_in_flight` one tenant may hold while another "
        "tenant has predictions in flight in the same process or was refused for lack of room in the last "
        "seconds; past it that tenant's prediction is answered 429 with Retry-After (`tenant_overloaded`). A "
        "tenant alone may use every slot. 1: no share, first come first served.",
    )
    batching_max_queue: int = Field(
        default=256,
        ge=1,
        description="Requests of one model version waiting for adaptive batching (in its open batch, or in "
        "joined calls under way) in one process, at most; past it a request is refused at once with 503 and "
        "Retry-After (`overloaded`) instead of queueing behind them.",
    )
    rate_limit_storage: str = Field(
        default="memory://",
        description="Where `rate_limit` counts: `memory://` counts in each worker process (with N workers "
        "a key may get up to N times the limit); a `redis://[:password@]host:port[/db]` URL (or `rediss://`, "
        "`redis+unix://`) shares the counts between workers and machines (needs the `redis` package, 5.2 or "
        "later: `pip install redis`). Any other is refused when the settings are read.",
    )

    @field_validator("rate_limit_storage")
    @classmethod
    def _check_storage(cls, value: str) -> str:
        """A storage `RateLimit` can open, its client installed: else every request would be a 500.
        Named by its scheme alone: the URL may hold a password."""
        import importlib.util
        from urllib.parse import urlsplit

        scheme = urlsplit(value).scheme.removeprefix("async+")
        if scheme not in RATE_LIMIT_STORAGES:
            given = f"{scheme}://" if scheme else "a value without a scheme"
            raise ValueError(f"SLUICE_RATE_LIMIT_STORAGE: {given} is not a storage sluice counts in: memory:// or redis://HOST:PORT (rediss://, redis+unix://)")
        needs = RATE_LIMIT_STORAGES[scheme]
        if needs and importlib.util.find_spec(needs) is None:
            raise ValueError(f"SLUICE_RATE_LIMIT_STORAGE: {scheme}:// needs the `{needs}` package: pip install {needs}")
        return value


# The storages of `limits` that `RateLimit` opens (asynchronously), and the package each needs.
RATE_LIMIT_STORAGES = {"memory": None, "redis": "redis", "rediss": "redis", "redis+unix": "redis"}


class AuthSettings(Group):
    """Read by the key service (how long a checked key is trusted) and the authorizer."""

    title: ClassVar[str] = "Keys and usage plans"

    auth_cache_ttl_s: Seconds = Field(
        default_factory=lambda: 0.0 if in_lambda() else 30.0,
        ge=0,
        description="How long a process trusts an API key it has checked. With SQLite a revoke reaches "
        "every local process at once regardless (a marker file); with DynamoDB this is the bound on "
        "how long a revoked key may still work in a container (0 by default in Lambda: every lookup reads).",
    )
    usage_key_prefix: str = Field(
        default="",
        description="The authorizer's usage-plan key prefix: it returns `<prefix><tenant>` or "
        "`<prefix>_default` as the API Gateway usage identifier; empty: none.",
    )
    usage_tenants: str = Field(
        default="", description="Comma-separated tenants with a usage plan of their own (the authorizer)."
    )


# One or more `limits` rates: `100/second`, `600 per minute`, `10/5 seconds`, joined by `;` or `,`.
_ONE_RATE = r"\s*[1-9][0-9]*\s*(?:/|per)\s*(?:[1-9][0-9]*\s*)?(?:second|minute|hour|day|month|year)s?\s*"
RATE = re.compile(rf"{_ONE_RATE}(?:[;,]{_ONE_RATE})*")


class WebSocketSettings(Group):
    """Read by both WebSocket doors: `sluice serve`'s route and the WebSocket Lambda."""

    title: ClassVar[str] = "WebSocket"

    websocket_rate_limit: str = Field(
        default="100/second",
        description="Messages one WebSocket connection may send, in the `limits` notation of "
        "`rate_limit`; past it a message is answered with a `rate_limited` error message and the "
        "connection stays open. Empty: off. `sluice serve` counts a moving window in memory; the "
        "WebSocket Lambda counts fixed windows in the registry, shared by its containers.",
    )
    websocket_max_in_flight: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="`sluice serve`: predictions of one WebSocket connection processed at once; past it "
        "the server reads that connection's next message only when an answer has gone out.",
    )
    websocket_max_message_bytes: int = Field(
        default=1 * MiB,
        ge=1024,
        description="Largest WebSocket message answered; a larger one gets a `payload_too_large` error "
        "message. On AWS, API Gateway takes messages of at most 128 KB.",
    )

    @model_validator(mode="after")
    def _check_rate(self) -> WebSocketSettings:
        if self.websocket_rate_limit and not RATE.fullmatch(self.websocket_rate_limit):
            # Checked by shape: `limits` is imported only once a connection opens.
            raise ValueError(f"SLUICE_WEBSOCKET_RATE_LIMIT {self.websocket_rate_limit!r} is not a rate such as 100/second or 600/minute;20/second")
        return self
