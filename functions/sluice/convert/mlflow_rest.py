"""MLflow's model registry over its REST API, without MLflow's client: what the scheduled poll
of follow bindings reads on AWS (`sluice.handlers.registry_events`), where MLflow stays out of
the Lambda layers. The same port as the client's (`sluice.convert.follow.MlflowSource`).

- Where an alias points: GET /api/2.0/mlflow/registered-models/alias; the newest version
  (`latest`): GET /api/2.0/mlflow/model-versions/search, newest first; tagging back: POST
  /api/2.0/mlflow/model-versions/set-tag.
- A version's files: GET /api/2.0/mlflow/model-versions/get-download-uri, then its MLmodel and
  the ONNX file from the tracking server's artifact proxy (`mlflow-artifacts:`, GET
  /api/2.0/mlflow-artifacts/artifacts/<path>) or from S3 (`s3://`, the buckets the function may
  read). Only an `onnx` flavor is taken, as it is: there are no converters here, so another
  flavor is refused with what to do instead (push it from a machine with `sluice[convert]`).
- The MLmodel file is YAML, read by PyYAML (the registry event function's own layer); its
  signature's columns name the model's features as MLflow's client path names them
  (`sluice.convert.mlflow_signature`). MLflow's REST API has no other way to the signature:
  a model version's fields carry none, and MLflow 3 leaves it out of the run's
  `mlflow.log-model.history` tag.

The tracking URI is checked against `mlflow_tracking_servers` before every call (scheme, host
and port, `sluice.domain.origins`); no redirect is followed, so the credentials (a tenant's,
`sluice.convert.mlflow_credentials`) go to that server alone, and no message repeats them.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from sluice.domain.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    SluiceError,
    Unavailable,
    Unprocessable,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from sluice.convert.mlflow_credentials import Credentials
    from sluice.convert.registry_pull import Pulled
    from sluice.domain.follows import BindingReads, Follow
    from sluice.domain.origins import Allowed, Origin

API = "/api/2.0/mlflow"
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"
MAX_MLMODEL_BYTES = 1024 * 1024
MAX_MODEL_BYTES = 256 * 1024 * 1024  # the function has 1 GiB of memory; a larger model is pushed from a machine
CONVERT = "push it from a machine with sluice[convert] (sluice models push MODEL models:/NAME/VERSION)"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: it could carry the credentials to another server."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect())


class MlflowRest:
    """`MlflowSource` over REST. `credentials(tenant)`: what to send for a tenant's bindings
    (None: nothing); `s3()`: an S3 client, for artifacts MLflow keeps in S3 (None: such
    artifacts are refused, as off AWS, where the only credentials are the operator's)."""

    def __init__(
        self, *, allowed: tuple[Allowed, ...], credentials: Callable[[str], Credentials | None],
        reads: Callable[[Follow], BindingReads | None], s3: Callable[[], Any] | None = None, timeout_s: float = 15.0,
        max_bytes: int = MAX_MODEL_BYTES,
    ) -> None:  # fmt: skip
        self.allowed = allowed
        self.credentials = credentials
        self.reads = reads  # a binding's model data locations (`FollowService.may_read`): s3:// is read only there
        self.s3 = s3
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes

    # The port ----------------------------------------------------------------------------
    def current_version(self, follow: Follow) -> int:
        source = follow.parsed_source()
        call = self._caller(follow)
        with _scrubbed(call):
            return self._current_version(follow, source, call)

    def _current_version(self, follow: Follow, source: Any, call: _Calls) -> int:
        if source.alias:
            found = call("GET", f"{API}/registered-models/alias", {"name": source.name, "alias": source.alias})
            return int(found["model_version"]["version"])
        query = {"filter": f"name = '{source.name}'", "max_results": 1, "order_by": "version_number DESC"}
        versions = call("GET", f"{API}/model-versions/search", query).get("model_versions") or []
        if not versions:
            raise NotFound(f"{follow.source}: registered model {source.name!r} has no versions (or does not exist)", field="registry")
        return int(versions[0]["version"])

    def pull(self, follow: Follow, version: int, tmp: Path) -> Pulled:
        source, call = follow.parsed_source(), self._caller(follow)
        with _scrubbed(call):
            return self._pull(follow, version, source, call)

    def _pull(self, follow: Follow, version: int, source: Any, call: _Calls) -> Pulled:
        from sluice.convert.mlflow_models import without_credentials
        from sluice.convert.registry_pull import Pulled

        said = f"models:/{source.name}/{version}"
        found = call("GET", f"{API}/model-versions/get", {"name": source.name, "version": str(version)})["model_version"]
        where = call("GET", f"{API}/model-versions/get-download-uri", {"name": source.name, "version": str(version)})["artifact_uri"]
        read = self._reader(follow, str(where), call)
        mlmodel = read_mlmodel(read("MLmodel", MAX_MLMODEL_BYTES), said)
        flavors = mlmodel.get("flavors") or {}
        if "onnx" not in flavors:
            raise Unprocessable(
                f"{said} has the flavors {', '.join(sorted(flavors)) or 'none'}; on AWS sluice takes an onnx flavor as it "
                f"is and converts nothing: {CONVERT}",
                field="file",
            )
        from sluice.convert.mlflow_signature import hint

        names, _ = hint(mlmodel.get("signature"), said)
        onnx = flavors["onnx"] if isinstance(flavors["onnx"], dict) else {}
        data = read(str(onnx.get("data") or "model.onnx"), self.max_bytes)
        lineage = {
            "registry": "mlflow", "uri": follow.source, "tracking_uri": without_credentials(follow.tracking_uri or ""),
            "name": source.name, "version": int(version), "run_id": found.get("run_id") or None, "alias": source.alias,
            "flavor": "onnx",
        }  # fmt: skip
        return Pulled(data, names, f"took {said}'s onnx flavor as it is\n", lineage)

    def set_tags(self, follow: Follow, version: int, tags: dict[str, str]) -> None:
        call, name = self._caller(follow), follow.parsed_source().name
        for key, value in tags.items():
            call("POST", f"{API}/model-versions/set-tag", {"name": name, "version": str(version), "key": key, "value": value})

    # Calls ------------------------------------------------------------------------------
    def _caller(self, follow: Follow) -> _Calls:
        """One binding's calls: its server checked, its tenant's credentials read once."""
        from sluice.domain.origins import check_origin

        server = check_origin(follow.tracking_uri or "", self.allowed, field="tracking_uri")
        return _Calls(self, server, self.credentials(follow.tenant))

    def _reader(self, follow: Follow, where: str, call: _Calls) -> Callable[[str, int], bytes]:
        """Reads a file of the model version's artifacts at `where`, at most `limit` bytes."""
        parts, server = urlsplit(where), call.server
        if parts.scheme == "mlflow-artifacts":
            if parts.netloc and parts.netloc.rpartition("@")[2] not in (server.netloc, server.host):
                raise Forbidden(
                    f"{follow.source}'s artifacts are on another server ({parts.netloc}): sluice reads them through "
                    f"{server.url()} alone",
                    field="tracking_uri",
                )
            base = parts.path.strip("/")
            return lambda name, limit: call.raw(f"{ARTIFACTS}/{quote(f'{base}/{name}'.strip('/'))}", limit)
        if parts.scheme == "s3" and self.s3 is not None:
            reads = self.reads(follow)

            def from_s3(name: str, limit: int) -> bytes:
                key = f"{parts.path.strip('/')}/{name}".strip("/")
                uri = f"s3://{parts.netloc}/{key}"
                checked = uri if reads is None else reads.model_data_uri(follow.tenant, uri)
                bucket, _, key = checked.removeprefix("s3://").partition("/")
                return self._from_s3(bucket, key, limit)

            return from_s3
        where_read = "through the tracking server (mlflow server --serve-artifacts)" + (" or S3" if self.s3 is not None else "")
        raise Unprocessable(
            f"{follow.source}'s artifacts are at a {parts.scheme or 'local'}: location, which sluice cannot read for this "
            f"binding: serve them {where_read}, or {CONVERT}",
            field="file",
        )

    def _from_s3(self, bucket: str, key: str, limit: int) -> bytes:
        from botocore.exceptions import ClientError

        try:
            got = self.s3().get_object(Bucket=bucket, Key=key)  # type: ignore[misc]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "error")
            hint = " (is it among api.model_data_locations for this tenant?)" if code in ("AccessDenied", "403") else ""
            raise NotFound(f"cannot read s3://{bucket}/{key}: {code}{hint}", field="file") from None
        if int(got.get("ContentLength") or 0) > limit:
            raise Unprocessable(f"s3://{bucket}/{key} is larger than {limit} bytes: {CONVERT}", field="file")
        return bytes(got["Body"].read())


@contextlib.contextmanager
def _scrubbed(call: _Calls) -> Iterator[None]:
    """What the server said, in any refusal made of its answers (a flavor's name, a column's),
    without the tenant's credentials: a server may quote back what it was sent."""
    try:
        yield
    except SluiceError as exc:
        exc.message = call.scrub(exc.message)
        exc.args = (exc.message,)
        raise


class _Calls:
    """Calls to one checked server, with one tenant's credentials (or none)."""

    def __init__(self, rest: MlflowRest, server: Origin, credentials: Credentials | None) -> None:
        self.rest, self.server, self.credentials = rest, server, credentials

    def __call__(self, method: str, path: str, params: dict[str, Any]) -> dict[str, Any]:
        """A registry call: its JSON answer."""
        body = self.raw(path, MAX_MLMODEL_BYTES, method=method, params=params)
        try:
            answer = json.loads(body)
        except ValueError:
            raise Unavailable(f"MLflow at {self.server.url()} answered {path} with something other than JSON", field="tracking_uri") from None
        return answer if isinstance(answer, dict) else {}

    def raw(self, path: str, limit: int, *, method: str = "GET", params: dict[str, Any] | None = None) -> bytes:
        """The answer's body, at most `limit` bytes."""
        url, data = f"{self.server.url()}{path}", None
        if method == "GET" and params:
            url += "?" + urlencode(params)
        elif method != "GET":
            data = json.dumps(params or {}).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={"Accept": "application/json"})
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.credentials is not None:
            request.add_unredirected_header("Authorization", self.credentials.authorization())
        shown = f"MLflow at {self.server.url()}"
        # The timeout bounds each wait for bytes; the deadline the whole answer, which a server
        # sending a byte a little faster than the timeout would otherwise hold without end (the
        # poll looks at every tenant's bindings one after another): the timeout, and a second
        # for each MiB the answer may hold.
        budget = self.rest.timeout_s + limit / (1 << 20)
        deadline = time.monotonic() + budget
        def late(got: int) -> Unavailable:
            return Unavailable(f"{shown} sent {path} too slowly: {got} bytes in its {budget:.0f} s", field="tracking_uri", poll_error="unreachable")

        try:
            with _OPENER.open(request, timeout=self.rest.timeout_s) as answer:
                body = _bounded(answer, limit + 1, deadline, late)
        except urllib.error.HTTPError as exc:
            try:  # its body as bounded as an answer's: a server dripping an error's held the poll too
                said = _bounded(exc, 64 * 1024, deadline, late)
            except (OSError, AttributeError):  # no body, or one cut off
                said = b""
            raise _refusal(exc, said, shown, path, self.scrub) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or type(exc).__name__
            raise Unavailable(self.scrub(f"cannot reach {shown}: {reason}"), field="tracking_uri", poll_error="unreachable") from None
        if len(body) > limit:
            raise Unprocessable(f"{shown}: {path} is larger than {limit} bytes: {CONVERT}", field="file")
        return bytes(body)

    def scrub(self, text: str) -> str:
        return self.credentials.scrub(text) if self.credentials is not None else text


