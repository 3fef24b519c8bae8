"""The Open Inference Protocol over gRPC (Triton's `inference.GRPCInferenceService`), for the
local service and a long-lived container: `sluice serve --grpc-port PORT`. API Gateway cannot
carry gRPC, so nothing here runs in Lambda. The messages and stubs are the ones compiled into
`tritonclient.grpc` (the `grpc` extra); no .proto is copied into this project.

The package is not named `grpc`: that would shadow the library it uses.
"""
