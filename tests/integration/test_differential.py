"""One data plane, checked against a plain reference: generated CSV, JSON Lines and Parquet
inputs and stream records (tests/differential.py) go through every driver that scores many
records, and each driver's answer is compared with a reference reading of the same bytes and
with ONNX Runtime called directly on the same model (models/iris.onnx, models/diabetes_mlp.onnx).

Drivers:
- `sluice batch run FILE --deployment D` (in this process, as `sluice.cli.main`), with
  `--concurrency 1` and `2`, chunks as small as a few bytes (`batch_chunk_bytes`) or rows
  (`batch_chunk_rows`), three rows per inference call, `--key id` or not, every output format;
- `sluice stream --deployment D` (in this process with `--workers 1` and `--batch-lines` 1 to
  4096; a few examples through a real pipe to a subprocess with `--workers 2`);
- the stream Lambda handler (`sluice.handlers.stream.handler`), fed SQS (standard or FIFO) or
  Kinesis events built like those in events/.

The promise (docs/batch.md, docs/streaming.md): the same records, each exactly once, as a result
(ONNX Runtime's answer within float tolerance, the key column or id carried) or as an error with
a reason. Where the reference says a record is valid it must be scored; where it says invalid it
must be an error; never a record lost, duplicated or invented.

The reference's rules:

What a record is.
- CSV: Python's `csv` module on the bytes (RFC 4180: a quoted field may hold the delimiter, line
  breaks and doubled quotes). A record ends at `\\n`, `\\r\\n` or `\\r` outside quotes. A UTF-8
  BOM at the start of the file is not data. The first record is the header; names are read
  without the spaces around them; a name twice, a feature column missing, or the key column
  missing (when there are records) fails the job at planning, as does a file that ends inside
  a quoted field, a file with no header, and an empty (0-byte) file. Every later record is a
  row: a blank line is one (an error), a record with another number of fields is an error, and
  a key or feature field whose bytes are not UTF-8 is an error.
- JSON Lines (batch and `sluice stream`): lines end at `\\n` only; a `\\r` before it is JSON
  whitespace, and one elsewhere is part of its line. The text after the last `\\n` is a line
  too, whatever it holds (a whitespace-only fragment is a blank line). A UTF-8 BOM at the
  start is not data (a file of nothing else is empty). Each line is a record: one that is not
  UTF-8 (anywhere in it), blank, not JSON by RFC 8259 (no NaN or Infinity, no trailing text, a
  second object on the line included), or not an object is an error. An object that names a
  key twice is an error (RFC 8259 leaves its meaning open). A number beyond float64's range
  makes the line invalid JSON (RFC 8259 §9 lets a parser limit the range). A batch input
  fails at planning when it is empty, when no line names some feature ("a column missing
  altogether": a line that lacks it fails alone, as JSON Lines fields may vary by line), or,
  with `--key`, when no line names the key; an input in which no line is an object may fail at
  planning or row by row. A key of any JSON type never fails its row.
- Parquet: pyarrow's reading of the file; each row is a record. A feature or key column
  missing (when there are rows) fails the job at planning.
- Stream records (docs/streaming.md, Records): a JSON object of an optional `id` and exactly
  one of `features` (an object naming every feature and no other), `inputs` (rows of F
  numbers, or one such row) or `batch` (a non-empty list of such rows or feature objects);
  any other field than those a record may carry (`routing_key`, `deployment`, …) is an error,
  and so is a `deployment` other than the source's, and an `id` that is neither text of at
  most 128 characters nor an integer within 64 bits (a float, true/false, a list, an object).
  Each line of `sluice stream`, and each SQS body or Kinesis record's data, is one record.

What a valid number is.
- Batch, CSV and JSON Lines alike: a JSON number (not true/false), or text that is ASCII digits
  with an optional sign, decimal point and exponent, spaces or tabs around them, or nan / inf /
  infinity (which then fail as NaN and infinity do). Nothing else: not `0x1`, `1_4`, `1d0`,
  digits of other scripts, a non-breaking space, an empty field (a missing value) or null.
- Parquet: integer, floating, boolean (0 or 1) and decimal columns are numbers; text columns,
  dictionary-encoded or not, hold numbers written as text (the rule above); any other type
  (lists, structs, nulls) is not a number.
- Stream: JSON numbers only (text, true/false and null are not numbers).
- Everywhere: the number must be finite, and finite as the model's FP32 (3.4e38 at most).

What comes out.
- A valid record: ONNX Runtime's label and probabilities (iris; confidence the top one; NaN,
  or null in JSON, where ONNX Runtime says NaN) or value (diabetes) for its rows, within 1e-4 relative. Batch
  rows carry the key column or the row number, in input order. A key of a text input is text:
  as it is (an empty CSV field and a missing value alike), a JSON whole number as its digits,
  another number by its value; the form of true/false, lists and objects is left open. A
  Parquet key keeps its value. A stream output carries the record's `id` as given (the same
  JSON type and value) and its position (`source.line`; the SQS message id; the Kinesis shard
  and sequence number).
- An invalid record: a batch error record (its `row`, a `reason`, its key if any), or a stream
  error output (`error`, not `retryable`). The job counts rows in = rows out + rows failed, and
  SUCCEEDS (`_SUCCESS`, exit 0) unless the input has rows and none could be scored (FAILED,
  exit 1).

Budget: `make test` runs a fixed, derandomized set of examples (about a minute here); `make
fuzz` (SLUICE_FUZZ=1) runs SLUICE_FUZZ_SCALE (10) times as many, random ones, shrinks a failure
to a minimal example, and prints hypothesis's statistics. Inputs of the shapes in KNOWN_DEFECTS
are not generated; each such defect has a strict-xfail regression in KNOWN_DEFECT_CASES.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis.configuration import set_hypothesis_home_dir

from tests.conftest import MODELS, REPO
from tests.differential import (
    BOM,
    BatchCase,
    BatchRun,
    EventCase,
    StreamCase,
    check_batch,
    check_stream,
    csv_cases,
    event_cases,
    jsonl_cases,
    parquet_cases,
    parquet_file,
    stream_cases,
)
from tests.support import LambdaContext

if TYPE_CHECKING:
    from collections.abc import Iterator

# Inputs of these shapes break a driver today; the property tests do not generate them until
# the fix lands (then remove the entry: the generated tests take the shape up again, and the
# strict xfail of its regression in KNOWN_DEFECT_CASES turns into a failure to remove too).
DEFECTS: dict[str, str] = {
    # Reported by a user.
    "csv-bare-cr": "a CSV whose lines end in a bare CR is read as 0 rows",
    "jsonl-null-line": "a JSON Lines chunk whose first line is `null` crashes pyarrow (SIGSEGV)",
    "jsonl-two-objects-and-blank": "the JSON Lines fast path scores phantom rows when a line holds two objects and a blank line cancels out",
    "non-utf8": "one non-UTF-8 byte fails a whole batch job instead of its row",
    "parquet-dictionary-numbers": "Parquet dictionary<string> numbers are read as 'not a number'",
    "stream-bom": "`sluice stream` turns a BOM on line 1 into an error",
    "stream-whitespace-tail": "`sluice stream` drops a whitespace-only final fragment",
    "duplicate-feature": "a record naming a feature twice is scored with the last value",
    # Found by this fuzzer.
    "jsonl-bom": "a BOM before line 1 of a JSON Lines batch input is read as part of the line where orjson reads it: row 0 fails when its chunk is read line by line, and planning finds no object on that line",
    "jsonl-key-not-text": "a JSON Lines key that is true/false, a list or an object fails its row",
    "jsonl-first-object-incomplete": "a JSON Lines input whose first object lacks a feature (or the key) fails at planning, though later lines name it",
    "jsonl-first-object-unterminated": "a JSON Lines input whose first object is its last line, with no newline after it, fails at planning ('no line near the start of the input is a JSON object')",
    "jsonl-non-utf8-ignored": "a JSON Lines line with a non-UTF-8 byte in a field no one reads is scored (read line by line, the same line is refused)",
    "parquet-boolean-null": "a null in a Parquet boolean feature column fails the whole job (ArrowInvalid: fill_null(0) on booleans)",
    "jsonl-big-integer": "a JSON Lines feature that is a whole number beyond 2**53 fails the whole job (ChunkUnreadable) when its chunk is read line by line",
}

# The defects not fixed yet: their shapes are not generated, their regressions are strict xfails.
KNOWN_DEFECTS: dict[str, str] = {name: DEFECTS[name] for name in ()}

AVOID = frozenset(KNOWN_DEFECTS)

# Hypothesis keeps its files outside the repository, and no example database: every `make test`
# runs the same examples.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "sluice-fuzz-hypothesis")
# `make test`: a fixed set of examples, and a failing one reported as generated (shrinking it
# could outlast the test's timeout). `make fuzz` (SLUICE_FUZZ=1): SLUICE_FUZZ_SCALE times as many
# (10 by default), random ones, shrunk to a minimal example.
FUZZ = os.environ.get("SLUICE_FUZZ", "") not in ("", "0")
SCALE = int(os.environ.get("SLUICE_FUZZ_SCALE") or 10) if FUZZ else 1
settings.register_profile(
    "sluice-differential", derandomize=True, database=None, deadline=None, print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)  # fmt: skip
settings.register_profile(
    "sluice-fuzz", settings.get_profile("sluice-differential"), derandomize=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)  # fmt: skip
PROFILE = settings.get_profile("sluice-fuzz" if FUZZ else "sluice-differential")


def budget(examples: int) -> settings:
    return settings(PROFILE, max_examples=examples * SCALE)


# The drivers ------------------------------------------------------------------------------------
EXTENSIONS = {"csv": "csv", "jsonl": "jsonl", "parquet": "parquet"}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One sluice home for the module (acme's demo deployments), that `sluice.cli.main` uses in
    this process, with three rows per inference call (a chunk makes several). The `sluice`
    logger says warnings only, as in a process of the CLI's own: stdout is its answer."""
    from sluice.demo import install_demo
    from sluice.domain import Principal
    from sluice.observability import get_logger
    from sluice.settings import get_settings
    from sluice.wiring import get_container

    path = tmp_path_factory.mktemp("differential") / "home"
    names = ("SLUICE_HOME", "SLUICE_BATCH_INFER_ROWS", "SLUICE_DEPLOYMENT_CACHE_TTL_S", "SLUICE_CAPTURE")
    saved = {n: os.environ.get(n) for n in names}
    os.environ.update({"SLUICE_HOME": str(path), "SLUICE_BATCH_INFER_ROWS": "3", "SLUICE_DEPLOYMENT_CACHE_TTL_S": "60", "SLUICE_CAPTURE": "off"})
    get_settings.cache_clear()
    get_container.cache_clear()
    install_demo(get_container(), Principal("acme", frozenset({"admin", "predict"}), "test"), MODELS)
    logger = get_logger()
    level = logger.log_level
    logger.setLevel("WARNING")
    yield path
    logger.setLevel(level)
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    get_settings.cache_clear()
    get_container.cache_clear()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("differential-runs")


