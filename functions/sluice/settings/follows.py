"""The group of follow bindings: how often `sluice serve` polls the MLflow registries that
deployments follow (`sluice.convert.follow`), which tracking servers a tenant's binding may
name, and, on AWS, where the scheduled poll finds each tenant's credentials."""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

from pydantic import Field, model_validator

from sluice.settings.process import Group

SECRET_ID = r"^(arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:)?[A-Za-z0-9/_+=.@-]{1,512}$"


class FollowSettings(Group):
    """Read by `sluice serve`, which polls on a thread of its own, and by the registry event
    function on AWS, which polls when its schedule says."""

    title: ClassVar[str] = "Follow bindings"
    allowlists: ClassVar[tuple[str, ...]] = ("mlflow_allowlist",)

    follow_poll_s: float = Field(
        default=60.0,
        ge=0,
        description=(
            "How often `sluice serve` asks MLflow where each followed alias (or `latest`) points, and records how "
            "the rollouts bindings started ended; a moved alias is pushed and rolled out (docs/registries.md). "
            "0: no polling (`sluice registries poll` still looks once). On AWS the registry event function polls "
            "on a schedule instead (`api.follow_poll_minutes`), and SageMaker Model Registry's approvals arrive as "
            "EventBridge events."
        ),
    )
    follow_lease_s: float = Field(
        default=600.0,
        gt=0,
        description=(
            "How long a poller's claim of a new version holds. A binding left `pushing` by a poller that died "
            "(between claiming a version and recording what became of it) is taken over by the first poll after "
            "its claim is this old; a version already pushed from the same source is rolled out, never pushed "
            "again. Give more than the longest push takes (pulling, converting and checking the model): a "
            "slower poller's claim would be taken over while it still works. On AWS a push ends with the "
            "registry event function's 5-minute timeout."
        ),
    )
    mlflow_tracking_servers: list[str] = Field(
        default_factory=list,
        description=(
            "The MLflow tracking servers a tenant's follow binding may name, read over MLflow's REST API, as "
            "`https://host:port` (or `:low-high`, `:*`), compared on the parsed URL like "
            "`triton_url_prefixes`; a binding to any other server is refused when made and never called. "
            "Off AWS the operator's own bindings (made with the CLI) may name any tracking URI MLflow takes. "
            "Set on AWS by the CDK app from `api.mlflow_tracking_servers`; JSON list in the environment; "
            "empty: none."
        ),
    )
    mlflow_credentials_secrets: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "On AWS: `{tenant: secret}`, the Secrets Manager secret (name or ARN) holding the MLflow "
            "credentials the scheduled poll sends for that tenant's bindings: a JSON object with MLflow's own "
            "`MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`, or `MLFLOW_TRACKING_TOKEN`. Read when "
            "needed, kept 5 minutes, never logged. A tenant not named calls MLflow without credentials. Set "
            "by the CDK app from `api.mlflow_credentials`, which grants reading these secrets alone."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> FollowSettings:
        import re

        for tenant, secret in self.mlflow_credentials_secrets.items():
            if not re.fullmatch(SECRET_ID, secret):
                raise ValueError(f"SLUICE_MLFLOW_CREDENTIALS_SECRETS: {secret!r} (tenant {tenant!r}) is not a secret's name or ARN")
        return self

    @cached_property
    def mlflow_allowlist(self) -> tuple[Any, ...]:
        """`mlflow_tracking_servers`, parsed."""
        return self._origins("mlflow_tracking_servers")
