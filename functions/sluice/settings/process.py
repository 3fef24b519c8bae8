"""The groups every part of the process reads: where it runs and keeps its state, which
adapter each port gets, where models may come from, and how it logs and counts."""

from __future__ import annotations

import os
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic._internal._utils import deep_update
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict, SettingsError

from sluice.startup import in_lambda

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from pydantic.fields import FieldInfo

MiB = 1024 * 1024
DAY_S = 24 * 3600.0
C_INT_MAX = 2**31 - 1  # what a C library's `int` holds (gRPC's options, ONNX Runtime's)

Seconds = Annotated[float, Field(le=DAY_S)]
"""A setting that a thread or a connection waits on: at most a day (every float setting is
finite): a larger one overflows the waits of `threading` and asyncio, or never ends."""


def lambda_memory_mb() -> int | None:
    """The memory Lambda gave this function, in MB (its CPU share follows it); None elsewhere."""
    memory = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "")
    return int(memory) if memory.isdigit() else None


ENV_PREFIX = "SLUICE_"
DEFAULT_HOME = "~/.sluice"


class Group(BaseSettings):
    """A group of settings, each field read from `SLUICE_<FIELD>` (its name in capitals)."""

    # No float setting is infinite or NaN: each bounds a wait, a size or a share.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", allow_inf_nan=False)
    title: ClassVar[str]
    # The group's properties that parse an allowlist of origins (`_origins`): read once as the
    # group is built, so that a setting that does not parse is refused then, by its name.
    allowlists: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _parse_allowlists(self) -> Self:
        for name in self.allowlists:
            getattr(self, name)
        return self

    def __init__(self, **values: Any) -> None:
        """The values given over those of the environment, merged as pydantic-settings merges
        them; the environment read by pydantic-settings' own source once for each group and
        each set of `SLUICE_*` variables, not at every build (which cost ~0.6 ms a group, two
        dozen of them a `Settings`, every command and test paying it)."""
        try:
            state = _from_environment(type(self), _sluice_variables())
            BaseModel.__init__(self, **(deep_update(state, values) if values else state))
        except ValidationError as exc:
            raise refusal(exc, type(self).model_fields) from None

    def _check_allowlist(self, field: str, valid: Callable[[str], bool], expected: str) -> None:
        """Every name in a per-tenant allowlist (`{tenant: [name, ...]}`) checked by `valid`; the
        first that is not, an error naming the setting, the tenant and what was `expected`."""
        for tenant, names in getattr(self, field).items():
            for name in names:
                if not valid(name):
                    raise ValueError(f"SLUICE_{field.upper()}: {name!r} (tenant {tenant!r}) is not {expected}")

    def _origins(self, field: str) -> tuple[Any, ...]:
        """The allowlist of origins in `field`, parsed (see `sluice.domain.origins`); one that
        does not parse, an error naming the setting."""
        from sluice.domain.errors import SluiceError
        from sluice.domain.origins import parse_allowlist

        try:
            return parse_allowlist(getattr(self, field), field=field)
        except SluiceError as exc:
            raise ValueError(f"SLUICE_{field.upper()}: {exc.message}") from None


class ProcessSettings(Group):
    """Read by the wiring, for the default of nearly every adapter, and by the CLI."""

    title: ClassVar[str] = "The process"

    mode: Literal["local", "aws"] = Field(
        default_factory=lambda: "aws" if in_lambda() else "local",
        description="`local` allows embedded defaults; `aws` refuses them (set automatically in Lambda).",
    )
    home: Path = Field(
        default=Path(DEFAULT_HOME),
        description="Folder for the embedded registry, artifact store and local state (empty: the default).",
    )

    @field_validator("home", mode="before")
    @classmethod
    def _home_given(cls, value: Any) -> Any:
        """`SLUICE_HOME=` (set, empty) is the default home, as an unset one: not the current
        folder, which sluice would make its owner's alone and fill with its registry."""
        return DEFAULT_HOME if unset_if_empty(value) is None else value

    @property
    def home_path(self) -> Path:
        return self.home.expanduser().resolve()


def unset_if_empty(value: Any) -> Any:
    """A folder setting given as an empty string (`SLUICE_X=`) is not given: pydantic reads ""
    as the path `.`, the current folder, wherever a command happens to run."""
    return None if isinstance(value, str) and not value.strip() else value


class AdapterSettings(Group):
    """Read by the wiring, which chooses each port's adapter (the local twin or the AWS
    service) and builds it, handing every AWS adapter the region."""

    title: ClassVar[str] = "Adapters"

    registry: str = Field(
        default="",
        description="`sqlite:///path/registry.db` or `dynamodb://table-name`; empty: SQLite under home.",
    )
    store: str = Field(
        default="",
        description="`file:///path` or `s3://bucket/prefix`; empty: a folder under home.",
    )
    mirror: str = Field(
        default="",
        description="Where shadow mirrors run: `local` (a thread of this process) or `lambda://function-name`; empty: local.",
    )
    region: str | None = Field(
        default=None, description="AWS region for DynamoDB/S3; defaults to the SDK's own lookup."
    )

    @field_validator("mirror")
    @classmethod
    def _check_mirror(cls, value: str) -> str:
        # Read as the process starts: the mirror is built on the first request, too late to refuse it.
        if value not in ("", "local") and not (value.startswith("lambda://") and len(value) > len("lambda://")):
            raise ValueError(f"SLUICE_MIRROR must be local or lambda://FUNCTION, not {value!r}")
        return value
    tenant_role_arn: str | None = Field(
        default=None,
        description=(
            "IAM role whose registry access is confined to the tenant named by a session tag "
            "(see sluice.registry.dynamodb.tenant_scope); set by the CDK app on the API function."
        ),
    )


