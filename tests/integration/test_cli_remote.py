"""`sluice predict --api`: the CLI against a running service (uvicorn on a loopback port), a
file above the in-line limit sent through an upload without the user asking, an asynchronous
answer polled until it is there, a kept answer followed through its 303."""

from __future__ import annotations

import http.server
import io
import json
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

from sluice.api.app import create_app
from sluice.runtimes.sagemaker import SageMakerRuntime
from sluice.storage.results import results_for
from tests.integration.conftest import run_cli
from tests.integration.traffic_fakes import add_fake
from tests.support import serving, steady

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container

URL = "http://127.0.0.1:9"


class Echo:
    """A Triton container's /invocations for v2 JSON: 7.0 per row."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def invoke_endpoint(self, **params: Any) -> dict[str, Any]:
        self.bodies.append(params["Body"])
        rows = json.loads(params["Body"])["inputs"][0]["shape"][0]
        body = {"outputs": [{"name": "y", "datatype": "FP32", "shape": [rows, 1], "data": [7.0] * rows}]}
        return {"Body": io.BytesIO(json.dumps(body).encode()), "ContentType": "application/json"}


@pytest.fixture
def served(demo: Container, acme: Principal) -> Iterator[tuple[str, str, Echo]]:
    echo = Echo()
    demo.runtimes["sagemaker"] = SageMakerRuntime(echo, endpoint_url=URL, results=results_for(demo.store))
    add_fake(demo.registry, "acme", "big", endpoint_name="big-ep", endpoint_url=URL, invocation="async")
    demo.deployments.create(acme, "big", {"kind": "single", "model": "big", "version": 1})
    _, key = demo.keys.create("acme", ["predict"])
    with serving(create_app(demo)) as url:
        yield url, key, echo


def test_a_large_file_goes_through_an_upload_by_itself(served: tuple[str, str, Echo], tmp_path: Path, capsys: pytest.CaptureFixture[str], demo: Container) -> None:
    url, key, _ = served
    body = tmp_path / "rows.json"
    body.write_text(json.dumps({"batch": [[5.1, 3.5, 1.4, 0.2]] * 50}))
    for above in ("100000", "10"):  # in line, then through an upload
        code, out, err = run_cli(capsys, "predict", "iris", "--file", str(body), "--api", url, "--api-key", key, "--upload-above", above)
        assert code == 0, err
        assert len(json.loads(out)["predictions"]) == 50
    assert len(list((demo.store.root / "uploads/tenants/acme").iterdir())) == 1  # type: ignore[attr-defined]
    # an answer too large to send is kept and followed through its 303
    demo.settings.limits.max_response_bytes = 256
    code, out, err = run_cli(capsys, "predict", "iris", "--file", str(body), "--api", url, "--api-key", key, "--upload-above", "10")
    assert code == 0, err
    assert len(json.loads(out)["predictions"]) == 50


def test_an_asynchronous_answer_is_polled_until_it_is_there(served: tuple[str, str, Echo], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, key, echo = served
    request = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [3, 4], "data": list(range(12))}]}
    body = tmp_path / "v2.json"
    body.write_text(json.dumps(request))
    monkeypatch.setenv("SLUICE_API_URL", url)
    monkeypatch.setenv("SLUICE_API_KEY", key)
    code, out, err = run_cli(capsys, "predict", "big", "--v2", "--file", str(body), "--upload-above", "10")
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "succeeded" and result["outputs"][0]["data"] == [7.0, 7.0, 7.0]
    assert echo.bodies == [body.read_bytes()]  # the file as written, handed on unchanged


def test_a_file_with_an_id_and_named_outputs_goes_to_an_asynchronous_endpoint_through_its_upload(
    served: tuple[str, str, Echo], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A v2 file whose id is sent beside its upload: its outputs, names only, go in the upload
    (an endpoint queued as it lies would never see them beside it) and the request is answered."""
    url, key, _ = served
    body = tmp_path / "v2.json"
    body.write_text(json.dumps({"id": "req-1", "inputs": [{"name": "input", "datatype": "FP32", "shape": [3, 4], "data": list(range(12))}], "outputs": [{"name": "y"}]}))
    code, out, err = run_cli(capsys, "predict", "big", "--v2", "--file", str(body), "--api", url, "--api-key", key, "--upload-above", "10")
    assert code == 0, err
    assert json.loads(out)["status"] == "succeeded"


