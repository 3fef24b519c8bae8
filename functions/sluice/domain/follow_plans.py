"""A follow binding's rollout plan: `1,10,50,100 every 10m gate agreement>=0.98 min 100`,
read by the rules `sluice rollout start` applies, and kept as text that reads back as itself."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sluice.domain.errors import InvalidRequest
from sluice.domain.rollout_specs import (
    MAX_MIN_REQUESTS,
    parse_duration,
    parse_gates,
    parse_steps,
    percent_text,
)

_PLAN = re.compile(
    r"^\s*(?P<steps>[0-9.,%\s]+?)\s*(?:\bevery\s+(?P<every>\S+))?\s*\bgate\s+(?P<gates>.+?)"
    r"\s*(?:\bmin\s+(?P<min>\d+))?\s*\Z"
)
DEFAULT_EVERY = "10m"
DEFAULT_MIN_REQUESTS = 100


@dataclass(frozen=True, slots=True)
class Plan:
    """How each followed version is rolled out: `1,10,50,100 every 10m gate agreement>=0.98`
    (`every` defaults to 10m; `min N`: candidate requests a step needs, default 100)."""

    steps: tuple[float, ...]
    every: str
    gates: str
    min_requests: int = DEFAULT_MIN_REQUESTS

    def __str__(self) -> str:
        steps = ",".join(map(percent_text, self.steps))  # read back as the same numbers
        return f"{steps} every {self.every} gate {self.gates} min {self.min_requests}"


def parse_plan(text: str, *, field: str = "rollout") -> Plan:
    found = _PLAN.match(text or "")
    if found is None:
        raise InvalidRequest(
            f"{text!r} is not a rollout plan such as '1,10,50,100 every 10m gate agreement>=0.98' "
            "(STEPS [every DURATION] gate GATES [min REQUESTS])",
            field=field,
        )
    steps = parse_steps(found["steps"].replace(" ", ""), field=field)
    if steps[0] >= 100:
        raise InvalidRequest("give at least one step below 100 before the last", field=field)
    every = found["every"] or DEFAULT_EVERY
    parse_duration(every, field=field)
    gates = ",".join(str(g) for g in parse_gates(found["gates"].replace(" ", ""), field=field))
    minimum = int(found["min"]) if found["min"] else DEFAULT_MIN_REQUESTS
    if not 1 <= minimum <= MAX_MIN_REQUESTS:
        raise InvalidRequest(f"min must be a whole number of requests from 1 to {MAX_MIN_REQUESTS}", field=field)
    return Plan(steps, every, gates, minimum)
