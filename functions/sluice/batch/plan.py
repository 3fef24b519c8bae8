"""Plan: split an input into chunks that can be scored independently.

- Parquet: by whole row groups, merged up to the target row count; a group larger than the
  target is a chunk of its own (a range inside a group would decode the group from its
  start again). The row count is exact from the footer.
- CSV and JSON Lines: by byte ranges of the target size, cut into records by the one record
  grammar (`records.py`) the readers cut them by too. A chunk owns the records that *start*
  inside its range, as Hadoop's TextInputFormat does: it skips the partial record it starts
  in and reads past its end to finish its last one, so no boundary has to fall on a line
  end. Plan counts the records each chunk owns (one streaming pass, chunks counted in
  parallel), which gives every row its number in the file and lets Score and Finalize prove
  that no row went missing. A CSV record ends at a line end (`\n`, `\r\n` or `\r`) outside
  quoted fields: each range is counted for both states it may start in (inside quotes or
  not), and the states are then chained from the first range on, so each chunk knows how it
  starts. Compressed bytes are refused whatever the file's name says.

An input may also be many objects (`objects.py`): a prefix (a folder) or a manifest listing
them. Chunks never span two objects; each chunk of such an input names its object and the
version Plan saw, and its rows are numbered within that object.

The chunk list goes to the work area as JSON (it can be far larger than a Step Functions
state may be); the job spec that travels with every chunk stays small.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sluice.batch.columns import plan_feeds
from sluice.batch.filestore import as_uploaded
from sluice.batch.objects import is_many, list_objects
from sluice.batch.plan_text import once_each, text_columns
from sluice.batch.records import count_range, grammar_of
from sluice.domain.errors import BadRequest, InvalidInput
from sluice.domain.jobs import PublishTarget, key_clash
from sluice.domain.locations import confine

if TYPE_CHECKING:
    import pyarrow as pa

    from sluice.batch.filestore import FileStore, Stat
    from sluice.domain.jobs import BatchJob
    from sluice.domain.locations import Root
    from sluice.domain.signature import Signature

COUNT_THREADS = 8
OBJECT_THREADS = 4  # objects of a many-object input planned at once
@dataclass(frozen=True, slots=True)
class Chunk:
    index: int
    first_row: int  # the number (0-based) of its first row in the input
    rows: int
    start: int | None = None  # text formats: the byte range whose line starts it owns
    end: int | None = None
    quoted: bool = False  # CSV: the range starts inside a quoted field
    uri: str | None = None  # an input of many objects: the object it reads (else the input)
    version: str | None = None  # and that object's version as Plan saw it

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"index": self.index, "first_row": self.first_row, "rows": self.rows}
        if self.start is not None:
            data |= {"start": self.start, "end": self.end}
        if self.quoted:
            data["quoted"] = True
        if self.uri is not None:
            data |= {"uri": self.uri, "version": self.version}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Chunk:
        """What `to_dict` wrote (a field it leaves out takes its default)."""
        return cls(**data)


def source_of(spec: JobSpec, chunk: Chunk) -> tuple[str, str]:
    """The object a chunk reads, and the version Plan saw of it."""
    if chunk.uri is not None:
        return chunk.uri, chunk.version or ""
    return spec.input_uri, spec.input_version


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What every chunk's scorer needs to know about its job (it travels with each chunk)."""

    tenant: str
    job_id: str
    deployment: str
    input_uri: str
    input_version: str
    format: str
    output_format: str
    output_uri: str
    key_columns: tuple[str, ...]
    columns: tuple[str, ...]  # the input's columns: Parquet schema, CSV header, JSONL fields
    key_types: dict[str, str] = field(default_factory=dict)  # unused (key columns of text inputs are text)
    publish: PublishTarget | None = None  # the table of precomputed answers its rows are written into
    revision: int | None = None  # the deployment's revision every chunk is scored by (`BatchJob.revision`)
    refs: dict[str, int] | None = None  # the revisions of the deployments it references (`BatchJob.refs`)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["key_columns"], data["columns"] = list(self.key_columns), list(self.columns)
        data["publish"] = self.publish.to_dict() if self.publish is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        """What `to_dict` wrote; one without the fields added later takes their defaults."""
        return cls(**{
            **data, "key_columns": tuple(data.get("key_columns") or ()), "columns": tuple(data.get("columns") or ()),
            "key_types": dict(data.get("key_types") or {}), "publish": PublishTarget.parse(data.get("publish")),
            "refs": None if data.get("refs") is None else {str(k): int(v) for k, v in data["refs"].items()},
        })  # fmt: skip