def test_remote_errors_name_their_field(served: tuple[str, str, Echo], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url, _, _ = served
    body = tmp_path / "rows.json"
    body.write_text(json.dumps({"inputs": [[1, 2, 3, 4]]}))
    code, _, err = run_cli(capsys, "predict", "nope", "--file", str(body), "--api", url, "--api-key", "sk_bad", "--upload-above", "1")
    assert code == 2 and "error" in err
    code, _, err = run_cli(capsys, "predict", "iris", "--file", str(body), "--api", url)
    assert code == 2 and "[api_key]" in err


@contextmanager
def _answering(status: int, headers: dict[str, str], body: bytes) -> Iterator[str]:
    """An API (or a proxy before one) that answers every request alike: its URL."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(status)
            for name, value in {**headers, "content-length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_answer_that_says_nothing_usable_is_an_error_never_a_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 200 HTML page was printed as the prediction with exit 0; a 202 without an id, or with a
    list, ended in a traceback; a 303 to `file:///…` had the CLI read a local file."""
    secret = tmp_path / "secret.json"
    secret.write_text('{"local": "file contents"}')
    cases = [
        ((200, {"content-type": "text/html"}, b"<html>hello</html>"), "error: the API answered 200 with a body that is not JSON: <html>hello</html>"),
        ((202, {}, b'{"status": "pending"}'), "error: the API answered 202 without saying where the result will be (no Location, result or id)"),
        ((202, {}, b"[1, 2]"), "error: the API answered 202 without saying where the result will be (no Location, result or id)"),
        ((303, {"location": secret.as_uri()}, b"{}"), "error [api]: GET to a file URL refused: only http and https are followed"),
    ]
    for answer, said in cases:
        with _answering(*answer) as url:
            code, out, err = run_cli(capsys, "predict", "iris", "--features", '{"a": 1}', "--api", url, "--api-key", "k")
        assert (code, out, err.strip().splitlines()[-1]) == (2, "", said)


ROW = "[[5.1,3.5,1.4,0.2]]"
V2 = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}]}


@pytest.fixture
def two_ways(demo: Container, acme: Principal) -> Iterator[tuple[str, str]]:
    """iris at version 2 of two, and a sticky split of its versions, served."""
    from tests.conftest import MODELS

    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())
    demo.deployments.update(acme, "iris", {"kind": "single", "model": "iris", "version": 2})
    demo.deployments.create(acme, "iris-split", {"kind": "split", "routing_key": "x-user-id", "variants": [
        {"name": "one", "weight": 50, "target": {"kind": "single", "model": "iris", "version": 1}},
        {"name": "two", "weight": 50, "target": {"kind": "single", "model": "iris", "version": 2}},
    ]})  # fmt: skip
    _, key = demo.keys.create("acme", ["predict"])
    with serving(create_app(demo)) as url:
        yield url, key


@pytest.mark.parametrize(
    ("deployment", "words", "body"),
    [
        ("iris", ["--version", "1"], None),
        ("iris-split", ["--variant", "one"], None),
        ("iris-split", ["--variant", "nope"], None),
        ("iris-split", ["--routing-key", "user-7"], None),
        ("iris-split", ["--routing-key", "user-8", "--param", "x=1"], None),
        ("iris", [], {"inputs": [[5.1, 3.5, 1.4, 0.2]], "version": 1, "options": {"return_probabilities": False}}),
        ("iris-split", ["--variant", "two"], {"inputs": [[5.1, 3.5, 1.4, 0.2]], "variant": "one", "routing_key": "k"}),
        ("iris", [], {"inputs": [[5.1, 3.5, 1.4, 0.2]], "verison": 1}),
        ("iris", ["--v2", "--version", "1"], V2),
        ("iris-split", ["--v2", "--variant", "one"], V2),
        ("iris-split", ["--v2"], {**V2, "parameters": {"routing_key": "user-7"}}),
        ("iris", ["--v2"], {**V2, "outputs": [{"name": "output_label"}]}),
        ("iris", ["--v2"], {**V2, "outputs": [{"name": "output_probability", "parameters": {"classification": 2}}]}),
        ("iris", ["--v2"], {**V2, "outputs": [{"name": "no_such_output"}]}),
        ("iris", ["--v2"], {**V2, "id": "mine"}),
    ],
)
def test_a_prediction_is_the_same_in_this_process_and_through_the_api(
    two_ways: tuple[str, str], demo: Container, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    deployment: str, words: list[str], body: dict[str, Any] | None,
) -> None:  # fmt: skip
    """--version, --variant and --routing-key were dropped with --api (answered by whatever the
    deployment routed to; an unknown variant a success), and a --file's own version, variant,
    routing key and options dropped in this process (and its unknown fields taken)."""
    from tests.support import cli_environment

    url, key = two_ways
    if body is not None:
        (tmp_path / "body.json").write_text(json.dumps(body))
        words = [*words, "--file", str(tmp_path / "body.json")]
    else:
        words = [*words, "--inputs", ROW]
    remote = run_cli(capsys, "predict", deployment, *words, "--api", url, "--api-key", key)
    with cli_environment(monkeypatch, demo.settings.home_path):
        local = run_cli(capsys, "--tenant", "acme", "predict", deployment, *words)
    assert remote[0] == local[0], (remote, local)
    if remote[0] != 0:
        assert remote[0] == 2 and "Traceback" not in remote[2] + local[2]
        return
    said = [json.loads(out) for out in (remote[1], local[1])]
    for answer in said:  # what differs from one request to the next
        for where in (answer, answer.get("parameters") or {}):
            for name in ("request_id", "id", "latency_ms"):
                where.pop(name, None)
    assert said[0] == said[1]
    if "--version" in words:
        assert "1" in json.dumps(said[0].get("version", said[0].get("model_version")))


