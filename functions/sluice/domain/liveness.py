"""Signs of life of the process that runs a job, kept on the job in the registry, so that any
process can tell a job at work from one whose process is gone (optimize jobs, and batch jobs
run on a machine rather than by Step Functions), and the words for a Step Functions execution
that ended without recording its job's outcome.

The process running a job names itself (`worker`: `<host>:<pid>`) and writes the job's
`heartbeat_at` every `HEARTBEAT_S`. A job whose last sign of life is older than `STALE_AFTER_S`
has lost its process (`silent`); so has one whose process, on this same host, no longer
exists (`process_gone`), which needs no wait at all.
"""

from __future__ import annotations

import os
import socket

HEARTBEAT_S = 10.0
# Several missed heartbeats, not one: a process busy on a loaded machine is late, not dead.
STALE_AFTER_S = 120.0


def this_worker() -> str:
    """This process, as a job names the process that runs it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def silent(heartbeat_at: float | None, since: float, at: float) -> bool:
    """No sign of life for more than `STALE_AFTER_S` before `at` (the last heartbeat, or
    `since` when there was none yet)."""
    return at - (heartbeat_at if heartbeat_at is not None else since) > STALE_AFTER_S


def process_gone(worker: str) -> bool:
    """True when `worker` names a process of this host that no longer exists. A process of
    another host, or one this host cannot tell about, is not known to be gone: its heartbeat
    decides."""
    host, _, pid = worker.rpartition(":")
    if os.name != "posix" or host != socket.gethostname() or not pid.isdigit() or int(pid) <= 0:
        return False
    try:
        os.kill(int(pid), 0)  # signal 0: nothing is sent, the process is only looked up
    except ProcessLookupError:
        return True
    except OSError:  # it exists, and belongs to someone else
        return False
    return False


def execution_ended(status: str, error: str | None = None) -> str:
    """Why a job whose Step Functions execution ended (`status`: SUCCEEDED, FAILED, TIMED_OUT,
    ABORTED; `error`: the execution's error name) without recording the job's outcome is FAILED."""
    ended = f"{status}: {error}" if error else status
    return f"its process stopped: its Step Functions execution ended ({ended}) without recording the job's outcome"
