"""What a runtime gives back for one (possibly batched) request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(slots=True)
class InferenceResult:
    outputs: dict[str, np.ndarray]
    # Column labels of probability outputs that arrived as maps (skl2onnx's ZipMap).
    classes: dict[str, list[int | str]] = field(default_factory=dict)
