"""The Open Inference Protocol over gRPC (Triton's `inference.GRPCInferenceService`), for the
local service and a long-lived container: `sluice serve --grpc-port PORT`. API Gateway cannot
carry gRPC, so nothing here runs in Lambda. The messages and stubs are the ones compiled into
`tritonclient.grpc` (the `grpc` extra); no .proto is copied into this project.

The package is not named `grpc`: that would shadow the library it uses.
"""


def address(host: str, port: int) -> str:
    """`host:port` as grpcio reads it (and as a client dials it): an IPv6 literal (`::`,
    `::1`) in brackets."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
