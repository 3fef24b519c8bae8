"""Reserved concurrency per function, checked against what the account can reserve."""

from __future__ import annotations

from pydantic import Field, model_validator

from infra.config.base import Section

# Lambda keeps this much of an account's concurrency unreserved, whatever functions reserve.
UNRESERVED_MINIMUM = 100


class ConcurrencyConfig(Section):
    """Reserved concurrency per function: each is both guaranteed and capped at its value, so
    a large batch job cannot take the concurrency the API needs (and the API cannot starve
    batch). `null` leaves a function in the shared, unreserved pool."""

    account_limit: int = Field(
        1000,
        ge=UNRESERVED_MINIMUM,
        description="The account's Lambda concurrency quota in the region (Service Quotas).",
    )
    api: int | None = Field(300, ge=1, description="The API function.")
    authorizer: int | None = Field(
        100, ge=1, description="Called once per request (no gateway cache), briefly."
    )
    shadow: int | None = Field(20, ge=1, description="Shadow mirrors, off the request path.")
    batch_create_job: int | None = Field(
        5, ge=1, description="One invoke per execution started with a job specification."
    )
    batch_plan: int | None = Field(5, ge=1)
    batch_score: int | None = Field(
        40, ge=1, description="At least batch.max_concurrency, or chunks wait on throttles."
    )
    batch_finalize: int | None = Field(5, ge=1)
    batch_mark_failed: int | None = Field(5, ge=1)
    batch_execution_ended: int | None = Field(
        5, ge=1, description="One invoke per execution of the batch state machine that ends."
    )
    batch_on_upload: int | None = Field(10, ge=1, description="One invoke per uploaded file.")
    rollouts: int | None = Field(
        1,
        ge=1,
        description="The rollout controller, invoked once a minute; its looks need no overlap.",
    )
    monitor: int | None = Field(
        1, ge=1, description="Model monitoring's scheduled check, invoked once an hour; its runs need no overlap."
    )
    registry_events: int | None = Field(
        2, ge=1, description="The function that pushes approved SageMaker model packages: approvals are rare, one at a time is enough."
    )

    def reserved(self, purpose: str) -> int | None:
        """The reservation of the function named `purpose` (`api`, `batch-score`, ...)."""
        return getattr(self, purpose.replace("-", "_"))

    @property
    def batch_total(self) -> int:
        return sum(v or 0 for k, v in self.model_dump().items() if k.startswith("batch_"))

    @property
    def total(self) -> int:
        return sum(v or 0 for k, v in self.model_dump().items() if k != "account_limit")

    @model_validator(mode="after")
    def _fits(self) -> ConcurrencyConfig:
        if self.total > self.account_limit - UNRESERVED_MINIMUM:
            raise ValueError(
                f"reserved concurrency adds up to {self.total}, but Lambda keeps "
                f"{UNRESERVED_MINIMUM} of the account's {self.account_limit} unreserved: "
                f"at most {self.account_limit - UNRESERVED_MINIMUM} may be reserved"
            )
        if self.api is not None and self.batch_total >= self.api:
            raise ValueError(
                f"batch functions reserve {self.batch_total} in all, which must stay below "
                f"the API's {self.api}"
            )
        return self
