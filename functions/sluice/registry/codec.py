"""Stored forms of the domain objects: one pydantic adapter per stored type, shared by the
SQLite and DynamoDB registries. The dataclasses in `sluice.domain` are the schema; nested
dataclasses, tuples, frozensets and pydantic models inside them map without help here.

A stored form is plain JSON data (dicts, lists, str, int, float, bool, None). Reading ignores
attributes a record does not have (DynamoDB's `pk`, `sk`, …) and takes a field that is absent
for None: the DynamoDB registry leaves None attributes out.
"""

from __future__ import annotations

import importlib
import json
import threading
from dataclasses import MISSING, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sluice.domain import ApiKey, Deployment, DeploymentChange, Model, ModelVersion
from sluice.domain.errors import BadRequest
from sluice.domain.jobs import BatchJob, ChunkResult

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pydantic import TypeAdapter

    from sluice.domain.follows import Follow
    from sluice.domain.optimize_jobs import OptimizeJob
    from sluice.domain.schedules import Schedule

T = TypeVar("T")


class Codec(Generic[T]):
    """`dump` and `load` for one dataclass. The adapter is built on first use: building one
    costs milliseconds that a cold start need not pay for types it never touches. A record
    kind that most processes never read is named instead (`Codec.of("sluice.domain.follows",
    "Follow")`): its module is imported where a record of it is first written or read."""

    def __init__(self, cls: type[T] | None = None, *, named: tuple[str, str] | None = None) -> None:
        if cls is not None:
            self.cls = cls
        self._named = named
        self._adapter: TypeAdapter[tuple[T]] | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, module: str, name: str) -> Codec[Any]:
        return cls(named=(module, name))

    @cached_property
    def cls(self) -> type[T]:
        assert self._named is not None
        module, name = self._named
        found: type[T] = getattr(importlib.import_module(module), name)
        return found

    @cached_property
    def _required(self) -> tuple[str, ...]:
        return tuple(
            f.name for f in fields(self.cls)  # type: ignore[arg-type]
            if f.default is MISSING and f.default_factory is MISSING
        )  # fmt: skip

    @property
    def adapter(self) -> TypeAdapter[tuple[T]]:
        if self._adapter is None:
            with self._lock:
                if self._adapter is None:
                    from pydantic import ConfigDict, TypeAdapter

                    # NaN and infinity stay floats (pydantic's JSON mode would make them None)
                    # so that the stores refuse them instead of changing them. A config applies
                    # only to a type without its own, hence the one-tuple around the record.
                    config = ConfigDict(ser_json_inf_nan="constants")
                    self._adapter = TypeAdapter(tuple[self.cls], config=config)  # type: ignore[name-defined]
        return self._adapter

    def dump(self, obj: T) -> dict[str, Any]:
        data: dict[str, Any] = self.adapter.dump_python((obj,), mode="json")[0]
        return data

    def load(self, data: Mapping[str, Any]) -> T:
        absent = {name: None for name in self._required if name not in data}
        return self.adapter.validate_python(({**data, **absent},))[0]

    def to_json(self, obj: T) -> str:
        return to_json(self.dump(obj))

    def from_json(self, text: str) -> T:
        return self.load(json.loads(text))


def to_json(data: Any) -> str:
    try:
        return json.dumps(data, allow_nan=False)
    except ValueError:
        raise not_finite() from None


def not_finite(field: str | None = None) -> BadRequest:
    return BadRequest("the registry cannot store NaN or infinite numbers", field=field)


# A bandit assignment's `variant`: the path of each variant the request's bandits chose
# (`sluice.domain.policy_paths.subject_at`), one apart from the next by a space, which no name or
# path holds. A request through one bandit split, as every request was before splits nested
# in ensembles, cases and steps were told apart, holds one: stored as it always was.
def assigned_variants(variants: Sequence[str]) -> str:
    return " ".join(variants)


def variants_assigned(stored: str) -> tuple[str, ...]:
    return tuple(stored.split(" "))


MODEL = Codec(Model)
VERSION = Codec(ModelVersion)
DEPLOYMENT = Codec(Deployment)
CHANGE = Codec(DeploymentChange)
API_KEY = Codec(ApiKey)
JOB = Codec(BatchJob)
CHUNK = Codec(ChunkResult)
# Read by the commands and routes of their own kind only.
SCHEDULE: Codec[Schedule] = Codec.of("sluice.domain.schedules", "Schedule")
OPTIMIZE_JOB: Codec[OptimizeJob] = Codec.of("sluice.domain.optimize_jobs", "OptimizeJob")
FOLLOW: Codec[Follow] = Codec.of("sluice.domain.follows", "Follow")

# The progress counters of a job; stored apart from the rest so they can be added to in place.
JOB_COUNTERS = ("chunks_done", "rows_in", "rows_out", "rows_failed")
