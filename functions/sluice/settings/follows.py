"""The group of follow bindings: how often `sluice serve` polls the MLflow registries that
deployments follow (`sluice.convert.follow`), which tracking servers a tenant's binding may
name, and, on AWS, where the scheduled poll finds each tenant's credentials."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field, model_validator

from sluice.settings.process import Group, Seconds

if TYPE_CHECKING:
    from sluice.domain.follows import BindingReads

SECRET_ID = r"^(arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:)?[A-Za-z0-9/_+=.@-]{1,512}$"


class FollowSettings(Group):
    """Read by `sluice serve`, which polls on a thread of its own, and by the registry event
    function on AWS, which polls when its schedule says."""

    title: ClassVar[str] = "Follow bindings"
    allowlists: ClassVar[tuple[str, ...]] = ("mlflow_allowlist",)

    follow_poll_s: Seconds = Field(
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
    follow_lease_s: Seconds = Field(
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

    follow_package_groups: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            "`{tenant: [GROUP, ...]}`: the SageMaker model package groups (by name) each tenant's follow bindings "
            "may follow; a binding to another group is refused when made (403 naming `registry`), and an approval "
            "of one is never pulled for it. The operator's own bindings off AWS (made with the CLI) are not held "
            "to it. Set by the CDK app from `api.follow_package_groups`, which grants describing those groups' "
            "packages alone; JSON in the environment; empty: none."
        ),
    )
    follow_group_arn_prefix: str = Field(
        "",
        pattern=r"^(arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:model-package-group/)?$",
        description=(
            "What the ARN of every package group a binding follows begins with: "
            "`arn:PARTITION:sagemaker:REGION:ACCOUNT:model-package-group/`, the stack's own account and "
            "region, whose approvals alone reach sluice (its EventBridge rule); a binding to a group of "
            "another account or region is refused when made (422 naming `registry`). Set by the CDK app; "
            "empty: any (off AWS)."
        ),
    )
    model_data_locations: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            "`{tenant: [\"s3://BUCKET/PREFIX/\", ...]}`: where the model data of each tenant's followed versions "
            "may be read, on its behalf (a SageMaker package's `ModelDataUrl`, an MLflow version's `s3://` "
            "artifacts): a version whose model data lies elsewhere is recorded as such and never read, so one "
            "tenant's registry cannot name another's objects in a shared bucket. Compared on the parsed key, as "
            "batch locations are. Set by the CDK app from `api.model_data_locations`, which grants reading "
            "those prefixes alone; JSON in the environment; empty: none."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> FollowSettings:
        import re

        for tenant, secret in self.mlflow_credentials_secrets.items():
            if not re.fullmatch(SECRET_ID, secret):
                raise ValueError(f"SLUICE_MLFLOW_CREDENTIALS_SECRETS: {secret!r} (tenant {tenant!r}) is not a secret's name or ARN")
        if self.follow_package_groups:  # the domain module only where there is a name to check: every process reads settings
            from sluice.domain.follows import GROUP_NAME

            self._check_allowlist("follow_package_groups", lambda g: re.fullmatch(GROUP_NAME, g) is not None, "a model package group's name")
        self._check_allowlist("model_data_locations", is_s3_prefix, "an S3 prefix (s3://BUCKET/PREFIX/)")
        return self

    def reads(self, tenant: str) -> BindingReads:
        """What `tenant`'s bindings may have sluice read on its behalf."""
        from sluice.domain.follows import BindingReads
        from sluice.domain.locations import Root

        roots = tuple(Root.of("model-data", uri) for uri in self.model_data_locations.get(tenant, ()))
        return BindingReads(frozenset(self.follow_package_groups.get(tenant, ())), roots, self.follow_group_arn_prefix)

    @cached_property
    def mlflow_allowlist(self) -> tuple[Any, ...]:
        """`mlflow_tracking_servers`, parsed."""
        return self._origins("mlflow_tracking_servers")


def is_s3_prefix(uri: str) -> bool:
    """`s3://BUCKET/` or `s3://BUCKET/PREFIX/` (the last `/` may be left out), as `Root.of` reads it."""
    from sluice.domain.locations import Root

    if not uri.startswith("s3://"):
        return False
    try:
        Root.of("model-data", uri)
    except ValueError:
        return False
    return True
