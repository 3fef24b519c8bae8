"""`sluice.cli.malloc`'s rules for glibc's heap stand aside wherever the operator set glibc's
malloc thresholds themselves, whatever else the environment holds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.cli import malloc

NAMES = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_.abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=30)
OTHERS = st.dictionaries(NAMES.filter(lambda n: n not in malloc.OPERATOR_TUNABLES and n != "GLIBC_TUNABLES"), st.text(max_size=20), max_size=5)


@given(OTHERS, st.sampled_from(malloc.OPERATOR_TUNABLES), st.text(max_size=12))
def test_any_threshold_the_operator_set_is_theirs(others: dict[str, str], name: str, value: str) -> None:
    assert malloc.operator_tuned({**others, name: value})


@given(OTHERS, st.lists(st.sampled_from(["glibc.pthread.mutex_spin_count=10", "glibc.cpu.hwcaps=-AVX2", "glibc.rtld.nns=8"]), max_size=3), st.sampled_from(["mmap_threshold", "trim_threshold", "arena_max", "tcache_count"]))
def test_glibc_tunables_are_the_operators_only_where_they_set_malloc(others: dict[str, str], rest: list[str], knob: str) -> None:
    assert not malloc.operator_tuned(others)
    assert not malloc.operator_tuned({**others, "GLIBC_TUNABLES": ":".join(rest)})
    assert malloc.operator_tuned({**others, "GLIBC_TUNABLES": ":".join([*rest, f"glibc.malloc.{knob}=1"])})


def test_the_rules_are_not_set_where_the_operator_set_theirs(monkeypatch: pytest.MonkeyPatch) -> None:
    if malloc.trim() is False:
        pytest.skip("not glibc")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert malloc.keep_large_blocks() is False
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    for name in malloc.OPERATOR_TUNABLES:
        monkeypatch.delenv(name, raising=False)
    assert malloc.keep_large_blocks() is True  # glibc takes both values
