"""The `sluice` command on a temporary home: push, deploy, predict, keys; bad input exits non-zero."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from sluice import cli
from tests.conftest import MODELS
from tests.integration.conftest import run_cli

if TYPE_CHECKING:
    from pathlib import Path

SETOSA = '{"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}'


pytestmark = pytest.mark.usefixtures("cli_home")


def test_push_deploy_predict_switch(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    assert code == 0 and "iris version 1" in out
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    code, out, _ = run_cli(capsys, "predict", "iris", "--features", SETOSA)
    assert code == 0
    first = json.loads(out)
    assert first["prediction"] == "setosa" and first["version"] == 1
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris_forest.onnx"))
    code, out, _ = run_cli(capsys, "deployments", "set", "iris", "--model", "iris", "--version", "2")
    assert code == 0 and "revision 2" in out
    second = json.loads(run_cli(capsys, "predict", "iris", "--features", SETOSA)[1])
    assert second["version"] == 2 and second["probabilities"] != first["probabilities"]
    code, out, _ = run_cli(capsys, "models", "list")
    assert "iris" in out and "2" in out
    shown = json.loads(run_cli(capsys, "deployments", "show", "iris")[1])
    assert [h["revision"] for h in shown["history"]] == [1, 2]
    rows = json.loads(run_cli(capsys, "predict", "iris", "--inputs", "[[5.1,3.5,1.4,0.2],[6.7,3.0,5.2,2.3]]")[1])
    assert [p["prediction"] for p in rows["predictions"]] == ["setosa", "virginica"]


def test_the_tenant_is_read_from_the_environment_at_each_command(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`--tenant`, else SLUICE_TENANT as it is when the command runs (the parser that reads the
    command line is built once per process), else `default`."""
    assert run_cli(capsys, "--tenant", "acme", "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    monkeypatch.setenv("SLUICE_TENANT", "acme")
    assert "iris" in run_cli(capsys, "models", "list")[1]
    monkeypatch.setenv("SLUICE_TENANT", "globex")
    assert "iris" not in run_cli(capsys, "models", "list")[1]
    assert "iris" in run_cli(capsys, "--tenant", "acme", "models", "list")[1]
    monkeypatch.delenv("SLUICE_TENANT")
    assert "iris" not in run_cli(capsys, "models", "list")[1]
    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0  # the tenant `default`'s own
    monkeypatch.setenv("SLUICE_TENANT", "default")
    assert "iris" in run_cli(capsys, "models", "list")[1]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("models", "push", "iris", "/no/such/file.onnx"), "no such file"),
        (("models", "push", "Bad Name", str(MODELS / "iris.onnx")), "[name]"),
        (("deployments", "create", "d", "--model", "ghost"), "ghost"),
        (("deployments", "create", "d", "--policy", "{broken"), "not valid JSON"),
        (("predict", "nope", "--features", "{}"), "deployment 'nope' not found"),
        (("predict", "nope"), "exactly one of"),
        (("keys", "create", "--scopes", "root"), "[scopes]"),
        # Found by a CLI review: a folder for a file, the OS's words for an @file, another flag blamed.
        (("models", "push", "iris", "/"), "/ is a folder, not a file"),
        (("deployments", "create", "d", "--policy", "@/"), "policy: / is a folder, not a file"),
        (("deployments", "create", "d", "--policy", "@/no/such/policy.json"), "policy: no such file: /no/such/policy.json"),
        (("deployments", "create", "d", "--model", "iris", "--policy", '{"kind": "single", "model": "iris", "version": 1}'), "not both"),
        (("predict", "iris", "--features", "[1, 2]"), "--features: Input should be a valid dictionary"),
        (("predict", "iris", "--batch", "5"), "--batch: Input should be a valid list"),
        (("batch", "schedule", "create", "s", "--deployment", "iris", "--input", "in.csv", "--rate", "-5 minutes"), "is no rate"),
    ],
)
def test_bad_input_is_a_message_and_a_non_zero_exit(capsys: pytest.CaptureFixture[str], args: tuple[str, ...], words: str) -> None:
    code, _, err = run_cli(capsys, *args)
    assert code == 2
    assert words in err and "Traceback" not in err


