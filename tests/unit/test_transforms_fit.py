"""`sluice transforms fit`: a transform node's parameters fitted from a generated training
file (Parquet and CSV), checked against NumPy, and the node a policy takes as it is printed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from sluice import cli
from sluice.domain.policy import parse_policy

if TYPE_CHECKING:
    from pathlib import Path

COLOURS = ["red", "green", "blue", "teal"]


def _table(rows: int = 500) -> tuple[pa.Table, dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    age = rng.normal(41.2, 12.0, rows)
    age[::17] = np.nan  # missing values are left out of every figure
    income = rng.lognormal(10.0, 0.5, rows)
    size = rng.integers(1, 6, rows)
    colour = np.array(COLOURS, dtype=object)[rng.integers(0, 4, rows)]
    table = pa.table({
        "age": pa.array(age, from_pandas=True), "income": income, "size": size, "colour": colour.tolist(), "unused": np.zeros(rows),
    })  # fmt: skip
    return table, {"age": age[~np.isnan(age)], "income": income, "size": size, "colour": colour}


def _fit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["transforms", "fit", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_fitted_parameters_match_numpy(tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    table, columns = _table()
    path = tmp_path / f"train.{suffix}"
    pq.write_table(table, path) if suffix == "parquet" else pcsv.write_csv(table, path)
    code, out, err = _fit(capsys, "--data", str(path), "--standardize", "age,income", "--min-max", "income", "--one-hot", "colour", "--ordinal", "size")
    assert code == 0, err
    node = json.loads(out)
    ops = {(op["op"], op["input"]): op for op in node["ops"]}
    for name in ("age", "income"):
        assert ops[("standardize", name)]["mean"] == pytest.approx(float(np.mean(columns[name])), rel=1e-9)
        assert ops[("standardize", name)]["std"] == pytest.approx(float(np.std(columns[name])), rel=1e-9)
    assert (ops[("min_max", "income")]["min"], ops[("min_max", "income")]["max"]) == pytest.approx((columns["income"].min(), columns["income"].max()))
    assert ops[("one_hot", "colour")]["vocabulary"] == sorted(COLOURS)
    assert ops[("ordinal", "size")]["vocabulary"] == sorted(np.unique(columns["size"]).tolist())
    assert {i["name"]: i["datatype"] for i in node["inputs"]} == {"age": "FP32", "income": "FP32", "colour": "BYTES", "size": "INT64"}
    # The node is one a policy takes: a sequence's first step, before a model.
    parse_policy({"kind": "sequence", "steps": [{"name": "features", "target": node}, {"name": "m", "target": {"kind": "single", "model": "m", "version": 1}}]})


def test_a_column_that_never_varies_is_scaled_by_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "flat.parquet"
    pq.write_table(pa.table({"x": [3.0, 3.0, 3.0]}), path)
    code, out, err = _fit(capsys, "--data", str(path), "--standardize", "x")
    assert code == 0, err
    assert json.loads(out)["ops"] == [{"op": "standardize", "input": "x", "mean": 3.0, "std": 1.0}]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--standardize", "nope"], "no column 'nope'"),
        (["--standardize", "colour"], "takes numbers"),
        (["--one-hot", "age"], "a vocabulary is of text or integers"),
        ([], "name the columns to fit"),
    ],
)
def test_bad_columns_are_refused_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str) -> None:
    table, _ = _table(20)
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    code, out, err = _fit(capsys, "--data", str(path), *args)
    assert code == 2 and out == ""
    assert words in err and "Traceback" not in err


def test_a_missing_or_unknown_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _fit(capsys, "--data", str(tmp_path / "none.parquet"), "--standardize", "x")
    assert code == 2 and "no file" in err
    (tmp_path / "train.json").write_text("{}")
    code, _, err = _fit(capsys, "--data", str(tmp_path / "train.json"), "--standardize", "x")
    assert code == 2 and ".parquet or .csv" in err


@pytest.mark.parametrize("flag", ["--standardize", "--min-max"])
@pytest.mark.parametrize("infinity", [float("inf"), float("-inf")])
def test_a_column_holding_an_infinity_is_refused_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, infinity: float) -> None:
    """It printed `"mean": Infinity` (not JSON) and a std of 1, the one for a column that never
    varies: a node no policy could keep."""
    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"e": [1.0, 2.0, infinity, float("nan")]}), path)
    code, out, err = _fit(capsys, "--data", str(path), flag, "e")
    assert code == 2 and out == ""
    assert "column 'e' holds an infinity" in err and "Traceback" not in err
