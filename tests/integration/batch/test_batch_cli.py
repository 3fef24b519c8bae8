"""`sluice batch` on a temporary home: run a file here with a progress bar; list, status, cancel;
and the local inbox that `sluice serve` watches."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pytest

from sluice import cli
from sluice.batch.inbox import InboxWatcher
from tests.conftest import MODELS
from tests.integration.batch.inputs import iris_rows, write_input

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import Principal
    from sluice.wiring import Container


def sluice(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["--tenant", "acme", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_batch_run_scores_a_file_here_with_a_progress_bar(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sluice(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert sluice(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    source = write_input(tmp_path / "flowers.csv", iris_rows(6000))
    code, out, err = sluice(capsys, "batch", "run", str(source), "--deployment", "iris", "--key", "id", "--format", "jsonl")
    assert code == 0, err
    report = json.loads(out)
    assert report["status"] == "SUCCEEDED" and report["counts"] == {"rows_in": 6000, "rows_out": 6000, "rows_failed": 0}
    assert report["rows_per_second"] > 0 and report["output_uri"] == (tmp_path / "flowers-scored").as_uri() + "/"
    assert "100.0%" in err and "6,000/6,000 rows" in err and "\r[" in err
    first = json.loads((tmp_path / "flowers-scored" / "part-00000.jsonl").read_text().splitlines()[0])
    assert first["id"] == "r000000" and first["prediction"] in ("setosa", "versicolor", "virginica")

    code, out, _ = sluice(capsys, "batch", "list")
    assert code == 0 and report["id"] in out and "SUCCEEDED" in out
    status = json.loads(sluice(capsys, "batch", "status", report["id"])[1])
    assert status["progress"]["rows_done"] == 6000
    code, _, err = sluice(capsys, "batch", "cancel", report["id"])
    assert code == 2 and "already SUCCEEDED" in err
    code, _, err = sluice(capsys, "batch", "run", str(tmp_path / "missing.csv"), "--deployment", "iris")
    assert code == 2 and "no such file" in err
    code, _, err = sluice(capsys, "batch", "run", "/dev/null", "--deployment", "iris")
    assert code == 2 and "not a file or a folder" in err


def test_batch_submit_with_the_local_orchestrator_runs_the_job_here(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sluice(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    sluice(capsys, "deployments", "create", "iris", "--model", "iris")
    source = write_input(tmp_path / "f.parquet", iris_rows(100))
    code, out, err = sluice(capsys, "batch", "submit", str(source), "--deployment", "iris", "--out", str(tmp_path / "res"))
    assert code == 0 and "runs here" in err
    assert json.loads(out)["status"] == "SUCCEEDED" and (tmp_path / "res" / "_SUCCESS").exists()


def test_a_file_dropped_in_the_inbox_starts_one_job_once_it_settles(batch: Container, acme: Principal, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    watcher = InboxWatcher(batch.batch, inbox, "acme", interval_s=0.05)
    (inbox / "iris").mkdir(parents=True)
    path = write_input(inbox / "iris" / "day.csv", iris_rows(300))
    (inbox / "iris" / ".hidden.csv").write_text("x")
    (inbox / "iris" / "copying.csv.part").write_text("x")
    (inbox / "loose.csv").write_text("x")  # not under a deployment
    assert watcher.scan_once() == []  # first sight: it may still be being written
    (job,) = watcher.scan_once()
    assert (job.deployment, job.source, job.tenant) == ("iris", "inbox", "acme")
    assert watcher.scan_once() == []
    assert InboxWatcher(batch.batch, inbox, "acme", interval_s=0.05).scan_once() == []  # a restart
    batch.orchestrator.wait(job.id, timeout=30)  # type: ignore[union-attr]
    done = batch.registry.get_job("acme", job.id)
    assert done.status == "SUCCEEDED" and done.rows_out == 300
    assert done.output_uri.startswith(batch.batch.paths.root + "outbox/acme/")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # rewritten: a new job
    watcher.scan_once()
    (again,) = watcher.scan_once()
    assert again.id != job.id
    (inbox / "nope").mkdir()
    write_input(inbox / "nope" / "x.csv", iris_rows(3))
    watcher.scan_once()
    (rejected,) = watcher.scan_once()
    assert rejected.status == "FAILED" and rejected.error == "deployment 'nope' not found"


def test_batch_run_scores_a_folder_of_files(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sluice(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))[0] == 0
    assert sluice(capsys, "deployments", "create", "iris", "--model", "iris")[0] == 0
    folder = tmp_path / "dt=2026-11-26"
    folder.mkdir()
    for i, n in enumerate((1200, 800)):
        write_input(folder / f"part-{i}.jsonl", iris_rows(n, seed=i))
    (folder / "_SUCCESS").write_bytes(b"")
    code, out, err = sluice(capsys, "batch", "run", str(folder), "--deployment", "iris", "--format", "csv")
    assert code == 0, err
    report = json.loads(out)
    assert report["status"] == "SUCCEEDED" and report["counts"] == {"rows_in": 2000, "rows_out": 2000, "rows_failed": 0}
    assert report["output_uri"] == (tmp_path / "dt=2026-11-26-scored").as_uri() + "/"
    assert (tmp_path / "dt=2026-11-26-scored" / "part-00000.csv").read_text().startswith('"object","row","prediction"')
    code, _, err = sluice(capsys, "batch", "run", str(folder), "--deployment", "iris", "--input-format", "jsonl")
    assert code != 0 and "leave format out" in err
    code, _, err = sluice(capsys, "batch", "run", str(tmp_path / "nowhere"), "--deployment", "iris")
    assert code != 0 and "no such file or folder" in err


def test_an_output_folder_that_is_a_file_is_refused_and_leaves_nothing_behind(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sluice(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    sluice(capsys, "deployments", "create", "iris", "--model", "iris")
    source = write_input(tmp_path / "f.parquet", iris_rows(100))
    (tmp_path / "taken").write_text("a file of the user's")
    for out in ("taken", "taken/below"):
        code, _, err = sluice(capsys, "batch", "run", str(source), "--deployment", "iris", "--out", str(tmp_path / out))
        assert code == 2 and "output_uri" in err and f"{tmp_path / 'taken'} is a file" in err and "Traceback" not in err
    assert (tmp_path / "taken").read_text() == "a file of the user's"
    code, out, _ = sluice(capsys, "batch", "list")
    assert code == 0 and "job-" not in out  # nothing was created


def test_an_output_folder_that_holds_the_input_is_refused_and_the_input_kept(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Inputs named as a job's parts (an earlier job's output scored again, a Spark partition),
    with the output folder the one that holds them: the job's Plan cleared the earlier parts
    there — the input itself, gone for good. Refused at submit, naming `output_uri`; the files stay."""
    sluice(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    sluice(capsys, "deployments", "create", "iris", "--model", "iris")
    partition = tmp_path / "spark" / "dt=1"
    partition.mkdir(parents=True)
    for name in ("part-00000.csv", "part-00001.csv"):
        (partition / name).write_text("sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2\n")
    for source, out in ((partition, partition), (partition / "part-00000.csv", partition), (partition, tmp_path / "spark")):
        for command in ("run", "submit"):
            code, _, err = sluice(capsys, "batch", command, str(source), "--deployment", "iris", "--out", str(out), "--format", "csv")
            assert code == 2 and "output_uri" in err and "holds the input" in err, (command, source, out, err)
    # Other spellings of the same places: a file URL as typed (`dt=1`, where the input's is
    # `dt%3D1`), a link, `..`, a manifest listing the files, the parts under the input's prefix.
    (tmp_path / "link").symlink_to(partition)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"files": [str(partition / "part-00000.csv"), str(partition / "part-00001.csv")]}))
    for source, out in (
        (str(partition), f"file://{partition}/"),
        (str(partition), str(tmp_path / "link")),
        (str(partition), f"{tmp_path}/spark/x/../dt=1"),
        (str(manifest), str(partition)),
        (str(tmp_path / "spark"), str(partition)),
    ):
        code, said, err = sluice(capsys, "batch", "run", source, "--deployment", "iris", "--out", out, "--format", "csv")
        assert code != 0 and "holds the input" in said + err and "Traceback" not in err, (source, out, said, err)  # refused at submit, or the job failed by Plan
    assert sorted(p.name for p in partition.iterdir()) == ["part-00000.csv", "part-00001.csv"]
    # A manifest listing a file that is not there beside one in the output folder: nothing deleted.
    manifest.write_text(json.dumps({"files": [str(partition / "part-00000.csv"), str(partition / "part-09999.csv")]}))
    code, said, err = sluice(capsys, "batch", "run", str(manifest), "--deployment", "iris", "--out", str(partition), "--format", "csv")
    assert code != 0 and "Traceback" not in err, (said, err)
    assert sorted(p.name for p in partition.iterdir()) == ["part-00000.csv", "part-00001.csv"]
    for _ in range(2):  # an output folder inside the input's: its own results, replaced run after run, as before
        code, out, err = sluice(capsys, "batch", "run", str(partition), "--deployment", "iris", "--out", str(partition / "scored"), "--format", "csv")
        assert code == 0, err
    # Parts appended beside an earlier job's manifest (a writer reusing the folder): its manifest
    # lists its own parts, not these, which stay the input's.
    scored = partition / "scored"
    (scored / "part-00007.csv").write_text("sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2\n")
    code, said, err = sluice(capsys, "batch", "run", str(tmp_path / "spark"), "--deployment", "iris", "--out", str(scored), "--format", "csv")
    assert code != 0 and "holds the input" in said + err, (said, err)
    assert (scored / "part-00007.csv").exists()


