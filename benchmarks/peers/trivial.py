"""The cheapest HTTP server asyncio can be: a fixed 200 answer to every request on a
keep-alive connection. The load generator's ceiling is measured against it, so a report can
show that the generator, not the server, was never what limited a figure.

    python -m benchmarks.peers.trivial PORT
"""

from __future__ import annotations

import asyncio
import sys

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"status\":\"ok\"}"


class Trivial(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head, rest = self.buffer[:end], self.buffer[end + 4 :]
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            self.transport.write(RESPONSE)  # type: ignore[attr-defined]


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Trivial, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    port = int(sys.argv[1])
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(port))
    else:
        uvloop.run(serve(port))


if __name__ == "__main__":
    main()
