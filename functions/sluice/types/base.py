"""The shared base of every wire model: serialization defaults set once."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, protected_namespaces=())


class OpenWireModel(WireModel):
    """For protocol objects whose spec allows extension fields."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, protected_namespaces=())
