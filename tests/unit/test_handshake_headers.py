"""The handshake headers a WebSocket connection's messages are routed by: the same rule on
`sluice serve` and in the `$connect` authorizer's context on AWS, which must stay small."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.services.keys import HANDSHAKE_HEADERS_BYTES, KEY_HEADERS, handshake_headers

_names = st.one_of(
    st.sampled_from(["Authorization", "X-API-Key", "Sec-WebSocket-Protocol", "Cookie", "X-Region", "x-region", "X-User-Id", "Host"]),
    st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=":"), min_size=1, max_size=20),
)
_values = st.one_of(st.text(max_size=40), st.text(max_size=3000))


@settings(max_examples=100, deadline=None)
@given(headers=st.dictionaries(_names, _values, max_size=12))
def test_the_headers_kept_carry_no_credential_and_fit_the_authorizers_answer(headers: dict[str, str]) -> None:
    kept = handshake_headers(headers)
    assert not set(kept) & KEY_HEADERS
    assert len(json.dumps(kept, ensure_ascii=False).encode()) <= HANDSHAKE_HEADERS_BYTES
    first: dict[str, str] = {}
    for name, value in headers.items():
        first.setdefault(name.lower(), value)
    assert all(first[name] == value for name, value in kept.items())  # the first of each name, as sent
    small = {n: v for n, v in first.items() if n not in KEY_HEADERS}
    if len(json.dumps(small, ensure_ascii=False).encode()) <= HANDSHAKE_HEADERS_BYTES // 2:
        assert kept == small  # a handshake of ordinary size keeps every other header
