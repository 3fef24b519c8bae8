"""What every section of the config shares: unknown keys are refused, values are frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

TENANT = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
