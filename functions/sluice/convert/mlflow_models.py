"""A model from an MLflow registry or run (`sluice models push NAME models:/fraud/3`), read with
MLflow's own client: its flavors, signature and input example, and where it came from.

Its ONNX flavor is taken as it is; a scikit-learn, XGBoost, LightGBM or PyTorch flavor is loaded
by MLflow's loader for that flavor and converted by `sluice.convert.check`, on the user's machine
(loading a pickled flavor runs code from the model, as loading the file itself would). MLflow is
imported here only, by the functions that need it: the extra `sluice[mlflow]`, never a Lambda layer.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlunsplit

from sluice.domain.errors import BadRequest, NotFound, SluiceError, Unprocessable
from sluice.domain.origins import split_url
from sluice.domain.values import decimal

if TYPE_CHECKING:
    import numpy as np

    from sluice.convert.frameworks import Loaded

INSTALL = "pip install 'sluice[mlflow]'"
SCHEMES = ("models:/", "runs:/")
# The flavors sluice takes, best first: ONNX as it is, the others through their converter.
FLAVORS = ("onnx", "sklearn", "xgboost", "lightgbm", "pytorch")
_MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:/(?P<version>[^/]+)|@(?P<alias>[^/]+))/?\Z")  # VERSION: a number or latest
_RUN_URI = re.compile(r"^runs:/(?P<run>[0-9a-zA-Z-]+)/(?P<path>.+)\Z")


def is_mlflow_uri(text: str) -> bool:
    return text.startswith(SCHEMES)


@dataclass(slots=True)
class Fetched:
    """An MLflow model downloaded to `path` (its MLmodel and artifacts)."""

    uri: str
    path: Path
    model: Any  # mlflow.models.Model
    source: dict[str, Any]


def without_credentials(uri: str) -> str:
    """A tracking URI as it may be stored and shown: no user, password, query or fragment."""
    parts = split_url(uri, field="tracking_uri")  # never Python's words: they quote the credentials
    netloc = parts.netloc.rpartition("@")[2]
    if "://" in uri:  # kept as written: `sqlite:////abs/path.db` has an empty host and a path of `//abs/…`
        return f"{parts.scheme}://{netloc}{parts.path}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _mlflow() -> Any:
    try:
        import mlflow
    except ImportError:
        from sluice.convert.frameworks import MissingConverter

        raise MissingConverter(f"pushing from MLflow needs the 'mlflow-skinny' package: {INSTALL}", field="file") from None
    return mlflow


def _said(exc: BaseException) -> str:
    """MLflow's message, first line (its exceptions carry a JSON-ish tail we need not show)."""
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return str(text).strip().splitlines()[0]


def fetch(uri: str, tracking_uri: str | None, into: Path) -> Fetched:
    """Resolve `uri` on the tracking server (`tracking_uri`, else MLFLOW_TRACKING_URI) and
    download the model into `into`. Unknown names, versions, aliases or runs are NotFound;
    a tracking URI MLflow cannot use is a BadRequest naming it."""
    tracking = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not tracking:
        raise BadRequest(f"{uri} needs a tracking server: give --tracking-uri or set MLFLOW_TRACKING_URI", field="tracking_uri")
    # MLflow tries a server 7 times with backoff (about 4 minutes for one that is down) and
    # urllib3 logs each retry with the URL's path and query: a few tries, the retries unlogged,
    # unless the user set MLflow's own variables.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    pool = logging.getLogger("urllib3.connectionpool")
    if not any(isinstance(f, _NoRetryLines) for f in pool.filters):
        pool.addFilter(_NoRetryLines())
    # What MLflow's loading imports may set (Feast: Prometheus' folders) is put back: left, it
    # turns on `/metrics` series in a process that never asked for them (a follow poll's).
    from sluice.runtimes.feast_store import prometheus_folders_kept

    with prometheus_folders_kept(), scrubbed(tracking):
        return _fetch(uri, tracking, into)