@pytest.mark.parametrize(
    "extra",
    [{}, {"version": 1}, {"version": 7}, {"options": {"return_probabilities": False}}, {"options": {"return_probabilities": True}}, {"no_such_field": 1},
     {"inputs": None, "version": None}, {"inputs": [[5.1, 3.5, 1.4, 0.2]]}],
    ids=["rows-only", "version", "no-such-version", "no-probabilities", "probabilities", "unknown-field", "nulls", "two-rows-fields"],
)
def test_a_files_own_fields_are_read_alike_in_line_and_through_an_upload(
    served: tuple[str, str, Echo], tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: dict[str, Any]
) -> None:
    """A file's fields beside its rows (a version, options, one the API does not know) are the
    API's to read whether the file is sent in line or, being large, through an upload: the same
    answer, or the same refusal, either way; never a field dropped on the way."""
    url, key, _ = served
    body = tmp_path / "rows.json"
    body.write_text(json.dumps({"batch": [[5.1, 3.5, 1.4, 0.2]], **extra}))
    outcomes = []
    for above in ("100000", "10"):  # in line, then through an upload
        code, out, err = run_cli(capsys, "predict", "iris", "--file", str(body), "--api", url, "--api-key", key, "--upload-above", above)
        answer = json.loads(out) if code == 0 else None
        outcomes.append((code, answer and steady(answer), err.strip().splitlines()[-1] if code else ""))  # the CLI's message, not the server's log
    assert outcomes[0] == outcomes[1]
    assert (outcomes[0][0] == 0) is (extra.get("version") in (1, None) and "no_such_field" not in extra and not extra.get("inputs"))
    if outcomes[0][0] == 0:
        assert len(outcomes[0][1]["predictions"]) == 1  # a batch of one row answers a list, in line or not


@pytest.mark.parametrize(
    "extra",
    [{}, {"id": "mine"}, {"parameters": {"segment": "web"}}, {"parameters": {"binary_data_output": False}},
     {"outputs": [{"name": "output_probability", "parameters": {"classification": 2}}]}, {"outputs": [{"name": "output_label"}]}],
    ids=["inputs-only", "id", "parameter", "binary-off", "classification", "an-output"],
)  # fmt: skip
def test_a_v2_files_parameters_are_read_alike_in_line_and_through_an_upload(
    served: tuple[str, str, Echo], tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: dict[str, Any]
) -> None:
    url, key, _ = served
    body = tmp_path / "v2.json"
    body.write_text(json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [6.7, 3.0, 5.2, 2.3]}], **extra}))
    outcomes = []
    for above in ("100000", "10"):  # in line, then through an upload
        code, out, err = run_cli(capsys, "predict", "iris", "--v2", "--file", str(body), "--api", url, "--api-key", key, "--upload-above", above)
        assert code == 0, err
        outcomes.append(steady(json.loads(out)))
    assert outcomes[0] == outcomes[1]
