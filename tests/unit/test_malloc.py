"""`sluice.cli.malloc`'s rules for glibc's heap stand aside wherever the operator set glibc's
malloc thresholds themselves, whatever else the environment holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.cli import malloc

NAMES = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_.abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=30)
FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
OTHERS = st.dictionaries(NAMES.filter(lambda n: n not in malloc.OPERATOR_TUNABLES and n != "GLIBC_TUNABLES"), st.text(max_size=20), max_size=5)


@given(OTHERS, st.sampled_from(malloc.OPERATOR_TUNABLES), st.text(max_size=12))
def test_any_threshold_the_operator_set_is_theirs(others: dict[str, str], name: str, value: str) -> None:
    assert malloc.operator_tuned({**others, name: value})


OTHER_TUNABLES = st.sampled_from(
    ["glibc.pthread.mutex_spin_count=10", "glibc.cpu.hwcaps=-AVX2", "glibc.rtld.nns=8", "glibc.malloc.arena_max=2", "glibc.malloc.tcache_count=0", "glibc.malloc.hugetlb=1"]
)


@given(OTHERS, st.lists(OTHER_TUNABLES, max_size=4), st.sampled_from(malloc.GLIBC_TUNABLES), st.integers(0, 4))
def test_glibc_tunables_are_the_operators_only_where_they_set_a_threshold(others: dict[str, str], rest: list[str], knob: str, at: int) -> None:
    assert not malloc.operator_tuned(others)
    assert not malloc.operator_tuned({**others, "GLIBC_TUNABLES": ":".join(rest)})
    assert malloc.operator_tuned({**others, "GLIBC_TUNABLES": ":".join([*rest[:at], f"{knob}=1", *rest[at:]])})


@pytest.mark.parametrize(
    ("environ", "set_them"),
    [({}, True), ({"MALLOC_TRIM_THRESHOLD_": "131072"}, False), ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}, False), ({"MALLOC_ARENA_MAX": "2"}, True)],
)
def test_the_rules_are_set_unless_the_operator_set_theirs(environ: dict[str, str], set_them: bool) -> None:
    """In a process of its own (the rules are the process's): glibc takes both values, or none is set."""
    if malloc.trim() is False:
        pytest.skip("not glibc")
    clean = {k: v for k, v in os.environ.items() if k not in malloc.OPERATOR_TUNABLES and k != "GLIBC_TUNABLES"}
    script = "from sluice.cli.malloc import keep_large_blocks; print(keep_large_blocks())"
    done = subprocess.run([sys.executable, "-c", script], env={**clean, **environ, "PYTHONPATH": str(FUNCTIONS)}, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(set_them)
