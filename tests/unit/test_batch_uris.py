"""`s3://bucket/key` split as S3 takes it: the key literally, `#` and `?` included."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.batch.uris import split_s3
from sluice.domain.errors import BadRequest

buckets = st.from_regex(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", fullmatch=True)
keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=200)


@given(buckets, keys)
def test_the_key_is_everything_after_the_bucket(bucket: str, key: str) -> None:
    assert split_s3(f"s3://{bucket}/{key}") == (bucket, key)


def test_a_key_with_a_fragment_or_query_character_is_not_cut_short() -> None:
    assert split_s3("s3://b/inbox/acme/iris/report#1.csv") == ("b", "inbox/acme/iris/report#1.csv")
    assert split_s3("s3://b/inbox/acme/iris/what?.csv") == ("b", "inbox/acme/iris/what?.csv")


@pytest.mark.parametrize("uri", ["s3:///key", "file:///x", "b/key"])
def test_what_is_no_s3_uri_is_refused_naming_the_field(uri: str) -> None:
    with pytest.raises(BadRequest) as refused:
        split_s3(uri)
    assert refused.value.field == "input_uri"


@pytest.mark.parametrize(
    ("typed", "read"),
    [
        ("S3://bucket/in/x.csv", "s3://bucket/in/x.csv"),
        ("s3://bucket/in/x.csv", "s3://bucket/in/x.csv"),
        ("FILE:///data/x.csv", "file:///data/x.csv"),
        ("File://localhost/data/x.csv", "file://localhost/data/x.csv"),
        ("file:/data/x.csv", "file:///data/x.csv"),
    ],
)
def test_a_scheme_is_read_in_any_case_and_spelled_as_every_check_spells_it(typed: str, read: str) -> None:
    """A CLI job's input or output as typed: `S3://` was a relative path (`<cwd>/S3:/bucket/…`)."""
    from sluice.batch.uris import as_uri

    assert as_uri(typed) == read
