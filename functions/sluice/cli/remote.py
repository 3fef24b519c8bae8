"""`sluice predict --api URL`: one prediction through a sluice API (on AWS, or `sluice serve`),
with the standard library's HTTP client.

A body up to `upload_above` bytes is sent in line. A larger one is uploaded first
(`POST /api/v1/uploads`, then the form it answers: an S3 presigned POST, or `sluice serve`'s
own), and the prediction names the upload. A 202 (asynchronous inference) is polled until the
result is there; a 303 is followed, without the API key when it leads elsewhere (a presigned
S3 URL carries its own authorization, and S3 refuses a request that carries two).
"""

from __future__ import annotations

import io
import json
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urljoin, urlsplit

from sluice.domain.errors import SluiceError

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.cli.predict import Flags

# What API Gateway hands the function: 6 MB, less the event's envelope, of a body it passes
# base64-encoded (a third larger): about 4.4 MB. Above this, a body goes through an upload.
UPLOAD_ABOVE = 4 * 1024 * 1024
CHUNK = 1024 * 1024


class RemoteError(SluiceError):
    def __init__(self, status: int, body: Any) -> None:
        found = body if isinstance(body, dict) else {}
        super().__init__(str(found.get("error") or f"the API answered {status}"), field=found.get("field"))
        self.status = status


