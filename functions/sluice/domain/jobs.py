"""The batch job record: what to score, where, and how far it has got.

Status moves PENDING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED (and PENDING straight to
FAILED or CANCELLED); a terminal job never changes again. Progress counters are added to
once per chunk (`ChunkResult`), exactly once even when a chunk is scored twice, so
`rows_in = rows_out + rows_failed` holds at every moment, not just at the end.

One job per output folder: from its creation until it finishes, a job holds its
`output_uri` in the registry, and another job into the same folder is refused (`OutputInUse`).
A job run on a machine (not by Step Functions) names its process (`worker`) and keeps a
heartbeat (`heartbeat_at`, see `sluice.domain.liveness`), so that a job whose process died
is found and marked FAILED, and its folder taken over.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from sluice.domain.errors import BadRequest, Conflict, Forbidden
from sluice.domain.liveness import STALE_AFTER_S, process_gone, silent
from sluice.domain.objects import Principal, now

JobStatus = Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]
Format = Literal["parquet", "csv", "jsonl"]
FORMATS: tuple[str, ...] = ("parquet", "csv", "jsonl")
TERMINAL: frozenset[str] = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
MOVES: dict[str, frozenset[str]] = {
    "PENDING": frozenset({"RUNNING", "FAILED", "CANCELLED"}),
    "RUNNING": frozenset({"SUCCEEDED", "FAILED", "CANCELLED"}),
    "SUCCEEDED": frozenset(),
    "FAILED": frozenset(),
    "CANCELLED": frozenset(),
}
# The fields `Registry.update_job` may set besides the status; counters are never set, only added.
UPDATABLE: frozenset[str] = frozenset(
    {"chunks_total", "rows_total", "started_at", "finished_at", "error", "execution", "format", "worker", "heartbeat_at", "revision", "refs", "finalizing_at"}
)
ERROR_CHARS = 2000


def check_move(job_id: str, current: str, target: str) -> None:
    """Raise Conflict unless a job may go from `current` to `target` (staying put is allowed
    for a job that is not finished: a retried step repeats its own move)."""
    if current in TERMINAL:
        raise Conflict(f"batch job '{job_id}' is already {current}", field="status")
    if target != current and target not in MOVES[current]:
        raise Conflict(f"batch job '{job_id}' cannot go from {current} to {target}", field="status")


class OutputInUse(Conflict):
    """The output folder is held by another job that has not finished (`holder`, its id)."""

    code = "output_in_use"

    def __init__(self, message: str, *, holder: str) -> None:
        super().__init__(message, field="output_uri", job=holder)
        self.holder = holder


def check_format(value: str, *, field: str) -> str:
    if value not in FORMATS:
        raise BadRequest(f"{field} must be one of {', '.join(FORMATS)}", field=field)
    return value


MAX_KEY_COLUMNS = 16
KEY_COLUMN_CHARS = 128  # a column name, as `publish.key`: a record holds them all, and DynamoDB's item 400 KB


OUTPUT_NAMES = ("row", "prediction", "confidence", "variant")  # a job's output columns beside its keys (and `prediction_*`, `probability_*`)
ERROR_NAMES = ("reason", "input")  # an error record's own members beside `row` and the key columns


def key_clash(key: str, *, many: bool = False) -> str | None:
    """Why no key column may be named `key`, or None: its copy would stand where an output
    column stands, or an error record's own member (`many`: an input of many objects, whose
    rows also say their `object`)."""
    if key in OUTPUT_NAMES or key.startswith(("prediction_", "probability_")) or (many and key == "object"):
        return f"key column '{key}' would clash with an output column"
    if key in ERROR_NAMES:  # a failed row's record would say its key where it says why, or its line
        return f"key column '{key}' would clash with the '{key}' of an error record"
    return None


def check_key_columns(value: object, *, stored: bool = False) -> tuple[str, ...]:
    """The input columns copied beside each prediction, stripped, each once (a job's, a schedule's).
    `stored`: a stored schedule's, whose runs go on under the rules it was made under (a name's
    length had no bound before KEY_COLUMN_CHARS)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(k, str) for k in value):
        raise BadRequest("key_columns must be a list of column names", field="key_columns")
    keys = tuple(dict.fromkeys(k.strip() for k in value if k.strip()))
    if len(keys) > MAX_KEY_COLUMNS:
        raise BadRequest(f"key_columns names at most {MAX_KEY_COLUMNS} columns", field="key_columns")
    if not stored and any(len(k) > KEY_COLUMN_CHARS for k in keys):
        raise BadRequest(f"a key column's name is at most {KEY_COLUMN_CHARS} characters", field="key_columns")
    for key in keys if not stored else ():  # a stored schedule's runs are refused when planned
        why = key_clash(key)
        if why is not None:
            raise BadRequest(why, field="key_columns")
    return keys


