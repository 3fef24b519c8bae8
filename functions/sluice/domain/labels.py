"""What a label is, on every path that takes one (`POST /api/v1/deployments/{name}/labels`,
`sluice monitor labels --file`), and what a class is where a label and a prediction are
compared. A class is named by what the model's classes are (`numbers`, known when its
prediction is kept: a label output of numbers, or class labels that are numbers):

- the classes of a model are numbers: a label is a number, or text writing one (a file cannot
  always say which it holds: CSV never does, a batch reader hands a label column on as text),
  named as the number's shortest text, a whole one as an integer: `1`, `1.0`, `"1"`, `"1.0"`
  and `"1e0"` are class `1`;
- they are text: a label is the text as written (`"1.10"` and `"1.1"`, two versions, are two
  classes; `"007"` is no `7`), and a number posted for one is its shortest text (`1.0` is
  `"1"`): text read from a file matches a text class only as written.

A regressor's label is a number, or text writing one (`sluice.domain.written_numbers`).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import InvalidInput
from sluice.domain.written_numbers import NUMBER

if TYPE_CHECKING:
    from collections.abc import Iterable

CLASS, VALUE = "class", "value"
MAX_LABEL = 1e100  # a regressor's label beyond this is refused: its squared error would overflow the window's sums
MAX_LABEL_CHARS = 256
MAX_REQUEST_ID_CHARS = 128
WHOLE_TEXT = re.compile(r"[+-]?\d+", re.ASCII)


def number_of(value: Any) -> float | None:
    """The finite number a class or label is, or writes (`NUMBER`'s grammar), or None."""
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not NUMBER.fullmatch(value):
            return None
        value = float(value)
    if not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # a whole number past float's range
        return None
    return number if math.isfinite(number) else None


def _number_text(value: int | float) -> str:
    """A number's shortest text, a whole one as an integer."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def class_name(value: Any, *, numbers: bool) -> str:
    """A class (a label, or one a model predicts) as a label and a prediction are compared,
    for a model whose classes are `numbers` or text (see the module's rule)."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        if numbers and (number := number_of(value)) is not None:
            whole = value.strip(" \t")
            exact = WHOLE_TEXT.fullmatch(whole) and len(whole) <= MAX_LABEL_CHARS  # a whole number's text exactly, past float's 2**53 too
            return str(int(whole)) if exact else _number_text(number)
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _number_text(value)
    return str(value)


def are_numbers(classes: Iterable[Any]) -> bool:
    """Whether a model's classes are numbers, by the classes themselves: numbers (not booleans),
    at least one."""
    found = list(classes)
    return bool(found) and all(isinstance(c, int | float) and not isinstance(c, bool) for c in found)


def write_numbers(names: Iterable[str]) -> bool:
    """Whether class names kept before the model's kind of classes was kept with them read as
    numbers: every one writes a number (at least one)."""
    found = list(names)
    return bool(found) and all(number_of(n) is not None for n in found)


def scalar_problem(label: Any) -> str | None:
    """Why `label` is no label whatever the model (the wire's check, and a file row's), or None.
    Empty text is a label: a model may predict a class `""` (a regressor refuses it, `label_of`)."""
    if not isinstance(label, str | int | float):  # (a boolean is an int: `label_of` says what it makes of one)
        return "a label is text or a number"
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


def label_of(kind: str, label: Any, field: str, *, numbers: bool = False) -> str | float:
    """A label as its prediction (of `kind`, CLASS or VALUE) is compared with it: a class as
    `class_name` writes it for a model whose classes are `numbers` (or text), a value as a
    finite number of at most `MAX_LABEL` either way; else InvalidInput naming `field`."""
    if kind == CLASS:
        if isinstance(label, bool | dict | list) or label is None:
            raise InvalidInput(f"a classifier's label is a class (text or a number), not {type(label).__name__}", field=field)
        return class_name(label, numbers=numbers)
    try:
        if isinstance(label, str) and not NUMBER.fullmatch(label):
            raise ValueError(label)
        value = float(label)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a whole number past float's range
        raise InvalidInput(f"a regressor's label is a number, not {label!r:.40}", field=field) from None
    if isinstance(label, bool) or not abs(value) <= MAX_LABEL:  # NaN and infinities too
        raise InvalidInput(f"a regressor's label is a number from -{MAX_LABEL:g} to {MAX_LABEL:g}, not {label!r:.40}", field=field)
    return value
