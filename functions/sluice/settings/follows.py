"""The group of follow bindings: how often `sluice serve` polls the MLflow registries that
deployments follow (`sluice.convert.follow`)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from sluice.settings.process import Group


class FollowSettings(Group):
    """Read by `sluice serve`, which polls on a thread of its own."""

    title: ClassVar[str] = "Follow bindings"

    follow_poll_s: float = Field(
        default=60.0,
        ge=0,
        description=(
            "How often `sluice serve` asks MLflow where each followed alias (or `latest`) points, and records how "
            "the rollouts bindings started ended; a moved alias is pushed and rolled out (docs/registries.md). "
            "0: no polling (`sluice registries poll` still looks once). On AWS, SageMaker Model Registry's "
            "approvals arrive as EventBridge events instead."
        ),
    )
