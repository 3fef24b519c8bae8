"""`sluice stream` through a real pipe: every line accounted for, in order, errors as lines;
a partial batch is flushed after the wait, not held until the pipe closes. One worker's
stream runs in this process (the `sluice` command's `main`, its stdin and stdout real pipes
or files); worker processes are a `sluice stream` process's own, so those runs start one."""

from __future__ import annotations

import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager, redirect_stderr
from typing import IO, TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO
from tests.integration.stream.conftest import rows
from tests.support import cli_environment

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container


@pytest.fixture
def env(demo: Container, settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "SLUICE_HOME": str(settings.home_path),
        "PYTHONPATH": os.pathsep.join([str(REPO / "functions"), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.fixture
def here(demo: Container, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The demo's home for the `sluice` commands this process runs, logging as `main` sets it
    in a process of its own (and put back after: `main` sets them in the environment)."""
    with cli_environment(monkeypatch, settings.home_path, SLUICE_LOG_LEVEL="WARNING", SLUICE_LOG_STREAM="stderr"):
        yield


def _stream(env: dict[str, str], *args: str) -> list[str]:
    return [sys.executable, "-m", "sluice.cli", "--tenant", "acme", "stream", "--deployment", "iris", *args]


@contextmanager
def _stdio(stdin: int, stdout: IO[bytes]) -> Iterator[io.StringIO]:
    """This process's stdin the pipe `stdin` reads from, its stdout `stdout`, its stderr
    captured (yielded), and the signal handlers the command sets put back after it."""
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    saved = sys.stdin, sys.stdout
    stderr = io.StringIO()
    with os.fdopen(stdin, "rb") as reading, redirect_stderr(stderr):
        sys.stdin, sys.stdout = reading, stdout  # type: ignore[assignment]
        try:
            yield stderr
        finally:
            sys.stdin, sys.stdout = saved
            for signum, handler in handlers.items():
                signal.signal(signum, handler)


def _stream_here(out: Path, data: bytes, *args: str, deployment: str = "iris") -> tuple[int, str, str]:
    """`sluice stream --workers 1 ARGS` in this process, fed `data` through a real pipe that a
    thread writes and closes: (exit code, stdout, stderr)."""
    from sluice import cli

    read, write = os.pipe()
    writer = threading.Thread(target=_write_all, args=(write, data))
    with out.open("w+b") as stdout, _stdio(read, stdout) as stderr:
        writer.start()
        try:
            code = cli.main(["--tenant", "acme", "stream", "--deployment", deployment, "--workers", "1", *args])
        finally:
            writer.join()
    return code, out.read_text(), stderr.getvalue()


def _write_all(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as pipe:
        pipe.write(data)


def test_every_line_gives_one_output_line_in_order(here: None, tmp_path: Path) -> None:
    lines = rows(300)
    lines[10] = "{broken"
    lines[200] = json.dumps({"id": "wide", "inputs": [[1, 2, 3, 4, 5]]})
    lines.insert(150, "")
    code, stdout, stderr = _stream_here(tmp_path / "out.jsonl", ("\n".join(lines) + "\n").encode(), "--batch-lines", "64")
    assert code == 0, stderr
    out = [json.loads(line) for line in stdout.splitlines()]
    assert len(out) == len(lines) == 301
    assert [o["source"]["line"] for o in out] == list(range(1, 302))
    errors = {o["source"]["line"]: o for o in out if "error" in o}
    assert set(errors) == {11, 151, 202}
    assert errors[202]["id"] == "wide" and errors[202]["field"].startswith("inputs")
    assert out[0] == {**out[0], "id": "tx-0", "prediction": "setosa", "deployment": "iris", "model": "iris", "version": 1}
    assert "301 lines: 298 predictions, 3 errors" in stderr


@pytest.mark.parametrize("member", ["features", "inputs"])
def test_a_line_nested_past_the_limit_is_one_error_line_not_a_traceback(here: None, tmp_path: Path, member: str) -> None:
    """A valid JSON line nested 1,000 deep (orjson reads it; Python's stack does not hold a
    walk of it) is one error line naming its member; the lines beside it are answered."""
    deep = ('{"a": ' * 999 + "1" + "}" * 999) if member == "features" else "[" * 999 + "1" + "]" * 999
    lines = [*rows(2), f'{{"id": "deep", "{member}": {deep}}}', *rows(2, start=2)]
    code, stdout, stderr = _stream_here(tmp_path / "out.jsonl", ("\n".join(lines) + "\n").encode())
    # (a logging handler an earlier test of this process left on its closed stderr may report
    # "--- Logging error ---" with a traceback of its own: the command's is what is looked for)
    assert code == 0 and "RecursionError" not in stderr and "Traceback" not in re.sub(r"--- Logging error ---.*?\nArguments: [^\n]*\n", "", stderr, flags=re.S), stderr
    out = [json.loads(line) for line in stdout.splitlines()]
    assert [o["source"]["line"] for o in out] == [1, 2, 3, 4, 5]
    assert (out[2]["id"], out[2]["code"], out[2]["field"]) == ("deep", "bad_request", member)
    assert [o["prediction"] for o in out[:2] + out[3:]] == ["setosa", "virginica", "setosa", "virginica"]


@pytest.mark.parametrize("features", ['[{"sepal_length": 5.1}, {"sepal_length": 6.2}]', "[[5.1, 3.5, 1.4, 0.2]]", '"5.1"', "7", "[]"])
def test_features_that_are_not_an_object_are_refused_naming_features_as_the_api_refuses_them(here: None, tmp_path: Path, features: str) -> None:
    """A line's `features` are an object of names and values, or one row's values in order: a
    list of objects (or of rows, or a lone value) was read as one row of a shape the model does
    not take, and the error named the input's shape, not `features`."""
    lines = [*rows(1), f'{{"id": "odd", "features": {features}}}', *rows(1, start=1)]
    code, stdout, stderr = _stream_here(tmp_path / "out.jsonl", ("\n".join(lines) + "\n").encode())
    out = [json.loads(line) for line in stdout.splitlines()]
    assert code == 0 and len(out) == 3, stderr
    assert (out[1]["id"], out[1]["code"], out[1]["field"]) == ("odd", "invalid_request", "features")
    assert "object of feature names and values" in out[1]["error"]


@pytest.fixture
def scalar(demo: Container, acme: Principal) -> Container:
    """acme's deployment `scalar`: a model of one scalar input (shape [])."""
    from tests.models import relu_model

    demo.models.push(acme, "scalar", relu_model([]))
    demo.deployments.create(acme, "scalar", {"kind": "single", "model": "scalar", "version": 1})
    return demo


SCALAR_LINE = st.tuples(st.sampled_from(["v2", "plain", "row"]), st.floats(-1e6, 1e6, width=32))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(SCALAR_LINE, min_size=1, max_size=12), batch=st.integers(1, 5))
def test_every_line_of_a_scalar_model_is_answered_alone_or_refused_alone(
    scalar: Container, here: None, tmp_path: Path, lines: list[tuple[str, float]], batch: int
) -> None:
    """docs/streaming.md: a model whose input is a scalar takes one record per call. Every
    line gives its own output line, in order, however many share a batch: a scalar its own
    prediction, a line giving a batch of rows (shape [1]) its own error naming the input."""
    import numpy as np

    shaped = {
        "v2": lambda i, x: {"id": i, "inputs": [{"name": "x", "datatype": "FP32", "shape": [], "data": [x]}]},
        "plain": lambda i, x: {"id": i, "inputs": {"x": x}},
        "row": lambda i, x: {"id": i, "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [x]}]},
    }
    data = "".join(json.dumps(shaped[kind](i, x)) + "\n" for i, (kind, x) in enumerate(lines)).encode()
    code, stdout, stderr = _stream_here(tmp_path / "out.jsonl", data, "--batch-lines", str(batch), deployment="scalar")
    assert code == 0, stderr
    out = [json.loads(line) for line in stdout.splitlines()]
    assert [o["id"] for o in out] == list(range(len(lines)))  # every line, in order
    for o, (kind, x) in zip(out, lines, strict=True):
        if kind == "row":
            assert (o["code"], o["field"]) == ("invalid_input", "inputs.x.shape"), o
        else:
            assert np.float32(o["prediction"]) == np.float32(max(x, 0.0)), o
    refused = sum(kind == "row" for kind, _ in lines)
    assert f"{len(lines) - refused} predictions, {refused} errors" in stderr


def test_a_partial_batch_is_answered_after_the_wait(here: None) -> None:
    """One line in, the pipe left open: its answer comes out after the wait (20 ms), while the
    pipe is still open (a minute at most); only then is the pipe closed and the stream ends."""
    from sluice import cli

    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    answered: list[bytes] = []
    client = threading.Thread(target=_one_line_then_close, args=(stdin_write, stdout_read, answered))
    with os.fdopen(stdout_write, "wb") as stdout, _stdio(stdin_read, stdout) as stderr:
        client.start()
        try:
            code = cli.main(["--tenant", "acme", "stream", "--deployment", "iris", "--workers", "1", "--batch-lines", "1000", "--max-wait-ms", "20", "--quiet"])
        finally:
            stdout.close()  # the end of the stream's output: the client reads to it
            client.join(timeout=120)
    assert code == 0, stderr.getvalue()
    assert answered, "no answer while the pipe was open"
    answer = json.loads(answered[0])
    assert answer["id"] == "tx-0" and answer["prediction"] == "setosa"


def _one_line_then_close(stdin: int, stdout: int, answered: list[bytes]) -> None:
    """Write one line and keep the pipe open until its answer comes out (a minute at most),
    then close it and read the stream's output to its end."""
    with os.fdopen(stdout, "rb") as out:
        with os.fdopen(stdin, "wb") as pipe:
            pipe.write((rows(1)[0] + "\n").encode())
            pipe.flush()
            if select.select([out], [], [], 60)[0]:  # the pipe is still open: only the wait can flush it
                answered.append(out.readline())
        out.read()


def test_an_unknown_deployment_exits_non_zero_with_every_line_an_error(env: dict[str, str]) -> None:
    """Worker processes (two, whatever the machine's cores) that cannot score say so for every line."""
    args = [a if a != "iris" else "nope" for a in _stream(env)]
    done = subprocess.run(
        [*args, "--workers", "2", "--quiet"], input="\n".join(rows(2)) + "\n", capture_output=True, text=True,
        env={**env, "SLUICE_STREAM_MAX_WAIT_MS": "1"}, timeout=120,
    )  # fmt: skip
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 1
    assert [o["retryable"] for o in out] == [True, True] and "nope" in out[0]["error"]


def test_worker_processes_answer_in_input_order_and_count_every_line(
    env: dict[str, str], here: None, demo: Container, acme: Principal, tmp_path: Path
) -> None:
    """Several processes score batches at once; the answers still come out in input order,
    each worker's statistics reach the registry, and one worker (this process) gives the same
    answers."""
    lines = rows(120)
    lines[33] = "{broken"
    data = "\n".join(lines) + "\n"
    done = subprocess.run(_stream(env, "--batch-lines", "7", "--workers", "3"), input=data, capture_output=True, text=True, env=env, timeout=120)
    code, stdout, stderr = _stream_here(tmp_path / "out.jsonl", data.encode(), "--batch-lines", "7")
    answers: dict[str, list[dict[str, object]]] = {}
    for workers, (status, out, err) in {"3": (done.returncode, done.stdout, done.stderr), "1": (code, stdout, stderr)}.items():
        assert status == 0, err
        assert "120 lines: 119 predictions, 1 errors" in err
        answers[workers] = [json.loads(line) for line in out.splitlines()]
    assert answers["3"] == answers["1"]
    assert [o["source"]["line"] for o in answers["3"]] == list(range(1, 121))
    assert "error" in answers["3"][33] and answers["3"][34]["id"] == "tx-34"
    stats = demo.deployments.stats(acme, "iris")
    assert stats["overall"]["requests"] >= 2 * (120 // 7), stats  # one a micro-batch, from every worker


def test_a_line_given_up_on_is_written_in_its_place(half_down: Container, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mixed` sends some users to a Triton server that is down: their lines are retried, then
    written as retryable errors, each in its own place among the others (not after them)."""
    from sluice.cli import stream

    monkeypatch.setattr(stream, "RETRIES", (0.0, 0.0, 0.0))  # the pauses between tries, not what is tried
    lines = [json.dumps({"id": f"line-{n}", "user": f"user-{n}", "features": json.loads(rows(1)[0])["features"]}) for n in range(1, 13)]
    prefixes = json.dumps(["http://127.0.0.1:9"])  # the operator admits the closed port, as `half_down` does
    with cli_environment(monkeypatch, settings.home_path, SLUICE_LOG_LEVEL="WARNING", SLUICE_LOG_STREAM="stderr", SLUICE_TRITON_URL_PREFIXES=prefixes):
        code, stdout, stderr = _stream_here(tmp_path / "out.jsonl", ("\n".join(lines) + "\n").encode(), deployment="mixed")
    out = [json.loads(line) for line in stdout.splitlines()]
    assert code == 1, stderr
    assert [o["source"]["line"] for o in out] == list(range(1, 13))
    assert [o["id"] for o in out] == [f"line-{n}" for n in range(1, 13)]
    given_up = [o["source"]["line"] for o in out if o.get("retryable")]
    assert given_up and len(given_up) < 12 and given_up != list(range(13 - len(given_up), 13))  # some lines wait, not all last
    assert all(o.get("variant") == "local" for o in out if not o.get("retryable"))


def test_lines_tried_again_count_a_failure_a_try_and_their_answers_once(
    half_down: Container, acme: Principal, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lines `mixed` sends to the Triton server that is down are tried four times and given
    up: each try's failed call is a failed request (as four retries over HTTP are), and the
    other lines' answers count once, not once a try."""
    from sluice.cli import stream

    monkeypatch.setattr(stream, "RETRIES", (0.0, 0.0, 0.0))
    lines = [json.dumps({"id": f"line-{n}", "user": f"user-{n}", "features": json.loads(rows(1)[0])["features"]}) for n in range(1, 13)]
    prefixes = json.dumps(["http://127.0.0.1:9"])
    with cli_environment(monkeypatch, settings.home_path, SLUICE_LOG_LEVEL="WARNING", SLUICE_LOG_STREAM="stderr", SLUICE_TRITON_URL_PREFIXES=prefixes):
        code, stdout, stderr = _stream_here(tmp_path / "out.jsonl", ("\n".join(lines) + "\n").encode(), deployment="mixed")
    assert code == 1, stderr
    given_up = sum(1 for line in stdout.splitlines() if json.loads(line).get("retryable"))
    assert 0 < given_up < 12
    overall = half_down.deployments.stats(acme, "mixed")["overall"]
    assert (overall["requests"], overall["errors"]) == (5, 4)  # the local variant's call answered once; the remote one's failed at each of four tries
