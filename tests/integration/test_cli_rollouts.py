"""`sluice rollout …`, capture options and `sluice replay` from the command line, on a
temporary home."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from sluice.wiring import get_container
from tests.conftest import MODELS
from tests.integration.conftest import run_cli

if TYPE_CHECKING:
    from pathlib import Path

BATCH = "[[5.1,3.5,1.4,0.2],[6.7,3.0,5.2,2.3],[5.9,3.0,5.1,1.8],[6.0,2.7,5.1,1.6]]"


pytestmark = pytest.mark.usefixtures("cli_home")


def test_rollout_commands(capsys: pytest.CaptureFixture[str]) -> None:
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    run_cli(capsys, "deployments", "create", "iris", "--model", "iris")
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris_forest.onnx"))
    code, _, err = run_cli(capsys, "rollout", "start", "iris", "--to", "iris:2", "--steps", "1,50,25,100", "--gate", "error_rate<=0.01")
    assert code == 2 and "[steps]" in err
    code, out, _ = run_cli(capsys, "rollout", "start", "iris", "--to", "iris:2", "--steps", "10,100", "--every", "5m", "--gate", "agreement>=0.9,error_rate<=0.01", "--min-requests", "5")
    assert code == 0 and "rollout started, running at 10%" in out
    for _ in range(3):
        assert run_cli(capsys, "predict", "iris", "--batch", BATCH, "--variant", "stable")[0] == 0
    code, out, _ = run_cli(capsys, "rollout", "status", "iris")
    assert code == 0 and "step 1 of 2: 10%" in out and "waiting for traffic: 0 of 5 candidate requests, 3 of 5 comparisons" in out
    assert "agreement>=0.9" in out and "next decision: " in out
    code, out, _ = run_cli(capsys, "rollout", "status", "iris", "--json")
    assert json.loads(out)["now"]["metrics"]["compared"] == 3
    assert "rollout paused" in run_cli(capsys, "rollout", "pause", "iris")[1]
    assert "rollout resumed" in run_cli(capsys, "rollout", "resume", "iris")[1]
    code, out, _ = run_cli(capsys, "rollout", "abort", "iris")
    assert code == 0 and "rollout aborted" in out and '{"kind": "single", "model": "iris", "version": 1}' in out
    code, _, err = run_cli(capsys, "rollout", "abort", "iris")
    assert code == 2 and "[deployment]" in err


def test_capture_options_and_replay(capsys: pytest.CaptureFixture[str], cli_home: Path) -> None:
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    code, _, err = run_cli(capsys, "deployments", "create", "iris", "--model", "iris", "--capture-percent", "0")
    assert code == 2 and "[capture.sample_percent]" in err
    assert run_cli(capsys, "deployments", "create", "iris", "--model", "iris", "--capture-percent", "100")[0] == 0
    run_cli(capsys, "models", "push", "iris", str(MODELS / "iris_forest.onnx"))
    for _ in range(2):
        assert run_cli(capsys, "predict", "iris", "--batch", BATCH)[0] == 0  # each drains its capture before it exits
    assert len(list((cli_home / "capture").rglob("*.jsonl"))) >= 1
    code, out, _ = run_cli(capsys, "replay", "iris", "--since", "1h", "--against", "iris:2")
    assert code == 0 and "records 2, rows 8: scored 8, failed 0" in out and "agreement 1.0000" in out
    assert run_cli(capsys, "deployments", "set", "iris", "--no-capture")[0] == 0
    assert get_container().deployments.get(cli_principal(), "iris").capture is None


def cli_principal():  # type: ignore[no-untyped-def]
    from sluice.domain import Principal

    return Principal("default", frozenset({"admin"}), "cli")
