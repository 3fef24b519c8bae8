"""The local inbox: `sluice serve` watches a folder as S3 notifications watch `inbox/` on AWS.

A file at `<inbox>/<deployment>/<name>` starts a job on that deployment, for the tenant the
server runs as. A file is taken once it has stopped changing between two looks (so a copy in
progress is not read half-written), and once per (path, size, mtime): touching or rewriting
it starts a new job, seeing it again does not. Hidden files (a part of the name starting with
`.` or `_`) and temporary ones are left alone.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sluice import owner_only
from sluice.domain.errors import SluiceError
from sluice.polling import Poller

if TYPE_CHECKING:
    from sluice.batch.service import BatchService
    from sluice.domain.jobs import BatchJob

log = logging.getLogger(__name__)
TEMPORARY = (".tmp", ".part", ".crdownload", ".partial", "~")


class InboxWatcher(Poller):
    thread_name = "sluice-inbox"
    what = "inbox scan"

    def __init__(self, service: BatchService, folder: Path, tenant: str, *, interval_s: float) -> None:
        super().__init__(interval_s=interval_s)
        self.service = service
        self.folder = folder
        self.tenant = tenant
        self._sizes: dict[Path, tuple[int, int]] = {}  # what each file looked like last time
        self._taken: set[tuple[str, int, int]] = set()

    def scan_once(self) -> list[BatchJob]:
        """Start a job for each file that is new and has stopped changing."""
        started: list[BatchJob] = []
        seen: dict[Path, tuple[int, int]] = {}
        for path in sorted(self.folder.glob("*/**/*")):
            relative = path.relative_to(self.folder)
            if not path.is_file() or any(p.startswith((".", "_")) for p in relative.parts):
                continue
            if path.name.endswith(TEMPORARY):
                continue
            info = path.stat()
            look = (info.st_size, info.st_mtime_ns)
            seen[path] = look
            identity = (str(path.resolve()), *look)
            if identity in self._taken or self._sizes.get(path) != look:
                continue  # taken already, or new since the last look: wait until it settles
            if self.stopping:  # the service is stopping: the file waits for the next start
                break
            try:
                job = self.service.start_upload(
                    self.tenant, relative.parts[0], path.resolve().as_uri(),
                    identity=[str(p) for p in identity], source="inbox",
                )  # fmt: skip
            except SluiceError as exc:  # try again on the next look
                log.warning("inbox file not started", extra={"path": str(path), "error": exc.message})
                continue
            self._taken.add(identity)
            started.append(job)
        self._sizes = seen
        return started

    def look(self) -> object:
        return self.scan_once()

    def start(self) -> threading.Thread:
        owner_only.folder(self.folder)
        return super().start()
