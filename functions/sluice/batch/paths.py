"""Where a deployment's batch files live, apart from what scores them: the batch service, and
the commands that only list or look at jobs, use these paths without building a runner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.domain.locations import Root

if TYPE_CHECKING:
    from sluice.domain.jobs import BatchJob


@dataclass(frozen=True, slots=True)
class BatchPaths:
    """Where a deployment's batch files live: `<root>inbox/<tenant>/<deployment>/…` for
    uploads, `<root>outbox/<tenant>/<job>/` for results, `<root>work/<tenant>/<job>/` for
    chunk lists. The root is `s3://<batch bucket>/` on AWS, a folder under the home locally."""

    root: str

    def inbox(self, tenant: str) -> str:
        return f"{self.root}inbox/{tenant}/"

    def outbox(self, tenant: str, job_id: str) -> str:
        return f"{self.root}outbox/{tenant}/{job_id}/"

    def inbox_root(self, tenant: str) -> Root:
        """The tenant's inbox as the root its inputs are confined to (`sluice.domain.locations`)."""
        return Root.of("inbox", self.inbox(tenant))

    def input_root(self, job: BatchJob) -> Root | None:
        """Where a job's input must lie: anywhere for the operator (the CLI, and a file the
        operator dropped in the folder `sluice serve` watches); else the tenant's inbox."""
        if job.operator or job.source in ("cli", "inbox"):
            return None
        return self.inbox_root(job.tenant)

    def chunk_list(self, tenant: str, job_id: str) -> str:
        return f"{self.root}work/{tenant}/{job_id}/chunks.json"