@dataclass(frozen=True, slots=True)
class Plan:
    spec: JobSpec
    chunks: list[Chunk]
    rows_total: int


def plan_job(
    job: BatchJob,
    signature: Signature,
    files: FileStore,
    *,
    chunk_rows: int,
    chunk_bytes: int,
    allowed: Root | None = None,
) -> Plan:
    """`allowed`: where every object of the input must lie (the tenant's inbox for a job not
    started by the operator). The input was confined at submit; it is again here, on this
    machine's disk as it is now, and every object a prefix or manifest holds is too."""
    if allowed is not None:
        job = replace(job, input_uri=confine(job.input_uri, (allowed,), field="input_uri").uri)
    if is_many(job.input_uri):
        fmt, objects = list_objects(job.input_uri, files, allowed=allowed, version=job.input_version)
        many = True
    else:
        stat = as_uploaded(files, job.input_uri, job.input_version)
        if stat.size == 0:
            raise InvalidInput(f"{job.input_uri} is empty (0 bytes): there is nothing to score", field="input_uri")
        fmt, objects, many = job.format, [(job.input_uri, stat)], False
    columns: list[str] = []
    chunks: list[Chunk] = []
    first_uri = ""

    def plan_one(obj: tuple[str, Stat]) -> tuple[list[str], list[Chunk]]:
        if fmt == "parquet":
            found, planned, types[obj[0]] = _plan_parquet(obj[0], obj[1], files, chunk_rows)
            return found, planned
        return _plan_text(obj[0], fmt, obj[1], files, chunk_bytes)

    types: dict[str, dict[str, str]] = {}  # a Parquet object's column types, by its URI

    if len(objects) == 1:
        each = [plan_one(objects[0])]
    else:  # footers read and text counted for a few objects at once (each a few requests)
        with ThreadPoolExecutor(min(OBJECT_THREADS, len(objects))) as pool:
            each = list(pool.map(plan_one, objects))
    for (uri, stat), (found, planned) in zip(objects, each, strict=True):
        if many and fmt != "jsonl" and first_uri and found != columns:
            raise InvalidInput(
                f"the objects of one input must have the same columns: {first_uri} has {columns}, {uri} has {found}",
                field="input_uri",
            )
        if not first_uri or (not columns and found):
            columns, first_uri = found, first_uri or uri
        for key in job.key_columns if many and fmt == "parquet" else ():  # a key keeps its type: one for every part
            kind, first = types[uri].get(key), types[first_uri].get(key)
            if kind != first and kind is not None and first is not None:
                raise InvalidInput(
                    f"key column '{key}' is {first} in {first_uri} and {kind} in {uri}: the objects of one input give a key one type",
                    field="key_columns",
                )
        for c in planned:
            chunks.append(
                Chunk(len(chunks), c.first_row, c.rows, c.start, c.end, c.quoted,
                      uri if many else None, stat.version if many else None)
            )  # fmt: skip
    if columns or (chunks and fmt != "jsonl"):
        plan_feeds(signature, columns)
    _check_keys(job.key_columns, columns, bool(columns) and bool(chunks), many=many)
    spec = JobSpec(
        tenant=job.tenant,
        job_id=job.id,
        deployment=job.deployment,
        input_uri=job.input_uri,
        input_version="" if many else objects[0][1].version,
        format=fmt,
        output_format=job.output_format,
        output_uri=job.output_uri,
        key_columns=job.key_columns,
        columns=tuple(columns),
        key_types={},
        publish=job.publish,
        revision=job.revision,
        refs=job.refs,
    )
    return Plan(spec, chunks, sum(c.rows for c in chunks))


