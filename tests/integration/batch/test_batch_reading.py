"""Reading input files nobody on the team wrote: every line-end style, JSON Lines that pyarrow
reads otherwise than JSON does (or crashes on), bytes that are not UTF-8, numbers stored as a
Parquet dictionary, compressed bytes under a plain name. Each job is compared with a plain
reading of the same file (Python's csv module, json.loads per line, pyarrow for Parquet), and
each prediction with ONNX Runtime called directly."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sluice
from sluice.handlers import batch as handlers
from tests.conftest import EVENTS, MODELS
from tests.integration.batch.inputs import FEATURES, iris_rows
from tests.integration.batch.jobs import read_errors, read_parts, run_job
from tests.integration.batch.test_batch_s3 import s3_batch  # noqa: F401  (the fixture)
from tests.support import LambdaContext

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import Principal
    from sluice.domain.jobs import BatchJob
    from sluice.wiring import Container

HEADER = ["id", *FEATURES]


def _onnx_iris(features: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The iris model's labels and class probabilities, from ONNX Runtime directly."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(MODELS / "iris.onnx"), providers=["CPUExecutionProvider"])
    labels, probabilities = session.run(None, {"input": np.asarray(features, dtype=np.float32)})
    classes = ("setosa", "versicolor", "virginica")
    return [str(label) for label in labels], np.array([[p[c] for c in classes] for p in probabilities])


def _check_scored(job: BatchJob, scored: dict[str, list[float]]) -> None:
    """The job's output rows are exactly `scored` (id -> features), in order, each as ONNX
    Runtime predicts it."""
    out = read_parts(job)
    assert out.column("id").to_pylist() == list(scored), (out.column("id").to_pylist(), list(scored))
    if not scored:
        return
    labels, probabilities = _onnx_iris(np.array(list(scored.values())))
    assert out.column("prediction").to_pylist() == labels
    for j, cls in enumerate(("setosa", "versicolor", "virginica")):
        got = np.asarray(out.column(f"probability_{cls}").to_pylist(), dtype=np.float64)
        assert np.allclose(got, probabilities[:, j], rtol=1e-6, atol=1e-7)


def _csv_reference(data: bytes) -> list[list[str]]:
    """Python's csv module over the file, header included (bytes that are not UTF-8 kept as
    lone surrogates)."""
    return list(csv.reader(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", errors="surrogateescape", newline="")))


def _csv_expectations(data: bytes) -> tuple[dict[str, list[float]], dict[int, str]]:
    """What a job should make of a CSV with an `id` key: the rows it scores, and the rows that
    fail, with why."""
    header, *records = _csv_reference(data)
    scored: dict[str, list[float]] = {}
    failed: dict[int, str] = {}
    for number, fields in enumerate(records):
        if not fields:
            failed[number] = "blank line"
        elif len(fields) != len(header):
            failed[number] = f"expected {len(header)} fields"
        elif bad := [n for n, f in zip(header, fields, strict=True) if n in HEADER and any("\udc80" <= c <= "\udcff" for c in f)]:
            failed[number] = f"'{bad[0]}' is not UTF-8 text"
        else:
            row = dict(zip(header, fields, strict=True))
            scored[row["id"]] = [float(row[f]) for f in FEATURES]
    return scored, failed


# 1. Line ends --------------------------------------------------------------------------------------
def _csv_text(rows: list[dict[str, Any]], ends: str, *, notes: bool = True) -> bytes:
    """Iris rows, with `ends` between records (`mixed`: a different one each time), and a
    quoted `note` holding line ends of every kind."""
    texts = ['"one\rtwo"', '"one\r\ntwo"', '"a, b\n\rc ""q"""', "plain", '""']
    kinds = ["\r", "\r\n", "\n"]
    out = ",".join(HEADER + ["note"] * notes) + (kinds[0] if ends == "mixed" else ends)
    for i, r in enumerate(rows):
        end = kinds[i % 3] if ends == "mixed" else ends
        out += ",".join([r["id"], *(str(r[f]) for f in FEATURES)] + [texts[i % len(texts)]] * notes) + end
    return out.encode()