def test_a_job_whose_folder_became_a_file_fails_with_a_reason_and_every_command_still_works(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder taken by a file after the job was accepted: the job fails naming it, and its
    failure (removing `_SUCCESS`, writing the manifest under a file) does not raise, then or
    whenever a later command settles the job."""
    from sluice.batch.local_files import LocalFiles

    sluice(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    sluice(capsys, "deployments", "create", "iris", "--model", "iris")
    source = write_input(tmp_path / "f.parquet", iris_rows(100))
    check = LocalFiles.check_folder

    def taken_after_the_check(self: LocalFiles, folder: str) -> None:
        check(self, folder)
        (tmp_path / "res").write_text("written meanwhile")

    monkeypatch.setattr(LocalFiles, "check_folder", taken_after_the_check)
    code, out, err = sluice(capsys, "batch", "run", str(source), "--deployment", "iris", "--out", str(tmp_path / "res"))
    report = json.loads(out)
    assert code == 1 and report["status"] == "FAILED" and "Traceback" not in err
    assert "res/part-00000.parquet" in report["error"] and "File exists" in report["error"]
    assert str(tmp_path) not in report["error"].replace((tmp_path / "res").as_uri(), "")  # the machine's path said once, as the URI
    assert (tmp_path / "res").read_text() == "written meanwhile"
    code, out, _ = sluice(capsys, "batch", "list")
    assert code == 0 and report["id"] in out and "FAILED" in out


def test_ctrl_c_during_batch_run_ends_the_job_with_a_reason_and_no_traceback(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT once a chunk has been scored (KeyboardInterrupt on the main thread, as Ctrl-C
    raises it, where the command waits for its chunks): the chunks in flight finish, the job ends
    FAILED saying it was interrupted, with what was scored recorded, and the command exits 130
    with its report. It printed a traceback and left the job RUNNING until a later command found
    it stopped."""
    import signal

    from sluice.batch import orchestrators

    sluice(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    sluice(capsys, "deployments", "create", "iris", "--model", "iris")
    source = write_input(tmp_path / "f.csv", iris_rows(6000))
    waits = 0
    real = orchestrators.wait

    def interrupted_after_the_first_chunk(*args: object, **kwargs: object) -> object:
        nonlocal waits
        waits += 1
        if waits == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(orchestrators, "wait", interrupted_after_the_first_chunk)
    code, out, err = sluice(capsys, "batch", "run", str(source), "--deployment", "iris", "--concurrency", "1")
    assert code == 128 + signal.SIGINT and "Traceback" not in err
    report = json.loads(out)
    assert report["status"] == "FAILED" and report["error"].startswith("Interrupted: the command was interrupted")
    assert 1 <= report["progress"]["chunks_done"] < report["progress"]["chunks_total"]
    code, out, err = sluice(capsys, "batch", "list")
    assert code == 0 and "FAILED" in out and "found stopped" not in err


def test_a_file_url_that_names_no_path_here_is_refused_naming_it(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`file://server/x` names a file on another machine; it was read (and written) as the local
    `/x`. A `#` in a file URL was dropped as a fragment. Each is refused, naming the field, and
    nothing is read or written."""
    sluice(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    sluice(capsys, "deployments", "create", "iris", "--model", "iris")
    data = tmp_path / "in.csv"
    data.write_text("sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2\n")
    out = tmp_path / "out"
    for source, target, field in (
        (f"file://fileserver{data}", out.as_uri(), "input_uri"),
        (data.as_uri(), f"file://fileserver{out}", "output_uri"),
        (data.as_uri() + "#x", out.as_uri(), "input_uri"),
    ):
        for command in ("run", "submit"):
            code, _, err = sluice(capsys, "batch", command, source, "--deployment", "iris", "--out", target, "--format", "csv")
            named = "file" if command == "run" and field == "input_uri" else field  # run's FILE
            assert code == 2 and named in err and ("file:///path" in err or "#" in err) and "Traceback" not in err, (command, source, target, err)
    code, _, err = sluice(capsys, "batch", "submit", data.as_uri(), "--deployment", "iris", "--out", f"FILE://fileserver{out}", "--format", "csv")
    assert code == 2 and "output_uri" in err, err  # a scheme is a scheme, in capitals too
    assert not out.exists()
    for command in ("run", "submit"):  # localhost is this machine; run takes a file URL as its path
        code, _, err = sluice(capsys, "batch", command, f"file://localhost{data}", "--deployment", "iris", "--out", (out / command).as_uri(), "--format", "csv")
        assert code == 0 and (out / command).is_dir(), err


def test_a_file_whose_name_starts_with_file_colon_is_a_file_and_rfc_8089s_short_url_a_url(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`./file:rows.csv` is a file so named (scored as it was before file URLs were checked);
    `file:/abs/path` (RFC 8089's form without a host) names /abs/path; `FILE:///abs` too."""
    sluice(capsys, "models", "push", "iris", str(MODELS / "iris.onnx"))
    sluice(capsys, "deployments", "create", "iris", "--model", "iris")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file:rows.csv").write_text("sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2\n")
    data = tmp_path / "in.csv"
    data.write_text("sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2\n")
    for n, (command, source) in enumerate((("run", "./file:rows.csv"), ("submit", "./file:rows.csv"), ("run", f"file:{data}"), ("submit", f"file:{data}"), ("submit", f"FILE://{data}"))):
        out = tmp_path / f"out{n}"
        code, _, err = sluice(capsys, "batch", command, source, "--deployment", "iris", "--out", str(out), "--format", "csv")
        assert code == 0 and (out / "part-00000.csv").is_file(), (command, source, err)
    assert not (tmp_path / "file:").exists()
    # A folder named `file:` beside the job: `./file:/…` is in it, input and output alike (made
    # relative, `file:/…` would read as a URL and the results land at the absolute path)
    inside = tmp_path / "file:" / "in"
    inside.mkdir(parents=True)
    (inside / "rows.csv").write_text("sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2\n")
    code, _, err = sluice(capsys, "batch", "run", "./file:/in/rows.csv", "--deployment", "iris", "--format", "csv")
    assert code == 0 and (inside / "rows-scored" / "part-00000.csv").is_file(), err
    code, _, err = sluice(capsys, "batch", "run", "./file:/in/rows.csv", "--deployment", "iris", "--out", "./file:/in/out", "--format", "csv")
    assert code == 0 and (inside / "out" / "part-00000.csv").is_file() and not os.path.exists("/in/out"), err
