"""A policy is kept as JSON, which has no NaN or Infinity: a number that is not finite, anywhere
in one given as data (the CLI's reader takes them), is refused naming its place."""

from __future__ import annotations

import json
import math
from typing import Any

from sluice.domain.errors import InvalidRequest


def check_finite(data: Any, *, field: str = "policy") -> None:
    """A policy (or a node of one) given as data is kept as JSON, which has no NaN or Infinity
    (they were stored as null, and every request then failed): one anywhere is refused, named."""
    where = _not_finite(data)
    if where is not None:
        named = ".".join([field, *map(str, where)]) if field else ".".join(map(str, where))
        raise InvalidRequest(f"{named}: a policy's numbers are finite (JSON has no NaN or Infinity)", field=named)


def _not_finite(data: Any) -> tuple[Any, ...] | None:
    """Where a policy given as JSON-like data holds a float that is not finite, if anywhere
    (looked for only where JSON's own writer, in C, finds one)."""
    if type(data) is not dict:
        return None
    try:
        json.dumps(data, allow_nan=False)
        return None
    except ValueError:
        pass
    except TypeError:  # a value JSON has no form for: the validation names it
        return None
    todo: list[tuple[tuple[Any, ...], Any]] = [((), data)]
    while todo:
        path, value = todo.pop()
        if type(value) is float and not math.isfinite(value):
            return path
        if type(value) is dict:
            todo.extend(((*path, k), v) for k, v in value.items())
        elif type(value) is list:
            todo.extend(((*path, i), v) for i, v in enumerate(value))
    return None
