"""CloudWatch alarms a rollout names: on AWS they roll it back at once when one is in ALARM.
The port (`Alarms`) and its CloudWatch adapter; locally no alarms are checked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence


class Alarms(Protocol):
    def firing(self, names: Sequence[str]) -> list[str]:
        """The named alarms now in the ALARM state."""
        ...


class CloudWatchAlarms:
    """Alarms by name, one `DescribeAlarms` call a look (metric and composite alarms)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def firing(self, names: Sequence[str]) -> list[str]:
        if not names:
            return []
        found = self.client.describe_alarms(
            AlarmNames=list(names), AlarmTypes=["MetricAlarm", "CompositeAlarm"]
        )
        alarms = [*found.get("MetricAlarms", []), *found.get("CompositeAlarms", [])]
        return sorted(a["AlarmName"] for a in alarms if a.get("StateValue") == "ALARM")
