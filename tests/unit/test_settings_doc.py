"""docs/configuration.md lists every setting as the code reads it (descriptions, defaults)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_the_configuration_page_holds_the_generated_settings_table() -> None:
    table = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "settings_table.py")], capture_output=True, text=True, check=True
    ).stdout
    page = (REPO / "docs" / "configuration.md").read_text()
    assert table in page, "docs/configuration.md is stale: run `python scripts/settings_table.py` and paste its table"
