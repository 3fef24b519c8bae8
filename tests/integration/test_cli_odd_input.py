"""The CLI with input nobody planned for: each is a message naming what is wrong and exit 2,
never a traceback, a native stack, a secret printed, or a file written outside where it was
asked (each test once showed one of those)."""

from __future__ import annotations

import io
import json
import os
import socket
import tarfile
import threading
from typing import TYPE_CHECKING

import pytest

from tests.conftest import MODELS
from tests.integration.conftest import run_cli

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.usefixtures("cli_home")


def _iris(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0


def test_policy_null_is_a_message_not_an_assertion_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "deployments", "create", "d", "--policy", "null")
    assert code == 2 and "policy" in err


def test_bad_preferred_batch_sizes_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    _iris(capsys)
    with pytest.raises(SystemExit) as exit_:
        run_cli(capsys, "deployments", "set", "iris", "--batch-preferred-sizes", "a,b")
    assert exit_.value.code == 2


@pytest.mark.parametrize("parameters", ["[1]", '"abc"', "5"])
def test_file_body_with_parameters_not_an_object(capsys: pytest.CaptureFixture[str], tmp_path: Path, parameters: str) -> None:
    _iris(capsys)
    body = tmp_path / "body.json"
    body.write_text(f'{{"inputs": [[5.1, 3.5, 1.4, 0.2]], "parameters": {parameters}}}')
    code, _, err = run_cli(capsys, "predict", "iris", "--file", str(body))
    assert code == 2 and "parameters" in err


@pytest.mark.parametrize(("name", "content"), [("m.txt", b"garbage"), ("m.pkl", MODELS.joinpath("iris.onnx").read_bytes())], ids=["lightgbm", "pickle"])
def test_a_model_file_that_does_not_load_is_a_message(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, content: bytes) -> None:
    pytest.importorskip("lightgbm" if name.endswith(".txt") else "sklearn")
    model = tmp_path / name
    model.write_bytes(content)
    code, _, err = run_cli(capsys, "models", "push", "m", str(model))
    assert code == 2 and "Traceback" not in err and f"{name} is not a" in err


def test_xgboost_load_failure_prints_no_native_stack(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("xgboost")
    model = tmp_path / "m.json"
    model.write_text("{broken")
    code, _, err = run_cli(capsys, "models", "push", "m", str(model))
    assert code == 2 and "[bt]" not in err and "libxgboost" not in err and "m.json is not a xgboost model" in err


@pytest.mark.parametrize("reply", ids=["not-http", "short-body"], argvalues=[b"SSH-2.0-OpenSSH_9\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"a\":"])
def test_a_server_that_is_not_http_is_a_message(capsys: pytest.CaptureFixture[str], reply: bytes) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(reply)
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    code, _, err = run_cli(capsys, "predict", "iris", "--inputs", "[[1,2,3,4]]", "--api", url, "--api-key", "k")
    server.close()
    assert code == 2 and "no answer" in err and "Traceback" not in err


def test_an_api_url_with_a_space_is_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "predict", "iris", "--inputs", "[[1,2,3,4]]", "--api", "http://exa mple.com", "--api-key", "k")
    assert code == 2 and "Traceback" not in err


def test_triton_repo_name_cannot_leave_the_out_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run_cli(capsys, "models", "push", "mlp", str(MODELS / "diabetes_mlp.onnx"))
    out = tmp_path / "a" / "repo"
    code, _, err = run_cli(capsys, "triton", "repo", "mlp:1", "--flavour", "local", "--out", str(out), "--name", "../../escaped")
    assert not (tmp_path / "escaped").exists()
    assert code == 2 and "one path segment" in err
    code, _, _ = run_cli(capsys, "triton", "repo", "mlp:1", "--flavour", "local", "--out", str(out), "--name", "DiabetesMLP")
    assert code == 0 and (out / "DiabetesMLP" / "config.pbtxt").exists()  # any name Triton takes, in one segment



@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [
        ("--max-batch-size", str(2**31), "max_batch_size"),
        ("--instance-count", str(2**31), "instance_count"),
        ("--preferred-batch-size", str(2**31), "preferred_batch_sizes"),
    ],
)
def test_triton_repo_refuses_numbers_triton_cannot_read(capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, value: str, field: str) -> None:
    """Wider than Triton's config holds (an int32): refused naming it, nothing written."""
    run_cli(capsys, "models", "push", "mlp", str(MODELS / "diabetes_mlp.onnx"))
    code, _, err = run_cli(capsys, "triton", "repo", "mlp:1", "--flavour", "sagemaker", "--out", str(tmp_path / "repo"), flag, value)
    assert code == 2 and field in err, err
    assert not (tmp_path / "repo").exists()


