"""API Gateway's two event kinds translated as Mangum translates them, in fewer steps.

Mangum (0.22) turns a REST API (v1) or HTTP API (v2) event into an ASGI scope and the app's
response into the Lambda result through a chain of small functions: four `infer` class methods
tried in turn, each header's name lowered in one dictionary and again in another, the response's
headers copied twice more to drop the excluded ones (none here), and, for an HTTP API event,
the whole scope built a second time to read the event's version. On the request path of every prediction that was
about 80,000 machine instructions of a lookup graph's 890,000 (`benchmarks.instructions`).

`RestEvent` and `HttpEvent` are Mangum's `APIGateway` and `HTTPGateway` with the same results
made in one pass each, through Mangum's own helpers for the path, the server and the body. They are the same rule, not a second one: every scope and every result
is equal to Mangum's for the same event and response (`tests/unit/test_gateway_events.py`
draws events and responses and compares the two), and anything they do not expect (a header
that is not text, a version other than 2.0, an excluded header) is handed to Mangum's own code,
which then answers, or raises, as it always has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from mangum.handlers import APIGateway, HTTPGateway
from mangum.handlers.utils import (
    get_server_and_port,
    handle_base64_response_body,
    strip_api_gateway_path,
)

if TYPE_CHECKING:
    from mangum.types import LambdaConfig, Scope


def gateway_handler(event: Any, context: Any, config: LambdaConfig) -> RestEvent | HttpEvent | None:
    """The handler Mangum would infer for `event` where that is `APIGateway` or `HTTPGateway`
    (its order: an ALB event first, then an HTTP API's, then a REST API's); None otherwise."""
    if type(event) is not dict or config["exclude_headers"]:
        return None
    context_ = event.get("requestContext")
    if "requestContext" not in event or type(context_) is not dict or "elb" in context_:
        return None
    if "version" in event:
        return HttpEvent(event, context, config)
    if "resource" in event:
        return RestEvent(event, context, config)
    return None


def _scope(event: dict[str, Any], context: Any, headers: dict[str, Any], method: Any, path: Any, query: bytes, ip: Any, config: LambdaConfig) -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "http_version": "1.1",
        "headers": [[k.encode(), v.encode()] for k, v in headers.items()],
        "path": strip_api_gateway_path(path, api_gateway_base_path=config["api_gateway_base_path"]),
        "raw_path": None,
        "root_path": "",
        "scheme": headers.get("x-forwarded-proto", "https"),
        "query_string": query,
        "server": get_server_and_port(headers),
        "client": (ip, 0),
        "asgi": {"version": "3.0", "spec_version": "2.0"},
        "aws.event": event,
        "aws.context": context,
    }


class RestEvent(APIGateway):
    """A REST API (v1) event: `APIGateway`'s scope and result."""

    @property
    def scope(self) -> Scope:
        event = self.event
        try:
            raw = event.get("headers", {}) or {}
            multi = event.get("multiValueHeaders")
            # Mangum takes each value from `headers`, then replaces it (in its place) with
            # `multiValueHeaders`'s, joined: `headers | joined`. In API Gateway's usual event
            # both hold the same names in the same order, and `joined` alone is that.
            joined = {k.lower(): ", ".join(v) if isinstance(v, list) else "" for k, v in multi.items()} if multi else {}
            same = multi and (not raw or (type(raw) is dict and list(raw) == list(multi)))
            headers = joined if same else {k.lower(): v for k, v in raw.items()} | joined
            params = event.get("multiValueQueryStringParameters", {}) or event.get("queryStringParameters", {})
            query = urlencode(params, doseq=True).encode() if params else b""
            ip = event["requestContext"].get("identity", {}).get("sourceIp")
            return _scope(event, self.context, headers, event["httpMethod"], event["path"], query, ip, self.config)
        except Exception:  # Mangum's own steps answer (or raise) for what these do not expect
            return super().scope

    def __call__(self, response: Any) -> dict[str, Any]:
        try:
            headers: dict[str, str] = {}
            multi: dict[str, list[str]] = {}
            for key, value in response["headers"]:
                name = key.decode().lower()
                if name in multi:
                    multi[name].append(value.decode())
                elif name in headers:
                    multi[name] = [headers.pop(name), value.decode()]
                else:
                    headers[name] = value.decode()
            body, encoded = handle_base64_response_body(response["body"], headers, self.config["text_mime_types"])
            return {"statusCode": response["status"], "headers": headers, "multiValueHeaders": multi, "body": body, "isBase64Encoded": encoded}
        except Exception:
            return super().__call__(response)  # type: ignore[no-any-return]


class HttpEvent(HTTPGateway):
    """An HTTP API (v2) event: `HTTPGateway`'s scope and result (a version other than 2.0,
    which Mangum reads as a REST event's fields, is left to it). Mangum builds the scope again
    to answer; this reads the version from the event once the scope has been built (so an
    event whose scope cannot be is answered by Mangum's code, which raises as it did)."""

    scoped = False

    @property
    def scope(self) -> Scope:
        event = self.event
        try:
            if event["version"] != "2.0":
                raise LookupError("not 2.0")
            http = event["requestContext"]["http"]
            headers = {k.lower(): v for k, v in event.get("headers", {}).items()}
            ip, path, method = http["sourceIp"], http["path"], http["method"]
            query = event.get("rawQueryString", "").encode()
            if event.get("cookies"):
                headers["cookie"] = "; ".join(event.get("cookies", []))
            scope = _scope(event, self.context, headers, method, path, query, ip, self.config)
            self.scoped = True
            return scope
        except Exception:
            return super().scope

    def __call__(self, response: Any) -> dict[str, Any]:
        try:
            if not self.scoped or self.event["version"] != "2.0":
                raise LookupError("not built, or not 2.0")
            headers: dict[str, str] = {}
            cookies: list[str] = []
            for key, value in response["headers"]:
                name, text = key.decode().lower(), value.decode()
                if name == "set-cookie":
                    cookies.append(text)
                else:
                    if name in headers:
                        text = f"{headers[name]},{text}"
                    headers[name] = text
            raw = response["body"]
            if "content-type" not in headers and raw is not None:
                headers["content-type"] = "application/json"
            body, encoded = handle_base64_response_body(raw, headers, self.config["text_mime_types"])
            out = {"statusCode": response["status"], "body": body, "headers": headers or None, "cookies": cookies or None, "isBase64Encoded": encoded}
            return {k: v for k, v in out.items() if v is not None}
        except Exception:
            return super().__call__(response)  # type: ignore[no-any-return]
