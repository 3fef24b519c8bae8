"""The demo models `sluice serve --demo` registers, from ONNX files the project's script made."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sluice.domain.errors import NotFound

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container

DEMOS = {"iris": "iris.onnx", "diabetes": "diabetes_mlp.onnx"}


def models_dir() -> Path:
    """`models/` of a source checkout (where scripts/make_demo_models.py writes)."""
    return Path(__file__).resolve().parents[2] / "models"


def install_demo(container: Container, principal: Principal, folder: Path | None = None) -> list[str]:
    """Register each demo model and a deployment of the same name, once. Returns what was added."""
    folder = folder or models_dir()
    added = []
    for name, filename in DEMOS.items():
        try:
            container.deployments.get(principal, name)
            continue
        except NotFound:
            pass
        path = folder / filename
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run `python scripts/make_demo_models.py`")
        version = container.models.push(principal, name, path.read_bytes(), description=f"demo: {filename}")
        container.deployments.create(principal, name, {"kind": "single", "model": name, "version": version.version})
        added.append(name)
    return added
