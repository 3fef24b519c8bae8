"""Where a version runs. Every runtime offers the same small async interface."""

from sluice.runtimes.base import InferenceResult, Runtime

__all__ = ["InferenceResult", "Runtime"]
