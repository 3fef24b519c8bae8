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
