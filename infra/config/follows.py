"""The config's fields for the model registries deployments follow (docs/registries.md): where
SageMaker packages' model data is, how often MLflow is polled, which tracking servers may be
called and with which tenants' credentials, and the KMS keys those credentials are under.
Part of the `api` section (`ApiConfig`), whose registry event function they shape."""

from __future__ import annotations

import re

from pydantic import Field, ValidationInfo, field_validator

from infra.config.base import TENANT, Section

# A key by its ARN (a multi-Region key's ID starts `mrk-`); an alias ARN authorizes no Decrypt.
KMS_KEY_ARN = r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/(?:mrk-[0-9a-f]{32}|[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})$"


class RegistryFields(Section):
    model_data_buckets: tuple[str, ...] = Field(
        (),
        description="Buckets that hold the model data of the SageMaker model packages deployments follow: "
        "the registry event function may read their objects (and no other bucket's).",
    )
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

