"""The runtime protocol: load, infer, unload, metadata. Policies compose these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from sluice.domain import ModelVersion
    from sluice.signature import Signature


@dataclass(slots=True)
class InferenceResult:
    outputs: dict[str, np.ndarray]
    # Column labels of probability outputs that arrived as maps (skl2onnx's ZipMap).
    classes: dict[str, list[int | str]] = field(default_factory=dict)


class Runtime(Protocol):
    kind: str

    async def load(self, version: ModelVersion) -> None:
        """Make the version ready to answer; idempotent."""
        ...

    async def infer(
        self,
        version: ModelVersion,
        inputs: dict[str, np.ndarray],
        outputs: Sequence[str] | None = None,
    ) -> InferenceResult:
        """Run one (possibly batched) request. Inputs were validated against the signature."""
        ...

    async def unload(self, version: ModelVersion) -> None: ...

    async def metadata(self, version: ModelVersion) -> Signature:
        """The signature as the backend itself reports it."""
        ...
