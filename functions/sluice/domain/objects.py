"""The objects sluice stores: models, versions, deployments, API keys, and who acts."""

from __future__ import annotations

import re
import time
import unicodedata
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sluice.domain.capture import CaptureSettings
from sluice.domain.errors import BadRequest, Forbidden, InvalidRequest
from sluice.domain.rollouts import Rollout
from sluice.domain.signature import Signature

RuntimeKind = Literal["onnx", "sagemaker", "triton"]
RUNTIME_KINDS: tuple[str, ...] = ("onnx", "sagemaker", "triton")
Scope = Literal["predict", "admin"]
SCOPES: tuple[str, ...] = ("predict", "admin")

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


def check_name(value: str, *, field: str) -> str:
    """Names appear in URLs, S3 keys and table keys: lower-case, short, no separators."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise BadRequest(
            f"{field} must be 1-63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit",
            field=field,
        )
    return value


def now() -> float:
    return round(time.time(), 3)


# What one record holds is bounded where it is written, alike in SQLite and DynamoDB, whose item
# holds at most 400 KB: a description is a line or two; a policy's history entry holds it twice
# (old -> new), beside the deployment's own item.
MAX_DESCRIPTION = 1024  # characters
MAX_LABEL = 128  # characters: an API key's name
MAX_POLICY_BYTES = 160 * 1024  # the policy as compact JSON (UTF-8)


# The bidi embeddings, overrides and isolates: they reorder the text shown after them. Other format
# characters are ordinary text (the joiners in emoji and in Persian or Hindi words, a soft hyphen).
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def check_description(value: Any, *, field: str = "description", most: int = MAX_DESCRIPTION) -> str:
    """Free text a record keeps (a description, a key's name): at most `most` characters, and
    nothing that moves a terminal's cursor or reorders what it shows (C0 and C1 controls, bidi
    controls: an operator's listing would show other rows than the registry holds); a
    description may have line breaks (LF or CRLF) and tabs, a key's name (a label, `MAX_LABEL`) not."""
    if not isinstance(value, str):
        raise BadRequest(f"{field} must be text", field=field)
    if len(value) > most:
        raise BadRequest(f"{field} is {len(value):,} characters; at most {most:,}", field=field)
    if not value.isprintable():
        lines = most > MAX_LABEL
        for at, char in enumerate(value):
            if char in _BIDI_CONTROLS:
                raise BadRequest(f"{field} holds {char!r} at {at}, a bidi control: it reorders the text shown", field=field)
            if unicodedata.category(char) == "Cc" and not (lines and (char in "\n\t" or value.startswith("\r\n", at))):
                raise BadRequest(f"{field} holds {char!r} at {at}, a control character", field=field)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate (JSON's "\ud800"): no store or answer can carry it
            raise BadRequest(f"{field} holds {value[exc.start]!r} at {exc.start}, a lone surrogate: not text", field=field) from None
    return value


def check_policy_size(policy: dict[str, Any], *, field: str = "policy") -> None:
    import json

    size = len(json.dumps(policy, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_POLICY_BYTES:
        raise BadRequest(
            f"the policy is {size:,} bytes as JSON; at most {MAX_POLICY_BYTES:,} (160 KiB: a deployment is one registry "
            "record): keep large vocabularies and tables out of it (a lookup step reads a table)",
            field=field,
        )



# The deployment a mirror's walk runs for (`PredictionService.run_node`): no deployment's name
# holds parentheses. A mirror answers no request: no feedback rewards its bandits' choices, and
# what its nodes count is the mirror's (`ShadowRunner`), never kept under this name.
MIRROR = "(mirror)"

@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: a tenant and what it may do there. The tenant is a name
    (`check_name`), whoever made the principal (a key, an authorizer's context, `--tenant`,
    a job or a stream's record): it becomes a folder, a key prefix and an IAM session tag."""

    tenant: str
    scopes: frozenset[str]
    subject: str  # the API key id, or the authorizer's principal id

    def __post_init__(self) -> None:
        check_name(self.tenant, field="tenant")

    def require(self, scope: str) -> None:
        if scope not in self.scopes and "admin" not in self.scopes:
            raise Forbidden(f"this operation needs the '{scope}' scope", field="scope")


@dataclass(frozen=True, slots=True)
class Model:
    tenant: str
    name: str
    description: str = ""
    created_at: float = field(default_factory=now)
    created_by: str = ""


# Lambda gives a function CPU in proportion to its memory: one vCPU at 1769 MB, six at the
# 10240 MB maximum (AWS Lambda "Memory and computing power").
MB_PER_VCPU = 1769
MAX_VCPUS = 6


def vcpus_for_memory(memory_mb: int) -> int:
    return max(1, min(MAX_VCPUS, -(-int(memory_mb) // MB_PER_VCPU)))


@dataclass(frozen=True, slots=True)
class SessionTuning:
    """The ONNX Runtime session options measured best for one size of machine."""

    vcpus: int
    memory_mb: int
    intra_op_threads: int
    inter_op_threads: int
    execution_mode: Literal["sequential", "parallel"] = "sequential"
    p50_ms: float | None = None  # at batch 64, where it was measured
    measured_on_cores: int | None = None  # fewer than `vcpus`: the larger sizes are extrapolated


def pick_tuning(tunings: tuple[SessionTuning, ...], vcpus: int) -> SessionTuning | None:
    """The tuning for the largest size that fits in `vcpus` (the smallest if none fits)."""
    if not tunings:
        return None
    fitting = [t for t in tunings if t.vcpus <= vcpus]
    return max(fitting, key=lambda t: t.vcpus) if fitting else min(tunings, key=lambda t: t.vcpus)


@dataclass(frozen=True, slots=True)
class ModelVersion:
    tenant: str
    model: str
    version: int
    runtime: RuntimeKind
    artifact_uri: str
    sha256: str
    size_bytes: int
    signature: Signature
    config: dict[str, Any] = field(default_factory=dict)  # runtime-specific (endpoint, url, …)
    created_at: float = field(default_factory=now)
    created_by: str = ""
    derived_from: str | None = None  # "model:version" this one was made from (`sluice optimize`)
    optimization: dict[str, Any] | None = None  # how: the candidate, its tool and its settings
    session_options: tuple[SessionTuning, ...] = ()  # tuned per machine size; the ONNX runtime applies them
    # Where it came from when pushed from a model registry (`sluice models push NAME models:/…`
    # or a SageMaker model package ARN): the registry, its name, version, run, alias or approval.
    source: dict[str, Any] | None = None

    @property
    def ref(self) -> str:
        return f"{self.model}:{self.version}"

    def with_version(self, version: int) -> ModelVersion:
        return replace(self, version=version)


MAX_CACHE_TTL_S = 7 * 24 * 3600
MAX_CACHE_ENTRIES = 100_000


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """A deployment's prediction cache: answers kept `ttl_s` seconds, at most `max_entries`
    of them per container (least recently used go first)."""

    ttl_s: float
    max_entries: int


def check_cache(value: Any, *, field: str = "cache") -> CacheSettings | None:
    """`{"ttl_s", "max_entries"}` (or settings already built, or None: no cache), checked."""
    if value is None or isinstance(value, CacheSettings):
        data = None if value is None else {"ttl_s": value.ttl_s, "max_entries": value.max_entries}
    elif isinstance(value, dict):
        data = value
    else:
        raise InvalidRequest("cache must be an object with ttl_s and max_entries, or null", field=field)
    if data is None:
        return None
    unknown = sorted(set(data) - {"ttl_s", "max_entries"})
    if unknown:
        raise InvalidRequest(f"unknown cache setting '{unknown[0]}'", field=f"{field}.{unknown[0]}")
    ttl, entries = data.get("ttl_s"), data.get("max_entries")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= MAX_CACHE_TTL_S:
        raise InvalidRequest(f"ttl_s must be a number of seconds above 0 and at most {MAX_CACHE_TTL_S}", field=f"{field}.ttl_s")
    if isinstance(entries, bool) or not isinstance(entries, int) or not 1 <= entries <= MAX_CACHE_ENTRIES:
        raise InvalidRequest(f"max_entries must be a whole number from 1 to {MAX_CACHE_ENTRIES}", field=f"{field}.max_entries")
    return CacheSettings(ttl_s=float(ttl), max_entries=entries)


MAX_BATCH_SIZE = 1024  # rows in one joined runtime call
MAX_BATCH_DELAY_US = 1_000_000
MAX_BATCH_INSTANCES = 16  # calls of one version under way at once, in one process
MAX_PREFERRED_SIZES = 16


@dataclass(frozen=True, slots=True)
class BatchingSettings:
    """A deployment's adaptive batching: concurrent requests for the same version are joined
    into one runtime call of at most `max_batch_size` rows, at most `instances` calls of the
    version under way at once; a batch opened while an instance is free waits at most
    `max_delay_us` for others to join it, and leaves sooner at one of `preferred_batch_sizes`
    (`sluice.inference.batching`)."""

    max_batch_size: int
    max_delay_us: int
    preferred_batch_sizes: tuple[int, ...] = ()
    instances: int = 1


BATCHING_KEYS = ("max_batch_size", "max_delay_us", "preferred_batch_sizes", "instances")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_batching(value: Any, *, field: str = "batching") -> BatchingSettings | None:
    """`{"max_batch_size", "max_delay_us"}` and optionally `preferred_batch_sizes` and
    `instances` (or settings already built, or None: off), checked."""
    if value is None or isinstance(value, BatchingSettings):
        return value
    if not isinstance(value, dict):
        raise InvalidRequest("batching must be an object with max_batch_size and max_delay_us, or null", field=field)
    unknown = sorted(set(value) - set(BATCHING_KEYS))
    if unknown:
        raise InvalidRequest(f"unknown batching setting '{unknown[0]}'", field=f"{field}.{unknown[0]}")
    size, delay = value.get("max_batch_size"), value.get("max_delay_us")
    if not _whole(size) or not 2 <= size <= MAX_BATCH_SIZE:
        raise InvalidRequest(f"max_batch_size must be a whole number from 2 to {MAX_BATCH_SIZE}", field=f"{field}.max_batch_size")
    if not _whole(delay) or not 0 <= delay <= MAX_BATCH_DELAY_US:
        raise InvalidRequest(f"max_delay_us must be a whole number from 0 to {MAX_BATCH_DELAY_US}", field=f"{field}.max_delay_us")
    preferred = value.get("preferred_batch_sizes") or ()
    if (
        not isinstance(preferred, list | tuple)
        or len(preferred) > MAX_PREFERRED_SIZES
        or not all(_whole(p) and 1 <= p <= size for p in preferred)
        or len(set(preferred)) != len(preferred)
    ):
        raise InvalidRequest(
            f"preferred_batch_sizes must be at most {MAX_PREFERRED_SIZES} different whole numbers from 1 to max_batch_size ({size})",
            field=f"{field}.preferred_batch_sizes",
        )
    instances = value.get("instances")
    instances = 1 if instances is None else instances
    if not _whole(instances) or not 1 <= instances <= MAX_BATCH_INSTANCES:
        raise InvalidRequest(f"instances must be a whole number from 1 to {MAX_BATCH_INSTANCES}", field=f"{field}.instances")
    return BatchingSettings(max_batch_size=size, max_delay_us=delay, preferred_batch_sizes=tuple(sorted(preferred)), instances=instances)


@dataclass(frozen=True, slots=True)
class Deployment:
    tenant: str
    name: str
    policy: dict[str, Any]  # a routing graph, see sluice.routing
    # Each write of the deployment is a new revision; what is counted per revision (statistics,
    # monitoring, a rollout step's traffic) is the revision's alone. A deployment deleted and
    # created again goes on from its name's writes (its first revision is its `generation`), so
    # a revision never names two deployments of one name.
    revision: int = 1
    cache: CacheSettings | None = None  # off unless asked for (`check_cache`)
    batching: BatchingSettings | None = None  # off unless asked for (`check_batching`)
    description: str = ""
    created_at: float = field(default_factory=now)
    updated_at: float = field(default_factory=now)
    updated_by: str = ""
    rollout: Rollout | None = None  # the last progressive rollout (one at a time), see docs/rollouts.md
    capture: CaptureSettings | None = None  # data capture, off unless asked for (docs/capture.md)
    # Which write of this name stored it, counting every create, update and delete of the name
    # (its history's length): it never repeats, so "stored still as it was read" compares it (a
    # deployment created again before revisions went on from it started again at revision 1).
    # 0: written before generations were kept.
    generation: int = 0


@dataclass(frozen=True, slots=True)
class ApiKey:
    key_id: str  # public part of the key, safe to log
    tenant: str
    secret_hash: str  # sha256 of the whole key; the key itself is never stored
    scopes: frozenset[str]
    name: str = ""
    created_at: float = field(default_factory=now)
    revoked_at: float | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True, slots=True)
class DeploymentChange:
    """One recorded change of a deployment's policy: who, when, old -> new."""

    tenant: str
    name: str
    revision: int
    at: float
    by: str
    old_policy: dict[str, Any] | None
    new_policy: dict[str, Any] | None
    note: dict[str, Any] | None = None  # why, when a rollout made (or paused) it: its decision and numbers

    @classmethod
    def written(cls, dep: Deployment, old: Deployment | None, note: dict[str, Any] | None = None) -> DeploymentChange:
        """The change that stored `dep` over `old` (None: a create)."""
        old_policy = old.policy if old is not None else None
        return cls(dep.tenant, dep.name, dep.revision, dep.updated_at, dep.updated_by, old_policy, dep.policy, note)

    @classmethod
    def deleted(cls, old: Deployment, by: str) -> DeploymentChange:
        """The change that deleted `old`, now."""
        return cls(old.tenant, old.name, old.revision + 1, now(), by, old.policy, None)


def made_at_revision(changes: list[DeploymentChange]) -> int:
    """The revision the deployment now under a name was made at (the name's last creation in
    its history): what was kept at an earlier revision (a closed monitoring window, a captured
    request) was another deployment's, deleted before it (`Deployment.revision`)."""
    return next((c.revision for c in reversed(changes) if c.old_policy is None and c.new_policy is not None), 1)


def policy_at_revision(changes: list[DeploymentChange], revision: int) -> dict[str, Any] | None:
    """The policy the deployment now under a name held at `revision`, from the name's history;
    None where that revision is not one of its writes (one before it was made was another
    deployment's, deleted before it)."""
    made = next((i for i in range(len(changes) - 1, -1, -1) if changes[i].old_policy is None and changes[i].new_policy is not None), 0)
    return next((c.new_policy for c in changes[made:] if c.revision == revision and c.new_policy is not None), None)
