"""`make install` leaves bytecode behind: every process of the CLI reads it rather than
compiling each module it imports, even where PYTHONDONTWRITEBYTECODE keeps Python from
writing any (read from make's own dry run of the recipe, from nothing)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _recipe(target: str, tmp_path: Path) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    venv = tmp_path / "venv"  # absent: make plans the install from nothing
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={venv}"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.splitlines()


def test_install_compiles_the_dependencies_and_sluice_itself(tmp_path: Path) -> None:
    lines = _recipe("install", tmp_path)
    installs = [line for line in lines if " pip install " in line and "-e " in line]
    assert installs, lines
    assert all("--compile-bytecode" in line for line in installs), installs
    # The editable install leaves sluice outside site-packages, which is all uv compiles.
    compiled = [line for line in lines if "-m compileall" in line]
    assert compiled and all(line.rstrip().endswith("functions/sluice") for line in compiled), lines
    assert lines.index(compiled[0]) > lines.index(installs[0])  # after the sources are in place


def test_bench_installs_its_extra_with_bytecode_too(tmp_path: Path) -> None:
    lines = _recipe("bench", tmp_path)
    extra = [line for line in lines if "pip install" in line and ".[bench]" in line]
    assert extra and all("--compile-bytecode" in line for line in extra), lines
