"""`sluice stream` through a real pipe: every line accounted for, in order, errors as lines;
a partial batch is flushed after the wait, not held until the pipe closes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.conftest import REPO
from tests.integration.stream.conftest import rows

if TYPE_CHECKING:
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


def _stream(env: dict[str, str], *args: str) -> list[str]:
    return [sys.executable, "-m", "sluice.cli", "--tenant", "acme", "stream", "--deployment", "iris", *args]


def test_every_line_gives_one_output_line_in_order(env: dict[str, str]) -> None:
    lines = rows(300)
    lines[10] = "{broken"
    lines[200] = json.dumps({"id": "wide", "inputs": [[1, 2, 3, 4, 5]]})
    lines.insert(150, "")
    done = subprocess.run(_stream(env, "--batch-lines", "64"), input="\n".join(lines) + "\n", capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(out) == len(lines) == 301
    assert [o["source"]["line"] for o in out] == list(range(1, 302))
    errors = {o["source"]["line"]: o for o in out if "error" in o}
    assert set(errors) == {11, 151, 202}
    assert errors[202]["id"] == "wide" and errors[202]["field"].startswith("inputs")
    assert out[0] == {**out[0], "id": "tx-0", "prediction": "setosa", "deployment": "iris", "model": "iris", "version": 1}
    assert "301 lines: 298 predictions, 3 errors" in done.stderr


def test_a_partial_batch_is_answered_after_the_wait(env: dict[str, str]) -> None:
    proc = subprocess.Popen(_stream(env, "--batch-lines", "1000", "--max-wait-ms", "20", "--quiet"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((rows(1)[0] + "\n").encode())
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())  # the pipe is still open: the wait flushed it
        assert answer["id"] == "tx-0" and answer["prediction"] == "setosa"
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()


def test_an_unknown_deployment_exits_non_zero_with_every_line_an_error(env: dict[str, str]) -> None:
    args = [a if a != "iris" else "nope" for a in _stream(env)]
    done = subprocess.run([*args, "--quiet"], input="\n".join(rows(2)) + "\n", capture_output=True, text=True, env={**env, "SLUICE_STREAM_MAX_WAIT_MS": "1"}, timeout=120)
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 1
    assert [o["retryable"] for o in out] == [True, True] and "nope" in out[0]["error"]


def test_worker_processes_answer_in_input_order_and_count_every_line(env: dict[str, str], demo: Container, acme: Principal) -> None:
    """Several processes score batches at once; the answers still come out in input order,
    each worker's statistics reach the registry, and one worker gives the same answers."""
    lines = rows(120)
    lines[33] = "{broken"
    answers = {}
    for workers in ("1", "3"):
        done = subprocess.run(
            _stream(env, "--batch-lines", "7", "--workers", workers), input="\n".join(lines) + "\n",
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "120 lines: 119 predictions, 1 errors" in done.stderr
        answers[workers] = [json.loads(line) for line in done.stdout.splitlines()]
    assert answers["3"] == answers["1"]
    assert [o["source"]["line"] for o in answers["3"]] == list(range(1, 121))
    assert "error" in answers["3"][33] and answers["3"][34]["id"] == "tx-34"
    stats = demo.deployments.stats(acme, "iris")
    assert stats["overall"]["requests"] >= 2 * (120 // 7), stats  # one a micro-batch, from every worker
