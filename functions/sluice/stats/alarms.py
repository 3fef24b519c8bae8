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
        """Refused (throttled, denied, unreachable): Unavailable, with the error's code."""
        from botocore.exceptions import BotoCoreError, ClientError

        from sluice.domain.errors import Unavailable

        if not names:
            return []
        try:
            found = self.client.describe_alarms(
                AlarmNames=list(names), AlarmTypes=["MetricAlarm", "CompositeAlarm"]
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "error")
            raise Unavailable(f"cannot read the rollout's alarms: {code}", field="alarms") from None
        except BotoCoreError as exc:
            raise Unavailable(f"cannot read the rollout's alarms: {type(exc).__name__}", field="alarms") from None
        alarms = [*found.get("MetricAlarms", []), *found.get("CompositeAlarms", [])]
        return sorted(a["AlarmName"] for a in alarms if a.get("StateValue") == "ALARM")
