"""Memory a `sluice serve` process gives back after a burst.

A prediction's large blocks — its body, its arrays, its answer's bytes, tens to hundreds of
kilobytes each — come from glibc's heap, which keeps what is freed for reuse: after a burst a
worker held on to what the burst needed (+16 to +18% over its resting size after 5-second
bursts of `make bench`'s burst benchmark). With blocks of 64 KiB and more mapped on their own
(`M_MMAP_THRESHOLD`), each goes back to the system as it is freed: the same bursts, run side by
side, left +6 to +7%. The cost is a map and an
unmap per large block, microseconds against a prediction's milliseconds.

Set where glibc is the allocator and `MALLOC_MMAP_THRESHOLD_` does not already say otherwise;
elsewhere (musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
LARGE_BLOCK = 64 * 1024


def return_large_blocks() -> bool:
    """Blocks of `LARGE_BLOCK` bytes and more mapped on their own in this process; whether it was set."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:  # the operator's own choice stands
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK))