@contextmanager
def workdir(scratch: Path) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir=scratch))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _batch_argv(case: BatchCase, source: Path, out: Path, concurrency: int) -> list[str]:
    argv = ["--tenant", "acme", "batch", "run", str(source), "--deployment", case.deployment, "--out", str(out), "--concurrency", str(concurrency)]
    if case.key:
        argv += ["--key", case.key]
    if case.output:
        argv += ["--format", case.output]
    return argv


def run_batch(case: BatchCase, work: Path, concurrency: int) -> BatchRun:
    """`sluice batch run` in this process, with the case's chunk size."""
    from sluice import cli
    from sluice.wiring import get_container

    config = get_container().settings.batch
    config.batch_chunk_bytes = config.batch_chunk_rows = case.chunk
    source = work / f"input.{EXTENSIONS[case.format]}"
    source.write_bytes(case.data)
    out = work / f"scored-{concurrency}"
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = cli.main(_batch_argv(case, source, out, concurrency))
    return _batch_run(case, out, code, stdout.getvalue(), stderr.getvalue())


def run_batch_subprocess(case: BatchCase, work: Path, home: Path) -> BatchRun:
    """`sluice batch run` in a process of its own (for inputs that crash it)."""
    source = work / f"input.{EXTENSIONS[case.format]}"
    source.write_bytes(case.data)
    out = work / "scored"
    env = _env(home) | ({"SLUICE_BATCH_CHUNK_BYTES": str(case.chunk)} if case.chunk >= 64 * 1024 else {})
    done = subprocess.run([sys.executable, "-m", "sluice.cli", *_batch_argv(case, source, out, 1)], capture_output=True, text=True, env=env, timeout=120)
    return _batch_run(case, out, done.returncode, done.stdout, done.stderr)


