"""Progressive rollouts on the wire: the body that starts one (checked by the service, which
names the field at fault) and what status answers."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictFloat, StrictInt, model_validator

from sluice.domain.values import TimeOrAgo, one_now
from sluice.types.base import WireModel


class RolloutStart(WireModel):
    to: str = Field(description="The candidate, MODEL:VERSION (such as iris:2; a version from 1 to 2**63-1).")
    steps: str | list[StrictFloat] = Field(
        default="1,5,25,50,100",
        description="Percentages of traffic for the candidate, increasing, ending with 100.",
    )
    every: str | StrictFloat = Field(
        default="10m", description="How long each step lasts at least: 30s, 10m, 1h, or seconds."
    )
    gate: str | list[str] = Field(
        description="Gates every step must pass, such as 'agreement>=0.98,error_rate<=0.005,p99_ratio<=1.2' (metrics: agreement, mean_abs_diff, error_rate, invalid_input_rate, p99_ratio, drift, accuracy, precision, recall, auc, mae, rmse)."
    )
    min_requests: StrictInt = Field(
        default=100,
        description="Candidate requests (and comparisons) a step needs before it is judged.",
    )
    alarms: list[str] = Field(
        default_factory=list,
        description="CloudWatch alarms that roll back at once when in ALARM (on AWS).",
    )
    routing_key: str | None = Field(
        default=None, description="Sticky routing by this request field or header."
    )
    mirror_percent: StrictFloat = Field(
        default=100.0,
        description="Share of the stable's requests the candidate also sees as a mirror.",
    )


class ReplayStart(WireModel):
    since: TimeOrAgo = Field(
        description="RFC 3339 (UTC when it names no zone), epoch seconds (a number), or a duration ago such as '2h'; "
        "from 1970-01-01T00:00:00Z to 9999-12-30T00:00:00Z."
    )
    until: TimeOrAgo | None = Field(default=None, description="The same forms; default now.")
    against: str = Field(description="The candidate: MODEL:VERSION (a version from 1 to 2**63-1) or a deployment name.")

    @model_validator(mode="wrap")
    @classmethod
    def _one_now(cls, data: Any, handler: Any) -> Any:
        """`since` and `until` read against one now: `"1h"` and `"1h"` are the same time."""
        with one_now():
            return handler(data)


class RolloutEndpointOut(WireModel):
    name: str = Field(description="The endpoint.")
    candidate_variant: str = Field(description="The production variant that serves the candidate.")
    candidate_version: int = Field(description="The `sagemaker` version bound to it: what the split's candidate routes to.")
    stable_variants: dict[str, float] = Field(description="The stable policy's production variants and their shares of it.")
    added: bool = Field(description="Whether the rollout added the candidate's variant to the endpoint.")
    ready: bool = Field(description="False while that variant is not in service yet (no step has begun).")
    weights: dict[str, float] | None = Field(description="The weights the endpoint should have now, by production variant.")
    pending: bool = Field(description="They are not on the endpoint yet: it was not InService; the next look tries again.")
    waiting_since: float | None = Field(description="Since when they wait (epoch seconds).")
    applied: dict[str, float] = Field(description="The weights the rollout last put on the endpoint.")
    before: dict[str, float] = Field(description="The weights when the rollout started: what a rollback or abort restores.")


class RolloutOut(WireModel):
    state: Literal["running", "paused", "completed", "rolled_back", "aborted"]
    to: str = Field(description="The candidate, MODEL:VERSION.")
    steps: list[float] = Field(description="The candidate's share of traffic at each step, in percent.")
    step: int = Field(description="The step it is at (0 is the first).")
    weight: float = Field(description="The candidate's share now, in percent.")
    every_s: float
    gates: str
    min_requests: int
    alarms: list[str]
    routing_key: str | None
    mirror_percent: float
    stable: dict[str, Any] = Field(description="The policy it started from (and goes back to).")
    started_at: float
    started_by: str
    step_started_at: float
    updated_at: float
    reason: str = Field(description="Its last decision, in words.")
    decided: dict[str, Any] = Field(description="The numbers behind its last decision.")
    endpoint: RolloutEndpointOut | None = Field(
        default=None, description="For a deployment bound to a SageMaker endpoint: the variant weights the rollout moves."
    )


class GateCheck(WireModel):
    gate: str = Field(description="The gate as given, such as 'error_rate<=0.01'.")
    metric: str
    op: Literal[">=", "<=", ">", "<"]
    threshold: float
    value: float | None = Field(description="The metric over the current step's traffic; null until it has one.")
    passes: bool | None = Field(description="Whether the value meets the threshold; null without a value.")


class RolloutNow(WireModel):
    metrics: dict[str, Any] = Field(description="Every gate metric over the current step, with the counts behind them.")
    gates: dict[str, Any] = Field(description="Each gate's value and verdict, by gate (as `checks`, keyed).")
    checks: list[GateCheck] = Field(description="Each gate: its metric, threshold, value now and verdict.")
    next: Literal["hold", "advance", "complete", "rollback", "paused"] = Field(
        description="What the controller's next look would do with these numbers."
    )
    reason: str
    at: float = Field(description="When these numbers were read (epoch seconds).")
    step_ends_at: float = Field(description="When the current step has lasted `every_s`.")
    next_decision_at: float | None = Field(
        description="The earliest the controller may advance or complete the rollout (the step's end, or now); "
        "a failing gate rolls it back at any look. Null while paused."
    )
    alarms_checked: bool


class RolloutStatus(WireModel):
    deployment: str
    revision: int
    rollout: RolloutOut | None = Field(description="The deployment's rollout, running or the last one; null if it never had one.")
    now: RolloutNow | None = Field(
        default=None, description="The numbers now, while the rollout is running or paused."
    )