@pytest.mark.parametrize(("ends", "notes"), [("\r", False), ("\r", True), ("\r\n", True), ("\n", True), ("mixed", True)])
def test_a_csv_reads_every_record_whatever_its_line_ends(batch: Container, acme: Principal, tmp_path: Path, ends: str, notes: bool) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(_csv_text(iris_rows(4000), ends, notes=notes))
    scored, failed = _csv_expectations(path.read_bytes())
    assert len(scored) == 4000 and not failed
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED", job.error
    assert job.chunks_total is not None and job.chunks_total > 1  # chunk boundaries among the line ends
    assert (job.rows_total, job.rows_in, job.rows_out, job.rows_failed) == (4000, 4000, 4000, 0)
    _check_scored(job, scored)


def test_a_csv_with_bare_cr_line_ends_through_the_step_functions_handlers(wired: Container, acme: Principal, tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(_csv_text(iris_rows(4000), "\r"))
    job = wired.batch.submit(acme, deployment="iris", input_uri=str(path), operator=True, start=False, key_columns=["id"], output_uri=str(tmp_path / "out"))
    planned = handlers.plan(json.loads((EVENTS / "batch_plan.json").read_text()) | {"job_id": job.id}, LambdaContext())
    items = json.loads((tmp_path / "home" / "batch" / "work" / "acme" / job.id / "chunks.json").read_text())
    assert sum(item["rows"] for item in items) == 4000 and len(items) > 2
    for item in items:  # what the Map's ItemSelector hands each Score
        assert handlers.score({"job": planned["job"], "chunk": item}, LambdaContext())["rows_in"] == item["rows"]
    finalize = json.loads((EVENTS / "batch_finalize.json").read_text()) | {"job_id": job.id, "plan": planned}
    summary = handlers.finalize(finalize, LambdaContext())
    assert summary["status"] == "SUCCEEDED" and (summary["rows_in"], summary["rows_out"]) == (4000, 4000), summary
    _check_scored(wired.registry.get_job("acme", job.id), _csv_expectations(path.read_bytes())[0])


# 2. A JSON Lines chunk whose first value is null ---------------------------------------------------
def _line(i: int, **changes: Any) -> bytes:
    row = iris_rows(20)[i] | changes
    return json.dumps(row).encode()


def _subprocess_env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLUICE_HOME": str(home), "SLUICE_MODE": "local",
        "SLUICE_LOG_LEVEL": "WARNING", "PYTHONPATH": str(Path(sluice.__file__).parents[1]),
    }  # fmt: skip


def _sluice(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    code = f"import sys; from sluice.cli import main; sys.exit(main({['--tenant', 'acme', *argv]!r}))"
    return subprocess.run([sys.executable, "-c", code], env=_subprocess_env(home), capture_output=True, text=True, timeout=300, check=False)


def _iris_home(home: Path) -> Path:
    """A home where acme has the deployment `iris` of the model `iris`, made in this process
    (what `sluice models push iris` and `sluice deployments create iris --model iris` make): the
    command under test runs in a process of its own, its setup need not."""
    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=home, registry="", store=""))
    acme = Principal("acme", frozenset({"admin", "predict"}), "cli")
    version = container.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())
    container.deployments.create(acme, "iris", {"kind": "single", "model": "iris", "version": version.version})
    return home


def test_a_json_lines_file_whose_first_line_is_null_is_scored_by_batch_run(tmp_path: Path) -> None:
    """pyarrow's JSON reader crashes the process on a chunk whose first value is `null`."""
    home = _iris_home(tmp_path / "home")
    path = tmp_path / "nulls.jsonl"
    path.write_bytes(b"null\n" + b"\n".join(_line(i) for i in range(1, 6)) + b"\n")
    done = _sluice(home, "batch", "run", str(path), "--deployment", "iris", "--key", "id")
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    report = json.loads(done.stdout)
    assert report["status"] == "SUCCEEDED" and report["counts"] == {"rows_in": 6, "rows_out": 5, "rows_failed": 1}
    errors = [json.loads(line) for line in (tmp_path / "nulls-scored" / "errors" / "part-00000.jsonl").read_text().splitlines()]
    assert errors == [{"row": 0, "id": None, "reason": "not a JSON object", "input": "null"}]


