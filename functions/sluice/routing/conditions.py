"""Deciding a switch: which case each row of a request takes.

Conditions are data (`sluice.domain.conditions`); here they are evaluated, vectorized, to one
boolean per row. A request-level field (the routing key, a header, a parameter) holds or not for every row
alike; an input's value is read row by row. A row takes the first case whose condition holds,
else the default (`len(cases)`): so a row takes the same case alone, in a request of many rows,
or in a bulk call of many records.
"""

from __future__ import annotations

import math
import operator
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.conditions import AllOf, AnyOf, Compare
from sluice.domain.errors import InvalidInput
from sluice.domain.requests import header_of
from sluice.domain.values import number_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from sluice.domain.conditions import Condition


@dataclass(frozen=True, slots=True)
class Facts:
    """What conditions may read of one request."""

    rows: int
    routing_key: str | None
    headers: Mapping[str, str]
    arrays: Mapping[str, np.ndarray]
    feature_names: Mapping[str, tuple[str, ...]]  # input -> the names of its last axis' columns
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        return header_of(self.headers, name)

    def parameter(self, name: str) -> Any:
        """A parameter as text, as a header reads (a number's digits, `true`/`false`); None
        when absent; `OTHER` when it is a list or an object (it exists, and equals nothing)."""
        found = self.parameters.get(name)
        if found is None or isinstance(found, str):
            return found
        if isinstance(found, bool):
            return "true" if found else "false"
        if isinstance(found, int | float):
            return repr(found)
        return OTHER


OTHER = object()  # a parameter's value that is not a string, a number or a boolean


def decide(conditions: Sequence[Condition], facts: Facts) -> np.ndarray:
    """The case each row takes: the index of the first condition that holds for it, or
    `len(conditions)` (the default) when none does."""
    chosen = np.full(facts.rows, len(conditions), dtype=np.intp)
    undecided = np.ones(facts.rows, dtype=bool)
    for index, condition in enumerate(conditions):
        holds = holds_for(condition, facts) & undecided
        chosen[holds] = index
        undecided &= ~holds
        if not undecided.any():
            break
    return chosen


def holds_for(condition: Condition, facts: Facts) -> np.ndarray:
    """One boolean per row."""
    if isinstance(condition, AllOf):
        out = np.ones(facts.rows, dtype=bool)
        for term in condition.all:
            out &= holds_for(term, facts)
        return out
    if isinstance(condition, AnyOf):
        out = np.zeros(facts.rows, dtype=bool)
        for term in condition.any:
            out |= holds_for(term, facts)
        return out
    if condition.source == "inputs":
        return _column_holds(condition, facts)
    return np.full(facts.rows, _scalar_holds(condition, request_value(condition, facts)), dtype=bool)


def request_value(compare: Compare, facts: Facts) -> Any:
    """The request-level value a comparison reads (the routing key, a header or a parameter)."""
    source = compare.source
    if source == "routing_key":
        return facts.routing_key
    return facts.header(compare.name) if source == "headers" else facts.parameter(compare.name)


def _scalar_holds(compare: Compare, found: Any) -> bool:
    if compare.op == "exists":
        return found is not None and found != ""
    if found is None or found is OTHER:
        return compare.op == "!="
    wanted = compare.value
    op = compare.op
    if op in ("in", "==", "!="):
        values = wanted if op == "in" else (wanted,)
        # The text read as a number once per condition (an `in` list holds up to MAX_IN_VALUES
        # values), and only where a value is one: text against text reads no number.
        number = _number(found) if any(type(v) in (int, float) for v in values) else None  # type: ignore[union-attr]
        same = any(_equal(found, number, v) for v in values)  # type: ignore[union-attr]
        return not same if op == "!=" else same
    number = _number(found)
    if number is None:
        return False
    return bool(_ORDER[compare.op](number, wanted))


