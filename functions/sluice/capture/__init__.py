"""Data capture: a sample of a deployment's requests and answers, kept off the request path.

`PredictionService.predict` makes one call per answered request (`Capturer.offer`): a coin
toss against the deployment's `sample_percent` and, if it lands, a non-blocking put on a
bounded queue. A thread of its own drains the queue, turns each item into a JSON record
(`records`), redacting the features the deployment names, and hands batches to a sink
(`sinks`): JSON Lines files under the home partitioned `tenant=/deployment=/dt=/hour=`
locally, a Firehose delivery stream (`put_record_batch`) on AWS. A full queue drops the
record and counts it; a sink that fails or is slow never reaches the request.
"""
