"""`sluice stream`'s input: a pipe read in blocks of whole lines, until its end or until told to
stop. Its lines are records as `sluice.codecs.lines` says (as a batch job's JSON Lines are)."""

from __future__ import annotations

import os
import select
import time
from typing import TYPE_CHECKING

from sluice.codecs.lines import BOM, count_lines, without_bom

if TYPE_CHECKING:
    from collections.abc import Iterator

BLOCK_BYTES = 1 << 20  # what one read takes, and about what one worker is handed at a time


class PipeReader:
    """Whole lines of `fd` in blocks of about `block_bytes`, each with the number of its first
    line: a block goes once it is that large, or once its first line has waited `max_wait_s`
    (a slow producer still gets answers). The lines stay one `bytes`: splitting them is the
    scorer's work, in whichever process scores.

    Reading stops at the end of the input, or as soon as `stop_fd` is readable (a signal
    arrived): the whole lines already read are still handed on, and a line read only in part
    is kept in `cut`, for the caller to answer. `lines` counts every line taken off the pipe."""

    def __init__(self, fd: int, max_wait_s: float, *, block_bytes: int = BLOCK_BYTES, stop_fd: int | None = None) -> None:
        self.fd = fd
        self.max_wait_s = max_wait_s
        self.block_bytes = block_bytes
        self.stop_fd = stop_fd
        self.lines = 0  # lines read: whole ones, and a last one without its newline, or cut
        self.cut = b""  # when stopped: the start of a line whose end was never read
        self.stopped = False

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        fd, stop = self.fd, self.stop_fd
        watch = select.poll()  # not select(): a process holding a thousand descriptors gets numbers past its limit
        for each in (fd,) if stop is None else (fd, stop):
            watch.register(each, select.POLLIN)
        pending, rest = b"", b""
        handed = 0  # lines handed on: the next block's first line is handed + 1
        deadline = 0.0
        at_start = True
        while True:
            wait = max(0.0, deadline - time.monotonic()) if pending else None
            ready = [each for each, _ in watch.poll(None if wait is None else wait * 1000)]
            if stop is not None and stop in ready:
                self.stopped = True
                if pending:
                    yield handed + 1, pending
                if rest:
                    self.cut = rest
                    self.lines += 1
                return
            if not ready:
                yield handed + 1, pending
                handed += count_lines(pending)
                pending = b""
                continue
            chunk = os.read(fd, self.block_bytes)
            data = rest + chunk
            if at_start:
                if chunk and len(data) < len(BOM) and BOM.startswith(data):
                    rest = data  # perhaps a byte order mark: look at the next bytes first
                    continue
                data, at_start = without_bom(data), False
            if not chunk:
                tail = pending + data  # a last line without its newline is a line, blank or not
                if data:
                    self.lines += 1
                if tail:
                    yield handed + 1, tail
                return
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if not cut:
                continue
            if not pending:
                deadline = time.monotonic() + self.max_wait_s
            whole = data[:cut]
            self.lines += whole.count(b"\n")
            pending += whole
            if len(pending) >= self.block_bytes:
                yield handed + 1, pending
                handed += count_lines(pending)
                pending = b""
