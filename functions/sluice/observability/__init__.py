"""Logs and metrics: powertools' structured logger everywhere, EMF metrics in Lambda.

Every prediction line carries the request id, tenant, deployment, model, version and
latency, locally and in Lambda alike. Secrets (API keys, authorization headers) are never
passed to a logger. The logger and the Lambda context's keys are `logger`'s, the faster line
`formatter`'s, what a prediction reports `telemetry`'s.
"""

from __future__ import annotations

from sluice.observability.logger import get_logger, get_metrics, inject_lambda_context
from sluice.observability.telemetry import Telemetry

__all__ = ["Telemetry", "get_logger", "get_metrics", "inject_lambda_context"]