class Api:
    """A sluice API at `base` (e.g. https://abc.execute-api.eu-west-1.amazonaws.com/v1)."""

    def __init__(self, base: str, key: str, *, timeout_s: float = 60.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self.base = base.rstrip("/") + "/"
        self.key = key
        self.timeout_s = timeout_s
        self.sleep = sleep

    def url(self, path: str) -> str:
        return urljoin(self.base, path.lstrip("/")) if not urlsplit(path).scheme else path

    def _same_origin(self, url: str) -> bool:
        a, b = urlsplit(url), urlsplit(self.base)
        return (a.scheme, a.netloc) == (b.scheme, b.netloc)

    def send(self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """One request, redirects not followed; the API key only to the API's own origin. Only
        http and https: a redirect to `file:` (which urllib would open) is a local file."""
        import http.client
        import urllib.error
        import urllib.request

        scheme = urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise SluiceError(f"{method} to a {scheme or 'relative'} URL refused: only http and https are followed", field="api")
        sent = dict(headers or {})
        if self._same_origin(url):
            sent["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(url, data=body, method=method, headers=sent)
        opener = urllib.request.build_opener(_no_redirects())
        try:
            with opener.open(request, timeout=self.timeout_s) as response:
                return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            # No answer, or none in HTTP: refused, no such host, timed out, a server of another
            # protocol, a URL no request takes.
            from sluice.domain.errors import Unavailable

            reason = getattr(exc, "reason", None) or type(exc).__name__
            from sluice.convert.mlflow_models import (
                without_credentials,  # no user information, query or fragment
            )

            raise Unavailable(f"{method} {without_credentials(url)}: no answer ({reason})", field="api") from None

    def json(self, method: str, path: str, payload: Any = None) -> tuple[int, dict[str, str], Any]:
        data = None if payload is None else json.dumps(payload).encode()
        status, headers, raw = self.send(method, self.url(path), data, {"Content-Type": "application/json"} if data else None)
        return status, headers, _decode(status, raw)

    def upload(self, deployment: str, path: Path) -> str:
        """Upload a JSON body from a file; its upload id."""
        size = path.stat().st_size
        status, _, made = self.json("POST", "/api/v1/uploads", {"deployment": deployment, "content_type": "application/json", "size": size})
        if status != 201:
            raise RemoteError(status, made)
        body, length, content_type = _form(made["fields"], path, size)
        status, _, raw = self.send(made.get("method", "POST"), self.url(made["url"]), body, {"Content-Type": content_type, "Content-Length": str(length)})
        if status not in (200, 201, 204):
            raise RemoteError(status, _decode(status, raw) if raw.startswith(b"{") else {"error": f"the store refused the upload ({status}): {raw[:300]!r}"})
        return str(made["upload_id"])

    def outcome(self, status: int, headers: dict[str, str], body: Any, *, wait_s: float) -> Any:
        """The answer behind a response: itself (2xx), the result once there (202: polled until
        it is no longer pending), what a redirect points at (303)."""
        deadline = time.monotonic() + wait_s
        delay, hops, poll = 0.5, 0, None
        while True:
            if status in (301, 302, 303, 307, 308) and headers.get("location"):
                hops += 1
                if hops > 10:
                    raise SluiceError("too many redirects", field="result")
                status, headers, raw = self.send("GET", self.url(headers["location"]))
                body = _decode(status, raw)
                continue
            pending = isinstance(body, dict) and body.get("status") == "pending"
            if status == 202 or (status == 200 and pending):
                poll = poll or _result_of(status, headers, body)
                if time.monotonic() + delay > deadline:
                    raise SluiceError(f"no result within {wait_s:g} s; poll {poll} later", field="result")
                self.sleep(delay)
                delay = min(delay * 2, 5.0)
                status, headers, raw = self.send("GET", self.url(poll))
                body = _decode(status, raw)
                continue
            if 200 <= status < 300:
                return body
            raise RemoteError(status, body)


def _no_redirects() -> Any:
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # followed by `outcome`, which decides where the key goes

    return NoRedirect


def _decode(status: int, raw: bytes) -> Any:
    """A body as JSON; one that is not, its text as the error (a proxy's HTML page): never a
    success, whatever its status."""
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        text = raw[:300].decode("utf-8", "replace")
        if 200 <= status < 300:
            raise RemoteError(status, {"error": f"the API answered {status} with a body that is not JSON: {text}"}) from None
        return {"error": text}


def _result_of(status: int, headers: dict[str, str], body: Any) -> str:
    """Where an accepted prediction's result will be: its Location, its `result`, or the
    results route of its `id`."""
    found = body if isinstance(body, dict) else {}
    if headers.get("location"):
        return headers["location"]
    if isinstance(found.get("result"), str) and found["result"]:
        return str(found["result"])
    if isinstance(found.get("id"), str) and found["id"]:
        return f"/api/v1/results/{quote(found['id'], safe='')}"
    raise RemoteError(status, {"error": f"the API answered {status} without saying where the result will be (no Location, result or id)"})


class _Stream(io.RawIOBase):
    """The multipart form, read in pieces: the fields, the file, the closing boundary."""

    def __init__(self, head: bytes, path: Path, tail: bytes) -> None:
        self.parts: list[Any] = [io.BytesIO(head), path.open("rb"), io.BytesIO(tail)]

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while self.parts:
            chunk = self.parts[0].read(CHUNK if size is None or size < 0 else size)
            if chunk:
                return chunk
            self.parts.pop(0).close()
        return b""


def _form(fields: dict[str, str], path: Path, size: int) -> tuple[_Stream, int, str]:
    boundary = uuid.uuid4().hex
    head = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode() for name, value in fields.items()
    )
    head += f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    return _Stream(head, path, tail), len(head) + size + len(tail), f"multipart/form-data; boundary={boundary}"


def predict_remote(
    api: Api,
    deployment: str,
    *,
    path: Path | None,
    given: dict[str, Any],
    v2: bool,
    upload_above: int,
    wait_s: float,
    flags: Flags,
) -> Any:
    """The prediction's answer, as the API presents it, to the request `sluice predict` makes
    in this process too (`Flags.applied`: its flags over the file's or the rows given)."""
    route = "/api/v1/predictions"
    if v2:
        pinned = "" if flags.version is None else f"/versions/{flags.version}"
        route = f"/v2/models/{quote(deployment, safe='')}{pinned}/infer"
    if path is not None and path.stat().st_size > upload_above:
        payload: Any = _uploaded_v2(api, deployment, path) if v2 else _uploaded_rows(api, deployment, path)
    elif path is not None:
        from sluice.codecs.json_text import loads_as_python

        payload = loads_as_python(path.read_bytes())
    else:
        payload = dict(given)
    payload = flags.applied(payload, deployment, v2=v2)
    status, headers, body = api.json("POST", route, payload)
    return api.outcome(status, headers, body, wait_s=wait_s)


def _uploaded_rows(api: Api, deployment: str, path: Path) -> dict[str, Any]:
    """A simple-JSON file too large to send in line: its rows (`inputs`, `features` or `batch`)
    uploaded, as an upload holds them, and its other fields (`version`, `options`, ...) sent in
    line beside the upload's id, read by the API's rules as they would be in line."""
    from sluice.domain.requests import ROW_FIELDS

    body = _object_in(path)
    rows = {k: body[k] for k in ROW_FIELDS if body.get(k) is not None}  # as the API reads them
    if len(rows) != 1:
        raise SluiceError("give exactly one of 'inputs', 'features' or 'batch'", field="inputs")  # the API's words
    return {**{k: v for k, v in body.items() if k not in rows}, "upload_id": _upload_json(api, deployment, rows)}


def _uploaded_v2(api: Api, deployment: str, path: Path) -> dict[str, Any]:
    """A v2 file too large to send in line: as it lies where it asks nothing beside its inputs and
    the outputs it names (an asynchronous endpoint gets it unchanged); else its inputs and output
    names uploaded, and its id and parameters sent in line beside the upload's id, where the API
    reads them (an upload read in process gives none), with its outputs only where they ask
    something beyond their names (classification, binary data: a request queued as it lies
    for asynchronous inference refuses them, since its endpoint would never see them)."""
    body = _object_in(path)
    outputs = body.get("outputs") if isinstance(body.get("outputs"), list) else []
    asks = body.get("id") is not None or body.get("parameters") or any(isinstance(o, dict) and o.get("parameters") for o in outputs)
    if not asks:
        return {"inputs": [], "parameters": {"upload_id": api.upload(deployment, path)}}
    named = [{"name": o["name"]} for o in outputs if isinstance(o, dict) and "name" in o]
    upload_id = _upload_json(api, deployment, {"inputs": body.get("inputs"), **({"outputs": named} if named else {})})
    held = body.get("parameters") if isinstance(body.get("parameters"), dict) else {}
    beside = {k: v for k, v in body.items() if k != "outputs" or any(isinstance(o, dict) and o.get("parameters") for o in outputs)}
    return {**beside, "inputs": [], "parameters": {**held, "upload_id": upload_id}}


def _object_in(path: Path) -> dict[str, Any]:
    from sluice.codecs.json_text import loads_as_python

    body = loads_as_python(path.read_bytes())
    if not isinstance(body, dict):
        raise SluiceError(f"--file holds JSON {type(body).__name__}: a request is an object", field="file")
    return body


def _upload_json(api: Api, deployment: str, body: dict[str, Any]) -> str:
    """`body` uploaded as JSON (written as `Api.json` writes a request: NaN and big integers as
    they came): its upload id."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        held = Path(tmp) / "body.json"
        held.write_text(json.dumps(body))
        return api.upload(deployment, held)


def api_from(args: Any) -> Api | None:
    base = args.api or os.environ.get("SLUICE_API_URL")
    if not base:
        return None
    key = args.api_key or os.environ.get("SLUICE_API_KEY")
    if not key:
        raise SluiceError("a remote API needs a key: --api-key or SLUICE_API_KEY", field="api_key")
    return Api(base, key)
