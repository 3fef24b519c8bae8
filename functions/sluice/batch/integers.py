"""Integer inputs of a batch job read exactly from what each value writes: a whole number as the
integer it is (`5.0`, `1e3`, `9007199254740993.0`), a fraction refused, however fine (`whole_of`);
and where a float may not have read a value as written (`FINE_NUMBER`: too many digits, or an
exponent), that value read from its text (`hidden_fractions`, `fine_number_of`)."""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np

from sluice.codecs.datatypes import integer_range
from sluice.domain.values import number_of

# A number a float may not read as written: more significant digits than a float keeps (16 and
# more: `1.0000000000000000001` reads as 1.0, `5000000000000000.5` as a whole float near it), or
# an exponent (`1e-400` reads as 0.0). Such an integer input's value is read from its text.
FINE_NUMBER = r"(?:[0-9]\.?){16,}|[0-9][eE][+-]?[0-9]"
FINE_NUMBER_BYTES = re.compile(FINE_NUMBER.encode())


@functools.lru_cache(maxsize=256)
def fine_number_of(name: str) -> re.Pattern[bytes]:
    """A JSON Lines member `name` (as a line writes it unescaped) holding a `FINE_NUMBER`: found
    in a chunk's bytes at C speed, so only the integer inputs' own values (not another member's
    digits) send a chunk to be read exactly. Made once per name."""
    import orjson

    return re.compile(re.escape(orjson.dumps(name)) + rb"[ \t\r]*:[ \t\r]*-?(?:(?:[0-9]\.?){16,}|[0-9.]*[0-9][eE])")


def hidden_fractions(array: Any, name: str, datatype: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows of an integer input's text that write a fraction too fine for the float they were
    read as (`FINE_NUMBER`), and why, each read exactly (`whole_of`): (a mask, the messages) to
    blame them by, as any fraction is, so a value is taken or refused by what it writes, never by
    the other values of its chunk."""
    import pyarrow.compute as pc

    from sluice.codecs.arrow_numbers import to_numbers

    mask = np.zeros(len(array), dtype=bool)
    messages = np.full(len(array), None, dtype=object)
    fine = pc.and_(pc.match_substring_regex(array, FINE_NUMBER), pc.match_substring_regex(array, r"[.eE]"))
    at = np.flatnonzero(to_numbers(pc.fill_null(fine, False)))
    if len(at):
        whys = np.asarray([whole_of(text, name, datatype)[1] for text in array.take(at).to_pylist()], dtype=object)
        mask[at], messages[at] = whys != "", whys
    return mask, messages


def whole_of(value: int | float | str, name: str, datatype: str) -> tuple[int | None, str]:
    """The whole number `value` is, within the integer `datatype`'s range, or why not: text as
    NUMBER reads it, exactly (`5.0`, `1e3` and `9007199254740993.0` are the integers written,
    not the floats near them); a float where it is whole."""
    from decimal import Decimal, InvalidOperation

    number = number_of(value) if isinstance(value, str) else value
    if number is None:
        return None, f"'{name}' is not a number: {str(value)[:40]!r}"
    if isinstance(number, float):
        if number != number or number in (float("inf"), float("-inf")):
            return None, f"'{name}' is {'NaN' if number != number else 'infinite'}"
        try:
            exact = Decimal(value.strip(" \t")) if isinstance(value, str) else Decimal(number)
        except InvalidOperation:  # an exponent past Decimal's: the float read says it (`1e-99…9` is 0)
            exact = Decimal(number)
        if exact != exact.to_integral_value():
            return None, f"'{name}' must be a whole number"
        if exact and exact.adjusted() > 20:
            return None, f"'{name}' is out of range for {datatype}"
        number = int(exact)
    low, high = integer_range(datatype)
    if not low <= number < high:
        return None, f"'{name}' is out of range for {datatype}"
    return number, ""
