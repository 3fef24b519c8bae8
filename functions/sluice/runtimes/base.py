"""The runtime protocol: load, infer, unload, metadata. Policies compose these. And what a
runtime requires of a version's config."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sluice.domain.errors import BadRequest
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


def required_text(config: dict[str, Any], key: str, *, needs: str) -> str:
    """`config[key]`, which must be a non-empty string; `needs` says so where it is not."""
    value = config.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(needs, field=f"config.{key}")
    return value