def _env(home: Path) -> dict[str, str]:
    return {
        **os.environ, "SLUICE_HOME": str(home), "SLUICE_LOG_LEVEL": "WARNING",
        "PYTHONPATH": os.pathsep.join([str(REPO / "functions"), os.environ.get("PYTHONPATH", "")]),
    }  # fmt: skip


def _batch_run(case: BatchCase, out: Path, code: int, stdout: str, stderr: str) -> BatchRun:
    try:
        job = json.loads(stdout) if stdout.strip() else {}
    except json.JSONDecodeError:
        job = {"unparsed": stdout[-2000:]}
    fmt = case.output or case.format
    parts: list[dict[str, Any]] = []
    for part in sorted(out.glob(f"part-*.{EXTENSIONS[fmt]}")):
        try:
            if fmt == "parquet":
                parts += pq.read_table(part).to_pylist()
            elif fmt == "csv":
                parts += list(csv.DictReader(io.StringIO(part.read_bytes().decode("utf-8"), newline="")))
            else:
                parts += _json_lines(part.read_bytes())
        except UnicodeDecodeError as exc:
            raise AssertionError(f"{part.name} holds text that is not UTF-8 ({exc})") from None
    errors = [e for part in sorted(out.glob("errors/part-*.jsonl")) for e in _json_lines(part.read_bytes())]
    return BatchRun(code, job, parts, errors, (out / "_SUCCESS").exists(), stderr[-4000:])


