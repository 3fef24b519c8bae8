"""A fake MLflow tracking server: a real HTTP server on loopback that speaks the endpoints
sluice's REST reader calls (`sluice.convert.mlflow_rest`), in MLflow's response shapes (model
versions, the alias lookup, the download URI, the artifact proxy), and records every request
with its Authorization header."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tests.models import embed_model

if TYPE_CHECKING:
    from collections.abc import Iterator

API = "/api/2.0/mlflow"
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"
RUN = "5b1c0f7e9d2a4c3b8e6f1a2d3c4b5a69"

# MLmodel files as MLflow writes them (mlflow.models.Model.to_yaml).
ONNX_MLMODEL = """artifact_path: model
flavors:
  onnx:
    code: null
    data: model.onnx
    onnx_version: 1.17.0
    providers:
    - CUDAExecutionProvider
    - CPUExecutionProvider
  python_function:
    data: model.onnx
    env:
      conda: conda.yaml
      virtualenv: python_env.yaml
    loader_module: mlflow.onnx
    python_version: 3.12.8
mlflow_version: 2.19.0
model_size_bytes: 412
model_uuid: 0350b3aa857b47f696338f15aecb4232
utc_time_created: '2025-01-14 09:12:44.079597'
"""
# An ONNX model logged with a column signature, as MLflow 3 writes it: the JSON of each part is a
# quoted YAML scalar, folded over several lines.
SIGNED_MLMODEL = """artifact_path: model
flavors:
  onnx:
    code: null
    data: model.onnx
    onnx_version: 1.17.0
    providers:
    - CPUExecutionProvider
is_signature_from_type_hint: false
mlflow_version: 3.17.2
model_id: null
model_uuid: 90b985677cca42089485475398c7d7fb
prompts: null
run_id: 5b1c0f7e9d2a4c3b8e6f1a2d3c4b5a69
signature:
  inputs: '[{"type": "double", "name": "sepal length (cm)", "required": true}, {"type":
    "double", "name": "sepal width (cm)", "required": true}, {"type": "double", "name":
    "petal length (cm)", "required": true}, {"type": "double", "name": "petal width
    (cm)", "required": true}]'
  outputs: '[{"name": "embedding", "type": "tensor", "tensor-spec": {"dtype": "float32",
    "shape": [-1, 2]}}]'
  params: null
type_hint_from_example: false
utc_time_created: '2026-11-29 03:51:47.181660'
"""
IRIS = ["sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)"]
SKLEARN_MLMODEL = """artifact_path: model
flavors:
  python_function:
    env:
      conda: conda.yaml
      virtualenv: python_env.yaml
    loader_module: mlflow.sklearn
    model_path: model.pkl
    predict_fn: predict
    python_version: 3.12.8
  sklearn:
    code: null
    pickled_model: model.pkl
    serialization_format: cloudpickle
    sklearn_version: 1.6.1
mlflow_version: 2.19.0
"""


class Registry:
    """What the fake tracking server knows: model `moving`'s versions (number -> MLmodel),
    its aliases, the requests it was sent, and the tags set."""

    def __init__(self) -> None:
        self.versions: dict[int, str] = {1: ONNX_MLMODEL}
        self.aliases: dict[str, int] = {"champion": 1}
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, Authorization
        self.tags: list[dict[str, Any]] = []
        self.fail_with: tuple[int, dict[str, Any]] | None = None
        self.artifact_uris: dict[int, str] = {}  # where a version's artifacts are, if not the artifact proxy
        self.drip_s = 0.0  # > 0: each answer sent a byte at a time over that many seconds

    def model_version(self, number: int) -> dict[str, Any]:
        return {
            "name": "moving", "version": str(number), "creation_timestamp": 1736845964079,
            "last_updated_timestamp": 1736845964079, "user_id": "", "current_stage": "None", "description": "",
            "source": f"models:/m-{number:032x}", "run_id": RUN, "status": "READY", "run_link": "",
            "aliases": [a for a, v in self.aliases.items() if v == number],
        }  # fmt: skip

    def answer(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        if self.fail_with is not None:
            return self.fail_with
        if path == f"{API}/registered-models/alias" and query.get("name") == "moving":
            if query.get("alias") in self.aliases:
                return 200, {"model_version": self.model_version(self.aliases[query["alias"]])}
            # What MLflow 2 and 3 answer for an alias that is not there: a 400, not a 404.
            return 400, {"error_code": "INVALID_PARAMETER_VALUE", "message": f"Registered model alias {query.get('alias')} not found."}
        if path == f"{API}/model-versions/search":
            assert query == {"filter": "name = 'moving'", "max_results": "1", "order_by": "version_number DESC"}
            return 200, {"model_versions": [self.model_version(max(self.versions))]}
        if path in (f"{API}/model-versions/get", f"{API}/model-versions/get-download-uri"):
            number = int(query["version"])
            if number not in self.versions:
                return 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": f"Model Version (name=moving, version={number}) not found"}
            if path.endswith("get"):
                return 200, {"model_version": self.model_version(number)}
            return 200, {"artifact_uri": self.artifact_uris.get(number, f"mlflow-artifacts:/1/models/m-{number:032x}/artifacts")}
        if path == f"{API}/model-versions/set-tag" and method == "POST":
            self.tags.append(body)
            return 200, {}
        for number, mlmodel in self.versions.items():
            prefix = f"{ARTIFACTS}/1/models/m-{number:032x}/artifacts/"
            if path == prefix + "MLmodel":
                return 200, mlmodel.encode()
            if path == prefix + "model.onnx" and "onnx:" in mlmodel:
                return 200, embed_model()
        return 404, {"error_code": "ENDPOINT_NOT_FOUND", "message": f"No API endpoint {path}"}


@contextlib.contextmanager
def serving(registry: Registry, *, authorization: str | None = None) -> Iterator[ThreadingHTTPServer]:
    """`registry` served on a free loopback port (`url(server)`); with `authorization`, a
    request without that exact header is answered 401, as a server behind authentication."""

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            registry.requests.append((self.command, parts.path, self.headers.get("Authorization")))
            if authorization is not None and self.headers.get("Authorization") != authorization:
                status, answer = 401, {"error_code": "UNAUTHENTICATED", "message": "You are not authenticated."}
            else:
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                status, answer = registry.answer(self.command, parts.path, query, body)
            data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not registry.drip_s:
                self.wfile.write(data)
                return
            for i in range(len(data)):
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                time.sleep(registry.drip_s / len(data))

        do_GET = do_POST = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()  # returns at once when the test stopped it already
        server.server_close()
        thread.join()


def url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"
