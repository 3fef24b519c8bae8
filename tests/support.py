"""Small test doubles shared by the tiers."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass
class LambdaContext:
    """What the Lambda runtime passes as `context`, with the fields powertools reads."""

    function_name: str = "sluice-api"
    function_version: str = "$LATEST"
    invoked_function_arn: str = "arn:aws:lambda:eu-west-1:123456789012:function:sluice-api"
    memory_limit_in_mb: int = 1024
    aws_request_id: str = "0f2a4e8e-1111-2222-3333-444455556666"
    log_group_name: str = "/aws/lambda/sluice-api"
    log_stream_name: str = "2026/11/21/[$LATEST]abc"

    def get_remaining_time_in_millis(self) -> int:
        return 29_000


class Together:
    """A registry whose `method` each thread enters only once `parties` threads have reached
    it: whatever a caller read before its write, every other caller read too. That is the
    moment a guard made of a read and a later write loses (both callers pass the check, both
    write); a guard that is one atomic write refuses one of them. A thread's later calls of
    `method` go straight through."""

    def __init__(self, registry: object, method: str, parties: int, timeout_s: float = 10.0) -> None:
        self._registry = registry
        self._method = method
        self._barrier = threading.Barrier(parties, timeout=timeout_s)
        self._waited = threading.local()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._registry, name)
        if name != self._method:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if not getattr(self._waited, "done", False):
                self._waited.done = True
                self._barrier.wait()
            return attr(*args, **kwargs)

        return call


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run each call on a thread of its own, all released together: what each returned, or
    the exception it raised, in the order given."""
    start = threading.Barrier(len(calls))
    outcomes: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        start.wait()
        try:
            outcomes[index] = calls[index]()
        except Exception as exc:  # the outcome under test
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


FORM_BOUNDARY = "b0undary"


def form_part(name: str, value: bytes, extra: str = "") -> bytes:
    """One part of multipart/form-data, its boundary before it."""
    return f'--{FORM_BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"{extra}\r\n\r\n'.encode() + value + b"\r\n"


def upload_form(fields: dict[str, str], data: bytes | None, *, after: dict[str, str] | None = None) -> bytes:
    """An upload's form as S3 takes it (multipart/form-data, boundary `FORM_BOUNDARY`): the
    fields, the body as `file` (None: no file), any fields `after` it, the closing boundary."""
    parts = [form_part(k, v.encode()) for k, v in fields.items()]
    if data is not None:
        parts.append(form_part("file", data, '; filename="body"\r\nContent-Type: application/octet-stream'))
    parts += [form_part(k, v.encode()) for k, v in (after or {}).items()]
    return b"".join(parts) + f"--{FORM_BOUNDARY}--\r\n".encode()
