"""`sluice` reads a command line with the parser of the command it names (one command group's
module imported, not sixteen): the answer must be the full parser's, word for word, whatever
the line: the same namespace, or the same refusal and exit status."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest
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


@settings(max_examples=150, deadline=None)
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


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["--port", "--grpc-port"]), st.integers(0, 65535) | st.integers(65536, 10**17))
def test_sluice_serve_takes_a_port_only_when_it_is_one(flag: str, port: int) -> None:
    """`sluice serve --port 70000` ended in a traceback as uvicorn bound it."""
    how, read, err = _read(_parser("serve"), ["serve", flag, str(port)])
    if port <= 65535:
        assert how == "read" and read[flag[2:].replace("-", "_")] == port
    else:
        assert how == "exit 2" and f"'{port}' is not a port (0-65535)" in err


@pytest.mark.parametrize(("wait", "ok"), [("0", True), ("900", True), ("86400", True), ("nan", False), ("-5", False), ("inf", False), ("86401", False)])
def test_sluice_predict_waits_a_number_of_seconds_from_none_to_a_day(wait: str, ok: bool) -> None:
    """`--wait-s nan` polled for ever; `-5` was taken."""
    how, read, err = _read(_parser("predict"), ["predict", "iris", "--api", "http://127.0.0.1:9", "--wait-s", wait])
    assert (how, read["wait_s"] if ok else err.strip().splitlines()[-1]) == (
        ("read", float(wait)) if ok else ("exit 2", "sluice predict: error: argument --wait-s: --wait-s is seconds, from 0 to 86400 (a day)")
    )
