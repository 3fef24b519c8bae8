"""`sluice.owner_only`: folders 0700 and files 0600 whatever the umask, a copy that takes no
mode from its source, the umask held for libraries, and a home open to others tightened."""

from __future__ import annotations

import contextlib
import os
import stat
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice import owner_only

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@contextlib.contextmanager
def process_umask(value: int) -> Iterator[None]:
    previous = os.umask(value)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """The most open umask a shell can have: what the helpers make must not depend on it."""
    with process_umask(0):
        yield


def test_folder_makes_every_missing_level_0700(tmp_path: Path) -> None:
    made = owner_only.folder(tmp_path / "a" / "b" / "c")
    assert made == tmp_path / "a" / "b" / "c" and made.is_dir()
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a/b", tmp_path / "a/b/c")] == [0o700] * 3
    owner_only.folder(made)  # there already: fine


def test_folder_leaves_a_folder_that_exists_as_it_is_and_refuses_when_asked(tmp_path: Path) -> None:
    (tmp_path / "theirs").mkdir(mode=0o755)
    owner_only.folder(tmp_path / "theirs" / "mine")
    assert mode(tmp_path / "theirs") == 0o755 and mode(tmp_path / "theirs/mine") == 0o700
    with pytest.raises(FileExistsError):
        owner_only.folder(tmp_path / "theirs", exist_ok=False)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(FileExistsError):
        owner_only.folder(tmp_path / "file")


def test_open_file_creates_0600_and_tightens_a_file_open_to_others(tmp_path: Path) -> None:
    with owner_only.open_file(tmp_path / "new") as fh:
        fh.write(b"one")
    assert mode(tmp_path / "new") == 0o600
    with owner_only.open_file(tmp_path / "new", "ab") as fh:
        fh.write(b"two")
    assert (tmp_path / "new").read_bytes() == b"onetwo"
    old = tmp_path / "old"
    old.write_bytes(b"x")
    old.chmod(0o755)  # as an older sluice (or a library) left it
    with owner_only.open_file(old) as fh:
        fh.write(b"y")
    assert mode(old) == 0o700 and old.read_bytes() == b"y"  # others lose access, the owner keeps hers
    with pytest.raises(FileExistsError):
        owner_only.open_file(old, "xb")


def test_write_is_atomic_0600_and_leaves_nothing_aside(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "record.json"
    owner_only.write(target, b"{}")
    assert target.read_bytes() == b"{}" and mode(target) == 0o600
    assert mode(tmp_path / "deep") == mode(tmp_path / "deep/er") == 0o700
    target.chmod(0o644)
    owner_only.write(target, b"{\"a\": 1}")  # replaced by a new file, not rewritten in place
    assert target.read_bytes() == b"{\"a\": 1}" and mode(target) == 0o600
    with pytest.raises(TypeError):
        owner_only.write(target, "not bytes")  # type: ignore[arg-type]
    assert sorted(p.name for p in target.parent.iterdir()) == ["record.json"]
    assert target.read_bytes() == b"{\"a\": 1}"


@pytest.mark.parametrize(("source_mode", "copied"), [(0o644, 0o600), (0o755, 0o700), (0o444, 0o600), (0o775, 0o700)])
def test_a_copy_takes_the_bytes_never_the_mode(tmp_path: Path, source_mode: int, copied: int) -> None:
    source = tmp_path / "source"
    source.write_bytes(b"\x7fELF" + bytes(range(256)) * 100)
    source.chmod(source_mode)
    owner_only.copy(source, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == source.read_bytes()
    assert mode(tmp_path / "copy") == copied


def test_umask_covers_what_libraries_create_and_is_restored(tmp_path: Path) -> None:
    with owner_only.umask():
        (tmp_path / "lib.txt").write_text("x")  # any writer that asks for 0666 or 0777
        (tmp_path / "libdir").mkdir()
        assert os.umask(0o077) == 0o077
    assert mode(tmp_path / "lib.txt") == 0o600 and mode(tmp_path / "libdir") == 0o700
    assert os.umask(0) == 0  # the caller's umask is back


@settings(max_examples=60, deadline=None)
@given(
    umask=st.integers(0, 0o077),  # any umask that leaves the owner's own bits alone
    parts=st.lists(st.sampled_from(["a", "b", "tenant=x", "dt=2026-11-28", ".hidden"]), min_size=1, max_size=4),
)
def test_modes_do_not_depend_on_the_umask(tmp_path_factory: pytest.TempPathFactory, umask: int, parts: list[str]) -> None:
    root = tmp_path_factory.mktemp("modes")
    with process_umask(umask):
        owner_only.write(root.joinpath(*parts, "file"), b"data")
        with owner_only.open_file(root.joinpath(*parts, "other"), "ab") as fh:
            fh.write(b"more")
    for entry in root.rglob("*"):
        assert mode(entry) == (0o700 if entry.is_dir() else 0o600), (entry, oct(umask))


def test_a_home_open_to_others_is_made_0700(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert owner_only.secure_home(home) is None and not home.exists()  # the first writer makes it
    home.mkdir(mode=0o755)
    (home / "old").write_bytes(b"")
    said = owner_only.secure_home(home)
    assert said is not None and "0755" in said and mode(home) == 0o700
    assert owner_only.secure_home(home) is None  # nothing more to do
    (tmp_path / "a-file").write_bytes(b"")
    assert owner_only.secure_home(tmp_path / "a-file") is None  # not a folder: not ours to judge


def test_a_home_of_another_user_is_warned_about_and_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o777)
    monkeypatch.setattr(os, "getuid", lambda: home.stat().st_uid + 1)
    said = owner_only.secure_home(home)
    assert said is not None and said.startswith("warning:") and "another user" in said
    assert mode(home) == 0o777
