"""The data plane: what happens to a request or a record once it reaches sluice.

The one prediction call (`predictions.PredictionService.predict`), the policy walk
(`execution`), online batching (`batching`), the prediction cache, uploads and results of
asynchronous inference, warm-up, the shadow runner, its mirrors and comparisons. Every driver
(the HTTP API, gRPC, WebSockets, batch, streams, replay, the CLI) sits above it and only reads
and writes; the control plane (`sluice.services`: models, deployments, keys, endpoints,
rollouts) sits beside it and never imports it.
"""
