"""What a rollout is made of, as a caller writes it: its gates (`METRIC OP NUMBER`, the metrics
`sluice.domain.rollouts` explains), its steps (percentages of traffic), how long each is
held, the alarms it watches; parsed and bounded here, once for the API, the CLI and a follow
binding's plan. Pure."""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Any

from sluice.domain.errors import InvalidRequest
from sluice.domain.values import parse_number

QUALITY = ("accuracy", "precision", "recall", "auc", "mae", "rmse")  # from ground truth
METRICS = ("agreement", "mean_abs_diff", "error_rate", "invalid_input_rate", "p99_ratio", "drift", *QUALITY)
# A rate gate that can fail beyond doubt before a step has its requests: its count.
RATE_COUNTS = {"error_rate": "candidate_errors", "invalid_input_rate": "candidate_invalid_inputs"}
MIN_EVERY_S = 1.0
MAX_EVERY_S = 7 * 24 * 3600.0
MAX_STEPS = 20
MAX_ALARMS = 5
MAX_MIN_REQUESTS = 10_000_000

_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
_GATE = re.compile(r"^\s*([a-z0-9_]+)\s*(>=|<=|>|<)\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*\Z")
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|d)?\s*\Z")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_ALARM = re.compile(r"^[A-Za-z0-9 ._\-/:#()+=@]{1,255}\Z")


@dataclass(frozen=True, slots=True)
class Gate:
    metric: str
    op: str
    threshold: float

    def passes(self, value: float) -> bool:
        return bool(_OPS[self.op](value, self.threshold))

    def __str__(self) -> str:
        number = repr(self.threshold)  # the shortest text that reads back as the same number
        return f"{self.metric}{self.op}{number.removesuffix('.0')}"


def parse_gates(
    text: str | list[str] | tuple[str, ...], *, field: str = "gate"
) -> tuple[Gate, ...]:
    """`"agreement>=0.98,error_rate<=0.005,p99_ratio<=1.2"` (or its parts as a list)."""
    parts = [
        p for p in (text.split(",") if isinstance(text, str) else list(text)) if str(p).strip()
    ]
    if not parts:
        raise InvalidRequest("give at least one gate, such as 'error_rate<=0.01'", field=field)
    gates: list[Gate] = []
    for part in parts:
        found = _GATE.match(str(part))
        if found is None:
            raise InvalidRequest(
                f"gate {str(part).strip()!r} is not METRIC OP NUMBER (OP one of >=, <=, >, <)",
                field=field,
            )
        metric, op, number = found.groups()
        if metric not in METRICS:
            raise InvalidRequest(
                f"unknown gate metric '{metric}'; expected one of {list(METRICS)}", field=field
            )
        if any(g.metric == metric for g in gates):
            raise InvalidRequest(f"gate metric '{metric}' is given twice", field=field)
        threshold = float(number)
        if not math.isfinite(threshold):  # 1e400 reads as infinity, which no metric is measured against
            raise InvalidRequest(f"gate {str(part).strip()!r}: {number} is beyond what a threshold can be", field=field)
        gates.append(Gate(metric, op, threshold))
    return tuple(gates)


def percent_text(step: float) -> str:
    """A step in plain decimal digits, the shortest that read back as the same number (1e-07
    as 0.0000001, 99.9999999 as itself: `:g` wrote 1e-07 and 100)."""
    from decimal import Decimal

    text = format(Decimal(repr(step)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def parse_steps(
    value: str | list[Any] | tuple[Any, ...], *, field: str = "steps"
) -> tuple[float, ...]:
    """`"1,5,25,50,100"`: percentages of traffic for the candidate, strictly increasing, the
    last one 100."""
    raw = value.split(",") if isinstance(value, str) else list(value)
    steps: list[float] = []
    for item in raw:
        if isinstance(item, bool):
            raise InvalidRequest("steps are percentages, not booleans", field=field)
        # Text by the rule every number written as text is read by (Python's float took `1_0`
        # for 10, and digits of other scripts)
        read: float | None = None
        if isinstance(item, str):
            read = parse_number(item.strip().removesuffix("%"))
        elif isinstance(item, int | float):
            read = item
        if read is None:
            raise InvalidRequest(f"step {str(item).strip()!r} is not a number", field=field)
        try:
            step = float(read)
        except OverflowError:  # a whole number past float's range: past 100 all the same
            step = math.inf
        if not 0 < step <= 100:
            raise InvalidRequest(
                f"step {percent_text(step)} is not a percentage above 0 and at most 100", field=field
            )
        if steps and step <= steps[-1]:
            raise InvalidRequest(
                f"steps must increase: {percent_text(step)} comes after {percent_text(steps[-1])}", field=field
            )
        steps.append(step)
    if not steps:
        raise InvalidRequest("give at least one step, ending with 100", field=field)
    if len(steps) > MAX_STEPS:
        raise InvalidRequest(f"at most {MAX_STEPS} steps", field=field)
    if steps[-1] != 100:
        raise InvalidRequest(f"the last step must be 100, not {steps[-1]:g}", field=field)
    return tuple(steps)


def parse_duration(value: str | float | int, *, field: str = "every") -> float:
    """`10m`, `30s`, `1h`, `2d`, or a number of seconds."""
    if isinstance(value, bool):
        raise InvalidRequest("a duration is a number of seconds or text such as '10m'", field=field)
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        found = _DURATION.match(value)
        if found is None:
            raise InvalidRequest(f"{value!r} is not a duration such as 30s, 10m or 1h", field=field)
        seconds = float(found.group(1)) * _UNITS[found.group(2)]
    if not MIN_EVERY_S <= seconds <= MAX_EVERY_S:
        raise InvalidRequest(
            f"a step lasts from {MIN_EVERY_S:g} s to {MAX_EVERY_S:g} s", field=field
        )
    return seconds


def check_alarms(names: list[str] | tuple[str, ...], *, field: str = "alarms") -> tuple[str, ...]:
    if len(names) > MAX_ALARMS:
        raise InvalidRequest(f"at most {MAX_ALARMS} alarms", field=field)
    for name in names:
        if not isinstance(name, str) or not _ALARM.match(name):
            raise InvalidRequest(f"{name!r} is not a CloudWatch alarm name", field=field)
    return tuple(names)