def new_job_id() -> str:
    return f"job-{secrets.token_hex(10)}"


def derived_job_id(kind: str, *parts: str) -> str:
    """A job id that the same inputs always give: a duplicate upload event names the same job."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:20]
    return f"{kind}-{digest}"


_CATALOG_NAME = re.compile(r"^[a-z0-9_]{1,128}\Z")


@dataclass(frozen=True, slots=True)
class CatalogTarget:
    """The AWS Glue Data Catalog table a job's output becomes a partition of (`job=<id>`)."""

    database: str
    table: str

    @classmethod
    def parse(cls, value: Any, *, field: str = "catalog") -> CatalogTarget | None:
        if value is None:
            return None
        if isinstance(value, CatalogTarget):
            return value
        if not isinstance(value, dict) or set(value) != {"database", "table"}:
            raise BadRequest(f"{field} must be an object with database and table", field=field)
        for part in ("database", "table"):
            if not isinstance(value[part], str) or not _CATALOG_NAME.fullmatch(value[part]):
                raise BadRequest(
                    f"{field}.{part} must be 1-128 characters of a-z, 0-9 and '_' (a Glue name)",
                    field=f"{field}.{part}",
                )
        return cls(value["database"], value["table"])

    def to_dict(self) -> dict[str, str]:
        return {"database": self.database, "table": self.table}


_PUBLISH_TABLE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}\Z")
PUBLISH_TTL_S = 7 * 86400  # how long published answers are kept when `ttl_s` is not given
MAX_PUBLISH_TTL_S = 366 * 86400


def require_publisher(principal: Principal) -> None:
    """Publishing writes what `precomputed` deployments answer every caller of the tenant: a
    change to serving, as a deployment's policy is, so it needs the `admin` scope."""
    if "admin" not in principal.scopes:
        raise Forbidden("publishing a job's answers (publish) changes what precomputed deployments answer: it needs the 'admin' scope", field="publish")


@dataclass(frozen=True, slots=True)
class PublishTarget:
    """The table of precomputed answers a job's results are published into, by the input's
    `key` column (one entity a row), kept `ttl_s` seconds; `precomputed` nodes read it."""

    table: str
    key: str
    ttl_s: int = PUBLISH_TTL_S

    @classmethod
    def parse(cls, value: Any, *, field: str = "publish") -> PublishTarget | None:
        if value is None:
            return None
        if isinstance(value, PublishTarget):
            return value
        if not isinstance(value, dict) or not {"table", "key"} <= set(value) or not set(value) <= {"table", "key", "ttl_s"}:
            raise BadRequest(f"{field} must be an object with table, key and optionally ttl_s", field=field)
        if not isinstance(value["table"], str) or not _PUBLISH_TABLE.fullmatch(value["table"]):
            raise BadRequest(f"{field}.table must be 1-63 characters of a-z, 0-9, '.', '_' or '-'", field=f"{field}.table")
        if not isinstance(value["key"], str) or not 0 < len(value["key"]) <= 128:
            raise BadRequest(f"{field}.key must name the input column holding each row's entity", field=f"{field}.key")
        ttl = value.get("ttl_s", PUBLISH_TTL_S)
        if isinstance(ttl, bool) or not isinstance(ttl, int) or not 60 <= ttl <= MAX_PUBLISH_TTL_S:
            raise BadRequest(f"{field}.ttl_s must be whole seconds from 60 to {MAX_PUBLISH_TTL_S}", field=f"{field}.ttl_s")
        return cls(value["table"], value["key"], ttl)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "key": self.key, "ttl_s": self.ttl_s}