def test_a_model_whose_constants_make_a_large_tensor_is_a_message_naming_the_node(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tests.models import filled_model

    path = tmp_path / "filled.onnx"
    path.write_bytes(filled_model([9000, 9000]))
    code, _, err = run_cli(capsys, "models", "push", "filled", str(path))
    assert code == 2 and "'fill0' (ConstantOfShape)" in err and "Traceback" not in err, err


def test_predict_with_bad_features_names_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    run_cli(capsys, "deployments", "create", "iris", "--model", "iris")
    code, _, err = run_cli(capsys, "predict", "iris", "--features", '{"sepal_length": 1}')
    assert code == 2 and "[features.sepal_width]" in err


@pytest.mark.parametrize("depth", [201, 800, 1100, 5000])
def test_predict_with_json_nested_too_deep_to_read_names_the_field(capsys: pytest.CaptureFixture[str], tmp_path: Path, depth: int) -> None:
    """The CLI's JSON is read as Python's json module reads it, as deep as the stack holds:
    deeper (1,100 levels), or too deep for decoding to walk (800 levels around a true), is an
    error naming the argument and the member, never a RecursionError's traceback; shallower (201
    levels, past the HTTP API's 200) is read, and refused for what it holds."""
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    run_cli(capsys, "deployments", "create", "iris", "--model", "iris")
    inner = "[" * (depth - 1) + ("true" if depth == 800 else "") + "]" * (depth - 1)
    features = json.loads(SETOSA)
    text = json.dumps({**features, "sepal_length": "X"}).replace('"X"', inner)
    code, _, err = run_cli(capsys, "predict", "iris", "--features", text)
    assert code == 2 and "Traceback" not in err, err
    if depth == 201:
        assert "nested too deep" not in err and "error [features]: rows of input" in err, err
    elif depth == 800:  # read, then too deep for decoding to walk
        assert "error [features]: 'features' is nested too deep to read" in err, err
    else:
        assert f"error: features: 'sepal_length' is nested too deep to read: {depth:,} levels" in err, err
    body = tmp_path / "body.json"
    body.write_text('{"batch": [' + text + "]}")
    code, _, err = run_cli(capsys, "predict", "iris", "--file", str(body))
    assert code == 2 and "Traceback" not in err and ("nested too deep" in err) == (depth > 201), err
    code, out, err = run_cli(capsys, "predict", "iris", "--features", SETOSA, "--param", "note=" + "[" * depth + "]" * depth)
    assert code == 0 and json.loads(out)["prediction"] == "setosa", err  # a parameter that is no number is its text


def test_keys_create_and_revoke(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--tenant", "globex", "keys", "create", "--scopes", "predict,admin", "--name", "ops")
    assert code == 0 and "tenant globex" in out
    key_id = out.split()[2].rstrip(",")
    assert key_id in run_cli(capsys, "--tenant", "globex", "keys", "list")[1]
    assert run_cli(capsys, "keys", "revoke", key_id)[0] == 2  # another tenant's key: not found
    code, _, err = run_cli(capsys, "--tenant", "globex", "keys", "revoke", key_id)
    assert code == 2 and "last admin key" in err  # the tenant would be locked out
    assert run_cli(capsys, "--tenant", "globex", "keys", "create", "--scopes", "admin")[0] == 0
    assert run_cli(capsys, "--tenant", "globex", "keys", "revoke", key_id)[0] == 0


def test_push_a_version_served_by_a_sagemaker_endpoint(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"), "--runtime", "sagemaker", "--config", '{"endpoint_name": "sluice-iris"}')
    assert code == 0, err
    shown = json.loads(run_cli(capsys, "models", "show", "iris", "--version", "1")[1])
    assert shown["runtime"] == "sagemaker"
    # MODEL[:VERSION] as the other commands take it (it looked for a model named 'iris:1').
    assert json.loads(run_cli(capsys, "models", "show", "iris:1")[1]) == shown == json.loads(run_cli(capsys, "models", "show", "iris:latest")[1])
    code, _, err = run_cli(capsys, "models", "show", "iris:1", "--version", "2")
    assert code == 2 and "[version]" in err, err
    code, _, err = run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"), "--runtime", "sagemaker", "--config", '{"bogus": 1}')
    assert code == 2 and "[config]" in err
    code, _, err = run_cli(capsys, "models", "register-triton", "m", "--url", "http://127.0.0.1:1")
    assert code == 2 and "error [triton_url]: http://127.0.0.1:1 is not an allowed server" in err  # not 8100-8102
    from sluice.settings import get_settings
    from sluice.wiring import get_container

    monkeypatch.setenv("SLUICE_TRITON_URL_PREFIXES", '["http://127.0.0.1:1"]')  # the operator allows it
    get_settings.cache_clear()
    get_container.cache_clear()
    code, _, err = run_cli(capsys, "models", "register-triton", "m", "--url", "http://127.0.0.1:1")
    assert code == 2 and "error: the Triton server is not reachable" in err


@pytest.mark.parametrize("version", ["٣", "³", "99999999999999999999", "0", "-1"])
def test_a_version_on_the_command_line_is_ascii_digits_within_64_bits(capsys: pytest.CaptureFixture[str], version: str) -> None:
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    with pytest.raises(SystemExit) as exited:
        cli.main(["predict", "iris", "--features", "{}", "--version", version])
    assert exited.value.code == 2
    assert "--version" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [["batch", "list", "--limit"], ["monitor", "history", "iris", "--limit"], ["monitor", "status", "iris", "--windows"],
     ["monitor", "baseline", "iris", "--data", "x.csv", "--limit"], ["monitor", "labels", "iris", "--file", "x.csv", "--limit"]],
)  # fmt: skip
def test_a_limit_of_zero_is_refused_rather_than_answered_as_nothing(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """`--limit 0` read no row and said the file held none, or listed no job and said there were none."""
    with pytest.raises(SystemExit) as exited:
        cli.main([*command, "0"])
    assert exited.value.code == 2
    assert f"argument {command[-1]}: '0' is not at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["serve"], ["stream", "--deployment", "iris"]])
def test_more_worker_processes_than_the_machine_runs_usefully_are_refused_before_any_starts(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """`--workers 99999` forked processes until the machine ran out of memory: past four a
    core (at least 8) it is refused, naming the bound, and nothing starts."""
    from sluice.cli.common import max_workers

    with pytest.raises(SystemExit) as exited:
        cli.main([*command, "--workers", str(max_workers() + 1)])
    assert exited.value.code == 2
    assert f"at most {max_workers()}" in capsys.readouterr().err


def test_adaptive_batching_is_set_changed_and_turned_off_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    code, _, err = run_cli(capsys, "deployments", "create", "iris", "--model", "iris", "--batch-max-size", "64")
    assert code == 2 and "--batch-max-delay-us" in err
    code, out, _ = run_cli(capsys, "deployments", "create", "iris", "--model", "iris", "--batch-max-size", "64", "--batch-max-delay-us", "100")
    assert code == 0 and "(batching: 64 rows, 100 µs)" in out
    code, out, _ = run_cli(capsys, "deployments", "set", "iris", "--batch-max-delay-us", "500")
    assert code == 0 and "(batching: 64 rows, 500 µs)" in out and "revision 2" in out
    code, _, err = run_cli(capsys, "deployments", "set", "iris", "--batch-max-size", "1")
    assert code == 2 and "batching.max_batch_size" in err
    code, out, _ = run_cli(capsys, "deployments", "set", "iris", "--no-batching")
    assert code == 0 and "batching" not in out
    assert run_cli(capsys, "predict", "iris", "--features", SETOSA)[0] == 0


def test_batching_s_preferred_sizes_and_instances_are_set_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    code, _, err = run_cli(capsys, "deployments", "create", "iris", "--model", "iris", "--batch-instances", "2")
    assert code == 2 and "--batch-max-size" in err
    args = ("--batch-max-size", "64", "--batch-max-delay-us", "0", "--batch-preferred-sizes", "32,8", "--batch-instances", "2")
    code, out, _ = run_cli(capsys, "deployments", "create", "iris", "--model", "iris", *args)
    assert code == 0 and "(batching: 64 rows, 0 µs, preferred 8,32, 2 instances)" in out
    code, out, _ = run_cli(capsys, "deployments", "set", "iris", "--batch-max-delay-us", "100")  # the others kept
    assert code == 0 and "(batching: 64 rows, 100 µs, preferred 8,32, 2 instances)" in out
    code, _, err = run_cli(capsys, "deployments", "set", "iris", "--batch-max-size", "16")  # 32 would be above it
    assert code == 2 and "batching.preferred_batch_sizes" in err
    code, out, _ = run_cli(capsys, "deployments", "set", "iris", "--batch-preferred-sizes", "", "--batch-instances", "1")
    assert code == 0 and "(batching: 64 rows, 100 µs)" in out


def test_predict_reads_a_body_from_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    run_cli(capsys, "deployments", "create", "iris", "--model", "iris")
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps({"batch": [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]}))
    code, out, err = run_cli(capsys, "predict", "iris", "--file", str(rows))
    assert code == 0, err
    assert [p["prediction"] for p in json.loads(out)["predictions"]] == ["setosa", "virginica"]
    v2 = tmp_path / "v2.json"
    v2.write_text(json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [6.7, 3.0, 5.2, 2.3]}]}))
    code, out, err = run_cli(capsys, "predict", "iris", "--v2", "--file", str(v2))
    assert code == 0, err
    assert {o["name"]: o for o in json.loads(out)["outputs"]}["output_label"]["data"] == ["virginica"]


