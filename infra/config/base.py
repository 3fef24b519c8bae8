"""What every section of the config shares: unknown keys are refused, values are frozen."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict

TENANT = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class _Named(Protocol):
    @property
    def name(self) -> str: ...


Items = TypeVar("Items", bound=Sequence[_Named])


def names_unique(message: str) -> AfterValidator:
    """Refuses a list of sections two of which have the same `name`, saying `message`."""

    def check(items: Items) -> Items:
        if len({item.name for item in items}) != len(items):
            raise ValueError(message)
        return items

    return AfterValidator(check)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
