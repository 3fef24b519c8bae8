"""Queryable results: a job that names `catalog: {database, table}` becomes, when it
succeeds, a partition `job=<id>` of that AWS Glue Data Catalog table, so Athena can query its
predictions at once. A job that fails never adds one.

The table is created on first use, with the schema of the job's Parquet output (the first
part's) and `job` as its partition key. Its location is the tenant's
`outbox/<tenant>/tables/<table>/`, and each job writes under `job=<id>/` there (Hive style; the
same layout locally, where no catalog is called). The Glue name of the table is
`<tenant>__<table>`, the tenant's `_`, `-` and `.` written `_u`, `_d` and `_p` (`glue_table_name`),
so tenants sharing the one database Finalize may write in never add to each other's tables. A
table of that name whose location is not this tenant's is refused.

Athena skips files whose names start with `_` (`_manifest.json`, `_SUCCESS`).
"""

from __future__ import annotations

import contextlib
import io
from typing import TYPE_CHECKING, Any

from sluice.clients import lazy_client
from sluice.domain.errors import Conflict, Forbidden

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Unpack

    import pyarrow as pa

    from sluice.batch.files import Files
    from sluice.clients import AwsArgs
    from sluice.domain.jobs import BatchJob

PARTITION_KEY = "job"
_PARQUET = {
    "InputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
    "OutputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
    "SerdeInfo": {"SerializationLibrary": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"},
}


def table_root(root: str, tenant: str, table: str) -> str:
    """Where a catalog table's partitions lie: in the tenant's outbox, so every grant and check
    on results applies (`<root>outbox/<tenant>/tables/<table>/job=<id>/`)."""
    return f"{root}outbox/{tenant}/tables/{table}/"


_ESCAPES = str.maketrans({"_": "_u", "-": "_d", ".": "_p"})


def glue_table_name(tenant: str, table: str) -> str:
    """One Glue name per (tenant, table), within Glue's `[a-z0-9_]{1,255}`: the escaped tenant
    has no `__` and ends in a letter or digit, so the first `__` is where its table starts (and
    a tenant of letters and digits keeps the plain `<tenant>__<table>`)."""
    return f"{tenant.translate(_ESCAPES)}__{table}"


def hive_type(arrow_type: pa.DataType) -> str:
    """The Hive type Athena reads an Arrow column as."""
    import pyarrow as pa

    t = arrow_type
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t):
        return "smallint"
    if pa.types.is_int32(t) or pa.types.is_uint8(t) or pa.types.is_uint16(t):
        return "int"
    if pa.types.is_integer(t):
        return "bigint"
    if pa.types.is_float32(t) or pa.types.is_float16(t):
        return "float"
    if pa.types.is_floating(t):
        return "double"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"array<{hive_type(t.value_type)}>"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    return "string"


@contextlib.contextmanager
def _unless(code: str) -> Iterator[None]:
    """Let the catalog's error `code` pass (matched on the code: the exception classes of two
    clients are not the same classes)."""
    from botocore.exceptions import ClientError

    try:
        yield
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != code:
            raise


class GlueCatalog:
    def __init__(self, files: Files, *, batch_root: str, database: str | None = None, **aws: Unpack[AwsArgs]) -> None:
        self.files = files
        self.batch_root = batch_root
        self.database = database  # where set, the only database jobs may publish to
        self._glue = lazy_client("glue", aws)

    @property
    def client(self) -> Any:
        return self._glue()

    def publish(self, job: BatchJob, parts: list[str]) -> dict[str, str]:
        """Add the job's output as a partition (creating the table on first use); the same
        job published twice is one partition. Only for a SUCCEEDED job."""
        target = job.catalog
        if target is None or job.status != "SUCCEEDED":
            raise Conflict(f"batch job '{job.id}' has nothing to publish (status {job.status})", field="catalog")
        if self.database is not None and target.database != self.database:
            raise Forbidden(
                f"jobs publish to the catalog database '{self.database}' only", field="catalog.database"
            )
        name = glue_table_name(job.tenant, target.table)
        location = table_root(self.batch_root, job.tenant, target.table)
        columns = self._columns(parts[0]) if parts else []
        self._ensure_table(target.database, name, location, columns)
        descriptor = {**_PARQUET, "Columns": columns, "Location": job.output_uri}
        with _unless("AlreadyExistsException"):  # published before (Finalize retried)
            self.client.create_partition(
                DatabaseName=target.database, TableName=name,
                PartitionInput={"Values": [job.id], "StorageDescriptor": descriptor},
            )  # fmt: skip
        return {"database": target.database, "table": name, "partition": f"{PARTITION_KEY}={job.id}"}

    def _columns(self, part_uri: str) -> list[dict[str, str]]:
        import pyarrow.parquet as pq

        schema = pq.read_schema(io.BytesIO(self.files.read_bytes(part_uri)))
        return [{"Name": f.name.lower(), "Type": hive_type(f.type)} for f in schema]

    def _ensure_table(self, database: str, name: str, location: str, columns: list[dict[str, str]]) -> None:
        client = self.client
        table = None
        with _unless("EntityNotFoundException"):
            table = client.get_table(DatabaseName=database, Name=name)["Table"]
        if table is not None:
            if table.get("StorageDescriptor", {}).get("Location") != location:
                raise Forbidden(f"catalog table '{name}' belongs to another location", field="catalog.table")
            if columns and not table.get("StorageDescriptor", {}).get("Columns"):
                # Made by a job of no rows (no part to read its columns from): the first job with
                # rows gives the table its columns, which every query reads.
                client.update_table(
                    DatabaseName=database,
                    TableInput={
                        "Name": name,
                        "TableType": table.get("TableType", "EXTERNAL_TABLE"),
                        "Parameters": table.get("Parameters") or {},
                        "PartitionKeys": table.get("PartitionKeys") or [{"Name": PARTITION_KEY, "Type": "string"}],
                        "StorageDescriptor": {**_PARQUET, "Columns": columns, "Location": location},
                    },
                )
            return
        with _unless("AlreadyExistsException"):  # another job made it meanwhile
            client.create_table(
                DatabaseName=database,
                TableInput={
                    "Name": name,
                    "TableType": "EXTERNAL_TABLE",
                    "Parameters": {"classification": "parquet", "EXTERNAL": "TRUE", "created_by": "sluice"},
                    "PartitionKeys": [{"Name": PARTITION_KEY, "Type": "string"}],
                    "StorageDescriptor": {**_PARQUET, "Columns": columns, "Location": location},
                },
            )
