"""The wire shapes of model monitoring's routes (docs/monitoring.md)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from sluice.types.base import WireModel

MAX_JOB_ROWS = 1_000_000


class CaptureWindow(WireModel):
    """A window of the deployment's captured requests."""

    since: str | float = Field(description="A time (RFC 3339 or epoch seconds) or a duration ago (`24h`).")
    until: str | float | None = Field(None, description="A time or a duration ago; now by default.")


class BaselineRows(WireModel):
    """The data a deployment was trained on: rows as a prediction sends them, a batch job's
    input, or a window of its captured requests (one of them)."""

    inputs: list[Any] | dict[str, Any] | None = Field(
        None, description="Rows for a single-input model (a 2-D list), or named tensors {input: rows}."
    )
    batch: list[Any] | None = Field(None, description="Rows as feature objects or lists.")
    job: str | None = Field(None, min_length=1, max_length=128, description="A batch job's id: its input, read as the job reads it.")
    capture: CaptureWindow | None = Field(None, description="The deployment's captured requests in this window, with the answers they got.")
    limit: int = Field(MAX_JOB_ROWS, ge=1, le=MAX_JOB_ROWS, description="With `job`: read at most this many rows.")
    source: str = Field("api", max_length=256, description="Where the rows came from, kept with the baseline.")
    outputs: bool = Field(True, description="Profile the answers to the rows too.")

    @model_validator(mode="after")
    def _one_source(self) -> BaselineRows:
        given = [k for k in ("inputs", "batch", "job", "capture") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of inputs, batch, job or capture, not {' and '.join(given)}")
        return self


MAX_LABELS = 10_000
MAX_REQUEST_ID_CHARS = 128
MAX_LABEL_CHARS = 256


def request_id_problem(request_id: str) -> str | None:
    """Why a label's `request_id` is refused (empty, or too long), or None."""
    if not request_id:
        return "missing value for 'request_id'"
    if len(request_id) > MAX_REQUEST_ID_CHARS:
        return f"'request_id' is longer than {MAX_REQUEST_ID_CHARS} characters"
    return None


def label_problem(label: Any) -> str | None:
    """Why a label is refused whatever the model (not text or a number, or too long), or None.
    Empty text is a label, as a model may name a class so."""
    if not isinstance(label, str | int | float):  # (a boolean is an int: the service says what it makes of one)
        return "a label is text or a number"
    if isinstance(label, str) and len(label) > MAX_LABEL_CHARS:
        return f"a label is at most {MAX_LABEL_CHARS} characters"
    return None


class Label(WireModel):
    """The ground truth of one prediction, by the request id its answer carried."""

    request_id: str = Field(min_length=1, max_length=MAX_REQUEST_ID_CHARS, description="The answer's `request_id` (also its `x-request-id` header).")
    label: Any = Field(description="The true class (a classifier: text or a number) or value (a regressor: a number).")
    row: int = Field(0, ge=0, le=1_000_000, description="The row of a request that sent several (0: the first, or only, one).")

    @field_validator("label")
    @classmethod
    def _scalar(cls, value: Any) -> Any:
        problem = label_problem(value)  # the rule a label file's rows are held to too
        if problem is not None:
            raise ValueError(problem)
        return value


class Labels(WireModel):
    labels: list[Label] = Field(min_length=1, max_length=MAX_LABELS, description=f"At most {MAX_LABELS:,} labels a post.")
