"""The runtime protocol: load, infer, unload, metadata. Policies compose these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from sluice.domain.results import InferenceResult

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from sluice.domain.objects import ModelVersion
    from sluice.domain.signature import Signature


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
