"""A tenant is a name whoever names it: a key, an authorizer's context, the CLI's `--tenant`,
a job, a stream. It becomes a folder (`tenants/<tenant>/`), a key prefix and an IAM session
tag, so a principal, and an artifact's key, cannot be made for anything else: no `..`, no
empty tenant (whose folder would be the parent of every tenant's), no capitals that IAM and
the folder store would read as another tenant."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain import Principal
from sluice.domain.errors import BadRequest
from sluice.storage.base import artifact_key

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


@settings(max_examples=300, deadline=None)
@given(tenant=st.one_of(st.text(max_size=70), st.from_regex(NAME, fullmatch=True).map(lambda n: n + "\n"), st.sampled_from(["", "..", "../x", "a/b", "A", "a" * 64, "-a", ".", "a\x00"])))
def test_a_principal_and_an_artifact_key_are_made_for_names_only(tenant: str) -> None:
    if NAME.fullmatch(tenant):
        assert Principal(tenant, frozenset({"predict"}), "k").tenant == tenant
        assert artifact_key(tenant, "d" * 64, ".onnx") == f"tenants/{tenant}/sha256/{'d' * 64}.onnx"
        return
    with pytest.raises(BadRequest) as caught:
        Principal(tenant, frozenset({"predict"}), "k")
    assert caught.value.field == "tenant"
    with pytest.raises(BadRequest):
        artifact_key(tenant, "d" * 64, ".onnx")