def test_a_home_open_to_others_is_made_0700_and_said(cli_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A home an older sluice made 0755: the first command that uses it makes it 0700 and says
    so on stderr; what the command writes is owner-only under any umask, and the caller's umask
    is back afterwards."""
    import os
    import stat

    cli_home.mkdir(mode=0o755)
    cli_home.chmod(0o755)
    previous = os.umask(0)
    try:
        code, _, err = run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
        assert os.umask(0) == 0  # restored
    finally:
        os.umask(previous)
    assert code == 0 and "made 0700" in err and "0755" in err
    modes = {p.relative_to(cli_home).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in [cli_home, *cli_home.rglob("*")]}
    assert {".", "registry.db", "artifacts/tenants/default"} <= set(modes)
    assert modes == {name: 0o700 if (cli_home / name).is_dir() else 0o600 for name in modes}
    assert "made 0700" not in run_cli(capsys, "models", "list")[2]  # said once


def test_a_command_that_predicts_nothing_builds_no_prediction_path(capsys: pytest.CaptureFixture[str]) -> None:
    """`sluice keys`, `sluice models` and `sluice batch list` start without the prediction
    service, its runtimes, graph steps and the batch runner (NumPy, the policy schema, ONNX
    Runtime's wrapper): a third less start-up. Whatever predicts still finds it all."""
    from sluice.cli import pieces

    assert run_cli(capsys, "keys", "create", "--scopes", "predict")[0] == 0
    assert run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert run_cli(capsys, "models", "list")[0] == 0
    assert run_cli(capsys, "batch", "list")[0] == 0
    container = pieces.container()
    built = container.__dict__
    assert "keys" in built and "models" in built and "batch" in built
    assert "predictions" not in built and "deployments" not in built and "batch_runner" not in built
    assert container.functions is None and container.lookup_steps is None
    assert not dict.__contains__(container.runtimes, "onnx")  # a factory, never called
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    code, out, _ = run_cli(capsys, "predict", "iris", "--features", SETOSA)
    assert code == 0 and json.loads(out)["prediction"] == "setosa"
    assert "predictions" in built and dict.__contains__(container.runtimes, "onnx")
    assert container.functions is not None and container.shadows is not None


def test_a_command_s_log_lines_leave_its_stdout_to_its_answer(tmp_path: Path) -> None:
    """A failed prediction's warning line goes to the command's stderr beside the error; its
    stdout (what a pipe reads) stays empty."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "SLUICE_HOME": str(tmp_path)}
    env.pop("SLUICE_LOG_STREAM", None)
    env.pop("SLUICE_LOG_LEVEL", None)
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from sluice.cli import main; sys.exit(main())", "predict", "nope", "--features", "{}"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert "deployment 'nope' not found" in done.stderr and '"message":"prediction failed"' in done.stderr


@pytest.mark.parametrize("tenant", ["../escaped", "", "Acme", "sha256/.."])
def test_the_cli_refuses_a_tenant_that_is_not_a_name_and_stores_nothing(
    tenant: str, cli_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--tenant ../escaped` stored the model's file beside the tenants' folders, and the empty
    tenant's in the folder of a tenant named `sha256`."""
    code = cli.main(["--tenant", tenant, "models", "push", "m", str(MODELS / "iris.onnx")])
    _, err = capsys.readouterr()
    assert code == 2 and "error [tenant]" in err
    assert not [p for p in cli_home.parent.rglob("*") if p.is_file() and "sha256" in p.parts]


@pytest.mark.parametrize("command", ["predict", "stream"])
def test_a_reader_that_stops_reading_ends_the_command_quietly(command: str, tmp_path: Path) -> None:
    """`sluice predict … | head -c 100`, `sluice stream … | head -2`: the reader closes the pipe
    with most of the answer unread. The command ends quietly with a shell's status for a process a
    closed pipe stopped (128 + SIGPIPE), not a BrokenPipeError traceback and status 1."""
    import os
    import signal
    import subprocess
    import sys

    from sluice.demo import install_demo
    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    install_demo(Container.from_settings(Settings(mode="local", home=tmp_path / "home")), Principal("default", frozenset({"admin"}), "t"))
    rows = [[5.1, 3.5, 1.4, 0.2]] * 20_000
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    (tmp_path / "rows.jsonl").write_bytes(b"".join(b'{"inputs": [[5.1, 3.5, 1.4, 0.2]]}\n' for _ in rows))
    argv = ["predict", "iris", "--batch", f"@{tmp_path / 'rows.json'}"] if command == "predict" else ["stream", "--deployment", "iris"]
    env = {**os.environ, "SLUICE_HOME": str(tmp_path / "home")}
    read, write = os.pipe()
    with (tmp_path / "rows.jsonl").open("rb") as given, subprocess.Popen(
        [sys.executable, "-c", "import sys; from sluice.cli import main; sys.exit(main())", *argv],
        env=env, stdin=given, stdout=write, stderr=subprocess.PIPE,
    ) as process:  # fmt: skip
        os.close(write)
        with os.fdopen(read, "rb") as reader:
            assert reader.read(100)  # a little of the answer, then the reader goes away
        _, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGPIPE, err.decode()
    assert b"Traceback" not in err and b"BrokenPipeError" not in err


def test_an_empty_sluice_home_is_the_default_home_not_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`SLUICE_HOME=` (set, empty) read as the current folder: sluice made the folder the command
    ran in its owner's alone (0700) and put its registry there. An empty home is the default."""
    import os
    import stat
    import subprocess
    import sys

    work, home = tmp_path / "project", tmp_path / "user"
    work.mkdir(mode=0o755)
    work.chmod(0o755)
    home.mkdir()
    env = {**os.environ, "SLUICE_HOME": "", "HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from sluice.cli import main; sys.exit(main())", "models", "list"],
        cwd=work, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(work.stat().st_mode) == 0o755 and list(work.iterdir()) == []
    assert (home / ".sluice" / "registry.db").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("predict", "iris", "--api", "http://127.0.0.1:1", "--api-key", "sk_x", "--features", "{}"), "no answer"),
        (("predict", "iris", "--api", "http://127.0.0.1:1", "--api-key", "sk_x", "--file", "{list}"), "a request is an object"),
        (("predict", "iris", "--file", "{folder}"), "is a folder, not a file"),
        (("deployments", "create", "x", "--policy", "@{folder}"), "is a folder, not a file"),
    ],
)
def test_a_command_that_cannot_be_done_says_why_without_a_traceback(cli_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], said: str) -> None:
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "folder").mkdir()
    filled = [a.replace("{list}", str(tmp_path / "list.json")).replace("{folder}", str(tmp_path / "folder")) for a in args]
    code, _, err = run_cli(capsys, *filled)
    assert code == 2 and said in err and "Traceback" not in err, err
