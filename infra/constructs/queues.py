"""SQS queues as sluice makes them: encrypted, TLS only."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_sqs as sqs
from constructs import Construct


def encrypted_queue(scope: Construct, id: str, *, fifo: bool = False, **props: Any) -> sqs.Queue:
    """SSE-KMS with the AWS-managed key (aws/sqs): no key policy to keep, the key's use shows in
    CloudTrail, and senders and Lambda use it through SQS."""
    return sqs.Queue(
        scope,
        id,
        encryption=sqs.QueueEncryption.KMS_MANAGED,
        enforce_ssl=True,
        fifo=fifo or None,
        **props,
    )
