"""Print the settings tables of docs/configuration.md from `sluice.settings.Settings`, one per
group (what reads them), so the page says what the code reads: `python scripts/settings_table.py`
(a unit test checks the page holds exactly these tables)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "functions"))

from pydantic_core import PydanticUndefined

from sluice.settings import GROUPS

# Defaults that depend on where the code runs, as a reader should see them.
SHOWN = {
    "mode": "local (aws in Lambda)",
    "home": "`~/.sluice`",
    "registry": "SQLite under home",
    "store": "a folder under home",
    "auth_cache_ttl_s": "`30.0` (`0` in Lambda)",
    "max_in_flight_per_key": "`64` (`0` in Lambda)",
    "max_predictions_in_flight": "`32` (`0` in Lambda)",
    "endpoints": "local (sagemaker in aws mode)",
}


def default_of(name: str, field: object) -> str:
    if name in SHOWN:
        return SHOWN[name]
    value = field.default  # type: ignore[attr-defined]
    if value is PydanticUndefined or value is None:
        factory = field.default_factory  # type: ignore[attr-defined]
        if factory is None:
            return ""
        value = factory()
    if value in ("", None):
        return ""
    if isinstance(value, list | dict):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def table() -> str:
    lines: list[str] = []
    for name, group in GROUPS.items():
        read_by = " ".join((group.__doc__ or "").split()).removesuffix(".")
        lines += [f"### {group.title}", "", f"{read_by}; in code, `settings.{name}`.", ""]
        lines += ["| variable | default | meaning |", "|---|---|---|"]
        for field_name, field in group.model_fields.items():
            meaning = " ".join((field.description or "").split()).replace("|", "\\|")
            lines.append(f"| `SLUICE_{field_name.upper()}` | {default_of(field_name, field)} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(table())
