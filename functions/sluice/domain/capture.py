"""A deployment's data capture (opt-in): which share of its requests is kept, what of them,
and which features are left out. Pure; `sluice.capture` does the keeping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import InvalidRequest

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sluice.domain.signature import TensorSpec

INCLUDES = ("inputs", "outputs")
MAX_REDACT = 256
SHOWN = 32  # names a refusal lists


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    """`sample_percent` of requests (0-100] kept with their request id, revision, variant,
    version, latency and time; `include` says whether inputs and outputs go with them;
    `redact` names input features (or whole input tensors) never written."""

    sample_percent: float
    include: tuple[str, ...] = INCLUDES
    redact: tuple[str, ...] = ()


def check_capture(value: Any, *, field: str = "capture") -> CaptureSettings | None:
    """`{"sample_percent", "include", "redact"}` (or settings already built, or None: off), checked."""
    if value is None:
        return None
    if isinstance(value, CaptureSettings):
        value = {"sample_percent": value.sample_percent, "include": list(value.include), "redact": list(value.redact)}
    if not isinstance(value, dict):
        raise InvalidRequest("capture must be an object with sample_percent, include and redact, or null", field=field)
    unknown = sorted(set(value) - {"sample_percent", "include", "redact"})
    if unknown:
        raise InvalidRequest(f"unknown capture setting '{unknown[0]}'", field=f"{field}.{unknown[0]}")
    percent = value.get("sample_percent")
    if isinstance(percent, bool) or not isinstance(percent, int | float) or not 0 < percent <= 100:
        raise InvalidRequest("sample_percent must be a number above 0 and at most 100", field=f"{field}.sample_percent")
    include = value.get("include", list(INCLUDES))
    if not isinstance(include, list | tuple):
        raise InvalidRequest("include must be a list of 'inputs' and 'outputs'", field=f"{field}.include")
    for i, item in enumerate(include):
        if item not in INCLUDES:
            raise InvalidRequest(f"include takes 'inputs' and 'outputs', not {item!r}", field=f"{field}.include.{i}")
    redact = value.get("redact", [])
    if not isinstance(redact, list | tuple) or len(redact) > MAX_REDACT:
        raise InvalidRequest(f"redact must be a list of at most {MAX_REDACT} feature names", field=f"{field}.redact")
    for i, item in enumerate(redact):
        if not isinstance(item, str) or not 0 < len(item) <= 128:
            raise InvalidRequest("a redacted feature is a name of 1 to 128 characters", field=f"{field}.redact.{i}")
    return CaptureSettings(float(percent), tuple(dict.fromkeys(include)), tuple(dict.fromkeys(redact)))


def check_redacted(
    settings: CaptureSettings | None,
    inputs: Sequence[TensorSpec],
    *,
    before: Callable[[], Sequence[TensorSpec]] | None = None,
    field: str = "capture",
) -> None:
    """Each name `redact` gives is one of the deployment's `inputs` (what callers send) or one
    of their features, exactly: a name that is neither would redact nothing. `before`, for a
    setting kept through a change of what the deployment routes to, gives the inputs it had
    until then: only a name the change takes away is refused, not one that already matched
    nothing (older releases stored any name), which would block every later change."""
    if settings is None or not settings.redact:
        return
    names = _names(inputs)
    earlier: list[str] | None = None
    for i, item in enumerate(settings.redact):
        if item in names:
            continue
        if before is not None:
            earlier = _names(before()) if earlier is None else earlier
            if item not in earlier:
                continue
        listed = ", ".join(repr(n) for n in names[:SHOWN]) + (", ..." if len(names) > SHOWN else "")
        raise InvalidRequest(f"redact names {item!r}, which is no input or feature of this deployment: it takes {listed}", field=f"{field}.redact.{i}")


def _names(inputs: Sequence[TensorSpec]) -> list[str]:
    """The inputs' names and their features', each once."""
    return list(dict.fromkeys(n for spec in inputs for n in (spec.name, *(spec.feature_names or ()))))