def _json_lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.split(b"\n") if line.strip()]


def run_stream(case: StreamCase, work: Path) -> tuple[int, list[dict[str, Any]], str]:
    """`sluice stream --workers 1` in this process, its stdin and stdout files (it reads and
    writes their descriptors, as it does a pipe's)."""
    from sluice import cli

    source = work / "records.jsonl"
    source.write_bytes(case.data)
    stderr = io.StringIO()
    argv = ["--tenant", "acme", "stream", "--deployment", case.deployment, "--workers", "1", "--batch-lines", str(case.batch_lines), "--max-wait-ms", "0"]
    saved = sys.stdin, sys.stdout
    with source.open("rb") as stdin, (work / "scored.jsonl").open("w+", encoding="utf-8") as stdout, redirect_stderr(stderr):
        sys.stdin, sys.stdout = stdin, stdout  # type: ignore[assignment]
        try:
            code = cli.main(argv)
        finally:
            sys.stdin, sys.stdout = saved
        stdout.flush()
    return code, _json_lines((work / "scored.jsonl").read_bytes()), stderr.getvalue()


def run_stream_subprocess(case: StreamCase, home: Path) -> tuple[int, list[dict[str, Any]], str]:
    """`sluice stream --workers 2` in a process of its own, its stdin a pipe."""
    argv = [sys.executable, "-m", "sluice.cli", "--tenant", "acme", "stream", "--deployment", case.deployment, "--workers", "2", "--batch-lines", str(case.batch_lines)]
    done = subprocess.run(argv, input=case.data, capture_output=True, env=_env(home), timeout=120)
    return done.returncode, _json_lines(done.stdout), done.stderr.decode(errors="replace")


