"""Property tests of tenant locations (`sluice.domain.locations`): hypothesis spells locations
as nobody wrote them down — encodings of `.` and `/`, doubled slashes, mixed case, look-alikes,
links made on the disk, trailing segments — and every one that is admitted is read, through
the very readers batch uses, and must never give back a byte of what lies outside the root.

Locally the tree holds another tenant's file, a sibling folder that shares the root's spelling
as a string prefix, the server's admin key, and links out of the root; on S3 (moto) the bucket
holds another tenant's object and keys that a normalising client would read as another key.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.batch.local_files import LocalFiles
from sluice.domain.errors import BadRequest, Forbidden, SluiceError
from sluice.domain.locations import Root, confine

if TYPE_CHECKING:
    from pathlib import Path

SECRET = b"SECRET-OF-ANOTHER-TENANT"
SEGMENTS = [
    "..", ".", "%2e%2e", "%2E%2e", ".%2e", "%2e.", "%2e", "%252e%252e", "%c0%ae%c0%ae", "\uff0e\uff0e",
    "..%2f", "%2f", "%2F", "%5c", "\\", "%00", "%0a", "", "~", "%7e", "acme", "ACME", "acme-evil", "globex",
    "private.csv", "admin-key", "ok.csv", "sub", "inner.csv", "out", "key.csv", "in", "dt=1", "a b", "%20",
    "\u2024\u2024", "\u2215", "?", "#", "%3f", "%23",
]  # fmt: skip


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """home/batch/inbox/acme is the root; everything else outside it holds SECRET."""
    home = tmp_path_factory.mktemp("locations") / "home"
    acme = home / "batch/inbox/acme"
    (acme / "sub").mkdir(parents=True)
    (acme / "ok.csv").write_bytes(b"mine\n")
    (acme / "sub/inner.csv").write_bytes(b"mine too\n")
    for outside in ("batch/inbox/globex/private.csv", "batch/inbox/acme-evil/private.csv", "admin-key", "private.csv"):
        (home / outside).parent.mkdir(parents=True, exist_ok=True)
        (home / outside).write_bytes(SECRET)
    os.symlink(home / "batch/inbox/globex", acme / "out")  # a folder link out of the root
    os.symlink(home / "admin-key", acme / "key.csv")  # a file link out of the root
    os.symlink(acme / "sub", acme / "in")  # a link that stays inside
    return home


def _spelled(root: str, scheme: str, parts: list[str], joiners: list[str], trailing: str) -> str:
    text = root
    for part, joiner in zip(parts, joiners, strict=False):
        text += joiner + part
    return scheme + text + trailing


@st.composite
def local_spellings(draw: st.DrawFn, home: str) -> str:
    scheme = draw(st.sampled_from(["", "file://", "FILE://", "file://localhost", "File://"]))
    start = draw(st.sampled_from([f"{home}/batch/inbox/acme", f"{home}/batch/inbox/ACME", f"{home}/batch/inbox", home, f"{home}/batch//inbox/acme", "inbox", ""]))
    if start == "inbox" or start == "":
        scheme = ""
    parts = draw(st.lists(st.sampled_from(SEGMENTS) | st.text(max_size=6), max_size=6))
    joiners = draw(st.lists(st.sampled_from(["/", "//", "%2f", "/./"]), min_size=len(parts), max_size=len(parts)))
    trailing = draw(st.sampled_from(["", "/", "/..", "/.", "%2f", "/%2e%2e"]))
    return _spelled(start, scheme, parts, joiners, trailing)


def test_no_local_spelling_reads_outside_the_root(tree: Path) -> None:
    root = Root.of("inbox", tree / "batch/inbox/acme")
    files = LocalFiles()
    admitted: list[str] = []

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def check(data: st.DataObject) -> None:
        spelling = data.draw(local_spellings(str(tree)) | st.text(max_size=40))
        try:
            where = confine(spelling, (root,), field="input_uri")
        except (BadRequest, Forbidden) as refused:
            assert refused.field == "input_uri" and str(tree) not in refused.message
            return
        real = os.path.realpath(where.path)
        assert real == root.path or real.startswith(root.path + "/"), (spelling, real)
        assert where.shown.startswith("inbox/")
        admitted.append(spelling)
        if os.path.isfile(real):  # read it as batch reads it: never another's bytes
            assert files.read_bytes(where.uri) != SECRET, spelling
        elif where.is_prefix and os.path.isdir(real):
            for name in files.names(where.uri):
                try:
                    child = where.child(name, field="input_uri")
                except Forbidden:
                    continue  # a link out of the root, refused
                assert files.read_bytes(child.uri) != SECRET, (spelling, name)

    check()
    assert admitted, "no spelling was admitted: the strategy tests nothing inside the root"


def test_every_link_out_of_the_root_is_refused_and_every_link_in_is_followed(tree: Path) -> None:
    root = Root.of("inbox", tree / "batch/inbox/acme")
    for spelling in ("inbox/out/private.csv", "inbox/key.csv", f"file://{tree}/batch/inbox/acme/out/"):
        with pytest.raises(Forbidden):
            confine(spelling, (root,), field="input_uri")
    assert confine("inbox/in/inner.csv", (root,), field="input_uri").key == "sub/inner.csv"


BUCKET = "sluice-batch"


@pytest.fixture(scope="module")
def bucket() -> object:
    import boto3
    from moto import mock_aws

    with mock_aws():
        s3 = boto3.client("s3", region_name="eu-west-1")
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        s3.put_object(Bucket=BUCKET, Key="inbox/acme/ok.csv", Body=b"mine\n")
        for key in ("inbox/globex/private.csv", "inbox/acme-evil/private.csv", "inbox/private.csv",
                    "inbox/acme/../globex/private.csv", "inbox/acme/%2e%2e/globex/private.csv", "admin-key"):  # fmt: skip
            s3.put_object(Bucket=BUCKET, Key=key, Body=SECRET)
        yield s3


@st.composite
def s3_spellings(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["s3://", "S3://", "s3:/", "s3:///", ""]))
    start = draw(st.sampled_from([f"{BUCKET}/inbox/acme", f"{BUCKET}/inbox/ACME", f"{BUCKET}/inbox", f"{BUCKET}", f"{BUCKET}.evil/inbox/acme", f"{BUCKET}/inbox/acme-evil"]))
    if draw(st.booleans()):
        scheme, start = "", "inbox"
    parts = draw(st.lists(st.sampled_from(SEGMENTS) | st.text(max_size=6), max_size=5))
    joiners = draw(st.lists(st.sampled_from(["/", "//", "%2f"]), min_size=len(parts), max_size=len(parts)))
    trailing = draw(st.sampled_from(["", "/", "/..", "%2f"]))
    return _spelled(start, scheme, parts, joiners, trailing)


def test_no_s3_spelling_fetches_a_key_outside_the_root(bucket: object) -> None:
    from sluice.batch.s3_files import S3Files

    root = Root.of("inbox", f"s3://{BUCKET}/inbox/acme/")
    files = S3Files(client=bucket)  # type: ignore[arg-type]
    admitted: list[str] = []

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def check(data: st.DataObject) -> None:
        spelling = data.draw(s3_spellings() | st.text(max_size=40))
        try:
            where = confine(spelling, (root,), field="input_uri")
        except (BadRequest, Forbidden) as refused:
            assert refused.field == "input_uri"
            return
        from sluice.batch.uris import split_s3

        fetched_bucket, key = split_s3(where.uri)  # the key batch's S3 reader asks for
        assert fetched_bucket == BUCKET and key.startswith("inbox/acme/"), spelling
        assert not any(part in (".", "..") for part in key.split("/")) and "%" not in key, spelling
        admitted.append(spelling)
        with contextlib.suppress(SluiceError):  # nothing there (or a prefix): nothing read
            assert files.read_bytes(where.uri) != SECRET, spelling

    check()
    assert admitted
