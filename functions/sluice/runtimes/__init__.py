"""Where a version runs. Every runtime offers the same small async interface."""

from sluice.domain.results import InferenceResult
from sluice.runtimes.base import Runtime

__all__ = ["InferenceResult", "Runtime"]