def _check_keys(keys: tuple[str, ...], columns: list[str], has_rows: bool, *, many: bool = False) -> None:
    for key in keys:
        why = key_clash(key, many=many)
        if why is not None:
            raise BadRequest(why, field="key_columns")
        if has_rows and key not in columns:
            raise InvalidInput(f"the input has no key column '{key}'", field="key_columns")


# Parquet ------------------------------------------------------------------------------------
def _plan_parquet(uri: str, stat: Stat, files: FileStore, chunk_rows: int) -> tuple[list[str], list[Chunk], dict[str, str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with files.open_random(uri, stat.version) as raw:
        try:
            metadata = pq.ParquetFile(raw).metadata
        except (pa.ArrowInvalid, OSError):
            raise InvalidInput(f"{uri} is not a Parquet file", field="input_uri") from None
    schema = metadata.schema.to_arrow_schema()
    columns = list(schema.names)
    once_each(columns, f"the Parquet file {uri}")
    sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
    return columns, row_ranges(sizes, chunk_rows), {f.name: kind for f in schema if (kind := _kind(f.type)) is not None}


def _kind(arrow_type: pa.DataType) -> str | None:
    """A column's kind as its rows come out in a key column: text (stored as a dictionary, or
    large, too), integers (of any width), floats, ... ; None for a column of nothing but nulls,
    which is of whatever kind the others are."""
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_null(arrow_type):
        return None
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    if pa.types.is_integer(arrow_type):
        return "integer"
    if pa.types.is_floating(arrow_type):
        return "floating"
    return "binary" if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type) else str(arrow_type)


def row_ranges(group_rows: list[int], target: int) -> list[Chunk]:
    """Chunks of whole row groups, of about `target` rows: small groups merged, a large one
    alone (each group is decoded once, by one chunk)."""
    chunks: list[Chunk] = []
    start = taken = first = 0

    def close(first_row: int, rows: int) -> None:
        if rows:
            chunks.append(Chunk(len(chunks), first_row, rows))

    for rows in group_rows:
        if taken and taken + rows > target:
            close(first, taken)
            first, taken = start, 0
        taken += rows
        start += rows
    close(first, taken)
    return chunks


# CSV and JSON Lines --------------------------------------------------------------------------
def _plan_text(uri: str, fmt: str, stat: Stat, files: FileStore, chunk_bytes: int) -> tuple[list[str], list[Chunk]]:
    grammar = grammar_of(fmt)
    columns, data = text_columns(uri, fmt, stat, files, grammar)
    ranges = [(s, min(s + chunk_bytes, stat.size)) for s in range(data, stat.size, chunk_bytes)]
    with ThreadPoolExecutor(COUNT_THREADS) as pool:
        counts = list(pool.map(lambda r: count_range(files, uri, stat.version, *r, grammar, size=stat.size), ranges))
    chunks: list[Chunk] = []
    first = 0
    inside = False  # the state each range starts in: chained from the start of the data
    for (start, end), (rows, exits) in zip(ranges, counts, strict=True):
        if rows[inside]:
            chunks.append(Chunk(len(chunks), first, rows[inside], start, end, quoted=inside))
            first += rows[inside]
        inside = exits[inside]
    if inside:
        raise InvalidInput(
            "the CSV ends inside a quoted field: a field that starts with a quote must end with one "
            "(a quote inside a quoted field is written twice)",
            field="input_uri",
        )
    return columns, chunks
