"""A batch job run to its end here, and what it left: its parts and its error files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.domain.jobs import BatchJob
    from sluice.wiring import Container


def run_job(container: Container, principal: Principal, path: Path | str, **options: Any) -> BatchJob:
    """Submit as the operator and run to the end on the local orchestrator."""
    options.setdefault("output_uri", str(Path(str(path)).with_suffix("")) + "-out")
    job = container.batch.submit(principal, input_uri=str(path), operator=True, source="cli", start=False, **options)
    from sluice.batch.orchestrators import LocalOrchestrator

    LocalOrchestrator(container.batch_runner, concurrency=2, backoff_s=0.01).run(job.tenant, job.id)
    return container.registry.get_job(job.tenant, job.id)


def read_parts(job: BatchJob) -> pa.Table:
    """Every part of a finished job, in chunk order, as one table."""
    import pyarrow.csv as pv
    import pyarrow.json as pj

    from sluice.batch.uris import local_path

    manifest = json.loads((local_path(job.output_uri) / "_manifest.json").read_text())
    readers = {"parquet": pq.read_table, "csv": pv.read_csv, "jsonl": pj.read_json}
    tables = [readers[job.output_format](local_path(p["uri"])) for p in manifest["parts"]]
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({})


def read_errors(job: BatchJob) -> list[dict[str, Any]]:
    from sluice.batch.uris import local_path

    manifest = json.loads((local_path(job.output_uri) / "_manifest.json").read_text())
    return sorted(
        (json.loads(line) for e in manifest["errors"] for line in local_path(e["uri"]).read_text().splitlines()),
        key=lambda r: r["row"],
    )
