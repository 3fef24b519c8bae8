"""`make install` leaves bytecode behind: every process of the CLI reads it rather than
compiling each module it imports, even where PYTHONDONTWRITEBYTECODE keeps Python from
writing any (read from make's own dry run of the recipe, from nothing). What it leaves to
compile at first import (the Makefile's NO_COMPILE) is nothing a sluice process imports."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What sluice's processes import: the Lambda handlers, the CLI, `sluice serve`'s workers (the
# API app, gRPC, the prediction path on ONNX Runtime), batch jobs and streams.
ENTRY_POINTS = [
    "sluice.cli", "sluice.cli.serve", "sluice.api.app", "sluice.handlers.api", "sluice.handlers.batch",
    "sluice.handlers.stream", "sluice.handlers.authorizer", "sluice.handlers.websocket",
    "sluice.handlers.registry_events", "sluice.handlers.monitor", "sluice.runtimes.onnx", "sluice.grpc_service",
]  # fmt: skip


def _recipe(target: str, tmp_path: Path) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = tmp_path / "venv"  # absent: make plans the install from nothing
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={venv}"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.splitlines()


def _compiles(lines: list[str]) -> list[str]:
    return [line for line in lines if "-m compileall" in line]


def test_install_compiles_the_dependencies_and_sluice_itself(tmp_path: Path) -> None:
    lines = _recipe("install", tmp_path)
    installs = [line for line in lines if " pip install " in line and "-e " in line]
    compiled = _compiles(lines)
    assert installs and compiled, lines
    assert lines.index(compiled[0]) > lines.index(installs[0])  # after the sources are in place
    # sluice's own modules (an editable install, outside site-packages) and site-packages.
    for line in compiled:
        assert " functions/sluice " in line and 'sysconfig.get_path("purelib")' in line, line


def test_bench_installs_its_extra_with_bytecode_too(tmp_path: Path) -> None:
    lines = _recipe("bench", tmp_path)
    extra = [i for i, line in enumerate(lines) if "pip install" in line and ".[bench]" in line]
    compiled = [i for i, line in enumerate(lines) if "-m compileall" in line]
    assert extra and compiled and compiled[-1] > extra[-1], lines  # the extra compiled once installed


def test_what_is_left_to_compile_is_nothing_a_sluice_process_imports(tmp_path: Path) -> None:
    (line,) = _compiles(_recipe("install", tmp_path))
    words = shlex.split(line.split("$(")[0])
    left_out = re.compile(words[words.index("-x") + 1])
    assert left_out.search("/venv/lib/python3.11/site-packages/aws_cdk/aws_lambda/__init__.py")  # the rule does apply
    # The CLI's command groups are imported as its parser is built.
    probe = f"import importlib, json, sys\nfor m in {ENTRY_POINTS!r}: importlib.import_module(m)\n" + (
        "from sluice.cli import build_parser\nbuild_parser()\n"
    ) + (
        "print(json.dumps(sorted({getattr(m, '__file__', None) or '' for m in list(sys.modules.values())})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    imported = [path for path in json.loads(done.stdout) if "site-packages" in path]
    assert len(imported) > 100, imported  # numpy, pydantic, FastAPI, ONNX Runtime... were imported
    assert [path for path in imported if left_out.search(path)] == []
