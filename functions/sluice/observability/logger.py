"""sluice's logger (powertools', with the formatter of `sluice.observability.formatter`), the
decorator that gives a Lambda handler's lines their context, and powertools' Metrics."""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sluice.observability.formatter import dumps, formatter_class

if TYPE_CHECKING:
    from collections.abc import Callable

    from aws_lambda_powertools import Logger, Metrics


@lru_cache(maxsize=1)
def get_logger() -> Logger:
    from aws_lambda_powertools import Logger

    from sluice.settings import get_settings

    settings = get_settings().observability
    return Logger(
        service=settings.service_name,
        level=settings.log_level,
        stream=sys.stderr if settings.log_stream == "stderr" else sys.stdout,
        # powertools' own lines, built without its per-record costs (see `formatter_class`); orjson
        # serializes them.
        logger_formatter=formatter_class()(json_serializer=dumps),
    )


def inject_lambda_context(handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """`get_logger().inject_lambda_context(handler, clear_state=True)` with the same keys on
    every line (cold_start, function_name, function_memory_size, function_arn,
    function_request_id), set in one step per invocation (and, while only cold_start and
    function_request_id change from one to the next, by copying the last ones). Where the logger uses more of
    powertools than that (sampling, a log buffer, logging the event, a formatter of its own, a
    durable context) powertools' own decorator runs."""
    import functools

    from aws_lambda_powertools.logging import logger as powertools
    from aws_lambda_powertools.shared.functions import (
        is_durable_context,
        resolve_truthy_env_var_choice,
    )

    logger = get_logger()
    theirs = logger.inject_lambda_context(handler, clear_state=True)
    formatter = logger.registered_formatter
    logs_event = resolve_truthy_env_var_choice(env=os.getenv("POWERTOOLS_LOGGER_LOG_EVENT", "false"), choice=False)
    if logger.sampling_rate or logger._buffer_config or logs_event or type(formatter) is not formatter_class():
        return theirs
    defaults = logger._default_log_keys

    @functools.wraps(handler)
    def decorate(event: Any, context: Any) -> Any:
        if is_durable_context(context):
            return theirs(event, context)
        # `_is_cold_start` reads the environment; once it has said False it always will.
        cold_start = powertools._is_cold_start() if powertools.is_cold_start else False
        formatter.invocation_keys(
            defaults, cold_start, context.function_name, context.memory_limit_in_mb, context.invoked_function_arn, context.aws_request_id
        )
        try:
            return handler(event, context)
        finally:
            formatter.invocation_over()

    return decorate


@lru_cache(maxsize=1)
def get_metrics() -> Metrics:
    """powertools Metrics, for handlers whose metrics are not per request (batch tasks)."""
    from aws_lambda_powertools import Metrics

    from sluice.settings import get_settings

    settings = get_settings().observability
    return Metrics(namespace=settings.metrics_namespace, service=settings.service_name)
