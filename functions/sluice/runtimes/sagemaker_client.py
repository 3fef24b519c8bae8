"""The `sagemaker-runtime` client sluice invokes endpoints with, and the same client pointed
at a local Triton container's own SageMaker port (the local twin of an endpoint): the request
rewritten to the container's `/invocations`, its errors framed as SageMaker frames them
(ModelError), so the bytes sent and the errors mapped are the ones met on AWS."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from sluice.clients import AwsClients


def build_client(
    clients: AwsClients | None = None,
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    timeout_s: float = 60.0,
    connections: int = 32,
) -> Any:
    """A `sagemaker-runtime` client; with `endpoint_url`, one that talks to a local container."""
    if clients is None:
        from sluice.clients import default_clients

        clients = default_clients(region)
    client = clients.client(
        "sagemaker-runtime",
        region=region or ("us-east-1" if endpoint_url else None),
        endpoint_url=endpoint_url,
        connect_timeout=min(timeout_s, 5.0),
        read_timeout=timeout_s,
        max_pool_connections=connections,
        total_max_attempts=1,  # retried here, on throttling only
        unsigned=bool(endpoint_url),
    )
    if endpoint_url:
        attach_local_container(client, endpoint_url)
    return client


def attach_local_container(client: Any, endpoint_url: str) -> None:
    """Make `client.invoke_endpoint` reach a Triton container's own SageMaker port."""
    base = urlsplit(endpoint_url)
    prefix = base.path.rstrip("/")

    def to_invocations(request: Any, **_: Any) -> None:
        parts = urlsplit(request.url)
        request.url = urlunsplit((base.scheme, base.netloc, f"{prefix}/invocations", parts.query, ""))

    def as_sagemaker_error(response_dict: dict[str, Any], **_: Any) -> None:
        # SageMaker answers a container's non-2xx with a 424 ModelError carrying the original.
        status = response_dict.get("status_code", 200)
        headers = response_dict["headers"]
        if status < 400 or "x-amzn-errortype" in headers:
            return
        body = response_dict.get("body") or b""
        original = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else str(body)
        response_dict["status_code"] = 424
        headers["x-amzn-ErrorType"] = "ModelError:"  # botocore's own case-insensitive dict
        headers["Content-Type"] = "application/json"
        response_dict["body"] = json.dumps(
            {
                "ErrorCode": "CLIENT_ERROR_FROM_MODEL" if status < 500 else "SERVER_ERROR_FROM_MODEL",
                "Message": f"Received {'client' if status < 500 else 'server'} error ({status}) from primary with message \"{original}\".",
                "OriginalMessage": original,
                "OriginalStatusCode": status,
            }
        ).encode()

    events = client.meta.events  # the factory shares clients: attach once per client
    events.register("before-send.sagemaker-runtime.InvokeEndpoint", to_invocations, unique_id="sluice-local-invocations")
    events.register("before-parse.sagemaker-runtime.InvokeEndpoint", as_sagemaker_error, unique_id="sluice-local-model-error")
