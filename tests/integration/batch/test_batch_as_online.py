"""A batch job against the online path, row by row: for any rows (values that are numbers,
missing, NaN or infinite), in any of the formats, every input row is accounted for once, as a
result or as a recorded failure; a row is a result exactly when the same row sent alone online
is answered, and then with the online prediction (a job with no such row fails, its rows'
failures written all the same; a JSON Lines file none of whose lines is JSON is refused whole)."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from sluice.domain.errors import SluiceError
from sluice.domain.requests import ArrayInputs, PredictionRequest
from sluice.inference.loop import run
from tests.integration.batch.inputs import FEATURES, write_input
from tests.integration.batch.jobs import read_errors, read_parts, run_job

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container

_VALUE = st.one_of(st.floats(0, 8).map(lambda v: round(v, 2)), st.floats(0, 8), st.sampled_from([None, math.nan, math.inf, -math.inf]))
_ROWS = st.lists(st.fixed_dictionaries({f: st.floats(0, 8) | _VALUE for f in FEATURES}), min_size=1, max_size=20)
_FILES = itertools.count()


def _online(container: Container, principal: Principal, row: dict[str, Any]) -> str | None:
    """The row's label sent alone, or None where it is refused."""
    matrix = np.array([[math.nan if row[f] is None else row[f] for f in FEATURES]], dtype=np.float32)
    try:
        answer = run(container.predictions.predict(principal, PredictionRequest("iris", ArrayInputs({"input": matrix})))).answer
    except SluiceError as exc:
        assert 400 <= exc.status < 500, exc
        return None
    return str(answer.result.outputs["output_label"][0])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=_ROWS, fmt=st.sampled_from(["parquet", "csv", "jsonl"]))
def test_each_row_is_scored_as_online(batch: Container, acme: Principal, tmp_path: Path, values: list[dict[str, Any]], fmt: str) -> None:
    rows = [{"id": f"r{i:03d}", **v} for i, v in enumerate(values)]
    path = write_input(tmp_path / f"in-{next(_FILES)}.{fmt}", rows)
    note(f"{fmt}: {rows}")
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    expected = {row["id"]: _online(batch, acme, row) for row in rows}
    # A job none of whose rows could be scored fails, its errors still written for every row.
    assert job.status == ("FAILED" if set(expected.values()) == {None} else "SUCCEEDED"), job.error
    if fmt == "jsonl" and all(any(isinstance(v, float) and not math.isfinite(v) for v in row.values()) for row in rows):
        # No line is JSON (NaN and Infinity are not): not JSON Lines at all, refused whole.
        assert job.rows_in == 0 and "no line near the start of the input is a JSON object" in (job.error or "")
        return
    out = read_parts(job)
    scored = dict(zip(out.column("id").to_pylist(), out.column("prediction").to_pylist(), strict=True)) if out.num_rows else {}
    failed = {e["row"] for e in read_errors(job)}
    assert len(scored) == out.num_rows and not {int(i[1:]) for i in scored} & failed, "a row both scored and failed"
    assert {int(i[1:]) for i in scored} | failed == set(range(len(rows))), "a row neither scored nor failed"
    for row in rows:
        event("scored" if expected[row["id"]] is not None else "refused")
        assert scored.get(row["id"]) == expected[row["id"]], (row, fmt)
