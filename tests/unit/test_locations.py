"""The one confined-location type (`sluice.domain.locations`): parsed once, then compared on
the parsed parts. The spellings of the security review each have a case here; the property
tests in tests/integration/test_locations.py hunt for the ones nobody wrote down."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from sluice.domain.errors import BadRequest, Forbidden, SluiceError
from sluice.domain.locations import Layout, Root, Roots, confine, file_uri
from sluice.storage.folder import path_of_file_url

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    for folder in ("batch/inbox/acme/churn", "batch/inbox/globex", "batch/inbox/acme-evil"):
        (tmp_path / "home" / folder).mkdir(parents=True)
    (tmp_path / "home" / "batch/inbox/globex/private.csv").write_text("secret\n")
    (tmp_path / "home" / "admin-key").write_text("sk_secret\n")
    return tmp_path / "home"


@pytest.fixture
def inbox(home: Path) -> Root:
    return Root.of("inbox", home / "batch/inbox/acme")


# Outside the root, however it is spelled: 403.
OUTSIDE = [
    # Finding 1 of the review: an encoded `..`, and a trailing `/..`.
    "file://{home}/batch/inbox/acme/%2e%2e/globex/private.csv",
    "file://{home}/batch/inbox/acme/%2E%2E/%2e%2e/%2e%2e/admin-key",
    "file://{home}/batch/inbox/acme/.%2e/globex/private.csv",
    "file://{home}/batch/inbox/acme/..",
    "{home}/batch/inbox/acme/..",
    "{home}/batch/inbox/acme/../globex/private.csv",
    "{home}/batch/inbox/acme-evil/x.csv",  # shares the root's spelling as a string prefix
    "file://{home}/batch/inbox/acme-evil/x.csv",
    "file://{home}/batch/inbox/globex/private.csv",
    "/etc/passwd.csv",
]
# What cannot be read one way: 400.
UNREADABLE = [
    "file://{home}/batch/inbox/acme/%2fetc%2fpasswd",  # an encoded separator
    "file://{home}/batch/inbox/acme/a%5c..%5cb.csv",  # an encoded backslash
    "file://{home}/batch/inbox/acme/a%00.csv",  # an encoded NUL
    "{home}/batch/inbox/acme/a\x00.csv",
    "{home}/batch/inbox/acme/..\\globex\\private.csv",
    "file://{home}/batch/inbox/acme/%c0%ae%c0%ae/x.csv",  # overlong UTF-8 for '..'
    "file://{home}/batch/inbox/acme/x.csv?x=1",
    "file://{home}/batch/inbox/acme/x.csv#frag",
    "file://other-host{home}/batch/inbox/acme/x.csv",
    "inbox/../globex/private.csv",
    "inbox/./x.csv",
    "inbox//x.csv",
    "outbox/x.csv",  # a root this field does not admit
    "http://example.com/x.csv",
    "",
    "   ",
    "file://{home}/batch/inbox/acme/\udc80.csv",  # a lone surrogate: valid JSON, no file's name
    "inbox/\udc80.csv",
    "s3://bucket/inbox/\udc80.csv",
]


@pytest.mark.parametrize(("spelling", "refusal"), [*((s, Forbidden) for s in OUTSIDE), *((s, BadRequest) for s in UNREADABLE)])
def test_a_location_outside_the_root_or_unreadable_is_refused_naming_the_field_not_the_path(
    home: Path, inbox: Root, spelling: str, refusal: type[SluiceError]
) -> None:
    with pytest.raises(refusal) as refused:
        confine(spelling.format(home=home), (inbox,), field="input_uri")
    assert refused.value.field == "input_uri" and str(home) not in refused.value.message


def test_a_location_inside_is_read_exactly_as_it_was_checked(home: Path, inbox: Root) -> None:
    for spelling in (
        f"file://{home}/batch/inbox/acme/churn/day%201.csv",
        f"FILE://localhost{home}/batch/inbox/acme/churn/day%201.csv",
        f"{home}/batch/inbox/acme/churn/../churn/day 1.csv",
        "inbox/churn/day 1.csv",
    ):
        where = confine(spelling, (inbox,), field="input_uri")
        assert where.key == "churn/day 1.csv" and where.shown == "inbox/churn/day 1.csv"
        assert path_of_file_url(where.uri) == home / "batch/inbox/acme/churn/day 1.csv"  # what the readers decode


def test_hive_partitions_keep_a_readable_uri_and_a_prefix_keeps_its_slash(home: Path, inbox: Root) -> None:
    where = confine(f"{home}/batch/inbox/acme/churn/dt=2026-11-28/", (inbox,), field="input_uri")
    assert where.is_prefix and where.uri.endswith("/churn/dt=2026-11-28/") and where.shown == "inbox/churn/dt=2026-11-28/"
    assert confine("inbox/", (inbox,), field="input_uri").key == ""


def test_a_link_that_leads_out_of_the_root_is_outside_and_one_that_stays_in_is_inside(home: Path, inbox: Root) -> None:
    acme = home / "batch/inbox/acme"
    os.symlink(home / "batch/inbox/globex", acme / "out")
    os.symlink(home / "admin-key", acme / "key.csv")
    os.symlink(acme / "churn", acme / "also-churn")
    for spelling in ("inbox/out/private.csv", f"{acme}/key.csv", f"file://{acme}/out/"):
        with pytest.raises(Forbidden):
            confine(spelling, (inbox,), field="input_uri")
    assert confine("inbox/also-churn/x.csv", (inbox,), field="input_uri").key == "churn/x.csv"
    where = confine("inbox/", (inbox,), field="input_uri")
    with pytest.raises(Forbidden):
        where.child("out/private.csv", field="input_uri")  # a listing that found a link


@pytest.mark.parametrize(
    ("spelling", "admitted"),
    [
        ("s3://sluice-batch/inbox/acme/day.csv", True),
        ("S3://sluice-batch/inbox/acme/churn/dt=2026-11-28/", True),
        ("inbox/day.csv", True),
        ("s3://sluice-batch/inbox/acme/../globex/private.csv", False),
        ("s3://sluice-batch/inbox/acme/%2e%2e/globex/private.csv", False),
        ("s3://sluice-batch/inbox/acme/./day.csv", False),
        ("s3://sluice-batch/inbox/acme//day.csv", False),
        ("s3://sluice-batch/inbox/acme/day.csv?versionId=1", False),
        ("s3://sluice-batch/inbox/acme-evil/day.csv", False),
        ("s3://sluice-batch/inbox/acme", False),
        ("s3://other-bucket/inbox/acme/day.csv", False),
        ("s3://sluice-batch/inbox/globex/day.csv", False),
    ],
)
def test_an_s3_key_is_taken_literally_and_compared_on_its_segments(spelling: str, admitted: bool) -> None:
    inbox = Root.of("inbox", "s3://sluice-batch/inbox/acme/")
    if admitted:
        where = confine(spelling, (inbox,), field="input_uri")
        assert where.uri.startswith("s3://sluice-batch/inbox/acme/") and where.shown == where.uri
    else:
        with pytest.raises((BadRequest, Forbidden)):
            confine(spelling, (inbox,), field="input_uri")


def test_responses_name_locations_by_root_and_never_show_a_server_path(home: Path) -> None:
    layout = Layout(batch=file_uri(home / "batch") + "/", store=file_uri(home / "artifacts") + "/tenants/{tenant}/", home=str(home))
    roots = layout.roots("acme")
    assert [r.name for r in roots.roots] == ["inbox", "outbox", "store"]
    assert roots.shown(file_uri(home / "batch/outbox/acme/job-1") + "/") == "outbox/job-1/"
    assert roots.shown(file_uri(home / "artifacts/tenants/acme/sha256/ab.onnx")) == "store/sha256/ab.onnx"
    assert roots.shown(file_uri(home / "batch/inbox/globex/x.csv")) == "$SLUICE_HOME/batch/inbox/globex/x.csv"
    assert roots.shown("file:///srv/data/flowers.csv") == "…/flowers.csv"
    assert roots.shown("s3://bucket/inbox/acme/x.csv") == "s3://bucket/inbox/acme/x.csv"
    said = roots.scrub(f"no file at {file_uri(home / 'batch/inbox/acme/a.csv')}; see {home}/registry.db")
    assert said == "no file at inbox/a.csv; see $SLUICE_HOME/registry.db"
    assert str(home) not in (said or "")


def test_a_tenant_that_could_climb_makes_no_roots() -> None:
    for tenant in ("", "..", "a/b", "{tenant}"):
        with pytest.raises(ValueError):
            Layout(batch="s3://sluice-batch/").roots(tenant)
    assert isinstance(Layout(batch="s3://sluice-batch/").roots("acme"), Roots)