class _NoRetryLines(logging.Filter):
    """urllib3's "Retrying (…) after connection broken by …: /path?query" lines, left out: the
    query may hold a tracking server's token. Its other lines stand."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Retrying (")


class scrubbed:
    """A SluiceError raised inside says the tracking URI without its credentials: MLflow's
    messages may quote the URI it was given, credentials and all."""

    def __init__(self, tracking: str) -> None:
        self.tracking = tracking

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, SluiceError):
            try:
                parts, shown = split_url(self.tracking, field="tracking_uri"), without_credentials(self.tracking)
            except BadRequest as unreadable:  # a URI that cannot be split: nothing of the message is safe to show
                exc.message = unreadable.message
                exc.args = (exc.message,)
                return False
            exc.message = exc.message.replace(self.tracking, shown)
            # MLflow's messages quote parts of the URI alone too (its path and query, a token in it)
            for secret in (parts.password, parts.query, parts.fragment):
                if secret and len(secret) >= 3:
                    exc.message = exc.message.replace(secret, "***")
            exc.args = (exc.message,)
        return False


def _fetch(uri: str, tracking: str, into: Path) -> Fetched:
    model_uri, run_uri = _MODEL_URI.match(uri), _RUN_URI.match(uri)
    if model_uri is None and run_uri is None:
        raise BadRequest(
            f"{uri!r} is not an MLflow model URI: models:/NAME/VERSION, models:/NAME/latest, models:/NAME@ALIAS "
            "or runs:/RUN_ID/PATH",
            field="file",
        )
    mlflow = _mlflow()
    from mlflow.exceptions import MlflowException

    shown = without_credentials(tracking)
    source: dict[str, Any] = {"registry": "mlflow", "uri": uri, "tracking_uri": shown, "name": None, "version": None, "run_id": None, "alias": None}
    with _asking(uri, shown):
        client = _client(mlflow, tracking, shown)
        if model_uri is not None:
            name, version, alias = model_uri["name"], model_uri["version"], model_uri["alias"]
            found = _version(client, uri, name, version, alias)
            source.update(name=name, version=int(found.version), run_id=found.run_id or None, alias=alias)
            download = f"models:/{name}/{found.version}"
        else:
            run = client.get_run(run_uri["run"])  # type: ignore[index]
            source.update(run_id=run.info.run_id, artifact_path=run_uri["path"])  # type: ignore[index]
            download = uri
    try:
        mlflow.set_registry_uri(tracking)
        path = Path(mlflow.artifacts.download_artifacts(artifact_uri=download, dst_path=str(into), tracking_uri=tracking))
        from mlflow.models import Model

        model = Model.load(str(path))
    except MlflowException as exc:
        raise _refusal(exc, uri, shown) from None
    except OSError as exc:
        raise BadRequest(f"cannot read {uri}'s artifacts: {_said(exc)} (is it an MLflow model?)", field="file") from None
    return Fetched(uri, path, model, source)


def _client(mlflow: Any, tracking: str, shown: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return mlflow.MlflowClient(tracking_uri=tracking, registry_uri=tracking)
    except MlflowException as exc:
        raise BadRequest(f"cannot use tracking URI {shown}: {_said(exc)}", field="tracking_uri") from None


def _version(client: Any, uri: str, name: str, version: str | None, alias: str | None) -> Any:
    """The model version a `models:/` URI names: by number, by alias, or the newest (`latest`)."""
    if alias:
        return client.get_model_version_by_alias(name, alias)
    if version == "latest":
        found = client.search_model_versions(f"name = '{name}'", max_results=1, order_by=["version_number DESC"])
        if not found:
            raise NotFound(f"{uri}: registered model {name!r} has no versions (or does not exist)", field="file")
        return found[0]
    if decimal(str(version)) is None:
        raise BadRequest(f"{uri}: a version is a number or latest (or use models:/{name}@ALIAS)", field="file")
    return client.get_model_version(name, version)


class _asking:
    """MLflow's refusals and failures to reach it, as sluice's errors naming `uri`."""

    def __init__(self, uri: str, shown: str) -> None:
        self.uri, self.shown = uri, shown

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or isinstance(exc, SluiceError):
            return False
        from mlflow.exceptions import MlflowException

        if isinstance(exc, MlflowException):
            raise _refusal(exc, self.uri, self.shown) from None
        if isinstance(exc, Exception):  # a server that does not answer, a database that will not open
            raise BadRequest(
                f"cannot reach the MLflow tracking server at {self.shown}: {_said(exc)}", field="tracking_uri", poll_error="unreachable"
            ) from None
        return False


def current_version(uri: str, tracking: str) -> tuple[int, str | None]:
    """The version (and its run) a `models:/NAME@ALIAS` or `models:/NAME/latest` points at now,
    without downloading anything: what a follow binding polls."""
    found = _MODEL_URI.match(uri)
    if found is None:
        raise BadRequest(f"{uri!r} is not an MLflow model URI", field="registry")
    mlflow = _mlflow()
    shown = without_credentials(tracking)
    with scrubbed(tracking), _asking(uri, shown):
        version = _version(_client(mlflow, tracking, shown), uri, found["name"], found["version"], found["alias"])
        return int(version.version), version.run_id or None


def set_tags(tracking: str, name: str, version: int, tags: dict[str, str]) -> None:
    """Tag a registered model version (`sluice.deployment`, `sluice.revision`: what serves it)."""
    mlflow = _mlflow()
    uri, shown = f"models:/{name}/{version}", without_credentials(tracking)
    with scrubbed(tracking), _asking(uri, shown):
        client = _client(mlflow, tracking, shown)
        for key, value in tags.items():
            client.set_model_version_tag(name, str(version), key, value)


# MLflow's error codes, as the kind of a follow binding's kept poll error.
_POLL_ERRORS = {
    "UNAUTHENTICATED": "unauthorized", "PERMISSION_DENIED": "unauthorized", "INTERNAL_ERROR": "server_error",
    "TEMPORARILY_UNAVAILABLE": "server_error",
}  # fmt: skip


def names_nothing(code: str, said: str) -> bool:
    """MLflow's answer for a model, version or alias that is not there: RESOURCE_DOES_NOT_EXIST,
    or (an alias, in MLflow 2 and 3) INVALID_PARAMETER_VALUE "Registered model alias x not found"."""
    return code in ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND", "INVALID_PARAMETER_VALUE") and "not" in said.lower()


def _refusal(exc: Any, uri: str, shown: str) -> SluiceError:
    code = getattr(exc, "error_code", "")
    if names_nothing(code, _said(exc)):
        return NotFound(f"{uri} was not found in MLflow at {shown}: {_said(exc)}", field="file")
    kind = {"poll_error": _POLL_ERRORS[code]} if code in _POLL_ERRORS else {}
    return BadRequest(f"MLflow at {shown} refused {uri}: {_said(exc)}", field="file", **kind)


def flavor_of(fetched: Fetched) -> str:
    flavors = fetched.model.flavors
    for flavor in FLAVORS:
        if flavor in flavors:
            return flavor
    raise Unprocessable(
        f"{fetched.uri} has the flavors {', '.join(sorted(flavors)) or 'none'}; sluice takes a model with an "
        f"{', '.join(FLAVORS[:-1])} or {FLAVORS[-1]} flavor",
        field="file",
    )


def onnx_bytes(fetched: Fetched) -> bytes:
    data = fetched.model.flavors["onnx"].get("data", "model.onnx")
    return (fetched.path / data).read_bytes()


def load(fetched: Fetched, flavor: str) -> Loaded:
    """The flavor's model, loaded by MLflow's own loader for it, ready to convert."""
    import importlib

    from sluice.convert.frameworks import from_object, need

    need({"sklearn": "sklearn", "pytorch": "torch"}.get(flavor, flavor), f"an MLflow {flavor} model")
    loader = importlib.import_module(f"mlflow.{flavor}")
    try:
        model = loader.load_model(str(fetched.path))
    except SluiceError:
        raise
    except Exception as exc:  # a missing package, skops' untrusted types, a file of another version
        raise Unprocessable(f"cannot load {fetched.uri}'s {flavor} flavor: {_said(exc)}", field="file") from None
    return from_object(model, fetched.uri)


def signature_hint(fetched: Fetched) -> tuple[list[str] | None, int | None]:
    """Feature names and width from MLflow's signature (`sluice.convert.mlflow_signature`, the
    mapping the REST path on AWS shares): a column schema's numeric columns, in order, or one
    2-D tensor's width. A column sluice cannot feed a float tensor is refused."""
    from sluice.convert.mlflow_signature import hint

    signature = fetched.model.signature
    return hint(signature.to_dict() if signature is not None else None, fetched.uri)


def example_rows(fetched: Fetched, names: list[str] | None) -> tuple[np.ndarray, str] | None:
    """The logged input example as float32 rows (its columns in the signature's order)."""
    import numpy as np

    if not fetched.model.saved_input_example_info:
        return None
    try:
        example = fetched.model.load_input_example(str(fetched.path))
    except Exception as exc:  # an example MLflow itself cannot read back
        raise Unprocessable(f"cannot read {fetched.uri}'s input example: {_said(exc)}; give --sample", field="sample") from None
    if example is None:
        return None
    if hasattr(example, "columns"):  # a pandas DataFrame
        if names and set(names) <= {str(c) for c in example.columns}:
            example = example[names]
        rows = example.to_numpy()
    elif isinstance(example, dict):
        return None  # several named tensors: no rows to check one input on
    else:
        rows = np.asarray(example)
    try:
        rows = rows.astype(np.float32).reshape(len(rows), -1)
    except (TypeError, ValueError):
        return None
    return rows, f"{len(rows)} rows of the logged input example"
