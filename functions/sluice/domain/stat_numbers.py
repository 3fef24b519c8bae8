"""What a registry stores as the value of a statistic (`sluice.stats.recorder`): each backend
declares its range (`StatsRegistry.stat_numbers`), and the recorder keeps every count it
holds within it, at each add and at each flush, so that no single value can make a key's
write refused at every flush (and so hold back, then lose, the key's other counts).

- SQLite: a float64 that is finite (`FLOAT64`).
- DynamoDB: a number of 38 digits at most, from 1E-130 to 9.9999999999999999999999999999999999999E+125
  in magnitude, or 0 (`DYNAMODB`). Every float is written in 17 digits at most, so its
  range alone decides; a magnitude below 1E-130 is stored as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class StatNumbers:
    """A backend's numbers: magnitudes of `below` or more cannot be stored (nor NaN), and
    those under `tiny` are stored as 0."""

    below: float
    tiny: float = 0.0

    def stored(self, value: float) -> float | None:
        """`value` as the backend stores it, or None when it cannot."""
        magnitude = abs(value)
        if not magnitude < self.below:  # NaN too
            return None
        return 0.0 if magnitude < self.tiny else value


FLOAT64 = StatNumbers(below=math.inf)
# The largest DynamoDB number, 9.99…9E+125 (38 nines), is 1e126 as a float, and 1e126 itself is
# too large: every float below it is stored.
DYNAMODB = StatNumbers(below=1e126, tiny=1e-130)
