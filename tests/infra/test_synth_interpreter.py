"""`make synth`'s first step: an interpreter of the runtime's Python for the layers' bytecode,
found or installed by uv (infra/constructs/bytecode.py `ensure_interpreter`). uv is stood in
for by a script: installing a real CPython needs downloads this suite does not make."""

from __future__ import annotations

import stat
from typing import TYPE_CHECKING

import pytest
from infra.constructs import bytecode

if TYPE_CHECKING:
    from pathlib import Path

VERSION = "9.7"  # no machine has it: found only once the stand-in uv has "installed" it


def _script(path: Path, text: str) -> None:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `uv` whose `python install` succeeds where `INSTALLABLE` is set and then makes
    `python find` name an interpreter that says it is Python 9.7."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(tmp_path / "python9.7", f"echo {VERSION}\n")
    marker = tmp_path / "installed"
    _script(
        bin_dir / "uv",
        f'case "$1 $2" in\n'
        f'  "python install") if [ -n "$INSTALLABLE" ]; then touch {marker}; else echo "error: failed to download" >&2; exit 2; fi ;;\n'
        f'  "python find") if [ -e {marker} ]; then echo {tmp_path / "python9.7"}; else exit 2; fi ;;\n'
        f"esac\n",
    )
    monkeypatch.setattr(bytecode, "find_uv", lambda: str(bin_dir / "uv"))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    bytecode.find_interpreter.cache_clear()
    yield tmp_path
    bytecode.find_interpreter.cache_clear()


def test_an_interpreter_uv_installs_is_the_one_the_layers_are_compiled_with(uv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("INSTALLABLE", "1")
    assert bytecode.find_interpreter(VERSION) is None  # not on this machine before
    assert bytecode.ensure_interpreter(VERSION) == str(uv / "python9.7")
    assert f"`uv python install {VERSION}`" in capsys.readouterr().out


def test_where_uv_cannot_install_it_the_step_says_why_and_the_synth_goes_on(uv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bytecode.ensure_interpreter(VERSION) is None
    assert f"uv could not install Python {VERSION}: error: failed to download" in capsys.readouterr().out
    config = tmp_path / "sluice.yaml"
    config.write_text('functions:\n  python: "3.14"\n')
    if bytecode.find_interpreter("3.14") is None:  # the step names the configured runtime, and never fails
        assert bytecode.main([str(config)]) == 0
        assert "layers' bytecode: no Python 3.14 (the synthesis ships sources and warns)" in capsys.readouterr().out