def test_triton_repo_and_check_refuse_a_scalar_tensor(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Triton cannot declare a rank-0 tensor: the message names it and says how to export it."""
    from tests.models import relu_model

    (tmp_path / "scalar.onnx").write_bytes(relu_model([]))
    assert run_cli(capsys, "models", "push", "scalar", str(tmp_path / "scalar.onnx"))[0] == 0
    code, _, err = run_cli(capsys, "triton", "repo", "scalar:1", "--flavour", "sagemaker", "--out", str(tmp_path / "repo"))
    assert code == 2 and "inputs.x" in err and "[1]" in err, err
    assert not (tmp_path / "repo").exists()
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in {"m/config.pbtxt": b'name: "m"\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ ] } ]\n', "m/1/model.onnx": b"x"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    code, _, err = run_cli(capsys, "triton", "check", str(archive))
    assert code == 2 and "inputs.x" in err and "[1]" in err, err


@pytest.mark.parametrize("name", ["modèle", 'a"b', "a#b"])
def test_triton_check_accepts_a_repository_triton_repo_names(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str) -> None:
    run_cli(capsys, "models", "push", "mlp", str(MODELS / "diabetes_mlp.onnx"))
    archive = tmp_path / "model.tar.gz"
    code, _, err = run_cli(capsys, "triton", "repo", "mlp:1", "--flavour", "sagemaker", "--out", str(archive), "--name", name)
    assert code == 0, err
    code, out, err = run_cli(capsys, "triton", "check", str(archive))
    assert code == 0, err
    assert json.loads(out)["default_model"] == name

@pytest.mark.parametrize("names", ["a,a,b,c", "a,,b,c"])
def test_feature_names_must_be_distinct_and_non_empty(capsys: pytest.CaptureFixture[str], names: str) -> None:
    code, _, err = run_cli(capsys, "models", "push", "m", str(MODELS / "iris.onnx"), "--feature-names", names)
    assert code == 2 and "feature_names" in err


def test_a_tracking_uri_query_token_is_never_printed(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's message quotes the URI's path and query alone (`url: /?token=…/api/2.0/…`)."""
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # else ~4 minutes of MLflow's backoff first
    code, _, err = run_cli(
        capsys, "models", "push", "fraud", "models:/fraud@champion", "--tracking-uri", "http://127.0.0.1:1/?token=s3cret"
    )
    assert code == 2 and "s3cret" not in err
    # what MLflow's loading imported (Feast) left no Prometheus folder in this process's environment
    assert not {"PROMETHEUS_MULTIPROC_DIR", "PROMETHEUS_MULTIPROCESS_DIR"} & set(os.environ)


def test_a_tracking_uri_python_cannot_split_is_refused_without_its_credentials(capsys: pytest.CaptureFixture[str]) -> None:
    """Python's own words for such a URI (a host NFKC changes) quote its netloc, credentials
    and all: the push says sluice's, naming the flag's field."""
    pytest.importorskip("mlflow")
    code, _, err = run_cli(capsys, "models", "push", "fraud", "models:/fraud/1", "--tracking-uri", "http://alice:s3cretpw@mlflow.example\uff0fx")
    assert code == 2 and "s3cretpw" not in err and "tracking_uri cannot be read as a URL" in err, err


@pytest.mark.parametrize(("written", "read"), [("sepal_length,sepal_width,petal_length,petal_width,", 4), ("sepal_length,sepal_width,sepal_width,petal_width", None)])
def test_feature_names_a_models_metadata_gives_are_read_as_an_exporter_writes_them(written: str, read: int | None) -> None:
    """A trailing comma an exporter left in the model's `feature_names` metadata names nothing
    (the user never typed it); a name given twice there is refused, blaming the artifact."""
    import onnx

    from sluice.domain.errors import SluiceError
    from sluice.services.models import read_signature

    model = onnx.load(str(MODELS / "iris.onnx"))
    for prop in model.metadata_props:
        if prop.key == "feature_names":
            prop.value = written
    if read is None:
        with pytest.raises(SluiceError) as refused:
            read_signature(model.SerializeToString())
        assert refused.value.field == "artifact" and "the model's feature_names metadata" in refused.value.message and "twice" in refused.value.message
    else:
        assert len(read_signature(model.SerializeToString()).inputs[0].feature_names or ()) == read
