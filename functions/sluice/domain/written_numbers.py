"""A number written as text, in CSV and JSON Lines alike, and wherever text stands for a
number (a file's label, a text label posted for a regressor): ASCII digits with an optional
sign, point and exponent, or nan / inf / infinity (refused later, as NaN and infinity are),
spaces or tabs around it. Not Python's float(): no `1_4`, no digits of other scripts."""

from __future__ import annotations

import re

NUMBER = re.compile(r"[ \t]*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)[ \t]*", re.ASCII | re.IGNORECASE)


def parse_number(text: str) -> float | None:
    """The number `text` writes, or None when it is not one (see NUMBER)."""
    return float(text) if NUMBER.fullmatch(text) else None