def _equal(found: str, number: int | float | None, wanted: Any) -> bool:
    """`found` (text), whose number is `number` (None: none), equals `wanted`."""
    if isinstance(wanted, bool):
        return found.lower() == str(wanted).lower()
    if isinstance(wanted, str):
        return found == wanted
    return number is not None and number == wanted


def _number(text: str) -> int | float | None:
    """The number `text` spells by the rule every number written as text is read by
    (`sluice.domain.values.number_of`: `1_0` and digits of other scripts are no number), or None. Whole numbers are
    read as integers, as Python compares an integer with an integer or a float exactly: as a
    float, an id past 2**53 would equal its neighbours (9007199254740993 == 9007199254740992)."""
    number = number_of(text)
    return number if number is None or isinstance(number, int) or math.isfinite(number) else None


# Python's operators: on arrays they are NumPy's; on a float and an int they are exact.
_ORDER: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _column_holds(compare: Compare, facts: Facts) -> np.ndarray:
    array = facts.arrays.get(compare.name)
    if facts.rows == 0:
        return np.zeros(0, dtype=bool)
    if array is None:
        return np.zeros(facts.rows, dtype=bool) if compare.op != "!=" else np.ones(facts.rows, dtype=bool)
    values = _values(compare, array, facts)
    text = values.dtype.kind in "OUS"
    if text:
        values = np.array([v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in values], dtype=object)
    op, wanted = compare.op, compare.value
    if op == "exists":
        if text:
            return np.array([v is not None and v != "" for v in values], dtype=bool)
        return ~np.isnan(values) if values.dtype.kind == "f" else np.ones(facts.rows, dtype=bool)
    if op in ("==", "!=", "in"):
        options = wanted if op == "in" else [wanted]
        fits = [v for v in options if isinstance(v, str) == text]  # type: ignore[union-attr]
        same = np.isin(values, _options(fits, values.dtype, text)) if fits else np.zeros(facts.rows, dtype=bool)
        return ~same if op == "!=" else same
    if text:
        return np.zeros(facts.rows, dtype=bool)
    if values.dtype.kind == "f" and isinstance(wanted, int) and abs(wanted) > sys.float_info.max:  # an integer past every float: NumPy cannot convert it
        values = values.astype(object)  # so Python compares, exactly
    return np.asarray(_ORDER[op](values, wanted), dtype=bool)


def _options(fits: list[Any], dtype: np.dtype, text: bool) -> np.ndarray:
    """The values a row may equal, as the row's own type holds them: an FP32 row of 0.2 (which
    the caller sent as 0.2) equals 0.2, as `<=` and `>=` find it does. A value no row of that
    type can hold (beyond its range: 1e39 for FP32, an integer of 400 digits for any) is left out."""
    if text:
        return np.array(fits, dtype=object)
    if dtype.kind in "iu":  # as whole numbers of the row's type: a fraction, or one past its range, no row equals
        info = np.iinfo(dtype)
        return np.array([int(v) for v in fits if not isinstance(v, float) or v.is_integer() if info.min <= int(v) <= info.max], dtype=dtype)
    if dtype.kind != "f":
        return np.array(fits)
    most = float(np.finfo(dtype).max)
    return np.array([v for v in fits if abs(v) <= most or abs(v) == math.inf], dtype=dtype)


def _values(compare: Compare, array: np.ndarray, facts: Facts) -> np.ndarray:
    """The compared value of each row: the input's one value per row, or a column of it."""
    flat = array.reshape(facts.rows, -1)
    column = compare.column
    if isinstance(column, str):
        names = facts.feature_names.get(compare.name, ())
        if column not in names:
            raise InvalidInput(f"input '{compare.name}' has no feature '{column}'", field=compare.field)
        column = names.index(column)
    if column is None:
        if flat.shape[1] != 1:
            raise InvalidInput(f"input '{compare.name}' has {flat.shape[1]} values a row: the condition needs a column", field=compare.field)
        column = 0
    if column >= flat.shape[1]:
        raise InvalidInput(f"input '{compare.name}' has {flat.shape[1]} columns, not {column + 1}", field=compare.field)
    return flat[:, column]
