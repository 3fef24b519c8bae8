"""`sluice serve --grpc-port`: the command claims the port before its workers start
(`sluice.cli.grpc_workers.claim`): a port another server listens on is refused with a message,
never a silent second server beside it; a free one is held for the workers, who share it."""

from __future__ import annotations

import socket

import pytest

from sluice.cli import grpc_workers


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_port_another_server_listens_on_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(grpc_workers.ADDRESS_VARIABLE, "")  # and what `claim` sets is undone after
    with _listening() as other:
        port = other.getsockname()[1]
        with pytest.raises(SystemExit, match=f"gRPC: cannot listen on 127.0.0.1:{port}"):
            grpc_workers.claim("127.0.0.1", port)
    assert grpc_workers.WorkerGrpc.from_environment() is None  # no worker is told to listen


def test_a_free_port_is_held_for_the_workers_who_share_it_and_kept_from_other_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(grpc_workers.ADDRESS_VARIABLE, "")  # and what `claim` sets is undone after
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hold = grpc_workers.claim("127.0.0.1", port)
    try:
        worker = grpc_workers.WorkerGrpc.from_environment()
        assert worker is not None and (worker.host, worker.port) == ("127.0.0.1", port)
        with socket.socket() as other, pytest.raises(OSError):  # another server, without SO_REUSEPORT
            other.bind(("127.0.0.1", port))
        shared = []
        for _ in range(2):  # the workers, with it: each listens, both on the one port
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen()
            shared.append(sock)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # a listener takes it; the hold never listens
        for sock in shared:
            sock.close()
    finally:
        hold.close()


def test_the_http_port_is_refused_for_grpc_before_either_is_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--port P --grpc-port P`: neither listens yet when the command checks, so the bind check
    alone would pass and the HTTP server would later fail to listen, unseen."""
    monkeypatch.setenv(grpc_workers.ADDRESS_VARIABLE, "")
    with pytest.raises(SystemExit, match="gRPC: port 8123 is the HTTP port too"):
        grpc_workers.claim("127.0.0.1", 8123, http_port=8123)
    assert grpc_workers.WorkerGrpc.from_environment() is None


@pytest.mark.parametrize("host", ["::1", "::", "127.0.0.1", "0.0.0.0"])
def test_a_worker_listens_on_an_ipv6_host_as_on_an_ipv4_one(host: str) -> None:
    """grpcio reads `::1:8000` as no address: an IPv6 host is bracketed where it is bound."""
    import asyncio

    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc as pb_grpc

    from sluice.grpc_service import address
    from sluice.grpc_service.server import start
    from sluice.settings import Settings
    from sluice.wiring import Container

    assert address("::1", 80) == "[::1]:80" and address("[::1]", 80) == "[::1]:80" and address("h", 80) == "h:80"

    async def live() -> bool:
        container = Container.from_settings(Settings(mode="local", home=__import__("tempfile").mkdtemp()))
        server, port = await start(container, host, 0)
        try:
            dial = "[::1]" if ":" in host else "127.0.0.1"
            async with grpc.aio.insecure_channel(f"{dial}:{port}") as channel:
                return (await pb_grpc.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=10)).live
        finally:
            await server.stop(None)

    assert asyncio.run(live())
