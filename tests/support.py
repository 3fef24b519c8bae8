"""Small test doubles shared by the tiers."""

from __future__ import annotations

from dataclasses import dataclass


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