def test_a_json_lines_file_whose_first_line_is_null_dropped_in_the_inbox_leaves_the_server_running(tmp_path: Path) -> None:
    content = b"null\n" + _line(1) + b"\n"
    script = f"""
import time
from pathlib import Path
from sluice.batch.inbox import InboxWatcher
from sluice.demo import install_demo
from sluice.domain import Principal
from sluice.settings import Settings
from sluice.wiring import Container
container = Container.from_settings(Settings(mode="local", home=Path({str(tmp_path / "home")!r})))
install_demo(container, Principal("acme", frozenset({{"admin", "predict"}}), "t"), Path({str(MODELS)!r}))
inbox = Path({str(tmp_path / "inbox")!r})
(inbox / "iris").mkdir(parents=True)
(inbox / "iris" / "day.jsonl").write_bytes({content!r})
watcher = InboxWatcher(container.batch, inbox, "acme", interval_s=0.05)
watcher.scan_once()
(job,) = watcher.scan_once()
container.orchestrator.wait(job.id, timeout=60)
done = container.registry.get_job("acme", job.id)
print(done.status, done.rows_in, done.rows_out, done.rows_failed)
"""
    done = subprocess.run([sys.executable, "-c", script], env=_subprocess_env(tmp_path / "home"), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["SUCCEEDED", "2", "1", "1"]


# 3. JSON Lines that pyarrow reads otherwise than JSON does -----------------------------------------
def _strict_json(line: bytes) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    return json.loads(line.decode("utf-8"), parse_constant=refuse)


def _jsonl_expectations(data: bytes) -> tuple[dict[str, list[float]], dict[int, str]]:
    """json.loads on each line (held to JSON: UTF-8, no NaN): the rows a job should score, and
    the rows that fail, with why."""
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    lines = body.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    scored: dict[str, list[float]] = {}
    failed: dict[int, str] = {}
    for number, line in enumerate(lines):
        if not line.strip(b" \t\r"):
            failed[number] = "blank line"
            continue
        try:
            obj = _strict_json(line)
        except UnicodeDecodeError:
            failed[number] = "not valid JSON (not UTF-8 text)"
            continue
        except ValueError:
            failed[number] = "not valid JSON"
            continue
        if not isinstance(obj, dict):
            failed[number] = "not a JSON object"
        elif "id" not in obj:  # the job's key: a line lacking it fails (a null one is carried as null)
            failed[number] = "the line has no key 'id'"
        elif any(obj.get(f) is None for f in FEATURES):
            failed[number] = f"missing value for '{next(f for f in FEATURES if obj.get(f) is None)}'"
        else:
            scored[obj["id"]] = [float(obj[f]) for f in FEATURES]
    return scored, failed


ADVERSARIAL = {
    # two objects on one line and a blank line: as many rows as lines, but not the same rows
    "phantom": [_line(0, id="a"), _line(1, id="b") + b" " + _line(2, id="phantom"), b"", _line(3, id="d")],
    "a bare cr between two objects": [_line(0, id="a"), _line(1, id="b") + b"\r" + _line(2, id="c"), _line(3, id="d")],
    "null after the first line": [_line(0, id="a"), b"null", _line(1, id="b")],
    "nan in a field nobody reads": [_line(0, id="a"), _line(1, id="b")[:-1] + b', "note": NaN}', _line(2, id="c")],
    "not utf-8 in a key": [_line(0, id="a"), _line(1, id="b\xe9").replace(b"b\\u00e9", b"b\xe9"), _line(2, id="c")],
    "a byte order mark first": [b"\xef\xbb\xbf" + _line(0, id="a"), _line(1, id="b")],
    "crlf line ends": [_line(0, id="a") + b"\r", _line(1, id="b") + b"\r", b"\r", _line(2, id="c") + b"\r"],
    "a line lacking its key": [_line(0, id="a"), json.dumps({f: 1.0 for f in FEATURES}).encode(), _line(2, id="c")],
    "a null key": [_line(0, id="a"), _line(1, id=None), _line(2, id="c")],
    "a line lacking its key and a feature": [_line(0, id="a"), json.dumps({FEATURES[0]: 1.0}).encode(), _line(2, id="c")],
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_json_lines_give_the_records_json_loads_reads(batch: Container, acme: Principal, tmp_path: Path, name: str) -> None:
    data = b"\n".join(ADVERSARIAL[name]) + b"\n"
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    scored, failed = _jsonl_expectations(data)
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED", job.error
    assert (job.rows_in, job.rows_out, job.rows_failed) == (len(scored) + len(failed), len(scored), len(failed))
    assert {e["row"]: e["reason"] for e in read_errors(job)} == failed
    _check_scored(job, scored)


# An input of k numbers per row, as a JSON list -----------------------------------------------------
@pytest.mark.parametrize("bad", [False, True])
def test_json_lines_lists_feed_an_input_of_k_numbers(batch: Container, acme: Principal, tmp_path: Path, bad: bool) -> None:
    from tests.conftest import MODELS as models

    version = batch.models.push(acme, "iris-lists", (models / "iris.onnx").read_bytes(), feature_names=[])  # one input [batch, 4]
    batch.deployments.create(acme, "iris-lists", {"kind": "single", "model": "iris-lists", "version": version.version})
    rows = iris_rows(1200)
    lines = [json.dumps({"id": r["id"], "input": [r[f] for f in FEATURES]}).encode() for r in rows]
    failed: dict[int, str] = {}
    if bad:  # each fails alone; the others are read line by line
        lines[5] = json.dumps({"id": "short", "input": [1.0, 2.0]}).encode()
        lines[9] = json.dumps({"id": "word", "input": [1.0, "x", 2.0, 3.0]}).encode()
        failed = {5: "'input' must hold 4 values", 9: "'input' must hold a list of numbers: 'x'"}
    path = tmp_path / "lists.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    job = run_job(batch, acme, path, deployment="iris-lists", key_columns=["id"])
    assert job.status == "SUCCEEDED", job.error
    assert (job.rows_in, job.rows_out, job.rows_failed) == (1200, 1200 - len(failed), len(failed))
    assert {e["row"]: e["reason"] for e in read_errors(job)} == failed
    _check_scored(job, {r["id"]: [r[f] for f in FEATURES] for i, r in enumerate(rows) if i not in failed})


def test_json_lines_lists_under_the_input_name_feed_a_deployment_with_feature_names(batch: Container, acme: Principal, tmp_path: Path) -> None:
    """iris also takes its feature names; a file naming only `input` is fed by it, as Plan said."""
    rows = iris_rows(30)
    path = tmp_path / "input.jsonl"
    path.write_bytes(b"".join(json.dumps({"id": r["id"], "input": [r[f] for f in FEATURES]}).encode() + b"\n" for r in rows))
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert (job.status, job.rows_out, job.rows_failed) == ("SUCCEEDED", 30, 0), (job.error, read_errors(job)[:3])
    _check_scored(job, {r["id"]: [r[f] for f in FEATURES] for r in rows})


# 7. Bytes that are not UTF-8 ------------------------------------------------------------------------
def test_a_byte_that_is_not_utf8_in_a_csv_key_or_feature_fails_its_row_alone(batch: Container, acme: Principal, tmp_path: Path) -> None:
    rows = iris_rows(2000)
    lines = [",".join([*HEADER, "note"]).encode()]
    for i, r in enumerate(rows):
        key = r["id"].encode() + (b"\xff" if i == 3 else b"")
        width = str(r["sepal_width"]).encode() + (b"\xe9" if i == 1500 else b"")
        note = b"caf\xe9" if i % 7 == 0 else b"ok"  # Latin-1 in a column nobody reads: no harm
        lines.append(b",".join([key, str(r["sepal_length"]).encode(), width, str(r["petal_length"]).encode(), str(r["petal_width"]).encode(), note]))
    path = tmp_path / "in.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    scored, failed = _csv_expectations(path.read_bytes())
    assert failed == {3: "'id' is not UTF-8 text", 1500: "'sepal_width' is not UTF-8 text"}
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED", job.error
    assert (job.rows_in, job.rows_out, job.rows_failed) == (2000, 1998, 2)
    errors = read_errors(job)
    assert {e["row"]: e["reason"] for e in errors} == failed
    assert errors[0]["input"].startswith("r000003\ufffd,")  # the record as it was, the bad byte shown as such
    _check_scored(job, scored)


def test_a_csv_header_that_is_not_utf8_fails_the_job_saying_so(batch: Container, acme: Principal, tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,sepal_l\xe9ngth,sepal_width,petal_length,petal_width\nx,1,2,3,4\n")
    job = run_job(batch, acme, path, deployment="iris")
    assert job.status == "FAILED" and "first line of the CSV is not UTF-8 text" in (job.error or ""), job.error


# 8. Parquet numbers stored as a dictionary ----------------------------------------------------------
def test_parquet_numbers_stored_as_dictionary_text_are_numbers(batch: Container, acme: Principal, tmp_path: Path) -> None:
    rows = iris_rows(1500)
    columns = {"id": pa.array([r["id"] for r in rows])}
    for f in FEATURES:
        columns[f] = pa.array([str(r[f]) for r in rows]).dictionary_encode()
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table(columns), path, row_group_size=600)
    table = pq.read_table(path)  # the reference reading
    assert all(pa.types.is_dictionary(table.schema.field(f).type) for f in FEATURES)
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert job.status == "SUCCEEDED" and job.rows_failed == 0, job.error
    features = np.column_stack([np.asarray(table.column(f).cast(pa.string()).to_pylist(), dtype=np.float64) for f in FEATURES])
    _check_scored(job, dict(zip(table.column("id").to_pylist(), features.tolist(), strict=True)))


# 9. Compressed bytes under a plain name --------------------------------------------------------------
@pytest.mark.parametrize("name", ["day.csv", "day.jsonl"])
def test_compressed_bytes_under_a_plain_name_are_refused_as_compressed(batch: Container, acme: Principal, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"id,sepal_length\nx,1\n"))
    job = run_job(batch, acme, path, deployment="iris")
    assert job.status == "FAILED", job.error
    assert f"{name} is compressed (gzip)" in (job.error or "") and "cannot be split" in (job.error or ""), job.error


@pytest.mark.parametrize("name", ["day.csv", "day.jsonl"])
def test_a_parquet_file_under_a_text_name_is_refused_as_parquet(batch: Container, acme: Principal, tmp_path: Path, name: str) -> None:
    """Read as CSV, its 'columns' were its bytes, echoed back in the error. A CSV whose header
    begins `PAR1` (a gene's name) is a CSV: a Parquet file ends with those bytes too."""
    import pyarrow.parquet as pq

    path = tmp_path / name
    pq.write_table(pa.table({"id": ["a"], **{f: [1.0] for f in FEATURES}}), path)
    job = run_job(batch, acme, path, deployment="iris")
    assert job.status == "FAILED" and f"{name} is a Parquet file (it starts with PAR1)" in (job.error or ""), job.error
    if name.endswith(".csv"):
        genes = tmp_path / "genes.csv"
        genes.write_text("PAR1_expr," + ",".join(FEATURES) + "\n" + "".join(f"{i}," + ",".join(["1.0"] * 4) + "\n" for i in range(3)))
        job = run_job(batch, acme, genes, deployment="iris", output_uri=str(tmp_path / "genes-out"))
        assert (job.status, job.rows_out) == ("SUCCEEDED", 3), job.error


def test_batch_run_refuses_compressed_bytes_named_csv_as_a_failed_job(tmp_path: Path) -> None:
    home = _iris_home(tmp_path / "home")
    path = tmp_path / "day.csv"
    path.write_bytes(gzip.compress(b"id,sepal_length\nx,1\n"))
    done = _sluice(home, "batch", "run", str(path), "--deployment", "iris")
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    report = json.loads(done.stdout)
    assert report["status"] == "FAILED" and "day.csv is compressed (gzip)" in report["error"]
    assert "codec can't decode" not in done.stderr + done.stdout


# On S3: the same reading through ranged GETs ---------------------------------------------------------
# Each input made when its test runs, not at collection (every pytest-xdist worker collects).
S3_INPUTS: dict[str, Callable[[], bytes]] = {
    "bom-and-bare-cr.csv": lambda: b"\xef\xbb\xbf" + _csv_text(iris_rows(4000), "\r"),
    # the last byte is a quote: Plan reads on past a run of quotes at a range's end, and
    # must not ask S3 for bytes past the object's end
    "ends-in-a-quote.csv": lambda: _ending_in_a_quote(_csv_text(iris_rows(4000), "\n").rstrip(b"\n")),
    "bom-crlf-null.jsonl": lambda: b"\xef\xbb\xbf" + b"\r\n".join(b"null" if i == 7 else _line(i % 20, id=f"j{i}") for i in range(3000)) + b"\r\n",
}


def _ending_in_a_quote(text: bytes) -> bytes:
    return text[: text.rindex(b",")] + b',"the end"'


@pytest.mark.parametrize("name", list(S3_INPUTS))
def test_text_on_s3_reads_as_python_reads_it(s3_batch: tuple[Container, Any], acme: Principal, name: str) -> None:  # noqa: F811
    from sluice.batch.orchestrators import LocalOrchestrator
    from tests.integration.batch.test_batch_s3 import BUCKET

    container, s3 = s3_batch
    data = S3_INPUTS[name]()
    s3.put_object(Bucket=BUCKET, Key=f"inbox/acme/iris/{name}", Body=data)
    uri = f"s3://{BUCKET}/inbox/acme/iris/{name}"
    job = container.batch.submit(acme, deployment="iris", input_uri=uri, key_columns=["id"], output_format="parquet", start=False)
    LocalOrchestrator(container.batch_runner, concurrency=2).run(acme.tenant, job.id)
    done = container.registry.get_job(acme.tenant, job.id)
    scored, failed = (_csv_expectations if name.endswith(".csv") else _jsonl_expectations)(data)
    assert done.status == "SUCCEEDED", done.error
    assert done.chunks_total is not None and done.chunks_total > 1
    assert (done.rows_in, done.rows_out, done.rows_failed) == (len(scored) + len(failed), len(scored), len(failed))
    prefix = f"outbox/acme/{job.id}/"
    parts = [s3.get_object(Bucket=BUCKET, Key=f"{prefix}part-{i:05d}.parquet")["Body"].read() for i in range(done.chunks_total)]
    assert pa.concat_tables([pq.read_table(io.BytesIO(p)) for p in parts]).column("id").to_pylist() == list(scored)
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}errors/").get("Contents", [])
    errors = [json.loads(line) for o in listed for line in s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read().splitlines()]
    assert {e["row"]: e["reason"] for e in errors} == failed


