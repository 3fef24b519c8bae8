"""Follow bindings on the wire: the body that makes one (checked by the service, which names
the field at fault) and what is answered: the binding, and what became of each version."""

from __future__ import annotations

from pydantic import Field, StrictBool

from sluice.types.base import WireModel


class FollowStart(WireModel):
    registry: str = Field(
        description="What to follow: models:/NAME@ALIAS or models:/NAME/latest (MLflow), or "
        "arn:aws:sagemaker:REGION:ACCOUNT:model-package-group/GROUP (SageMaker Model Registry)."
    )
    rollout: str = Field(
        description="How each new version is rolled out: STEPS [every DURATION] gate GATES [min REQUESTS], "
        "such as '1,10,50,100 every 10m gate agreement>=0.98'."
    )
    model: str | None = Field(
        default=None, description="The model each new version is pushed into (default: the model the deployment routes to)."
    )
    tracking_uri: str | None = Field(default=None, description="MLflow: the tracking server, without credentials.")
    tag_back: StrictBool = Field(
        default=False, description="MLflow: tag each version with sluice.deployment and sluice.revision once it serves."
    )


class FollowEventOut(WireModel):
    version: str = Field(description="The registry's version (MLflow's number, the package's version).")
    outcome: str = Field(
        description="pushing, rolling_out, completed, rolled_back, aborted, conversion_failed, push_failed, rejected, rollout_refused "
        "or withdrawn (a version taken before, back to pending approval: approved again, it is taken again)."
    )
    at: float
    reason: str = Field(description="Why, in words: the gate that failed, the conversion's error, …")
    model_version: int | None = Field(None, description="The version it was pushed as.")
    revision: int | None = Field(None, description="The deployment revision its rollout started (or ended) in.")
    changed_at: float | None = Field(
        None,
        description="When the registry made the change this answers (SageMaker: the event's time): a change of the version "
        "made before it and delivered after it is stale.",
    )


class PollErrorOut(WireModel):
    kind: str = Field(description="unreachable, unauthorized (401/403), server_error (5xx), not_found or refused.")
    message: str = Field(description="What failed, in words; never with credentials.")
    at: float = Field(description="The last poll that failed.")
    since: float = Field(description="The first poll of this failing run.")


class FollowOut(WireModel):
    deployment: str
    registry: str = Field(description="mlflow or sagemaker.")
    source: str = Field(description="What is followed.")
    model: str
    plan: str = Field(description="The rollout plan, as read.")
    tracking_uri: str | None = None
    tag_back: bool
    operator: bool = Field(
        False,
        description="Made by the machine's operator (the CLI): off AWS it is read with MLflow's client and the operator's "
        "environment; a binding made through the API is read from the admitted tracking servers alone.",
    )
    state: str = Field(description="waiting, pushing, rolling_out, completed or failed (the last version's story).")
    seen: str | None = Field(None, description="The registry's version last taken.")
    seen_at: float | None = Field(
        None,
        description="When the registry made the change that version was taken for (SageMaker: the approval's time); an "
        "approval made before it and delivered after it is superseded, never rolled out.",
    )
    claimed_at: float | None = Field(
        None, description="While pushing: when the version was claimed. A claim older than follow_lease_s is taken over by the next poll."
    )
    claimed_by: str | None = Field(None, description="While pushing: the poller that claimed it.")
    error: PollErrorOut | None = Field(None, description="The last poll's error, kept until a poll succeeds; null when it succeeded.")
    revision: int
    history: list[FollowEventOut] = Field(description="What became of each version offered, oldest first (the last 20).")
    created_at: float
    created_by: str
    updated_at: float | None = None