class MemorySink:
    """The stream function's destination, kept here: each output as the sinks encode it."""

    def __init__(self) -> None:
        self.outputs: dict[int, dict[str, Any]] = {}

    def write(self, records: Any, outputs: Any) -> set[int]:
        from sluice.stream.sinks import encode

        for index, output in outputs:
            assert index not in self.outputs, f"record {index} written twice"
            self.outputs[index] = json.loads(encode(output))
        return set()


def run_handler(case: EventCase) -> tuple[dict[str, Any], list[dict[str, Any] | None], list[dict[str, Any]]]:
    """The stream Lambda on an SQS or Kinesis event of the case's bodies, bound to acme's
    deployment: its answer, each record's output (None: none), and each record's position."""
    from sluice.handlers import stream as function
    from sluice.wiring import get_container
    from tests.integration.stream.conftest import kinesis_event, sqs_event

    container = get_container()
    if case.source.startswith("sqs"):
        event = sqs_event([body.decode() for body in case.bodies], fifo=case.source == "sqs-fifo")
        positions = [{"message_id": r["messageId"]} for r in event["Records"]]
    else:
        event = kinesis_event(list(case.bodies))
        positions = [{"shard": r["eventID"].partition(":")[0], "sequence_number": r["kinesis"]["sequenceNumber"]} for r in event["Records"]]
    sink = MemorySink()
    saved = function._container, function.sink_for, container.settings.stream.streams, container.settings.stream.stream_batch_rows
    function._container, function.sink_for = container, lambda binding: sink
    container.settings.stream.streams = {"*": {"tenant": "acme", "deployment": case.deployment, "destination": {"kind": "stdout"}}}
    container.settings.stream.stream_batch_rows = case.batch_rows
    try:
        answer = function.handler(event, LambdaContext(function_name="sluice-stream"))
    finally:
        function._container, function.sink_for, container.settings.stream.streams, container.settings.stream.stream_batch_rows = saved
    return answer, [sink.outputs.get(i) for i in range(len(case.bodies))], positions


# Checks, one per driver -------------------------------------------------------------------------
@contextmanager
def showing(case: Any) -> Iterator[None]:
    """A failed check names its input (hypothesis's own report of it may be empty)."""
    try:
        yield
    except AssertionError as exc:
        exc.args = (f"{exc}\nthe input: {case!r}",)
        raise


def check_batch_run(case: BatchCase, scratch: Path, concurrency: int = 1, *, isolated: Path | None = None) -> BatchRun:
    """`isolated`: run it in a process of its own, on this home."""
    with workdir(scratch) as work, showing(case):
        run = run_batch_subprocess(case, work, isolated) if isolated else run_batch(case, work, concurrency)
        check_batch(case, case.expected(), run)
    return run


def check_batch_runs(case: BatchCase, scratch: Path) -> None:
    """The case at `--concurrency 1`, then 2. Text chunks are scored one per thread: a text job
    of one chunk (or none: refused at planning) is scored by one thread at any concurrency, so
    its second run would be the first again. A Parquet job's inference calls are on
    `concurrency` threads, however many chunks it has."""
    first = check_batch_run(case, scratch, 1)
    if case.format == "parquet" or (first.job.get("progress") or {}).get("chunks_total") not in (0, 1, None):
        check_batch_run(case, scratch, 2)


def check_stream_run(case: StreamCase, scratch: Path) -> None:
    with workdir(scratch) as work:
        code, outputs, stderr = run_stream(case, work)
    with showing(case):
        assert code == 0, stderr
        check_stream(case.deployment, case.expected(), outputs, [{"line": n} for n in range(1, len(outputs) + 1)])


def check_handler_run(case: EventCase) -> None:
    answer, outputs, positions = run_handler(case)
    with showing(case):
        assert answer == {"batchItemFailures": []}, f"records retried: {answer}"
        missing = [i for i, o in enumerate(outputs) if o is None]
        assert not missing, f"records {missing} have no output"
        check_stream(case.deployment, case.expected(), outputs, positions)  # type: ignore[arg-type]


# The properties ---------------------------------------------------------------------------------
IRIS = "sepal_length,sepal_width,petal_length,petal_width"
SETOSA = b'{"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}'


