"""A batch job's 64-bit integer inputs reach the model as the integers written: as floats, two
ids past 2**53 were one (9007199254740993 was scored as 9007199254740992), in CSV and JSON Lines
alike, whatever else the chunk holds; text that is no whole number fails its row, saying why."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.batch.jobs import read_errors, read_parts, run_job
from tests.models import echo_int_model
from tests.support import single

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container


def _echo(batch: Container, acme: Principal, datatype: str) -> str:
    name = f"echo-{datatype.lower()}"
    if name not in {m.name for m in batch.registry.list_models("acme")}:
        batch.models.push(acme, name, echo_int_model(datatype))
        batch.deployments.create(acme, name, single(name, 1))
    return name


def _scored(batch: Container, acme: Principal, path: Path, deployment: str) -> tuple[list[int], list[str]]:
    job = run_job(batch, acme, path, deployment=deployment, output_uri=str(path) + "-out", output_format="parquet")  # its integers as they are
    assert job.status in ("SUCCEEDED", "FAILED"), job.error
    scored = read_parts(job).column("prediction").to_pylist() if job.rows_out else []
    return scored, [e["reason"] for e in read_errors(job)] if job.rows_failed else []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    written=st.sampled_from(["csv", "jsonl"]),
    values=st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(2**53 - 3, 2**53 + 3), min_size=1, max_size=5),
    made=st.integers(0, 10**9),
)
def test_int64_inputs_reach_the_model_as_written(batch: Container, acme: Principal, tmp_path: Path, written: str, values: list[int], made: int) -> None:
    path = tmp_path / f"x-{made}.{written}"
    path.write_text("x\n" + "".join(f"{v}\n" for v in values) if written == "csv" else "".join(json.dumps({"x": v}) + "\n" for v in values))
    assert _scored(batch, acme, path, _echo(batch, acme, "INT64")) == (values, [])


def test_whole_numbers_written_otherwise_are_the_integers_their_text_says(batch: Container, acme: Principal, tmp_path: Path) -> None:
    """`5.0`, `1e3` and `9007199254740993.0` are whole numbers, read from their text (not from
    the float near it); hexadecimal, a fraction and words fail their rows alone, and the chunk's
    other integers stay exact."""
    echo = _echo(batch, acme, "INT64")
    csv = tmp_path / "mixed.csv"
    csv.write_text("x\n9007199254740993.0\n1e3\n5.0\n0x10\nabc\n2.5\n9007199254740995\n1e-99999999999999999999999\n")
    assert _scored(batch, acme, csv, echo) == (
        [9007199254740993, 1000, 5, 9007199254740995, 0],  # an exponent past Decimal's: the float it reads as
        ["'x' is not a number: '0x10'", "'x' is not a number: 'abc'", "'x' must be a whole number"],
    )
    lines = tmp_path / "mixed.jsonl"
    lines.write_text('{"x": 9007199254740993.0}\n{"x": 5.0}\n{"x": "7"}\n{"x": "0x10"}\n{"x": 2.5}\n{"x": 9007199254740995}\n{"x": true}\n{"x": "1e-99999999999999999999999"}\n')
    scored, refused = _scored(batch, acme, lines, echo)
    assert scored == [9007199254740993, 5, 7, 9007199254740995, 0]
    assert refused == ["'x' is not a number: '0x10'", "'x' must be a whole number", "'x' is not a number: 'true'"]


FRACTIONS = ("", ".0", ".5", ".0000000000000000001", ".00000000000000000000", ".9999999999999999999", ".49999999999999999", "e-400", "e2", ".5e1")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    datatype=st.sampled_from(["INT64", "INT32", "INT8"]),
    whole=st.integers(-130, 130) | st.integers(2**52 - 2, 2**52 + 2) | st.integers(2**31 - 2, 2**31 + 1),
    fraction=st.sampled_from(FRACTIONS),
    made=st.integers(0, 10**9),
)
def test_an_integer_inputs_value_is_taken_or_refused_by_what_it_writes_alone(
    batch: Container, acme: Principal, tmp_path: Path, datatype: str, whole: int, fraction: str, made: int
) -> None:
    """One outcome per value, read exactly from what it writes: alone or beside a value past
    2**53 (which sends its chunk down the exact path), in a CSV cell, a JSON number or a JSON
    string; a fraction a float would round away (`1.0000000000000000001`) fails as `2.5` does,
    for every integer type (found by an accounting review: it was taken alone and refused in
    company, and taken for INT32 and INT8 where INT64 refused it)."""
    from decimal import Decimal

    from sluice.codecs.datatypes import integer_range

    text = f"{whole}{fraction}"
    exact = Decimal(text)
    low, high = integer_range(datatype)
    if exact != exact.to_integral_value():
        expected: tuple[list[int], list[str]] = ([], ["'x' must be a whole number"])
    elif not low <= int(exact) < high:
        expected = ([], [f"'x' is out of range for {datatype}"])
    else:
        expected = ([int(exact)], [])
    echo = _echo(batch, acme, datatype)
    company = "9007199254740993" if datatype == "INT64" else "1"
    for name, body in (
        ("alone.csv", f"x\n{text}\n"),
        ("company.csv", f"x\n{text}\n{company}\n"),
        ("number.jsonl", f'{{"x": {text}}}\n'),
        ("company.jsonl", f'{{"x": {text}}}\n{{"x": {company}}}\n'),
        ("string.jsonl", f'{{"x": "{text}"}}\n'),
        ("noise.jsonl", f'{{"x": {text}, "note": 0.3333333333333333}}\n'),  # another member's digits change nothing
    ):
        path = tmp_path / f"{made}-{datatype}-{name}"
        path.write_text(body)
        scored, refused = _scored(batch, acme, path, echo)
        if "company" in name:
            scored = scored[: len(scored) - 1]  # the company's own answer last
        assert (scored, refused) == expected, (name, text)


def test_uint64_inputs_are_read_to_their_top(batch: Container, acme: Principal, tmp_path: Path) -> None:
    echo = _echo(batch, acme, "UINT64")
    for name, text in (("top.csv", "x\n18446744073709551615\n9223372036854775808\n-1\n"), ("top.jsonl", '{"x": 18446744073709551615}\n{"x": 9223372036854775808}\n{"x": -1}\n')):
        path = tmp_path / name
        path.write_text(text)
        assert _scored(batch, acme, path, echo) == ([18446744073709551615, 9223372036854775808], ["'x' is out of range for UINT64"]), name


def test_a_publish_key_on_an_integer_input_is_the_integer_written(batch: Container, acme: Principal, tmp_path: Path) -> None:
    """A CSV key column that is a 64-bit integer input too is that integer's entity, as the model
    reads it: `+5` and `5.0` are `5` (one entity on two rows fails the job), `007` is `7`, `1e3`
    is `1000`, and 9007199254740993 is itself."""
    echo = _echo(batch, acme, "INT64")
    path = tmp_path / "keys.csv"
    path.write_text("x\n+5\n007\n1e3\n9007199254740993\n")
    job = run_job(batch, acme, path, deployment=echo, publish={"table": "echoes", "key": "x"}, output_format="parquet")
    assert job.status == "SUCCEEDED", job.error
    assert sorted(batch.precomputed.get_answers("acme", "echoes", job.id, ["5", "+5", "7", "007", "1000", "1e3", "9007199254740993"], now=time.time())) == ["1000", "5", "7", "9007199254740993"]
    twice = tmp_path / "twice.csv"
    twice.write_text("x\n5\n5.0\n")
    job = run_job(batch, acme, twice, deployment=echo, publish={"table": "echoes", "key": "x"}, output_uri=str(tmp_path / "twice-out"))
    assert job.status == "FAILED" and "publish.key: 1 value of column 'x'" in (job.error or ""), job.error


def test_a_key_column_has_one_type_in_every_part_whichever_way_its_chunk_was_read(batch: Container, acme: Principal, tmp_path: Path) -> None:
    """A JSON Lines key that is an input too: a chunk read whole and one read line by line (it
    holds a bad line) write the key as the same type, so the job's Parquet parts read as one."""
    import pyarrow.parquet as pq

    from sluice.batch.uris import local_path

    echo = _echo(batch, acme, "INT64")
    path = tmp_path / "ids.jsonl"
    lines = [json.dumps({"x": i, "note": "n" * 80}) for i in range(1400)]  # two chunks of 64 KiB
    lines[-3] = "not json"
    path.write_text("\n".join(lines) + "\n")
    job = run_job(batch, acme, path, deployment=echo, key_columns=["x"], output_format="parquet", output_uri=str(tmp_path / "ids-out"))
    assert (job.status, job.rows_out, job.rows_failed) == ("SUCCEEDED", 1399, 1), job.error
    assert job.chunks_total and job.chunks_total > 1
    parts = sorted(local_path(job.output_uri).glob("part-*.parquet"))
    assert len({str(pq.read_schema(p).field("x").type) for p in parts}) == 1
    assert pq.ParquetDataset([str(p) for p in parts]).read().num_rows == 1399  # one schema: the parts read as one table
