"""What `sluice serve`'s processes and the CLI's commands import as they start: each process
pays for what it imports (bytecode read, classes and pydantic models built), and the suite and
users start many of them.

- `sluice serve`'s supervising process, with several workers, parses the arguments, reads the
  settings, claims the ports, runs the background work (inbox, schedules, rollouts, follow
  bindings, monitoring windows) and watches the workers: the workers import the app they
  serve, and nothing of the HTTP side or the prediction path is the supervisor's to import
  (its background looks build the deployments' service only once a rollout or a follow binding
  is there to move). Nor NumPy: the monitoring service it holds for closing windows imports it
  where a window is checked.
- A worker imports `sluice.cli.serve` (uvicorn's factory), hence the `sluice.cli` package: the
  other command groups are the parser's to import.
- A plain command (`batch list`, `models list`, `keys list`) reads the registry: not the policy
  schema, the graphs' steps, the API's wire models or NumPy.
- `sluice batch run` imports its own command group alone, no record kind it never reads
  (follows, schedules, optimize jobs; schedules' wire models) and scores through the batch runner's prediction service
  only: the API's (its mirror, capture and kept predictions) is never built.
- An app's routes are built once, by the routers' decorators, and `SluiceApp.prepare` (what a
  worker runs before it takes a request) leaves nothing for the first requests to build. A
  route returns its own response: FastAPI builds it no serializer, and the OpenAPI document
  names the model of its answer all the same (`sluice.api.responses.answers`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from tests.conftest import MODELS, REPO
from tests.integration.conftest import api_keys, auth

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from sluice.wiring import Container

# What serves HTTP, imported in the workers alone.
SERVING = ("fastapi", "starlette", "sluice.api.app", "sluice.cli.protocol", "uvicorn.protocols.http.httptools_impl", "aiohttp")
# The prediction path and the policy schema: a worker's (and a command's that changes a deployment).
PREDICTING = ("sluice.inference.predictions", "sluice.services.deployments", "sluice.domain.policy", "sluice.domain.transforms", "onnxruntime")
# The CLI's other command groups (and what they import), the parser's alone.
COMMANDS = ("sluice.cli.batch", "sluice.cli.models", "sluice.cli.triton", "sluice.cli.stream", "sluice.endpoints.local_triton")

# `sluice serve --workers 2` up to where it would start its workers: the supervisor's run is
# replaced by a look at what the process has imported, then the command stops as on a signal.
# First, what importing the package and the serve command's modules alone imported.
PROBE = f"""
import json, sys
import sluice.cli.serve
commands = [m for m in {COMMANDS!r} if m in sys.modules]
from sluice.cli import drain, main
drain.Supervisor.run = lambda self: print(json.dumps([commands, [m for m in {SERVING + PREDICTING + ("numpy",)!r} if m in sys.modules]]))
sys.exit(main(["serve", "--workers", "2", "--port", "0", "--grpc-port", "0"]))
"""

COMMAND_PROBE = f"""
import contextlib, io, json, sys
from sluice.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    codes = [main(argv) for argv in (["batch", "list"], ["models", "list"], ["keys", "list"])]
heavy = ("numpy", "sluice.batch.wire", *{PREDICTING!r}, *{SERVING!r})
print(json.dumps([codes, [m for m in heavy if m in sys.modules]]))
"""


# A deployment of the iris model on the home, set up by another process: `batch run` alone in the probe.
BATCH_SETUP = f"""
from sluice.cli import main
assert main(["models", "push", "iris", {str(MODELS / "iris.onnx")!r}]) == 0
assert main(["deployments", "create", "iris", "--model", "iris"]) == 0
print("[]")
"""
# What `batch run` must leave alone: the other command groups (and what they import), the
# records of other kinds, the API's prediction service and what it hands work to.
NOT_BATCH_RUN = (
    "sluice.cli.models", "sluice.cli.deployments", "sluice.cli.serve", "sluice.cli.stream", "sluice.cli.triton",
    "sluice.endpoints.triton_env", "sluice.convert.frameworks",
    "sluice.domain.follows", "sluice.domain.schedules", "sluice.domain.optimize_jobs", "sluice.batch.schedule_wire",
    "sluice.inference.mirror", "sluice.inference.shadow_runner", "sluice.capture.capturer", "sluice.monitor.kept",
    "pandas",  # pyarrow's to_numpy and pyarrow.array import it on first use (`sluice.codecs.arrow_numbers`)
)  # fmt: skip
BATCH_RUN_PROBE = f"""
import contextlib, io, json, sys
from sluice.cli import main, pieces
source = sys.argv[1]
with open(source, "w") as f:
    f.write("sepal_length,sepal_width,petal_length,petal_width\\n" + "5.1,3.5,1.4,0.2\\n" * 3)
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(["batch", "run", source, "--deployment", "iris", "--concurrency", "1"])
built = [name for name in ("predictions", "batch_runner") if name in pieces.container().__dict__]
print(json.dumps([code, json.loads(out.getvalue())["status"], built, [m for m in {NOT_BATCH_RUN!r} if m in sys.modules]]))
"""


def _probe(code: str, tmp_path: Path, *args: str) -> list[list[object]]:
    env = {**os.environ, "SLUICE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO / "functions")}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_supervisor_of_several_workers_imports_nothing_that_serves_http_or_predicts(tmp_path: Path) -> None:
    commands, imported = _probe(PROBE, tmp_path)
    assert commands == [], "a worker's import of sluice.cli.serve imported other command groups"
    assert imported == [], "the supervisor imported what its workers serve with"


def test_a_plain_command_reads_the_registry_without_the_prediction_path(tmp_path: Path) -> None:
    codes, imported = _probe(COMMAND_PROBE, tmp_path)
    assert codes == [0, 0, 0]
    assert imported == []


def test_batch_run_builds_and_imports_only_what_it_scores_with(tmp_path: Path) -> None:
    """What `sluice batch run` cut from its start-up cannot come back unnoticed."""
    _probe(BATCH_SETUP, tmp_path)
    code, status, built, imported = _probe(BATCH_RUN_PROBE, tmp_path, str(tmp_path / "flowers.csv"))
    assert (code, status) == (0, "SUCCEEDED")
    assert built == ["batch_runner"], "a batch run built the API's prediction service"
    assert imported == []


def test_a_prepared_app_builds_no_route_at_its_first_requests(container: Container, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi import routing
    from starlette.testclient import TestClient

    from sluice.api.app import create_app

    key = api_keys(container)["acme"]
    app = create_app(container)
    app.prepare()
    built: list[Any] = []
    populate = routing._populate_api_route_state
    monkeypatch.setattr(routing, "_populate_api_route_state", lambda route, *a, **kw: built.append(route) or populate(route, *a, **kw))
    with TestClient(app) as client:
        for path in ("/healthz", "/api/v1/models", "/api/v1/deployments", "/api/v1/batch-jobs", "/api/v1/keys"):
            assert client.get(path, headers=auth(key)).status_code == 200, path
    assert built == [], "the first requests built routes again"
    serializing = [route.path for route in app.routes if getattr(route, "response_field", None) is not None]
    assert serializing == [], "a route that returns its own response got a serializer"


def test_the_document_names_the_model_of_each_answer(container: Container) -> None:
    from sluice.api.app import create_app

    paths = create_app(container).openapi()["paths"]
    answer = lambda path, method, status: paths[path][method]["responses"][status]["content"]["application/json"]["schema"]  # noqa: E731
    assert answer("/api/v1/models", "post", "201") == {"$ref": "#/components/schemas/ModelOut"}
    assert answer("/api/v1/models", "get", "200") == {"type": "array", "items": {"$ref": "#/components/schemas/ModelOut"}, "title": "Response List Models Api V1 Models Get"}
    assert answer("/api/v1/deployments/{name}/rollout/pause", "post", "200") == {"$ref": "#/components/schemas/DeploymentOut"}
