"""Model monitoring's windows closed on AWS: an EventBridge Scheduler schedule invokes this
function a few minutes past every hour with the time it was scheduled for
(`{"time": "<aws.scheduler.scheduled-time>"}`; a missing or unreadable time is read as now);
for every deployment with a baseline, in every tenant (a scan of the baselines' keys), it
checks the window that closed before that time (`MonitorService.closed`) and writes EMF
metrics through powertools, one line per deployment, with the dimensions `service`, `tenant`
and `deployment`:

- `MonitorAlerts` (Count): the columns whose verdict is not ok (the alarms' metric), and
  `MonitorDrift` (None): the worst column's drift, for a window with traffic;
- `MonitorRows` (Count): the window's profiled rows;
- `LabelledRows` (Count) and `ModelAccuracy`, `ModelPrecision`, `ModelRecall`, `ModelAuc`,
  `ModelMae`, `ModelRmse` (None) where the window's predictions have labels.

The line's metadata names the window, the revision, the verdict and the worst columns. Each
deployment's result is also written to the batch bucket as JSON, one object per deployment
and window (`sluice.services.monitor_results`). The
checks read sketches with Apache DataSketches; where the function's layers do not have it
(the Python 3.14 runtime: no wheel), windows are not checked, quality is still reported, and
the answer says so. One deployment whose check fails is logged and skipped: the others are
still reported."""

from __future__ import annotations

from sluice.startup import pause_in_lambda, started

pause_in_lambda()  # in Lambda, the collector off until this module has loaded (`sluice.startup`)

import time
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sluice.observability import get_logger, get_metrics

if TYPE_CHECKING:
    from sluice.services.monitor_results import MonitorResults

logger = get_logger()
metrics = get_metrics()
QUALITY = {"accuracy": "ModelAccuracy", "precision": "ModelPrecision", "recall": "ModelRecall",
           "auc": "ModelAuc", "mae": "ModelMae", "rmse": "ModelRmse"}  # fmt: skip


@lru_cache(maxsize=1)
def service() -> MonitorResults:
    from sluice.services.monitor_results import MonitorResults
    from sluice.services.monitoring import MonitorService
    from sluice.wiring import get_container

    container = get_container()
    # No recorder to flush first: this function serves no traffic.
    monitor = MonitorService(container.registry, container.settings.monitor)
    return MonitorResults(monitor, container.batch_files(), container.settings.batch_root_url)


def scheduled_time(event: dict[str, Any]) -> float:
    """The schedule's time (ISO 8601, `Z` or an offset) in epoch seconds; now without one."""
    text = event.get("time") if isinstance(event, dict) else None
    if isinstance(text, str):
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            logger.warning("scheduled time unreadable: checking the window before now", extra={"time": text})
    return time.time()


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    import importlib.util

    results = service()
    monitor = results.monitor
    at = scheduled_time(event)
    reported: dict[str, int] = {"deployments": 0, "checked": 0, "alerts": 0, "labelled": 0, "failed": 0}
    for tenant, closed, error in results.close(at):
        if error is not None:  # one broken baseline, record or write must not hide every other deployment
            logger.error("monitoring window not checked", exc_info=error, extra={"tenant": tenant, "deployment": closed and closed["deployment"]})
            reported["failed"] += 1
            continue
        if closed is None:
            continue
        reported["deployments"] += 1
        alerts = _emit(tenant, closed)
        if closed["check"] is not None:
            reported["checked"] += 1
            reported["alerts"] += alerts
        reported["labelled"] += closed["quality"] is not None
    sketches = importlib.util.find_spec("datasketches") is not None
    if not sketches:
        logger.info("monitoring windows not checked: Apache DataSketches is not in this function's layers")
    return {"window_start": monitor.window_before(at), "sketches": sketches, **reported}


def _emit(tenant: str, closed: dict[str, Any]) -> int:
    """One EMF line of the deployment's window; its alerting columns' count."""
    from aws_lambda_powertools.metrics import MetricUnit

    checked, quality = closed["check"], closed["quality"]
    if checked is None and quality is None:
        return 0
    metrics.add_dimension(name="tenant", value=tenant)
    metrics.add_dimension(name="deployment", value=closed["deployment"])
    metrics.add_metadata(key="window_start", value=closed["window_start"])
    metrics.add_metadata(key="revision", value=closed["revision"])
    alerts = 0
    if checked is not None:
        alerts = sum(c["verdict"] not in ("ok", "too_few_rows") for c in checked["columns"].values())
        metrics.add_metric(name="MonitorAlerts", unit=MetricUnit.Count, value=alerts)
        metrics.add_metric(name="MonitorRows", unit=MetricUnit.Count, value=checked["rows"])
        if checked["drift"] is not None:
            metrics.add_metric(name="MonitorDrift", unit=MetricUnit.NoUnit, value=checked["drift"])
        metrics.add_metadata(key="verdict", value=checked["verdict"])
        metrics.add_metadata(key="worst", value=checked["worst"])
    if quality is not None:
        metrics.add_metric(name="LabelledRows", unit=MetricUnit.Count, value=quality["rows"])
        for key, metric in QUALITY.items():
            if quality.get(key) is not None:
                metrics.add_metric(name=metric, unit=MetricUnit.NoUnit, value=quality[key])
    metrics.flush_metrics()
    return alerts


started()  # the function's start-up is over: the collector back on (`sluice.startup`)
