"""A `precomputed` node: answers published by a batch job, served by entity, with a live
node behind them for the rows the table does not answer.

    {"kind": "precomputed",
     "table": "recs",                          # the tenant's table a job published (`publish.table`)
     "key": "inputs.user", "column": 0,        # the entity: routing_key, headers.<name> or inputs.<name>
     "max_age_s": 86400,                       # older stored answers are not served
     "live": {"kind": "single", "model": "recommender", "version": 3}}

A row whose entity has a stored answer no older than `max_age_s` is answered from the table
(`source: precomputed`, with the time it was computed); every other row (a new user, a stale
answer, a table nothing was published to yet) is answered by `live`, the rows of one request in
one call. A key read from the request (`routing_key`, a header) is one entity for every row of
the request; a key read from an input is one entity per row. The table's answers must have the
live node's outputs (names, datatypes, shapes): checked when the policy is saved, and again
on every read of a new publication (a table whose answers do not fit is not served).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, StrictFloat, StrictInt, field_validator

from sluice.domain.parts import HEADER_NAME, Part, ReadsRequest

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sluice.domain.policy import Node
    from sluice.domain.signature import TensorSpec  # resolved by `policy` once its union is built

TABLE_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
KEY_PATTERN = rf"^(routing_key|headers\.{HEADER_NAME}|inputs\.[^\s]{{1,128}})$"
MAX_ENTITY_BYTES = 1024  # UTF-8: a DynamoDB partition key holds 2048 bytes; the tenant's and the table's prefix take up to 134
MAX_AGE_S = 366 * 86400.0


class Precomputed(ReadsRequest, Part):
    path_field: ClassVar[str] = "key"

    kind: Literal["precomputed"] = "precomputed"
    table: str = Field(pattern=TABLE_PATTERN, description="The tenant's table of published answers (a batch job's `publish.table`).")
    key: str = Field(description="Where the entity key is read: routing_key, headers.<name> or inputs.<name>.")
    column: Annotated[StrictInt, Field(ge=0)] | Annotated[str, Field(min_length=1, max_length=128)] | None = Field(
        None, description="inputs only: a column of the input's last axis, by index or feature name (true, 1.0: neither)."
    )
    max_age_s: StrictFloat = Field(86400.0, gt=0, le=MAX_AGE_S, allow_inf_nan=False, description="Stored answers older than this are answered live.")
    live: Node = Field(description="The node that answers the rows the table does not (any node: a model, a sequence).")

    @field_validator("key")
    @classmethod
    def _known(cls, value: str) -> str:
        if not re.fullmatch(KEY_PATTERN, value):
            raise ValueError("the key is read from routing_key, headers.<name> or inputs.<name>")
        return value

    @field_validator("column")
    @classmethod
    def _column_of_input(cls, value: Any, info: Any) -> Any:
        if value is not None and not str(info.data.get("key", "")).startswith("inputs."):
            raise ValueError("'column' is only for a key read from inputs.<name>")
        return value

    def children(self) -> list[Any]:
        return [self.live]

    def primary_single(self, resolve_ref: Callable[[str], Any] | None = None) -> Any:
        return self.live.primary_single(resolve_ref)


def entity_of(value: Any) -> str | None:
    """An entity key as the table stores it: a string as it is, a whole number without a
    fraction (`7`, `7.0` and `"7"` are one entity), bytes as the UTF-8 text they are; None
    for a missing one (null, NaN, an empty string), an infinite number (its text, `inf`, is the
    text key "inf"'s entity), a list or an object (several values, or none: no one entity), bytes
    that are no UTF-8 text (read with replacement characters, two such keys would be one
    entity), or one whose entity is longer than `MAX_ENTITY_BYTES` in UTF-8 (a number's digits
    and sign too), which no stored answer can have (never cut short: two keys alike in their
    first bytes are two entities)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        if not value or (len(value) * 4 > MAX_ENTITY_BYTES and len(value.encode("utf-8", "surrogatepass")) > MAX_ENTITY_BYTES):
            return None
        return value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, Decimal):  # a Parquet decimal column's: `7.00` is `7` too
        if not value.is_finite():
            return None
        if value == value.to_integral_value():  # its digits and its sign, counted before it is spelled out
            return None if value.adjusted() + 1 + value.is_signed() > MAX_ENTITY_BYTES else str(int(value))
        text = str(value)
        return text if len(text) <= MAX_ENTITY_BYTES else None
    if isinstance(value, list | tuple | dict | set | frozenset):
        return None  # a list or an object (a JSON Lines row's) is no one key: its text is no entity's
    item = getattr(value, "item", None)  # a NumPy scalar
    return entity_of(item()) if callable(item) else str(value)


def fits(stored: Iterable[TensorSpec], live: Iterable[TensorSpec]) -> str | None:
    """Why stored answers with outputs `stored` cannot stand for the live node's (`live`):
    names, datatypes and shapes past the rows must be the same; None when they are."""

    def described(specs: Iterable[TensorSpec]) -> list[tuple[str, str, tuple[int, ...]]]:
        return sorted((s.name, s.datatype, tuple(s.shape[1:])) for s in specs)

    have, want = described(stored), described(live)
    if have == want:
        return None
    return f"its answers hold {[f'{n} {d} {list(s)}' for n, d, s in have]}; the live node answers {[f'{n} {d} {list(s)}' for n, d, s in want]}"
