"""Progressive rollouts on the wire: the body that starts one (checked by the service, which
names the field at fault) and what status answers."""

from __future__ import annotations

from pydantic import Field, StrictInt

from sluice.types.base import WireModel


class RolloutStart(WireModel):
    to: str = Field(description="The candidate, MODEL:VERSION (such as iris:2).")
    steps: str | list[float] = Field(
        default="1,5,25,50,100",
        description="Percentages of traffic for the candidate, increasing, ending with 100.",
    )
    every: str | float = Field(
        default="10m", description="How long each step lasts at least: 30s, 10m, 1h, or seconds."
    )
    gate: str | list[str] = Field(
        description="Gates every step must pass, such as 'agreement>=0.98,error_rate<=0.005,p99_ratio<=1.2'."
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
    mirror_percent: float = Field(
        default=100.0,
        description="Share of the stable's requests the candidate also sees as a mirror.",
    )


class ReplayStart(WireModel):
    since: str | float = Field(description="ISO 8601 (UTC unless it says), a duration ago such as '2h', or epoch seconds.")
    until: str | float | None = Field(default=None, description="The same forms; default now.")
    against: str = Field(description="The candidate: MODEL:VERSION or a deployment name.")
