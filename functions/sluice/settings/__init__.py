"""Process settings, read once from `SLUICE_*` environment variables, grouped by what reads
them: each service or adapter is given its group (`settings.onnx`, `settings.uploads`…), not
the whole object; the wiring hands the groups out.

Every field is read from `SLUICE_` + its name in capitals, whatever its group. `Settings(...)`
and `Settings.replace(...)` take those names too (`Settings(mode="local", batch_infer_rows=64)`),
as the environment gives them. Adapters are chosen by URL (`sqlite:///…` or `dynamodb://table`,
`file:///…` or `s3://bucket/prefix`); unset means the embedded default under `SLUICE_HOME`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sluice.settings.admission import AdmissionSettings, AuthSettings, WebSocketSettings
from sluice.settings.follows import FollowSettings
from sluice.settings.functions import FunctionSettings
from sluice.settings.jobs import (
    BatchSettings,
    DataCaptureSettings,
    EndpointSettings,
    JobSettings,
    StreamSettings,
)
from sluice.settings.lookups import LookupSettings
from sluice.settings.monitoring import MonitorSettings
from sluice.settings.precomputed import PrecomputedSettings
from sluice.settings.process import (
    AdapterSettings,
    Group,
    ObservabilitySettings,
    ProcessSettings,
    SettingRefused,
    SourceSettings,
    in_lambda,
    lambda_memory_mb,
    refusal,
)
from sluice.settings.serving import (
    LimitSettings,
    OnnxSettings,
    PredictionCacheSettings,
    PredictionSettings,
    ServeSettings,
    SnapStartSettings,
    UploadSettings,
)

__all__ = [
    "GROUP_OF",
    "AdapterSettings",
    "AdmissionSettings",
    "AuthSettings",
    "BatchSettings",
    "DataCaptureSettings",
    "EndpointSettings",
    "FollowSettings",
    "FunctionSettings",
    "Group",
    "JobSettings",
    "LimitSettings",
    "LookupSettings",
    "MonitorSettings",
    "ObservabilitySettings",
    "OnnxSettings",
    "PrecomputedSettings",
    "PredictionCacheSettings",
    "PredictionSettings",
    "ProcessSettings",
    "ServeSettings",
    "SettingRefused",
    "Settings",
    "SnapStartSettings",
    "SourceSettings",
    "StreamSettings",
    "UploadSettings",
    "WebSocketSettings",
    "get_settings",
    "in_lambda",
    "lambda_memory_mb",
]


class Settings(BaseModel):
    """Every setting, one group per reader; each group reads its own variables when built."""

    model_config = ConfigDict(extra="forbid")

    process: ProcessSettings = Field(default_factory=ProcessSettings)
    adapters: AdapterSettings = Field(default_factory=AdapterSettings)
    sources: SourceSettings = Field(default_factory=SourceSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    predictions: PredictionSettings = Field(default_factory=PredictionSettings)
    prediction_cache: PredictionCacheSettings = Field(default_factory=PredictionCacheSettings)
    functions: FunctionSettings = Field(default_factory=FunctionSettings)
    lookups: LookupSettings = Field(default_factory=LookupSettings)
    precomputed: PrecomputedSettings = Field(default_factory=PrecomputedSettings)
    monitor: MonitorSettings = Field(default_factory=MonitorSettings)
    onnx: OnnxSettings = Field(default_factory=OnnxSettings)
    snapstart: SnapStartSettings = Field(default_factory=SnapStartSettings)
    uploads: UploadSettings = Field(default_factory=UploadSettings)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    websocket: WebSocketSettings = Field(default_factory=WebSocketSettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    stream: StreamSettings = Field(default_factory=StreamSettings)
    data_capture: DataCaptureSettings = Field(default_factory=DataCaptureSettings)
    endpoint_control: EndpointSettings = Field(default_factory=EndpointSettings)
    follows: FollowSettings = Field(default_factory=FollowSettings)
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)

    def __init__(self, **values: Any) -> None:
        """Refused as a group refuses its settings: by their variables, in one line."""
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise refusal(exc, GROUP_OF) from None

    @model_validator(mode="before")
    @classmethod
    def _group_named_fields(cls, data: Any) -> Any:
        """Fields given by name (`batch_infer_rows=64`) go to their group, which reads the
        rest of its variables from the environment."""
        if not isinstance(data, dict):
            return data
        grouped: dict[str, Any] = {}
        named: dict[str, dict[str, Any]] = {}
        for key, value in data.items():
            if key in GROUPS:
                grouped[key] = value
            elif key in GROUP_OF:
                named.setdefault(GROUP_OF[key], {})[key] = value
            else:
                raise ValueError(f"no setting is called {key!r}")
        for group, values in named.items():
            if group in grouped:
                raise ValueError(f"{', '.join(values)} given both alone and in the group {group!r}")
            grouped[group] = GROUPS[group](**values)
        return grouped

    @model_validator(mode="after")
    def _refuse_embedded_defaults_on_aws(self) -> Settings:
        if self.admission.rate_limit:
            _check_rate_limit(self.admission.rate_limit, self.mode)
        if self.mode == "aws":
            if not self.adapters.registry.startswith("dynamodb://"):
                raise ValueError("SLUICE_REGISTRY must be dynamodb://TABLE when SLUICE_MODE=aws")
            if not self.adapters.store.startswith("s3://"):
                raise ValueError("SLUICE_STORE must be s3://BUCKET[/PREFIX] when SLUICE_MODE=aws")
        return self

    def replace(self, **changes: Any) -> Settings:
        """A copy with these fields changed (named as in the environment, less `SLUICE_`):
        the groups they are in checked again, the others copied as they are."""
        groups: dict[str, Group] = {name: getattr(self, name).model_copy() for name in GROUPS}
        named: dict[str, dict[str, Any]] = {}
        for key, value in changes.items():
            if key not in GROUP_OF:
                raise ValueError(f"no setting is called {key!r}")
            named.setdefault(GROUP_OF[key], {})[key] = value
        for name, values in named.items():
            groups[name] = GROUPS[name](**{**groups[name].model_dump(), **values})
        return Settings(**groups)

    # What the groups say together ---------------------------------------------------------
    @property
    def mode(self) -> Literal["local", "aws"]:
        return self.process.mode

    @property
    def home_path(self) -> Path:
        return self.process.home_path

    def import_prefixes_for(self, tenant: str) -> list[str]:
        return [p.format(home=self.home_path, tenant=tenant) for p in self.sources.import_prefixes]

    def import_prefixes_shown(self, tenant: str) -> list[str]:
        """The same, as a message to a client may say them: the server's folders are not
        named, the home stands as `$SLUICE_HOME`."""
        shown = []
        for prefix in self.sources.import_prefixes:
            if prefix.startswith("file://") and not prefix.startswith("file://{home}"):
                shown.append("a folder of the server")
            else:
                shown.append(prefix.format(home="$SLUICE_HOME", tenant=tenant))
        return shown

    @property
    def registry_url(self) -> str:
        return self.adapters.registry or f"sqlite:///{self.home_path / 'registry.db'}"

    @property
    def store_url(self) -> str:
        return self.adapters.store or f"file://{self.home_path / 'artifacts'}"

    @property
    def endpoints_kind(self) -> Literal["sagemaker", "local"]:
        """Which endpoint control plane `endpoints` names, its default filled in."""
        if self.endpoint_control.endpoints:
            return self.endpoint_control.endpoints
        return "sagemaker" if self.mode == "aws" else "local"

    @property
    def batch_root_url(self) -> str:
        """Where batch inboxes, outboxes and work files live (see `sluice.batch.runner.BatchPaths`)."""
        if self.jobs.batch_bucket:
            return f"s3://{self.jobs.batch_bucket}/"
        if self.mode == "aws":
            raise ValueError("SLUICE_BATCH_BUCKET must be set for batch jobs when SLUICE_MODE=aws")
        return (self.home_path / "batch").as_uri() + "/"

    @property
    def batch_inbox_path(self) -> Path:
        return (self.serve.batch_inbox or self.home_path / "inbox").expanduser()


GROUPS: dict[str, type[Group]] = {name: field.annotation for name, field in Settings.model_fields.items()}  # type: ignore[misc]
"""Each group of `Settings` by its name, in the order the configuration page lists them."""

GROUP_OF: dict[str, str] = {field: name for name, group in GROUPS.items() for field in group.model_fields}
"""Each field (its variable less `SLUICE_`, in lower case) and the group that holds it."""


def _check_rate_limit(spec: str, mode: str) -> None:
    if mode == "aws":
        raise ValueError("SLUICE_RATE_LIMIT is for the local service: on AWS, API Gateway usage plans throttle each tenant")
    try:
        from limits import parse_many
    except ImportError:
        raise ValueError("SLUICE_RATE_LIMIT needs the `limits` package: install sluice[serve]") from None
    try:
        if all(item.amount > 0 for item in parse_many(spec)):
            return
    except ValueError:
        pass
    raise ValueError(f"SLUICE_RATE_LIMIT {spec!r} is not a rate such as 10/second or 600/minute;20/second")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