@dataclass(frozen=True, slots=True)
class BatchJob:
    id: str
    tenant: str
    deployment: str
    input_uri: str
    output_uri: str
    format: Format
    output_format: Format
    key_columns: tuple[str, ...] = ()
    status: JobStatus = "PENDING"
    input_version: str | None = None  # an upload's: the S3 version id (or quoted ETag) its event named
    source: str = "api"  # api, cli, upload (S3), inbox (local folder), execution, schedule
    created_by: str = ""
    execution: str | None = None  # the Step Functions execution ARN, when one runs it
    chunks_total: int | None = None
    chunks_done: int = 0
    rows_total: int | None = None  # known once planned
    rows_in: int = 0
    rows_out: int = 0
    rows_failed: int = 0
    created_at: float = field(default_factory=now)
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    schedule: str | None = None  # the schedule that started it, when one did
    scheduled_for: float | None = None  # the scheduled time of that run
    catalog: CatalogTarget | None = None  # where a success is published as a partition
    publish: PublishTarget | None = None  # the table of precomputed answers a success is published into
    operator: bool = False  # started by the machine's operator (the CLI): its input is not confined
    worker: str = ""  # `<host>:<pid>` of the process that runs it here (none under Step Functions)
    heartbeat_at: float | None = None  # that process's last sign of life
    # The deployment's revision the job scores with: its policy as it stood when the job
    # started (Plan), for every chunk, whatever the deployment becomes meanwhile.
    revision: int | None = None
    # The revisions of the deployments that policy references (`ref`), and those they reference,
    # pinned with it: every chunk follows each reference at its pinned revision. None before Plan.
    refs: dict[str, int] | None = None
    # When Finalize began (it seals the job): from then on no try of a chunk writes into the
    # job's folder or table (`BatchRunner._may_write`), so what Finalize checks and publishes
    # stays what the recorded chunks wrote, whatever try of a chunk is still running.
    finalizing_at: float | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def stopped(self, at: float) -> str | None:
        """Why a job run by a process of its own has lost that process (it is gone from this
        host, or silent past `STALE_AFTER_S`), or None. A job no process claims (PENDING, or
        run by Step Functions) is never stopped by this reckoning."""
        if self.terminal or not self.worker:
            return None
        if process_gone(self.worker):
            return f"its process stopped: process {self.worker.rpartition(':')[2]} on this host is gone (it ended or was killed)"
        if silent(self.heartbeat_at, self.created_at, at):
            return f"its process stopped: no heartbeat for more than {STALE_AFTER_S:.0f} s (it ended, was killed, or lost the registry)"
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["key_columns"] = list(self.key_columns)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchJob:
        def number(name: str) -> int | None:
            value = data.get(name)
            return None if value is None else int(value)

        def moment(name: str) -> float | None:
            value = data.get(name)
            return None if value is None else float(value)

        return cls(
            id=data["id"],
            tenant=data["tenant"],
            deployment=data["deployment"],
            input_uri=data["input_uri"],
            output_uri=data["output_uri"],
            format=data["format"],
            output_format=data["output_format"],
            key_columns=tuple(data.get("key_columns") or ()),
            status=data.get("status", "PENDING"),
            input_version=data.get("input_version"),
            source=data.get("source", "api"),
            created_by=data.get("created_by", ""),
            execution=data.get("execution"),
            chunks_total=number("chunks_total"),
            chunks_done=int(data.get("chunks_done") or 0),
            rows_total=number("rows_total"),
            rows_in=int(data.get("rows_in") or 0),
            rows_out=int(data.get("rows_out") or 0),
            rows_failed=int(data.get("rows_failed") or 0),
            created_at=float(data["created_at"]),
            started_at=moment("started_at"),
            finished_at=moment("finished_at"),
            error=data.get("error"),
            schedule=data.get("schedule"),
            scheduled_for=moment("scheduled_for"),
            catalog=CatalogTarget.parse(data.get("catalog")),
            publish=PublishTarget.parse(data.get("publish")),
            operator=bool(data.get("operator")),
            worker=data.get("worker") or "",
            heartbeat_at=moment("heartbeat_at"),
            revision=number("revision"),
            refs=None if data.get("refs") is None else {str(k): int(v) for k, v in data["refs"].items()},
            finalizing_at=moment("finalizing_at"),
        )


@dataclass(frozen=True, slots=True)
class ChunkResult:
    """What scoring one chunk produced; recorded once per chunk."""

    index: int
    rows_in: int
    rows_out: int
    rows_failed: int
    part: str | None  # URI of the part file (None when the chunk held no rows)
    errors: str | None  # URI of the error file (None when no row failed)
    versions: dict[str, int] = field(default_factory=dict)  # "model:version" -> rows it scored
    seconds: float = 0.0
    # What was written, as the file store saw it just after (size, and the S3 ETag or the
    # local `<size>:<mtime_ns>`): Finalize checks each file is still that one.
    part_bytes: int | None = None
    part_version: str | None = None
    errors_bytes: int | None = None
    errors_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChunkResult:
        return cls(
            index=int(data["index"]),
            rows_in=int(data["rows_in"]),
            rows_out=int(data["rows_out"]),
            rows_failed=int(data["rows_failed"]),
            part=data.get("part"),
            errors=data.get("errors"),
            versions={str(k): int(v) for k, v in (data.get("versions") or {}).items()},
            seconds=float(data.get("seconds") or 0.0),
            part_bytes=None if data.get("part_bytes") is None else int(data["part_bytes"]),
            part_version=data.get("part_version"),
            errors_bytes=None if data.get("errors_bytes") is None else int(data["errors_bytes"]),
            errors_version=data.get("errors_version"),
        )
