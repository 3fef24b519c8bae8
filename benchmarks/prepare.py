"""The models, the sluice home and the request bodies every benchmark uses.

Models come from the project's own script (`scripts/make_demo_models.py --large`), written
into `benchmarks/work/models/` so the ~10 MB MLP never lands in `models/`. The home holds
the three deployments of tenant `default` and one API key, as `sluice serve --demo` would, and
the tensor models' deployments again with adaptive batching on (`<name>-batched`).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, REPO, WORK

MODELS_DIR = WORK / "models"
HOME = WORK / "home"
TENANT = "default"
KEY_FILE = "admin-key"  # what `sluice serve` reads, so it makes no key of its own


@dataclass(frozen=True, slots=True)
class Model:
    """A benchmark model: its file, its deployment, its input and one row of it."""

    name: str  # the deployment name (and the hand-written app's model name)
    file: str
    input_name: str
    row: tuple[float, ...]
    triton: bool  # tensor outputs only: Triton and MLServer can serve it as is
    description: str

    @property
    def path(self) -> Path:
        return MODELS_DIR / self.file

    def rows(self, batch: int) -> list[list[float]]:
        return [list(self.row) for _ in range(batch)]


def _large_row() -> tuple[float, ...]:
    return tuple(round(((i * 37) % 101) / 101.0 - 0.5, 4) for i in range(256))


MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model("iris", "iris.onnx", "input", (5.1, 3.5, 1.4, 0.2), False, "demo classifier: logistic regression + ZipMap"),
        Model(
            "diabetes",
            "diabetes_mlp.onnx",
            "input",
            (0.038, 0.05, 0.062, 0.022, -0.044, -0.035, -0.043, -0.003, 0.02, -0.018),
            True,
            "demo MLP regressor (10 -> 32 -> 16 -> 1)",
        ),
        Model("mlp_large", "mlp_large.onnx", "input", _large_row(), True, "~10 MB float MLP (256 -> 3x1024 -> 10)"),
    )
}


def make_models(force: bool = False) -> dict[str, int]:
    """Run the project's model script once; returns each file's size."""
    if force or not all(m.path.exists() for m in MODELS.values()):
        MODELS_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [PYTHON, str(REPO / "scripts" / "make_demo_models.py"), "--large", "--out", str(MODELS_DIR)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return {m.name: m.path.stat().st_size for m in MODELS.values()}


def make_home() -> str:
    """Register the three models as deployments of `default` and return its API key."""
    from sluice.demo import install_demo
    from sluice.domain import Principal
    from sluice.domain.errors import NotFound
    from sluice.settings import Settings
    from sluice.wiring import Container

    HOME.mkdir(parents=True, exist_ok=True)
    container = Container.from_settings(Settings(mode="local", home=HOME, registry="", store=""))
    operator = Principal(TENANT, frozenset({"admin", "predict"}), "bench")
    install_demo(container, operator, MODELS_DIR)
    large = MODELS["mlp_large"]
    try:
        container.deployments.get(operator, large.name)
    except NotFound:
        version = container.models.push(operator, large.name, large.path.read_bytes(), description="benchmark: ~10 MB MLP")
        container.deployments.create(operator, large.name, {"kind": "single", "model": large.name, "version": version.version})
    # The tensor models again, with adaptive batching on (as Triton's dynamic batching is set
    # in peerbench: at most 64 rows, 100 µs of queue delay).
    for model in MODELS.values():
        if not model.triton:
            continue
        name = batched(model.name)
        policy = container.deployments.get(operator, model.name).policy
        try:
            current = container.deployments.get(operator, name)
        except NotFound:
            container.deployments.create(operator, name, policy, batching=BATCHING)
        else:
            if current.policy != policy or current.batching is None or current.batching.max_batch_size != BATCHING["max_batch_size"] \
                    or current.batching.max_delay_us != BATCHING["max_delay_us"]:
                container.deployments.update(operator, name, policy, batching=BATCHING)
    key_file = HOME / KEY_FILE
    if not key_file.exists():
        _, plain = container.keys.create(TENANT, ["admin", "predict"], name="benchmarks")
        key_file.write_text(plain + "\n")
        key_file.chmod(0o600)
    return key_file.read_text().strip()


BATCHING = {"max_batch_size": 64, "max_delay_us": 100}


def batched(name: str) -> str:
    """The deployment of model `name` with adaptive batching on."""
    return f"{name}-batched"


def api_key() -> str:
    return (HOME / KEY_FILE).read_text().strip()


def prepare(force: bool = False) -> dict[str, Any]:
    sizes = make_models(force)
    make_home()
    return {"models": {name: {"file": MODELS[name].file, "bytes": size, "what": MODELS[name].description} for name, size in sizes.items()}}


# request bodies -----------------------------------------------------------------------------
def sluice_body(model: Model, batch: int = 1) -> bytes:
    """sluice's simple JSON: the same rows the hand-written app takes."""
    return json.dumps({"deployment": model.name, "inputs": model.rows(batch)}).encode()


def handwritten_body(model: Model, batch: int = 1) -> bytes:
    return json.dumps({"inputs": model.rows(batch)}).encode()


def v2_body(model: Model, batch: int = 1) -> bytes:
    """Open Inference Protocol v2 JSON, as Triton, MLServer and sluice's /v2 take it."""
    rows = model.rows(batch)
    return json.dumps(
        {
            "inputs": [
                {
                    "name": model.input_name,
                    "shape": [batch, len(model.row)],
                    "datatype": "FP32",
                    "data": [x for row in rows for x in row],
                }
            ]
        }
    ).encode()