def test_a_json_lines_first_line_longer_than_the_opening_is_read_to_its_end(batch: Container, acme: Principal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan reads the fields of the lines in the input's first MiB: a first line longer than that
    (a long text member) is read on to its end, and its rows scored, as such a line is anywhere
    else in the file; one longer than the bound is refused, saying so."""
    from sluice.batch import plan_text

    long = json.dumps(iris_rows(20)[0] | {"note": "x" * (3 << 19)}).encode()  # 1.5 MiB
    path = tmp_path / "long.jsonl"
    path.write_bytes(long + b"\n" + _line(1) + b"\n")
    job = run_job(batch, acme, path, deployment="iris", key_columns=["id"])
    assert (job.status, job.rows_in, job.rows_out, job.rows_failed) == ("SUCCEEDED", 2, 2, 0), job.error
    _check_scored(job, {r["id"]: [r[f] for f in FEATURES] for r in iris_rows(20)[:2]})
    after_blank = tmp_path / "after-blank.jsonl"  # the long line after a blank first one: read on to its end too
    after_blank.write_bytes(b"\r\n" + long + b"\n" + _line(1) + b"\n")
    job = run_job(batch, acme, after_blank, deployment="iris", key_columns=["id"], output_uri=str(tmp_path / "blank-out"))
    assert (job.status, job.rows_in, job.rows_out, job.rows_failed) == ("SUCCEEDED", 3, 2, 1), job.error
    monkeypatch.setattr(plan_text, "MAX_FIRST_LINE_BYTES", 1 << 20)
    refused = run_job(batch, acme, path, deployment="iris", key_columns=["id"], output_uri=str(tmp_path / "again"))
    assert refused.status == "FAILED" and "a line near the start of the input is longer than 1 MiB" in (refused.error or ""), refused.error
