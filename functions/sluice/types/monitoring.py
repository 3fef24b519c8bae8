"""The wire shapes of model monitoring's routes (docs/monitoring.md)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from sluice.types.base import WireModel


class BaselineRows(WireModel):
    """Rows of the data a deployment was trained on, as a prediction sends them."""

    inputs: list[Any] | dict[str, Any] | None = Field(
        None, description="Rows for a single-input model (a 2-D list), or named tensors {input: rows}."
    )
    batch: list[Any] | None = Field(None, description="Rows as feature objects or lists.")
    source: str = Field("api", max_length=256, description="Where the rows came from, kept with the baseline.")
    outputs: bool = Field(True, description="Profile the primary version's answers to the rows too.")
