"""The numbers a client may send, as one annotated type per kind of value: path parameters,
query values and body fields all validate through these, so every door says the same thing.

A number is written in ASCII digits (Python's `int()` also reads `٣` and `³`; a URL must not)
and fits in 63 bits, what SQLite and DynamoDB can hold.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, StrictInt

MAX_NUMBER = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,19}")  # [0-9], not \d: \d matches every script's digits


def _whole_number(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a whole number, not true or false")
    if isinstance(value, str):
        if not _DIGITS.fullmatch(value):
            raise ValueError(f"must be a whole number written in the digits 0-9, at most {MAX_NUMBER}")
        return int(value)
    return value


def _version_or_latest(value: str) -> str:
    if value != "latest" and not 1 <= int(value) <= MAX_NUMBER:
        raise ValueError(f"must be 'latest' or a version from 1 to {MAX_NUMBER}")
    return value


# The range comes first: after the before-validator it would not reach the JSON schema.
# A model version's number: in a path, a query or a body.
VersionNumber = Annotated[int, Field(ge=1, le=MAX_NUMBER), BeforeValidator(_whole_number)]
# A deployment's policy revision.
RevisionNumber = Annotated[int, Field(ge=1, le=MAX_NUMBER), BeforeValidator(_whole_number)]
# The same inside a policy, where only a JSON number is a number.
StrictVersionNumber = Annotated[StrictInt, Field(ge=1, le=MAX_NUMBER)]
# A version in a path that also takes `latest`.
VersionOrLatest = Annotated[
    str,
    Field(pattern=r"^(latest|[0-9]{1,19})$", description="A version number, or `latest`."),
    AfterValidator(_version_or_latest),
]

