"""Per-deployment statistics: requests, errors and latency per variant and mirror, shadow
comparisons, bandit rewards. Recorded in memory, merged into the registry in batches; the
verdicts drawn from them, and the CloudWatch alarms that judge a rollout on AWS (`alarms`)."""
