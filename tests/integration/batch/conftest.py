"""Batch fixtures: a container with small chunks (so a few thousand rows make many), acme's
demo deployments, and iris inputs in every format, with or without bad rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.settings import Settings
from sluice.wiring import Container
from tests.conftest import MODELS

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.domain.jobs import BatchJob

FEATURES = ("sepal_length", "sepal_width", "petal_length", "petal_width")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        mode="local", home=tmp_path / "home", deployment_cache_ttl_s=0, batch_chunk_rows=700,
        batch_chunk_bytes=64 * 1024, batch_infer_rows=512, batch_concurrency=2,
    )  # fmt: skip


@pytest.fixture
def batch(settings: Settings, acme: Principal) -> Container:
    from sluice.demo import install_demo

    container = Container.from_settings(settings)
    install_demo(container, acme, MODELS)
    return container


@pytest.fixture
def client(batch: Container) -> TestClient:
    """The API over `batch` (not the demo container the integration tests' `client` serves)."""
    from fastapi.testclient import TestClient

    from sluice.api.app import create_app

    return TestClient(create_app(batch))


@pytest.fixture
def keys(batch: Container) -> dict[str, str]:
    """acme's predict key and globex's admin key on `batch`."""
    _, acme = batch.keys.create("acme", ["predict"])
    _, globex = batch.keys.create("globex", ["admin", "predict"])
    return {"acme": acme, "globex": globex}


def iris_rows(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    lows, highs = np.array([4.3, 2.0, 1.0, 0.1]), np.array([7.9, 4.4, 6.9, 2.5])
    values = np.round(rng.uniform(lows, highs, size=(n, 4)), 2)
    return [{"id": f"r{i:06d}", **dict(zip(FEATURES, map(float, row), strict=True))} for i, row in enumerate(values)]


def write_input(path: Path, rows: list[dict[str, Any]], *, row_group_rows: int = 1000) -> Path:
    """Rows as the file's suffix says: .csv (header first), .jsonl or .parquet."""
    if path.suffix == ".parquet":
        table = pa.Table.from_pylist(rows) if rows else pa.table({c: pa.array([], pa.float64()) for c in ("id", *FEATURES)})
        pq.write_table(table, path, row_group_size=row_group_rows)
    elif path.suffix == ".csv":
        columns = ["id", *FEATURES]
        lines = [",".join(columns)] + [",".join("" if r.get(c) is None else str(r[c]) for c in columns) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


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