class SourceSettings(Group):
    """Read by the model service, which registers models from them, and by the Triton and
    SageMaker runtimes, which check every call against them."""

    title: ClassVar[str] = "Where models come from"
    allowlists: ClassVar[tuple[str, ...]] = ("triton_allowlist",)

    import_prefixes: list[str] = Field(
        default_factory=lambda: ["file://{home}/imports/{tenant}/"],
        description=(
            "URI prefixes that push-by-URI may read, `{tenant}` standing for the caller's tenant "
            "(e.g. `s3://uploads-bucket/{tenant}/`); JSON list in the environment."
        ),
    )
    @field_validator("import_prefixes")
    @classmethod
    def _check_imports(cls, value: list[str]) -> list[str]:
        # Each tenant's roots are built per request: a prefix that makes none is refused now.
        from sluice.domain.locations import Root

        for prefix in value:
            try:
                Root.of("imports", prefix.replace("{home}", "/home").replace("{tenant}", "tenant"))
            except ValueError:
                raise ValueError(
                    f"SLUICE_IMPORT_PREFIXES: {prefix!r} is no prefix: give s3://BUCKET/PREFIX/ or an absolute file:// folder, with {{tenant}}"
                ) from None
            if "{tenant}" not in prefix:
                raise ValueError(f"SLUICE_IMPORT_PREFIXES: {prefix!r} names no {{tenant}}: every tenant would read the same place")
        return value

    triton_url_prefixes: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:8100-8102", "http://localhost:8100-8102"],
        description=(
            "The Triton servers sluice may call: a tenant may register models only from these, and "
            "every call is checked again. Entries are `scheme://host:port`, `scheme://host:low-high` "
            "or `scheme://host:*` (any port), compared on the parsed URL, never as a string prefix; "
            "JSON list in the environment. The default admits the ports of `sluice triton up` (HTTP "
            "8100, gRPC 8101, SageMaker 8102) and no other loopback service; the local endpoints' "
            "servers are admitted by the `sagemaker` runtime only while they run. The server calls "
            "them, so keep this to servers you run."
        ),
    )

    @cached_property
    def triton_allowlist(self) -> tuple[Any, ...]:
        """`triton_url_prefixes`, parsed."""
        return self._origins("triton_url_prefixes")


class ObservabilitySettings(Group):
    """Read by the logger, the EMF metrics and data capture's counts."""

    title: ClassVar[str] = "Logs and metrics"

    log_level: Annotated[
        Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(lambda v: (v.strip().upper() or "INFO") if isinstance(v, str) else v)
    ] = Field(default="INFO", description=(
        "Log level of the `sluice` logger (any case; empty: INFO). Above INFO, each prediction's, failure's and shadow "
        "comparison's EMF metrics are still written, as a line with the metrics and their dimensions alone: alarms see "
        "the same figures at any level."
    ))
    log_stream: Literal["stdout", "stderr"] = Field(
        default="stdout",
        description="Where the `sluice` logger writes its lines: stdout, which Lambda sends to CloudWatch Logs; the `sluice` command sets `stderr`, its stdout being its answer.",
    )
    metrics_namespace: str = Field(default="sluice", description="CloudWatch namespace for EMF metrics.")
    service_name: str = Field(default="sluice", description="Service name in logs, metrics and traces.")



class SettingRefused(ValueError):
    """A setting that does not parse or is out of bounds: `SLUICE_<FIELD>: what is wrong`."""


def refusal(exc: ValidationError, fields: Collection[str]) -> SettingRefused:
    """pydantic's report, as one line a reader acts on: each error named by its variable (the
    first of its location's names that is one of `fields`), without pydantic's links."""
    said = []
    for error in exc.errors(include_url=False, include_input=False):  # an input may hold a secret
        loc = [str(part) for part in error["loc"]]
        named = [i for i, part in enumerate(loc) if part in fields]
        # A validator's own words (which name the variable) without pydantic's "Value error, ".
        message = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
        if named and not message.startswith("SLUICE_"):
            at = ".".join(loc[named[0] + 1 :])
            message = f"SLUICE_{loc[named[0]].upper()}: {f'at {at}: ' if at else ''}{message}"
        said.append(message)
    return SettingRefused("; ".join(said))


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source, but a JSON setting (a list or a mapping) set
    empty is its default, as an unset one, and one that is not JSON is refused by its name."""

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        try:
            return super().decode_complex_value(field_name, field, value)
        except ValueError as exc:
            raise SettingRefused(f"SLUICE_{field_name.upper()}: not JSON ({exc})") from None


def _sluice_variables() -> tuple[tuple[str, str], ...]:
    """The environment's variables that may name a setting (pydantic-settings matches their
    names whatever their case)."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k[: len(ENV_PREFIX)].upper() == ENV_PREFIX))


@lru_cache(maxsize=512)
def _from_environment(group: type[Group], variables: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """What pydantic-settings reads for `group` from the environment, which holds `variables`
    (the key of the cache: read again when they change)."""
    del variables
    try:
        return _Environment(group)()
    except SettingsError as exc:  # pydantic-settings names the field and its source; the cause says what is wrong
        raise (exc.__cause__ if isinstance(exc.__cause__, SettingRefused) else SettingRefused(str(exc))) from None
