"""The HTTP server's own cost per request: the least an ASGI app can do (read the body, answer
a fixed 15-byte JSON body), served by uvicorn exactly as `sluice serve` runs (httptools,
uvloop, one worker). What sluice spends per request beyond it is sluice's.

    python -m uvicorn benchmarks.peers.asgi_floor:app --http httptools --loop uvloop
"""

from __future__ import annotations

from typing import Any

BODY = b'{"status":"ok"}'
START = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json"), (b"content-length", b"15")]}
END = {"type": "http.response.body", "body": BODY}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send(START)
    await send(END)
