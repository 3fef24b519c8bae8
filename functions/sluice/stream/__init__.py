"""Streaming inference: records from SQS, Kinesis or Kafka (or JSON Lines on a pipe) scored as
they arrive, in as few calls to the one prediction call as the policy allows.

- `records`: the events of each source read into `StreamRecord`s (body, own id, partition)
- `bindings`: which tenant, deployment and destination a source is bound to
- `core`: decode and check records, score them micro-batched, sort the failures
- `sinks`: where the output records go (SQS, Kinesis, Firehose, S3, a file)

The Lambda handler (`sluice.handlers.stream`) and `sluice stream` (the CLI) both drive `core`.
"""
