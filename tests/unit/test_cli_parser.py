"""`sluice` reads a command line with the parser of the command it names (one command group's
module imported, not sixteen): the answer must be the full parser's, word for word, whatever
the line: the same namespace, or the same refusal and exit status."""

from __future__ import annotations

import contextlib
import io
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.cli import COMMANDS, _command_of, _parser

WORDS = [
    *COMMANDS, "--tenant", "--tenant=acme", "--ten", "--t=x", "--", "-h", "--help", "acme", "run", "list", "submit",
    "status", "f.csv", "--deployment", "iris", "--concurrency", "2", "--format", "csv", "--out", "x", "--nope", "",
]  # fmt: skip


def _read(parser: Any, argv: list[str]) -> tuple[str, Any, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            return "read", vars(parser.parse_args(argv)), ""
        except SystemExit as exc:
            return f"exit {exc.code}", out.getvalue(), err.getvalue()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=7))
def test_a_command_s_own_parser_reads_every_line_as_the_full_parser_does(argv: list[str]) -> None:
    assert _read(_parser(_command_of(argv)), argv) == _read(_parser(None), argv)


def test_the_command_is_found_after_the_tenant_in_each_of_its_spellings() -> None:
    assert _command_of(["batch", "run", "f.csv"]) == "batch"
    assert _command_of(["--tenant", "batch", "serve"]) == "serve"  # a tenant named as a command
    assert _command_of(["--tenant=acme", "models", "list"]) == "models"
    assert _command_of(["--ten", "acme", "rollout", "status"]) == "rollout"
    assert _command_of(["--help", "batch"]) is None  # help, and anything unclear: the full parser
    assert _command_of(["-h"]) is None and _command_of(["nope"]) is None and _command_of([]) is None


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from(["calibration_rows", "evaluation_rows"]),
    st.integers(-3, 3) | st.integers(9_998, 10_002) | st.integers(99_998, 100_002) | st.integers(),
)
def test_sluice_optimize_takes_the_row_counts_the_api_takes(field: str, rows: int) -> None:
    """`--calibration-rows -5` once ran on rows sliced from the end; 0 ended in a library's message."""
    from pydantic import ValidationError

    from sluice.types.management import OptimizeCreate

    try:
        api = getattr(OptimizeCreate.model_validate({"data_uri": "x.csv", field: rows}), field)
    except ValidationError:
        api = None
    argv = ["optimize", "m:1", "--data", "x.csv", f"--{field.replace('_', '-')}={rows}"]
    how, read, _ = _read(_parser("optimize"), argv)
    assert (read[field] if how == "read" else None) == api
