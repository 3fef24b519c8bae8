"""A job that publishes its answers keyed by a column: a table holds one answer an entity, so
a key on more than one row of the input (in one chunk or in two, scored in any order) fails
the job at Finalize, naming two of those rows, and nothing is published; the keys each chunk
published are read from the job's folder and leave it with the job."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.batch.jobs import run_job
from tests.integration.test_precomputed import users_csv

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container

PUBLISH = {"table": "recs", "key": "user"}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.integers(1, 1600), repeats=st.lists(st.tuples(st.integers(0, 1599), st.integers(0, 1599)), max_size=3), made=st.integers(0, 10**6))
def test_a_key_on_two_rows_fails_the_job_and_publishes_nothing(
    batch: Container, acme: Principal, tmp_path: Path, rows: int, repeats: list[tuple[int, int]], made: int
) -> None:
    users = [f"u{i}" for i in range(rows)]
    for a, b in repeats:  # row b takes row a's key (700 rows a chunk: often another chunk's)
        if a < rows and b < rows and a != b:
            users[b] = users[a]
    path = users_csv(tmp_path / f"users-{made}.csv", users, 0.02)
    before = batch.precomputed.publication("acme", "recs", now=time.time())
    job = run_job(batch, acme, path, deployment="diabetes", key_columns=["user"], publish=PUBLISH, output_uri=str(tmp_path / f"out-{made}"))
    assert not (tmp_path / f"out-{made}" / "_publish").exists() or not any((tmp_path / f"out-{made}" / "_publish").iterdir())
    served = batch.precomputed.publication("acme", "recs", now=time.time())
    if len(set(users)) == len(users):
        assert job.status == "SUCCEEDED", job.error
        assert served is not None and served.generation == job.id and served.rows == rows
        return
    assert job.status == "FAILED" and "publish.key:" in (job.error or ""), job.error
    said = job.error.split("(rows ")[1].split(" share one)")[0].split(" and ")
    first, second = (int(r) for r in said)
    assert first < second and users[first] == users[second], (job.error, first, second)  # rows as error files count them
    repeated = len({u for u in users if users.count(u) > 1})
    assert f"{repeated} value{'s' if repeated > 1 else ''} of column 'user'" in job.error
    assert (served.generation if served else None) == (before.generation if before else None)  # nothing published


def test_a_json_lines_key_written_as_a_whole_float_is_its_integers_entity(batch: Container, acme: Principal, tmp_path: Path) -> None:
    """`7.0`, `7e0` and `7` are one entity (as a request's number is read): a JSON Lines key
    written `7.0` is published as `7`, and `1e20` as its integer; `7.0` beside `7` is one
    entity on two rows (the job fails); a fraction is kept as written."""
    import json

    from tests.integration.test_precomputed import FEATURES

    def lines(name: str, users: list[object]) -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"user": u, **dict.fromkeys(FEATURES, 0.01 * i)}) + "\n" for i, u in enumerate(users, 1)))
        return path

    job = run_job(batch, acme, lines("whole.jsonl", [7.0, 1e20, 2.5, 9]), deployment="diabetes", publish=PUBLISH)
    assert job.status == "SUCCEEDED", job.error
    store = batch.precomputed
    found = store.get_answers("acme", "recs", job.id, ["7", "7.0", "100000000000000000000", "1e+20", "2.5", "9"], now=time.time())
    assert sorted(found) == ["100000000000000000000", "2.5", "7", "9"]
    twice = run_job(batch, acme, lines("twice.jsonl", [7.0, 7]), deployment="diabetes", publish=PUBLISH, output_uri=str(tmp_path / "twice-out"))
    assert twice.status == "FAILED" and "publish.key: 1 value of column 'user'" in (twice.error or ""), twice.error


def test_a_key_read_as_floats_past_their_exact_integers_is_no_entity(batch: Container, acme: Principal, tmp_path: Path) -> None:
    """A key that is a float input of the model too is read as the input is, as floats: a whole
    number past 2**53 may have been rounded as it was read (9007199254740993 reads as ...992),
    so it is not published under a key that is another entity's: the row fails, saying why; a
    key within the floats' exact integers is published as the integer. (A 64-bit integer input
    is read as the integers written: `test_exact_integers`.)"""
    from tests.integration.batch.jobs import read_errors
    from tests.integration.test_precomputed import FEATURES

    path = tmp_path / "ages.csv"
    path.write_text(",".join(FEATURES) + "\n" + "".join(",".join([age] + ["0.01"] * 9) + "\n" for age in ("9007199254740993", "5")))
    job = run_job(batch, acme, path, deployment="diabetes", publish={"table": "ages", "key": "age"})
    assert (job.status, job.rows_out, job.rows_failed) == ("SUCCEEDED", 1, 1), job.error
    assert "a whole number too large for the floats it was read as" in read_errors(job)[0]["reason"]
    found = batch.precomputed.get_answers("acme", "ages", job.id, ["9007199254740992", "9007199254740993", "5"], now=time.time())
    assert sorted(found) == ["5"]


def test_a_parquet_decimal_key_is_its_numbers_entity(batch: Container, acme: Principal, tmp_path: Path) -> None:
    """A Parquet decimal key `7.00` is the entity `7`, as a request's `7` or `7.0` is (a
    fraction keeps its digits)."""
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.integration.test_precomputed import FEATURES

    path = tmp_path / "users.parquet"
    columns = {"user": pa.array([Decimal("7.00"), Decimal("8.50")], pa.decimal128(5, 2)), **{f: pa.array([0.01, 0.02]) for f in FEATURES}}
    pq.write_table(pa.table(columns), path)
    job = run_job(batch, acme, path, deployment="diabetes", publish=PUBLISH)
    assert job.status == "SUCCEEDED", job.error
    assert sorted(batch.precomputed.get_answers("acme", "recs", job.id, ["7", "7.00", "8.50"], now=time.time())) == ["7", "8.50"]


def test_an_infinite_float_key_is_no_entity_as_nan_is_none(batch: Container, acme: Principal, tmp_path: Path) -> None:
    """A Parquet float key of NaN is no entity (its row fails, naming the key column); an
    infinite one was published as the entity "inf" ("-inf"), the text key "inf"'s, where a
    request's infinite key is answered live: now its row fails as a NaN key's does."""
    import math

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.integration.batch.jobs import read_errors
    from tests.integration.test_precomputed import FEATURES

    path = tmp_path / "users.parquet"
    users = [7.0, math.inf, -math.inf, math.nan]
    pq.write_table(pa.table({"user": pa.array(users, pa.float64()), **{f: pa.array([0.01] * len(users)) for f in FEATURES}}), path)
    job = run_job(batch, acme, path, deployment="diabetes", publish=PUBLISH)
    assert (job.status, job.rows_out, job.rows_failed) == ("SUCCEEDED", 1, 3), job.error
    errors = read_errors(job)
    assert sorted(e["row"] for e in errors) == [1, 2, 3] and all("publish key column 'user'" in e["reason"] for e in errors), errors
    assert sorted(batch.precomputed.get_answers("acme", "recs", job.id, ["7", "inf", "-inf", "nan"], now=time.time())) == ["7"]
