"""The config's fields for the model registries deployments follow (docs/registries.md): where
SageMaker packages' model data is, how often MLflow is polled, which tracking servers may be
called and with which tenants' credentials, and the KMS keys those credentials are under.
Part of the `api` section (`ApiConfig`), whose registry event function they shape."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from infra.config.base import TENANT, Section

# A key by its ARN (a multi-Region key's ID starts `mrk-`); an alias ARN authorizes no Decrypt.
KMS_KEY_ARN = r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/(?:mrk-[0-9a-f]{32}|[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})$"


class RegistryFields(Section):
    follow_package_groups: dict[str, tuple[str, ...]] = Field(
        {},
        description="`{tenant: [GROUP, ...]}`: the SageMaker model package groups (names) each tenant's deployments "
        "may follow; the registry event function may describe those groups' packages alone, and a binding to "
        "another group is refused.",
    )
    model_data_locations: dict[str, tuple[str, ...]] = Field(
        {},
        description="`{tenant: [s3://BUCKET/PREFIX/, ...]}`: where the model data of each tenant's followed versions "
        "may lie (SageMaker packages' `ModelDataUrl`, MLflow's `s3://` artifacts); the registry event function may "
        "read those prefixes alone, and reads a version's model data only under its own tenant's.",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "model_data_buckets" in data:
            raise ValueError(
                "api.model_data_buckets is now per tenant: list each tenant's S3 prefixes in api.model_data_locations "
                "({tenant: [s3://BUCKET/PREFIX/]}) and its package groups in api.follow_package_groups, so that one "
                "tenant's registry cannot have sluice read another's model data"
            )
        return data

    @field_validator("follow_package_groups", "model_data_locations")
    @classmethod
    def _per_tenant(cls, entries: dict[str, tuple[str, ...]], info: ValidationInfo) -> dict[str, tuple[str, ...]]:
        from sluice.domain.follows import GROUP_NAME
        from sluice.settings.follows import is_s3_prefix

        groups = info.field_name == "follow_package_groups"
        for tenant, names in entries.items():
            if not re.fullmatch(TENANT, tenant):
                raise ValueError(f"{tenant!r} is not a tenant's name")
            for name in names:
                if not (re.fullmatch(GROUP_NAME, name) if groups else is_s3_prefix(name)):
                    what = "a model package group's name" if groups else "an S3 prefix (s3://BUCKET/PREFIX/)"
                    raise ValueError(f"{name!r} (tenant {tenant!r}) is not {what}")
            if len(set(names)) != len(names):
                raise ValueError(f"tenant {tenant!r} lists an entry twice")
        return entries
    follow_poll_minutes: int = Field(
        5,
        ge=0,
        le=1440,
        description="How often the registry event function polls the follow bindings (MLflow aliases that moved "
        "are pushed and rolled out; ended rollouts recorded); 0: no schedule.",
    )
    mlflow_tracking_servers: tuple[str, ...] = Field(
        (),
        description="The MLflow tracking servers (`https://host:port`) deployments may follow on AWS: the "
        "scheduled poll calls these alone, and the API refuses a binding to any other.",
    )
    mlflow_credentials: dict[str, str] = Field(
        {},
        description="`{tenant: secret}`: the Secrets Manager secret (name, or full ARN) holding each tenant's "
        "MLflow credentials (MLFLOW_TRACKING_USERNAME/PASSWORD or MLFLOW_TRACKING_TOKEN, as JSON); the "
        "registry event function may read these secrets and no other.",
    )
    mlflow_credentials_kms_keys: tuple[str, ...] = Field(
        (),
        description="The customer-managed KMS keys (key ARNs) the `mlflow_credentials` secrets are encrypted "
        "under, if any: the registry event function may decrypt with them through Secrets Manager alone "
        "(`kms:ViaService`), for those secrets alone (their ARN in the encryption context). A secret under "
        "the AWS-managed `aws/secretsmanager` key needs none.",
    )

    @field_validator("mlflow_tracking_servers")
    @classmethod
    def _servers(cls, servers: tuple[str, ...]) -> tuple[str, ...]:
        from sluice.domain.errors import SluiceError
        from sluice.domain.origins import parse_allowlist

        try:
            parse_allowlist(list(servers), field="mlflow_tracking_servers")
        except SluiceError as exc:
            raise ValueError(exc.message) from None
        return servers

    @field_validator("mlflow_credentials")
    @classmethod
    def _secrets(cls, secrets: dict[str, str]) -> dict[str, str]:
        from sluice.settings.follows import SECRET_ID

        for tenant, secret in secrets.items():
            if not re.fullmatch(TENANT, tenant):
                raise ValueError(f"{tenant!r} is not a tenant's name")
            if not re.fullmatch(SECRET_ID, secret):
                raise ValueError(f"{secret!r} (tenant {tenant!r}) is not a secret's name or ARN")
        return secrets

    @field_validator("mlflow_credentials_kms_keys")
    @classmethod
    def _keys(cls, keys: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        for key in keys:
            if not re.fullmatch(KMS_KEY_ARN, key):
                raise ValueError(
                    f"{key!r} is not a KMS key's ARN (arn:aws:kms:REGION:ACCOUNT:key/ID): an alias does not "
                    "authorize kms:Decrypt"
                )
        if keys and not info.data.get("mlflow_credentials"):
            raise ValueError("KMS keys decrypt the mlflow_credentials secrets: name those secrets too")
        return keys

