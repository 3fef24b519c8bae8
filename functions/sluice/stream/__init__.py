"""Streaming inference: records from SQS, Kinesis or Kafka (or JSON Lines on a pipe) scored as
they arrive, in as few calls to the one prediction call as the policy allows.

- `records`: the events of each source read into `StreamRecord`s (body, own id, partition)
- `bindings`: which tenant, deployment and destination a source is bound to
- `reading`: decode and check records, grouped by layout into the bulk call's records
- `core`: score them through the bulk call, write each outcome, sort the failures
- `sinks`: where the output records go (SQS, Kinesis, Firehose, S3, a file)

The Lambda handler (`sluice.handlers.stream`) and `sluice stream` (the CLI) both drive `core`.
"""
