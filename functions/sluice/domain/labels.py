"""What a label is, on every path that takes one (`POST /api/v1/deployments/{name}/labels`,
`sluice monitor labels --file`), and what a class is where a label and a prediction are
compared. A file cannot always say whether it holds a number or its text (CSV never does; a
batch reader hands a label column on as text), so text and numbers follow one rule: a class is
compared as text, a number (or text writing one with a point or an exponent, as a float is
written) as the number's shortest text, a whole one as an integer: `1`, `1.0`, `"1"`, `"1.0"`
and `"1e0"` are one class. Text written as an integer stays as it is (`"007"`, a code, is not
`7`). A regressor's label is a number, or text writing one (`sluice.domain.written_numbers`).
"""

from __future__ import annotations

import math
import re
from typing import Any

from sluice.domain.errors import InvalidInput
from sluice.domain.written_numbers import NUMBER

CLASS, VALUE = "class", "value"
MAX_LABEL = 1e100  # a regressor's label beyond this is refused: its squared error would overflow the window's sums
MAX_LABEL_CHARS = 256
MAX_REQUEST_ID_CHARS = 128

# A number as a float is written: digits with a point or an exponent (no spaces, no nan or inf).
FLOAT_TEXT = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+(?=[eE]))(?:[eE][+-]?\d+)?", re.ASCII)


def class_name(value: Any) -> str:
    """A class as a label and a prediction are compared (see the module's rule)."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        if not FLOAT_TEXT.fullmatch(value):
            return value
        number = float(value)
        if not math.isfinite(number):  # "1e400": text it stays
            return value
        value = number
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def scalar_problem(label: Any) -> str | None:
    """Why `label` is no label whatever the model (the wire's check, and a file row's), or None."""
    if not isinstance(label, str | int | float):  # (a boolean is an int: `label_of` says what it makes of one)
        return "a label is text or a number"
    if isinstance(label, str) and not label.strip():
        return "a label is not empty text"
    if isinstance(label, str) and len(label) > MAX_LABEL_CHARS:
        return f"a label is at most {MAX_LABEL_CHARS} characters"
    return None


def request_id_problem(request_id: str) -> str | None:
    """Why `request_id` can name no prediction, or None."""
    if not request_id.strip():
        return "missing value for 'request_id'"
    if len(request_id) > MAX_REQUEST_ID_CHARS:
        return f"'request_id' is longer than {MAX_REQUEST_ID_CHARS} characters"
    return None


def label_of(kind: str, label: Any, field: str) -> str | float:
    """A label as its prediction (of `kind`, CLASS or VALUE) is compared with it: a class as
    `class_name` writes it, a value as a finite number of at most `MAX_LABEL` either way; else
    InvalidInput naming `field`."""
    if kind == CLASS:
        if isinstance(label, bool | dict | list) or label is None:
            raise InvalidInput(f"a classifier's label is a class (text or a number), not {type(label).__name__}", field=field)
        return class_name(label)
    try:
        if isinstance(label, str) and not NUMBER.fullmatch(label):
            raise ValueError(label)
        value = float(label)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a whole number past float's range
        raise InvalidInput(f"a regressor's label is a number, not {label!r:.40}", field=field) from None
    if isinstance(label, bool) or not abs(value) <= MAX_LABEL:  # NaN and infinities too
        raise InvalidInput(f"a regressor's label is a number from -{MAX_LABEL:g} to {MAX_LABEL:g}, not {label!r:.40}", field=field)
    return value
