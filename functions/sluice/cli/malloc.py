"""Memory a `sluice serve` process gives back after a burst, without a mapping per large block.

A prediction's large blocks — its body, its arrays, its answer's bytes, tens of kilobytes to
megabytes each — come from glibc's heap, which keeps what is freed for reuse: after a burst a
worker held on to what the burst needed (+16 to +18% over its resting size after 5-second
bursts of `make bench`'s burst benchmark). Mapping every block of 64 KiB and more on its own
(`M_MMAP_THRESHOLD`), as `sluice serve` once did, gave each back as it was freed (+6 to +7%),
at a price that grows with the block: a fresh mapping is faulted in page by page, zeroed by
the kernel and unmapped again, for every body, array and answer. A 1 MiB gRPC request cost a
worker 3.7 ms of CPU that way.

So the heap keeps its blocks, and a thread gives what it holds free back to the system once a
second (`malloc_trim`: the main heap's top, and every whole free page inside each arena): a burst's memory
goes back within a second of its end, and a worker under steady load faults in again at most
what a second of it freed. The call runs without the GIL (ctypes lets go of it), and walks
the heap's free blocks under glibc's lock: ~0.5 ms on a fragmented gigabyte, 4 ms the first
time it hands pages back.

The heap keeps them by rule, not by glibc's guess: a block up to `MMAP_BELOW` comes from the
heap, and freeing one hands an arena's top back on the spot only past `TRIM_ABOVE`; the thread
does the rest, once a second. Left to glibc, both thresholds start low and move only once a
mapped block is freed (the top's to twice that block), so a worker still mapped blocks, and a
free that left enough at an arena's top gave pages back that the next request faulted in and
zeroed again: serving 1 MiB gRPC requests at one client, 61% of a worker's CPU was the
kernel's, most of it page faults, and a request took 2.4-2.9 ms of it; with these two rules,
about 1.0 ms (`benchmarks.bench_grpc`'s 1 MiB case).

Where glibc is not the allocator (musl, macOS) nothing is done. `MALLOC_MMAP_THRESHOLD_`,
`MALLOC_TRIM_THRESHOLD_` and glibc's other malloc tunables (`GLIBC_TUNABLES`), where the
operator sets any, apply as always: the rules above are then not set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

TRIM_EVERY_S = 1.0
MMAP_BELOW = 32 * 1024 * 1024  # the most glibc takes on a 64-bit machine (half an arena's heap)
# Free at the top of an arena before a free gives it back itself. A thread's arena (each of
# gRPC's, the executor's and ONNX Runtime's threads allocates in one) is trimmed by nothing else:
# `malloc_trim` gives back the main heap's top and the free pages inside each arena, not another
# arena's top, so this is the most such an arena keeps. At 512 MiB eight threads kept 248 MiB
# after a burst; at 16 MiB, 1 MiB, and one worker took 8 page faults a 1 MiB gRPC request at 8
# clients (at 4 MiB, 50; with glibc's own thresholds, ~700).
TRIM_ABOVE = 16 * 1024 * 1024
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
OPERATOR_TUNABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
GLIBC_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold", "glibc.malloc.top_pad", "glibc.malloc.mmap_max")  # the same four

_lock = threading.Lock()
_thread: threading.Thread | None = None


@cache
def _libc() -> Any:
    """glibc, or None where the C library is another (no `malloc_trim`)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    except (OSError, AttributeError):  # not glibc
        return None
    return libc


def operator_tuned(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the operator set glibc's malloc thresholds themselves, as a variable of their
    own or in `GLIBC_TUNABLES` (`name=value` pairs joined by `:`): then theirs stand. Other
    malloc settings (the number of arenas, the thread cache) do not meet these two rules."""
    if any(name in environ for name in OPERATOR_TUNABLES):
        return True
    return any(pair.partition("=")[0].strip() in GLIBC_TUNABLES for pair in environ.get("GLIBC_TUNABLES", "").split(":"))


def keep_large_blocks() -> bool:
    """Blocks up to `MMAP_BELOW` from the heap, and no trimming on a free below `TRIM_ABOVE`
    (the module's docstring says why); whether both rules are set."""
    libc = _libc()
    if libc is None or operator_tuned():
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_BELOW)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_ABOVE))


def trim() -> bool:
    """What the heap holds free given back to the system now; whether this C library can."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def give_back_after_bursts(every_s: float = TRIM_EVERY_S) -> bool:
    """A thread of this process that trims the heap every `every_s` seconds (one a process,
    however often asked), the heap keeping large blocks meanwhile (`keep_large_blocks`);
    whether one runs."""
    global _thread
    if _libc() is None:
        return False
    with _lock:
        if _thread is None or not _thread.is_alive():
            keep_large_blocks()  # the thread gives back what the heap then keeps
            _thread = threading.Thread(target=_trimming, args=(every_s,), name="sluice-malloc-trim", daemon=True)
            _thread.start()
    return True


def _trimming(every_s: float) -> None:
    while True:
        time.sleep(every_s)
        trim()


def _forked() -> None:  # a forked child has no thread of its parent's
    global _thread, _lock
    _thread, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forked)
