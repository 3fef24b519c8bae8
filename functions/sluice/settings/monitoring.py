"""The group of model monitoring: the profiles each process keeps of the traffic it serves,
and the thresholds its checks hold them to (docs/monitoring.md)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from sluice.settings.process import Group, Seconds


class MonitorSettings(Group):
    """Read by the wiring, which builds the prediction service's profile recorder, and by the
    monitoring checks (the route, `sluice monitor status`, the rollout gate `drift`)."""

    title: ClassVar[str] = "Model monitoring"

    monitor_profiles: bool = Field(
        default=True,
        description="Profile every answered prediction (its inputs and outputs, per deployment, revision, "
        "variant and window) for drift and data-quality checks. Needs Apache DataSketches "
        "(`sluice[monitor]`; in the API layer on AWS); a process without it profiles nothing and says so once.",
    )
    monitor_window_s: int = Field(
        default=3600, ge=60, le=7 * 86400, description="The length of a monitoring window, in seconds: checks compare each window with the baseline."
    )
    monitor_flush_s: Seconds = Field(
        default=30.0,
        ge=0,
        description="How often a process writes the profiles it holds to the registry (one record per "
        "deployment, revision, variant and window); also on a timer when idle (not in Lambda) and at shutdown.",
    )
    monitor_max_columns: int = Field(
        default=64, ge=1, le=256, description="The widest `[batch, F]` tensor profiled column by column; wider ones (images, embeddings) are left out."
    )
    monitor_drift_threshold: float = Field(
        default=0.2, gt=0, description="A column's drift (population stability index) above which its verdict is `drift`."
    )
    monitor_missing_threshold: float = Field(
        default=0.05, gt=0, le=1, description="A rise of a column's missing rate over the baseline's above which its verdict is `missing`."
    )
    monitor_range_threshold: float = Field(
        default=0.05, gt=0, le=1,
        description="The share of a window's values outside the baseline's range (numbers), or of categories "
        "the baseline never had, above which the verdict is `out_of_range` or `unseen_categories`.",
    )  # fmt: skip
    monitor_min_rows: int = Field(
        default=500, ge=1, description="The fewest rows a window needs for drift and range verdicts (`too_few_rows` below)."
    )
    monitor_keep_predictions: Literal["baseline", "all", "off"] = Field(
        default="baseline",
        description="Which deployments keep each answered request's prediction by its request id, for "
        "ground truth posted later (`POST /api/v1/deployments/{name}/labels`): `baseline` (those with a "
        "monitoring baseline), `all`, or `off`. Kept in the registry, one record per request.",
    )
    monitor_keep_ttl_s: int = Field(
        default=14 * 86400, ge=3600, le=35 * 86400,
        description="How long a kept prediction waits for its label, in seconds; a label that comes later is `unmatched`.",
    )  # fmt: skip
    monitor_keep_rows: int = Field(
        default=100_000, ge=1,
        description="The most rows one process keeps per deployment, revision, variant and monitoring window; the rest are not kept.",
    )  # fmt: skip
    monitor_min_labels: int = Field(
        default=100, ge=1, description="The fewest labelled rows a rollout step needs before a quality gate (`accuracy`, `mae`, ...) has a value."
    )
