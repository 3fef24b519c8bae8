"""A `lookup` node: a step of a sequence that enriches each row with features fetched by its
entity key(s) from an online feature store, before the steps that need them.

    {"kind": "lookup",
     "store": "dynamodb", "table": "acme-customers",          # or sagemaker / feast / sqlite
     "keys": {"customer_id": "customer"},                      # {the store's key: the input holding it}
     "features": [{"name": "avg_amount_30d", "datatype": "FP32", "default": 0.0},
                  {"name": "chargebacks", "datatype": "INT64"}],
     "max_age_s": 86400, "event_time_output": "customer_at"}

Stores: a DynamoDB table keyed by the entity (its partition key, and a sort key for a second
key), a SageMaker Feature Store feature group (its record identifier; one key), a Feast feature
view (its entities' join keys, read through Feast's SDK from the online store the operator's
Feast repository names), and locally a table of the tenant's own SQLite file. A lookup gives every tensor it takes, and one more per
feature, `[-1]` (one value a row) of its declared datatype, so the next step sees them as a
transform's outputs. Like a transform it declares its `inputs` as a sequence's first step and
takes the previous step's outputs as a later one.

Per feature, a row whose entity is missing, whose feature is missing (or null), or whose record
is older than `max_age_s` takes the feature's `default`; a feature without one fails the request
with a 422 naming the entity's key. The record's event time (`event_time`, epoch seconds or an
ISO-8601 time) is given as `event_time_output` (FP64 epoch seconds, NaN where there is none)
when the lookup names one; a sequence's `expose` puts it in the answer.

`cache_ttl_s` keeps the values read for later requests and batch chunks of the same tenant
(`sluice.runtimes.lookup_cache`), never past `max_age_s`; unset, the operator's default.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from sluice.domain.parts import Part
from sluice.domain.signature import DYNAMIC, TensorSpec
from sluice.domain.transforms import InputSpec, Name

STORES = ("dynamodb", "sagemaker", "feast", "sqlite")
# A store's limit (SQLite's: bound variables kept small; Feast's: one `get_online_features` call,
# which its online store splits as it must, DynamoDB's into BatchGetItem calls of 100).
MAX_KEYS_PER_CALL = {"dynamodb": 100, "sagemaker": 100, "feast": 1000, "sqlite": 500}
MAX_FEATURES = 256
MAX_AGE_S = 10 * 365 * 86400
MAX_CACHE_TTL_S = 86400
# DynamoDB table names; SageMaker feature group names; Feast feature view names (no `:`, which
# separates a view from a feature in Feast's references); SQL identifiers, unquoted.
TABLE_PATTERNS = {
    "dynamodb": re.compile(r"[A-Za-z0-9_.-]{3,255}"),
    "sagemaker": re.compile(r"[A-Za-z0-9](?:[-_]*[A-Za-z0-9]){0,63}"),
    "feast": re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,127}"),
    "sqlite": re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}"),
}
# The names a store gives its features (its keys and event time are features too), where it holds
# them to a rule a lookup's own names do not: SageMaker Feature Store's FeatureName (botocore's
# model: 1 to 64 characters of this pattern). Checked where a policy is written
# (`sluice.services.written_bounds`): a name past it was a 502 on every call.
FEATURE_NAMES = {"sagemaker": (re.compile(r"[a-zA-Z0-9](?:[-_]*[a-zA-Z0-9]){0,63}"), 64, "a SageMaker feature name: 1 to 64 letters, digits, '-' and '_', starting and ending with a letter or digit")}
SQLITE_OWN = ("sqlite_", "pragma_")  # SQLite's own tables and its pragmas' table-valued functions, in every file
Attribute = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")]
Value = StrictBool | StrictInt | StrictFloat | StrictStr
WHOLE = {"INT32": (-(2**31), 2**31 - 1), "INT64": (-(2**63), 2**63 - 1)}  # the integers each holds
# The least magnitude that rounds to infinity: half way past the largest finite float (a tie goes
# to the even mantissa, infinity's).
OVERFLOW = {"FP32": 2**128 - 2**103, "FP64": 2**1024 - 2**970}


def holds(datatype: str, number: float) -> bool:
    """Whether a numeric `datatype` holds `number` (an integer for INT32/INT64): an integer within
    its range; a number that does not round to infinity as a float (NaN and the infinities are
    floats). A default and a store's value are held to the same rule."""
    whole = WHOLE.get(datatype)
    if whole is not None:
        return whole[0] <= number <= whole[1]
    return not abs(number) >= OVERFLOW[datatype] or number in (math.inf, -math.inf)


class FeatureSpec(Part):
    name: Attribute = Field(description="The feature's name in the store, and the tensor it becomes.")
    datatype: Literal["BOOL", "INT32", "INT64", "FP32", "FP64", "BYTES"]
    default: Value | None = Field(None, description="Taken where the value is missing or stale; none: the request fails (422, naming the entity).")

    @model_validator(mode="after")
    def _default_fits(self) -> FeatureSpec:
        if self.default is None:
            return self
        text, flag = isinstance(self.default, str), isinstance(self.default, bool)
        if (self.datatype == "BYTES") != text or (self.datatype == "BOOL") != flag:
            raise ValueError(f"default {self.default!r} is not a {self.datatype} value")
        if self.datatype in WHOLE and not isinstance(self.default, int):
            raise ValueError(f"default {self.default!r} is not a whole number")
        return self  # its range: where a policy is written (`past_range_default`), so one stored before stays readable

    def past_range_default(self) -> str | None:
        """Why the default is no value of the datatype (past its range), or None."""
        default = self.default
        if isinstance(default, int | float) and not isinstance(default, bool) and not holds(self.datatype, default):
            return f"default {default!r} is not a {self.datatype} value: out of its range"
        return None

    def spec(self) -> TensorSpec:
        return TensorSpec(self.name, self.datatype, (DYNAMIC,))