@given(case=csv_cases(avoid=AVOID))
@budget(35)
@example(case=BatchCase("csv", "iris", f'id,{IRIS}\n"a\nb",5.1,3.5,1.4,0.2\n"c,d", 1e0 ,+3,.5,5.\r\n\n'.encode(), key="id", chunk=7))
@example(case=BatchCase("csv", "iris", f"{IRIS}\n3.4028235e38,5.2,3.4028235e38,0\n".encode(), output="jsonl"))  # ONNX Runtime says NaN
def test_csv_batch_agrees_with_the_csv_module_and_onnx_runtime(home: Path, scratch: Path, case: BatchCase) -> None:
    check_batch_runs(case, scratch)


@given(case=jsonl_cases(avoid=AVOID))
@budget(35)
@example(case=BatchCase("jsonl", "iris", SETOSA + b"\n\n" + SETOSA[:-1] + b', "x": NaN}\n' + SETOSA + b"\r\n  ", chunk=9))
@example(case=BatchCase("jsonl", "iris", BOM))  # nothing but a BOM: empty, refused at planning
@example(case=BatchCase("jsonl", "iris", SETOSA.replace(b"sepal_width", b"sepal\\u005fwidth") + b"\n", output="csv"))
def test_jsonl_batch_agrees_with_json_loads_and_onnx_runtime(home: Path, scratch: Path, case: BatchCase) -> None:
    check_batch_runs(case, scratch)


@given(case=parquet_cases(avoid=AVOID))
@budget(25)
@example(case=BatchCase("parquet", "iris", parquet_file({
    "id": pa.array(["a", None]).dictionary_encode(), "sepal_length": pa.array([2**64 - 1, 5], pa.uint64()),
    "sepal_width": pa.array([True, False]), "petal_length": pa.array(["+1.5e0 ", "\t2"], pa.large_string()),
    "petal_width": pa.array([Decimal("0.200"), Decimal("1.500")], pa.decimal128(6, 3)),
}, row_group_size=1), key="id", chunk=1, output="csv"))
def test_parquet_batch_agrees_with_pyarrow_and_onnx_runtime(home: Path, scratch: Path, case: BatchCase) -> None:
    check_batch_runs(case, scratch)


@given(case=stream_cases(avoid=AVOID))
@budget(50)
@example(case=StreamCase("iris", b'{"id": 123456789012345678901234567890, "features": ' + SETOSA + b'}\r\n{"batch": [[1, 2, 3, 4], ' + SETOSA + b"]}"))
def test_sluice_stream_agrees_with_json_loads_and_onnx_runtime(home: Path, scratch: Path, case: StreamCase) -> None:
    check_stream_run(case, scratch)


def test_sluice_stream_reads_its_pipe_in_a_process_holding_thousands_of_descriptors(home: Path, tmp_path: Path) -> None:
    """A long-lived process (a server, a test run) may hold more than 1,024 descriptors, past
    what select() can watch: the stream's own then get numbers select() refuses."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        check_stream_run(StreamCase("iris", b'{"id": 1, "features": ' + SETOSA + b"}\n"), tmp_path)
    finally:
        for fd in held:
            os.close(fd)


@given(case=event_cases(avoid=AVOID))
@budget(50)
@example(case=EventCase("iris", "sqs-fifo", (b'{"id": "a", "features": ' + SETOSA + b"}", b'{"id": "b", "inputs": [1, 2]}', b"{")))
def test_the_stream_function_agrees_with_json_loads_and_onnx_runtime(home: Path, case: EventCase) -> None:
    check_handler_run(case)


@given(case=stream_cases(avoid=AVOID))
@budget(3)
def test_sluice_stream_through_a_pipe_to_worker_processes(home: Path, case: StreamCase) -> None:
    code, outputs, stderr = run_stream_subprocess(case, home)
    with showing(case):
        assert code == 0, stderr
        check_stream(case.deployment, case.expected(), outputs, [{"line": n} for n in range(1, len(outputs) + 1)])
        errors = sum(1 for o in outputs if "error" in o)
        assert f"{len(outputs)} lines: {len(outputs) - errors} predictions, {errors} errors" in stderr


# Known defects: one minimal example each, failing today -----------------------------------------
@dataclass(frozen=True)
class Regression:
    case: BatchCase | StreamCase | EventCase
    driver: str = "in-process"  # or "subprocess": the driver crashes the process

    def check(self, home: Path, scratch: Path) -> None:
        if isinstance(self.case, BatchCase):
            check_batch_run(self.case, scratch, isolated=home if self.driver == "subprocess" else None)
        elif isinstance(self.case, StreamCase):
            check_stream_run(self.case, scratch)
        else:
            check_handler_run(self.case)


def known(defect: str, regression: Regression) -> Any:
    """A defect's minimal example: a plain regression once fixed, a strict xfail while known."""
    if defect not in KNOWN_DEFECTS:
        return pytest.param(regression, id=defect)
    return pytest.param(
        regression, id=defect,
        marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"known defect: {KNOWN_DEFECTS[defect]}"),
    )  # fmt: skip