def _bounded(stream: Any, limit: int, deadline: float, late: Callable[[int], SluiceError]) -> bytes:
    """At most `limit` bytes of `stream`, read as they come, `late` raised once `deadline` is
    past: the timeout bounds each wait for bytes, not a server sending one a little faster."""
    body = bytearray()
    while len(body) < limit:
        chunk = stream.read1(min(1 << 16, limit - len(body)))
        if not chunk:
            break
        body += chunk
        if time.monotonic() > deadline:
            raise late(len(body))
    return bytes(body)


def _refusal(exc: urllib.error.HTTPError, said: bytes, shown: str, path: str, scrub: Callable[[str], str]) -> SluiceError:
    from sluice.convert.mlflow_models import names_nothing

    try:
        answer = json.loads(said or b"{}")
    except ValueError:
        answer = {}
    if not isinstance(answer, dict):
        answer = {}
    said = str(answer.get("message") or exc.reason or "").strip().splitlines()
    message = scrub(f"{shown} answered {path} with {exc.code}{': ' + said[0] if said else ''}")
    status = {"http_status": exc.code}  # what a binding's kept poll error is classed by
    if 300 <= exc.code < 400:
        return Forbidden(f"{message} (a redirect, which sluice does not follow: give the server's own URL)", field="tracking_uri", **status)
    if exc.code in (401, 403):
        return Forbidden(f"{message} (check the tenant's MLflow credentials secret)", field="tracking_uri", **status)
    if exc.code == 404 or names_nothing(str(answer.get("error_code") or ""), str(answer.get("message") or "")):
        return NotFound(message, field="registry", **status)
    if exc.code < 500:
        return BadRequest(message, field="registry", **status)
    return Unavailable(message, field="tracking_uri", **status)


def read_mlmodel(data: bytes, said: str) -> dict[str, Any]:
    """A model's MLmodel file (YAML, as MLflow writes it), with its `flavors` a mapping."""
    import yaml

    try:
        # libyaml's loader where the wheel's C extension is installed; the layer ships PyYAML's own.
        doc = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        shown = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Unprocessable(f"{said}'s MLmodel file is not YAML MLflow wrote: {shown}", field="file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("flavors") or {}, dict):
        raise Unprocessable(f"{said}'s MLmodel file has no flavors: is it an MLflow model?", field="file")
    return doc