class Lookup(Part):
    kind: Literal["lookup"] = "lookup"
    store: Literal["dynamodb", "sagemaker", "feast", "sqlite"] = Field(
        description="DynamoDB table, SageMaker feature group, Feast feature view, or (locally) SQLite table."
    )
    table: str = Field(min_length=1, max_length=255, description="The table (feature group, Feast feature view) the tenant may read.")
    keys: dict[Attribute, Name] = Field(min_length=1, max_length=2, description="{the store's key: the input tensor holding it, one a row}.")
    features: list[FeatureSpec] = Field(min_length=1, max_length=MAX_FEATURES)
    inputs: list[InputSpec] | None = Field(None, min_length=1, max_length=256, description="What a caller sends: a sequence's first step only.")
    max_age_s: StrictFloat | None = Field(None, gt=0, le=MAX_AGE_S, allow_inf_nan=False, description="Older records count as missing.")
    event_time: Attribute = Field("event_time", description="The record's event-time attribute (feature) in the store; Feast's own event times for `feast`.")
    event_time_output: Name | None = Field(None, description="A tensor of each row's event time (FP64 epoch seconds, NaN: none).")
    cache_ttl_s: StrictFloat | None = Field(
        None, ge=0, le=MAX_CACHE_TTL_S, allow_inf_nan=False,
        description="Seconds values read are kept for later requests and chunks (never past max_age_s); 0: never; none: the operator's default.",
    )  # fmt: skip

    @model_validator(mode="after")
    def _consistent(self) -> Lookup:
        if not TABLE_PATTERNS[self.store].fullmatch(self.table):
            raise ValueError(f"'{self.table}' is not a {self.store} table name")
        if self.store == "sqlite" and self.table.lower().startswith(SQLITE_OWN):
            raise ValueError(f"'{self.table}' is a name SQLite keeps for its own tables (sqlite_..., pragma_...): name one of the file's tables")
        if self.store == "sagemaker" and len(self.keys) != 1:
            raise ValueError("a feature group has one record identifier: give one key")
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ValueError("a feature is named twice")
        if self.event_time_output is not None and self.event_time_output in names:
            raise ValueError(f"event_time_output '{self.event_time_output}' is also a feature")
        if self.store == "sqlite" and not all(TABLE_PATTERNS["sqlite"].fullmatch(n) for n in [*names, *self.keys, self.event_time]):
            raise ValueError("a SQLite table's keys, features and event time are plain identifiers (letters, digits, _)")
        return self

    def children(self) -> list[Any]:
        return []

    def misnamed(self) -> Iterator[tuple[str, str, str]]:
        """Each name the store asks for that it cannot hold as a feature's (`FEATURE_NAMES`): its
        field under the lookup, the name, and what a name of the store's is."""
        rule = FEATURE_NAMES.get(self.store)
        if rule is None:
            return
        pattern, most, said = rule
        named = [*((f"keys.{k}", k) for k in self.keys), *((f"features.{i}.name", f.name) for i, f in enumerate(self.features)), ("event_time", self.event_time)]
        for where, name in named:
            if len(name) > most or not pattern.fullmatch(name):
                yield where, name, said

    def primary_single(self, resolve_ref: Callable[[str], Any] | None = None) -> None:
        return None

    def input_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(s.spec() for s in self.inputs or ())

    @property
    def max_keys(self) -> int:
        return MAX_KEYS_PER_CALL[self.store]

    @property
    def source(self) -> str:
        """How an allowlist names what it reads: `dynamodb:TABLE`, `sagemaker:GROUP`, `feast:VIEW`, `sqlite:TABLE`."""
        return f"{self.store}:{self.table}"

    @cached_property
    def reads(self) -> tuple[Any, ...]:
        """What a read of its store answers, beyond the tenant and the store: the table, the key
        names, the features with their datatypes, and the event-time attribute read ("": none)."""
        event_time = self.event_time if self.max_age_s is not None or self.event_time_output else ""  # read only when used
        return (self.table, tuple(self.keys), tuple((f.name, f.datatype) for f in self.features), event_time)

    @cached_property
    def gives(self) -> tuple[TensorSpec, ...]:
        """What it adds to what it takes."""
        extra = (TensorSpec(self.event_time_output, "FP64", (DYNAMIC,), nan_missing=True),) if self.event_time_output else ()
        return (*(f.spec() for f in self.features), *extra)

    def derive(self, takes: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
        """What it gives after taking `takes`: those, less any a feature replaces, then its own."""
        mine = {s.name for s in self.gives}
        return (*(s for s in takes if s.name not in mine), *self.gives)

    def key_problem(self, takes: tuple[TensorSpec, ...]) -> tuple[str, str] | None:
        """(why, the key) where a key's input is not among `takes` or is not one value a row."""
        by_name = {s.name: s for s in takes}
        for key, name in self.keys.items():
            spec = by_name.get(name)
            if spec is None:
                return f"key '{key}' is read from input '{name}', which is not among {sorted(by_name)}", key
            if len(spec.shape) != 1 or spec.datatype not in ("BYTES", "INT32", "INT64"):
                return f"key '{key}' is read from input '{name}' ({spec.datatype} {list(spec.shape)}): a key is one string or integer a row", key
        return None
