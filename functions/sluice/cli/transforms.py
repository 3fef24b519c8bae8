"""`sluice transforms fit --data FILE`: a `transform` node's parameters fitted from a training
file (Parquet or CSV, read with pyarrow), printed as the node's JSON to put in a policy, so the
scaling and the vocabularies a deployment applies are the ones the model was trained with.

    sluice transforms fit --data train.parquet --standardize age,income --one-hot colour

- `--standardize COL,…`: mean and standard deviation (the population's, ddof 0, as
  scikit-learn's StandardScaler; a column that never varies gets std 1, as it does there);
- `--min-max COL,…`: smallest and largest value;
- `--one-hot COL,…` and `--ordinal COL,…`: the column's distinct values, sorted.

Missing values (nulls, and NaN in a float column) are left out of every figure. The node
declares each fitted column as an input (numbers FP32, text BYTES, integers to encode INT64)
and is checked as a policy would check it before it is printed.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.cli.common import print_json
from sluice.domain.errors import BadRequest

if TYPE_CHECKING:
    import pyarrow as pa

FLAGS = (("standardize", "standardize"), ("min_max", "min-max"), ("one_hot", "one-hot"), ("ordinal", "ordinal"))


def add_transform_commands(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("transforms", help="transform steps of a policy").add_subparsers(dest="transforms_command", required=True)
    fit = group.add_parser("fit", help="fit a transform node's parameters from a training file and print the node")
    fit.add_argument("--data", type=Path, required=True, help="the training file: .parquet or .csv")
    for op, flag in FLAGS:
        fit.add_argument(f"--{flag}", dest=op, default="", metavar="COL,…", help=f"columns to {flag.replace('-', ' ')}")
    fit.set_defaults(func=cmd_fit)


def cmd_fit(args: argparse.Namespace) -> int:
    wanted = {op: [c.strip() for c in getattr(args, op).split(",") if c.strip()] for op, _ in FLAGS}
    if not any(wanted.values()):
        raise BadRequest("name the columns to fit: --standardize, --min-max, --one-hot or --ordinal", field="data")
    table = read_table(args.data, sorted({c for cols in wanted.values() for c in cols}))
    print_json(fit_node(table, wanted))
    return 0


def read_table(path: Path, columns: list[str]) -> pa.Table:
    """The named columns of a Parquet or CSV file; BadRequest naming a column it lacks."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    if not path.is_file():
        raise FileNotFoundError(f"no file {path}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            names = pq.read_schema(path).names
            table = pq.read_table(path, columns=[c for c in columns if c in names])
        elif suffix == ".csv":
            table = pcsv.read_csv(path)
            names = table.column_names
        else:
            raise BadRequest(f"{path.name}: give a .parquet or .csv file", field="data")
    except pa.ArrowException as exc:
        raise BadRequest(f"{path.name} could not be read: {exc}", field="data") from None
    missing = [c for c in columns if c not in names]
    if missing:
        raise BadRequest(f"{path.name} has no column {missing[0]!r}; it has {names}", field="data")
    return table


def fit_node(table: pa.Table, wanted: dict[str, list[str]]) -> dict[str, Any]:
    """The transform node (JSON) with the parameters `table` gives for each op's columns."""
    import pyarrow.compute as pc

    from sluice.domain.policy_numbers import check_finite
    from sluice.domain.transform_specs import answer_specs
    from sluice.domain.transforms import Transform

    inputs: dict[str, dict[str, Any]] = {}
    ops: list[dict[str, Any]] = []
    for op, _ in FLAGS:
        for name in wanted[op]:
            column = pc.drop_null(table.column(name))
            if op in ("standardize", "min_max"):
                values = _numbers(column, name, op)
                inputs.setdefault(name, {"name": name, "datatype": "FP32", "shape": [-1]})
                if op == "standardize":
                    std = float(values.std()) if values.size else 0.0
                    ops.append({"op": op, "input": name, "mean": float(values.mean()), "std": std if std > 0 and math.isfinite(std) else 1.0})
                else:
                    if values.size == 0 or values.max() <= values.min():
                        raise BadRequest(f"column {name!r} holds one value or none: min-max needs two", field="min_max")
                    ops.append({"op": op, "input": name, "min": float(values.min()), "max": float(values.max())})
            else:
                vocabulary, datatype = _vocabulary(column, name)
                inputs.setdefault(name, {"name": name, "datatype": datatype, "shape": [-1]})
                ops.append({"op": op, "input": name, "vocabulary": vocabulary})
    node = {"kind": "transform", "inputs": list(inputs.values()), "ops": ops}
    check_finite(node, field="node")  # what a policy would refuse is refused here
    parsed = Transform.model_validate(node)
    answer_specs(parsed, parsed.input_specs(), field="node")
    return node


def _numbers(column: Any, name: str, op: str) -> Any:
    import numpy as np
    import pyarrow as pa

    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        raise BadRequest(f"column {name!r} holds {column.type}: --{op.replace('_', '-')} takes numbers", field=op)
    values = column.to_numpy(zero_copy_only=False).astype(np.float64)
    values = values[~np.isnan(values)]
    infinite = np.flatnonzero(np.isinf(values))
    if infinite.size:  # no mean or bounds a policy can hold (JSON has no Infinity), and no missing value
        raise BadRequest(f"column {name!r} holds an infinity ({infinite.size} of its values): --{op.replace('_', '-')} fits finite numbers", field=op)
    return values


def _vocabulary(column: Any, name: str) -> tuple[list[Any], str]:
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        datatype = "BYTES"
    elif pa.types.is_integer(column.type):
        datatype = "INT64"
    else:
        raise BadRequest(f"column {name!r} holds {column.type}: a vocabulary is of text or integers", field="vocabulary")
    values = sorted(pc.unique(column).to_pylist())
    if not values:
        raise BadRequest(f"column {name!r} holds no values to make a vocabulary of", field="vocabulary")
    return values, datatype
