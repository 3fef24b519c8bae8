"""The principal an API Gateway authorizer's context names, request after request."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.api.deps import principal_of
from sluice.domain import Principal

_contexts = st.fixed_dictionaries(
    {"tenant": st.sampled_from(["acme", "globex", "42"])},
    optional={
        "scopes": st.one_of(st.sampled_from(["predict", "admin,predict", "predict admin", ""]), st.lists(st.sampled_from(["predict", "admin"]))),
        "subject": st.sampled_from(["key-1", "key-2", ""]),
        "principalId": st.sampled_from(["user", ""]),
    },
)


@settings(max_examples=100, deadline=None)
@given(contexts=st.lists(_contexts, min_size=1, max_size=8))
def test_each_request_acts_as_its_own_context_says(contexts: list[dict[str, Any]]) -> None:
    """Callers interleaved (tenants, scopes as text or a list, subject or principal id): each
    request's principal is the one its context names, never an earlier caller's."""
    for context in contexts:
        event = {"requestContext": {"authorizer": dict(context)}}
        found = principal_of({"aws.event": event}, None, None)  # type: ignore[arg-type]
        scopes = context.get("scopes", "")
        expected = Principal(
            context["tenant"],
            frozenset(scopes.replace(",", " ").split() if isinstance(scopes, str) else scopes),
            context.get("subject") or context.get("principalId") or "",
        )
        assert found == expected
