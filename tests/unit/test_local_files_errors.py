"""Every operation of the local file store answers the machine's refusals as sluice's errors
(a 4xx or 503 with a message naming the URI), never an OSError that would reach a user as a
traceback or a 500: a path under a file, a folder where a file goes, a missing file."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sluice.batch.local_files import LocalFiles
from sluice.domain.errors import BadRequest, NotFound, SluiceError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

OPERATIONS: dict[str, Callable[[LocalFiles, str, Path], object]] = {
    "stat": lambda f, uri, _: f.stat(uri),
    "open_random": lambda f, uri, _: f.open_random(uri, "0:0"),
    "read_blocks": lambda f, uri, _: list(f.read_blocks(uri, "0:0", 0)),
    "read_bytes": lambda f, uri, _: f.read_bytes(uri),
    "exists": lambda f, uri, _: f.exists(uri),
    "write_bytes": lambda f, uri, _: f.write_bytes(uri, b"x"),
    "upload": lambda f, uri, source: f.upload(uri, source),
    "delete": lambda f, uri, _: f.delete(uri),
    "names": lambda f, uri, _: f.names(uri),
    "check_folder": lambda f, uri, _: f.check_folder(uri),
}


@pytest.mark.parametrize("where", ["under a file", "a folder", "missing"])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_each_operation_answers_a_path_it_cannot_use_with_sluices_error(operation: str, where: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"a file")
    (tmp_path / "folder").mkdir()
    source = tmp_path / "source"
    source.write_bytes(b"to upload")
    path = {"under a file": tmp_path / "file" / "x", "a folder": tmp_path / "folder", "missing": tmp_path / "none" / "x"}[where]
    try:
        OPERATIONS[operation](LocalFiles(), path.as_uri(), source)
    except SluiceError as exc:
        assert path.as_uri() in exc.message
        assert isinstance(exc, BadRequest | NotFound)
    assert (tmp_path / "file").read_bytes() == b"a file" and (tmp_path / "folder").is_dir()


def test_what_can_be_used_is_used(tmp_path: Path) -> None:
    files = LocalFiles()
    uri = (tmp_path / "out" / "a.txt").as_uri()
    files.check_folder((tmp_path / "out").as_uri())
    files.write_bytes(uri, b"x")
    assert files.exists(uri) and files.read_bytes(uri) == b"x" and files.names((tmp_path / "out").as_uri()) == ["a.txt"]
    files.delete(uri)
    files.delete(uri)  # nothing there: nothing to do
    assert not files.exists(uri)
    (tmp_path / "out" / "x").write_bytes(b"")
    with pytest.raises(BadRequest, match="is a file"):
        files.check_folder((tmp_path / "out" / "x" / "y").as_uri())


def test_a_folder_that_cannot_be_made_is_the_outputs_fault_not_a_missing_file() -> None:
    uri = "file:///proc/sluice-cannot-be-made/part-00000.parquet"  # the kernel's folder takes no new ones
    with pytest.raises(BadRequest, match="cannot write") as caught:
        LocalFiles().write_bytes(uri, b"x")
    assert caught.value.field == "output_uri" and uri in caught.value.message
