"""Batch inference: a file in, one scored row (or one error row) out per input row.

Plan splits the input into chunks, Score scores one chunk through the same prediction
service as real-time serving, Finalize checks the counts and writes the manifest. On AWS a
Step Functions state machine runs them (a distributed Map over the chunk list); locally a
thread pool does. Nothing here imports pyarrow or boto3 at module level.
"""
