"""Memory a `sluice serve` process gives back after a burst, without a mapping per large block.

A prediction's large blocks — its body, its arrays, its answer's bytes, tens of kilobytes to
megabytes each — come from glibc's heap, which keeps what is freed for reuse: after a burst a
worker held on to what the burst needed (+16 to +18% over its resting size after 5-second
bursts of `make bench`'s burst benchmark). Mapping every block of 64 KiB and more on its own
(`M_MMAP_THRESHOLD`), as `sluice serve` once did, gave each back as it was freed (+6 to +7%),
at a price that grows with the block: a fresh mapping is faulted in page by page, zeroed by
the kernel and unmapped again, for every body, array and answer. A 1 MiB gRPC request cost a
worker 3.7 ms of CPU that way, and 1.8-2.3 ms with its blocks from the heap.

So the heap keeps its blocks, and a thread gives what it holds free back to the system once a
second (`malloc_trim`: each arena's top, and every whole free page inside it): a burst's memory
goes back within a second of its end, and a worker under steady load faults in again at most
what a second of it freed. The call runs without the GIL (ctypes lets go of it), and walks
the heap's free blocks under glibc's lock: ~0.5 ms on a fragmented gigabyte, 4 ms the first
time it hands pages back.

Where glibc is not the allocator (musl, macOS) nothing is done. `MALLOC_MMAP_THRESHOLD_` and
glibc's other tunables, where the operator sets them, apply as always.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from functools import cache
from typing import Any

TRIM_EVERY_S = 1.0

_lock = threading.Lock()
_thread: threading.Thread | None = None


@cache
def _malloc_trim() -> Any:
    """glibc's `malloc_trim`, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        call = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    call.argtypes, call.restype = [ctypes.c_size_t], ctypes.c_int
    return call


def trim() -> bool:
    """What the heap holds free given back to the system now; whether this C library can."""
    call = _malloc_trim()
    if call is None:
        return False
    call(0)
    return True


def give_back_after_bursts(every_s: float = TRIM_EVERY_S) -> bool:
    """A thread of this process that trims the heap every `every_s` seconds (one a process,
    however often asked); whether one runs."""
    global _thread
    if _malloc_trim() is None:
        return False
    with _lock:
        if _thread is None or not _thread.is_alive():
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
