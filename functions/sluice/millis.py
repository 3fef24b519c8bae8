"""Latencies as answers, reports and log lines give them: milliseconds to the microsecond."""

from __future__ import annotations


def ms3(ms: float) -> float:
    """`ms` to three places, as `round(ms, 3)` gives it for a latency a clock measures (a
    finite millisecond count), without `round`'s decimal conversion: a float's `round(x, n)`
    formats and parses the number (some 2,000 machine instructions), and a request reports
    several latencies. Far beyond any latency (2**52 / 1000 ms), `round` itself."""
    scaled = ms * 1000.0
    if -4.5e15 < scaled < 4.5e15:
        return round(scaled) / 1000.0
    return round(ms, 3)