KNOWN_DEFECT_CASES = [
    known("csv-bare-cr", Regression(BatchCase("csv", "iris", f"{IRIS}\r5.1,3.5,1.4,0.2\r".encode()))),
    known("jsonl-null-line", Regression(BatchCase("jsonl", "iris", b"null\n" + SETOSA + b"\n"), driver="subprocess")),
    known("jsonl-two-objects-and-blank", Regression(BatchCase("jsonl", "iris", SETOSA + b" " + SETOSA + b"\n\n" + SETOSA + b"\n"))),
    known("non-utf8", Regression(BatchCase("csv", "iris", f"id,{IRIS}\na\xff,5.1,3.5,1.4,0.2\nb,5.1,3.5,1.4,0.2\n".encode("latin-1"), key="id"))),
    known("parquet-dictionary-numbers", Regression(BatchCase("parquet", "iris", parquet_file(
        {n: pa.array(["5.1", "3.5"]).dictionary_encode() if n == "sepal_length" else [1.0, 2.0] for n in IRIS.split(",")}
    )))),
    known("stream-bom", Regression(StreamCase("iris", BOM + b'{"id": 1, "features": ' + SETOSA + b"}\n"))),
    known("stream-whitespace-tail", Regression(StreamCase("iris", b'{"id": 1, "features": ' + SETOSA + b"}\n "))),
    known("duplicate-feature", Regression(StreamCase("iris", b'{"id": 1, "features": ' + SETOSA[:-1] + b', "petal_width": 9}}\n'))),
    known("jsonl-bom", Regression(BatchCase("jsonl", "iris", BOM + SETOSA + b"\n{\n" + SETOSA + b"\n"))),
    known("jsonl-key-not-text", Regression(BatchCase("jsonl", "iris", SETOSA[:-1] + b', "id": true}\n', key="id"))),
    known("jsonl-first-object-incomplete", Regression(BatchCase("jsonl", "iris", b'{"sepal_length": 5.1}\n' + SETOSA + b"\n"))),
    known("jsonl-first-object-unterminated", Regression(BatchCase("jsonl", "iris", b"{\n" + SETOSA))),
    known("jsonl-non-utf8-ignored", Regression(BatchCase("jsonl", "iris", SETOSA[:-1] + b', "note": "\xff"}\n' + SETOSA + b"\n"))),
    known("jsonl-big-integer", Regression(BatchCase("jsonl", "iris", SETOSA.replace(b"5.1", b"9007199254740993") + b"\n{\n"))),
    known("parquet-boolean-null", Regression(BatchCase("parquet", "iris", parquet_file(
        {"sepal_length": [5.1, 5.0], "sepal_width": [3.5, 3.0], "petal_length": [1.4, 1.3], "petal_width": pa.array([True, None])}
    )))),
]


@pytest.mark.parametrize("regression", KNOWN_DEFECT_CASES)
def test_known_defect(home: Path, scratch: Path, regression: Regression) -> None:
    regression.check(home, scratch)
