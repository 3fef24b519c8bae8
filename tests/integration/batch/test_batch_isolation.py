"""A row the model refuses fails alone: its neighbours in the same inference call are scored.
The refusal is ONNX Runtime's own (a lookup model given a code outside its table), on a value
the signature accepts, so every check before the model passes it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.settings import Settings
from sluice.wiring import Container
from tests.integration.batch.jobs import read_errors, read_parts, run_job
from tests.models import LOOKUP_TABLE, lookup_model

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal


@pytest.fixture
def lookup(tmp_path: Path, acme: Principal) -> Container:
    """A deployment of the lookup model, scored 4,096 rows a call (the default), two threads."""
    settings = Settings(mode="local", home=tmp_path / "home", deployment_cache_ttl_s=0, batch_infer_rows=4096, batch_concurrency=2)
    container = Container.from_settings(settings)
    container.models.push(acme, "lookup", lookup_model())
    container.deployments.create(acme, "lookup", {"kind": "single", "model": "lookup", "version": 1})
    return container


@pytest.mark.parametrize("refused", [[1234], [0, 4095, 5000, 7001]], ids=["one", "several"])
def test_a_row_the_model_refuses_fails_alone_and_its_neighbours_are_scored(
    lookup: Container, acme: Principal, tmp_path: Path, refused: list[int]
) -> None:
    rows = 8192  # two calls of 4,096 rows
    codes = np.random.default_rng(3).integers(0, 10, size=rows)
    codes[refused] = 99  # within INT64, outside the model's table
    path = tmp_path / "codes.parquet"
    pq.write_table(pa.table({"id": pa.array(np.arange(rows)), "code": pa.array(codes)}), path)
    job = run_job(lookup, acme, path, deployment="lookup", key_columns=["id"])
    assert job.status == "SUCCEEDED", job.error
    assert (job.rows_in, job.rows_out, job.rows_failed) == (rows, rows - len(refused), len(refused))
    errors = read_errors(job)
    assert [e["id"] for e in errors] == refused
    assert all("the model rejected this row" in e["reason"] for e in errors)
    out = read_parts(job)
    kept = np.setdiff1d(np.arange(rows), refused)
    assert out.column("id").to_pylist() == kept.tolist()  # in order, every neighbour scored
    assert out.column("prediction").to_numpy().tolist() == pytest.approx(LOOKUP_TABLE[codes[kept]].tolist())


def test_a_switch_whose_cases_answer_other_classes_fails_its_job_at_once_saying_why(tmp_path: Path, acme: Principal) -> None:
    """Rows of a switch's cases that answer other classes answer other columns, which one part
    cannot hold: the job fails at once (a retry writes the same columns), saying so, never after
    retries with a bare `ValueError`."""
    from tests.conftest import MODELS
    from tests.models import iris_of_classes
    from tests.support import single

    container = Container.from_settings(Settings(mode="local", home=tmp_path / "home", deployment_cache_ttl_s=0))
    container.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())
    container.models.push(acme, "other", iris_of_classes())
    short = {"field": "inputs.input", "column": "petal_length", "op": "<", "value": 2.5}
    container.deployments.create(acme, "mixed", {"kind": "switch", "cases": [{"name": "short", "when": short, "target": single("other", 1)}], "default": single("iris", 1)})
    path = tmp_path / "rows.csv"
    path.write_text("sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2\n6.7,3.0,5.2,2.3\n")
    job = run_job(container, acme, path, deployment="mixed", output_format="jsonl")
    assert job.status == "FAILED"
    assert "(not retried)" in job.error and "one set of columns" in job.error and "probability_A" in job.error
