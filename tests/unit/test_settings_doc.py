"""docs/configuration.md lists every setting as the code reads it (descriptions, defaults)."""

from __future__ import annotations

import runpy
import sys

import pytest

from tests.conftest import REPO


def test_the_configuration_page_holds_the_generated_settings_table(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # The script run as `python scripts/settings_table.py` runs it, in this process: a new
    # interpreter would import pydantic and the settings again (~0.5 CPU-s) to print the same.
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts functions/ first
    runpy.run_path(str(REPO / "scripts" / "settings_table.py"), run_name="__main__")
    table = capsys.readouterr().out
    page = (REPO / "docs" / "configuration.md").read_text()
    assert table in page, "docs/configuration.md is stale: run `python scripts/settings_table.py` and paste its table"
