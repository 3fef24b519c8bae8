"""Open-loop HTTP load: requests sent at a fixed rate whatever the server does, as traffic
from many independent clients arrives, from a process of its own.

A closed loop (wrk, `benchmarks.loadgen`) slows down when the server does, so it can never
overload it; this one keeps sending. Each request is sent at its scheduled time on an idle
kept-alive connection, or a new one (at most `--max-connections` open; past that it waits for
one, and that wait counts in its latency: latency runs from the scheduled time; the `_wire`
figures run from the moment the request was written, the server's own time). With
`--preopen` the connections are opened before the first request, as a proxy's or a client's
pool would hold them, and new ones are opened only to replace those that closed. Every request
ends one way: an answer (its status and latency), a reset (the connection closed or reset
before a whole answer), a connect failure, or a client timeout (`--timeout`).

    python -m benchmarks.openloop URL --body-file F --header 'Authorization: Bearer …' --rate 500 -d 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.common import percentile

IDLE_S = 2.0  # a kept-alive connection idle longer is closed, not reused (the server's timeout is 5 s)


class Load:
    def __init__(self, host: str, port: int, request: bytes, *, timeout_s: float, max_connections: int) -> None:
        self.host, self.port, self.request = host, port, request
        self.timeout_s = timeout_s
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []
        self.slots = asyncio.Semaphore(max_connections)
        self.statuses: Counter[int] = Counter()
        self.latency_us: dict[str, list[float]] = {"2xx": [], "refused": [], "other": []}  # from the scheduled time
        self.wire_us: dict[str, list[float]] = {"2xx": [], "refused": []}  # from the request written
        self.failures: Counter[str] = Counter()
        self.retry_after: Counter[str] = Counter()
        self.codes: Counter[str] = Counter()
        self.opened = 0
        self.by_connection: dict[str, list[float]] = {"new": [], "kept": []}  # every answer's latency

    async def one(self, scheduled: float) -> None:
        try:
            async with asyncio.timeout(self.timeout_s - (time.monotonic() - scheduled)):
                await self.slots.acquire()
        except TimeoutError:
            self.failures["unsent"] += 1  # no connection free within the client's patience: never sent
            return
        try:
            await self._send(scheduled)
        finally:
            self.slots.release()

    async def _send(self, scheduled: float) -> None:
        connection = None
        try:
            async with asyncio.timeout(self.timeout_s - (time.monotonic() - scheduled)):
                while self.idle and self.idle[-1][2] < time.monotonic() - IDLE_S:
                    self.idle.pop()[1].close()  # the server may be closing it: never race its keep-alive timeout
                fresh = not self.idle
                if self.idle:
                    connection = self.idle.pop()[:2]
                else:
                    try:
                        connection = await asyncio.open_connection(self.host, self.port)
                    except OSError:
                        self.failures["connect"] += 1
                        return
                    self.opened += 1
                reader, writer = connection
                written = time.monotonic()
                writer.write(self.request)
                status, keep, head, body = await _answer(reader)
        except TimeoutError:
            self.failures["timeout"] += 1
            if connection is not None:
                connection[1].close()
            return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            self.failures["reset"] += 1
            if connection is not None:
                connection[1].close()
            return
        answered = time.monotonic()
        took = (answered - scheduled) * 1e6
        wire = (answered - written) * 1e6  # from the request on the wire: the server's own time
        self.by_connection["new" if fresh else "kept"].append(took)
        self.statuses[status] += 1
        if 200 <= status < 300:
            self.latency_us["2xx"].append(took)
            self.wire_us["2xx"].append(wire)
        elif status in (429, 503):
            self.latency_us["refused"].append(took)
            self.wire_us["refused"].append(wire)
            self.retry_after["yes" if b"\r\nretry-after:" in head.lower() else "no"] += 1
            try:
                self.codes[str(json.loads(body).get("code"))] += 1
            except (ValueError, AttributeError):
                self.codes["not JSON"] += 1
        else:
            self.latency_us["other"].append(took)
        if keep:
            self.idle.append((*connection, time.monotonic()))  # type: ignore[arg-type]
        else:
            connection[1].close()  # type: ignore[index]

    def summary(self, sent: int, wall_s: float) -> dict[str, Any]:
        def p(values: list[float], q: float) -> float | None:
            return round(percentile(values, q)) if values else None

        answered = sum(self.statuses.values())
        return {
            "sent": sent,
            "wall_s": round(wall_s, 2),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "answered_2xx": len(self.latency_us["2xx"]),
            "refused": len(self.latency_us["refused"]),
            "other_status": len(self.latency_us["other"]),
            "resets": self.failures["reset"],
            "timeouts": self.failures["timeout"],  # sent, and no answer within the client's patience
            "unsent": self.failures["unsent"],  # never sent: every connection of the pool busy meanwhile
            "connect_errors": self.failures["connect"],
            "answered": answered,
            "p50_2xx_us": p(self.latency_us["2xx"], 50),
            "p99_2xx_us": p(self.latency_us["2xx"], 99),
            "p50_refused_us": p(self.latency_us["refused"], 50),
            "p99_refused_us": p(self.latency_us["refused"], 99),
            "p50_2xx_wire_us": p(self.wire_us["2xx"], 50),
            "p99_2xx_wire_us": p(self.wire_us["2xx"], 99),
            "p50_refused_wire_us": p(self.wire_us["refused"], 50),
            "p99_refused_wire_us": p(self.wire_us["refused"], 99),
            "refusals_with_retry_after": self.retry_after["yes"],
            "refusal_codes": dict(self.codes),
            "connections_opened": self.opened,
            # A worker accepts new connections as its event loop turns: under load they wait longer.
            "p99_new_connection_us": p(self.by_connection["new"], 99),
            "p99_kept_connection_us": p(self.by_connection["kept"], 99),
        }


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bool, bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    keep = True
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and value.strip().lower() == b"close":
            keep = False
    body = await reader.readexactly(length) if length else b""
    return status, keep, head, body


async def generate(
    url: str, body: bytes, headers: dict[str, str], rate: float, duration_s: float, timeout_s: float, max_connections: int, *, preopen: bool = False
) -> dict[str, Any]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    load = Load(host, port, request, timeout_s=timeout_s, max_connections=max_connections)
    if preopen:  # the pool a proxy or a client keeps: opened before the first request, then reused
        opened = await asyncio.gather(*(asyncio.open_connection(host, port) for _ in range(max_connections)))
        load.idle = [(reader, writer, time.monotonic()) for reader, writer in opened]
    tasks: set[asyncio.Task[None]] = set()
    total = int(rate * duration_s)
    started = time.monotonic()
    cpu0 = time.process_time()
    for i in range(total):
        at = started + i / rate
        wait = at - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        task = asyncio.create_task(load.one(at))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    late = time.monotonic() - (started + (total - 1) / rate)  # how far behind its schedule the generator fell
    await asyncio.gather(*tasks)
    wall = time.monotonic() - started
    for _, writer, _ in load.idle:
        writer.close()
    return {**load.summary(total, wall), "sender_late_s": round(late, 3), "loadgen_cpu": round((time.process_time() - cpu0) / wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("-d", "--duration", type=float, default=20.0)
    parser.add_argument("--timeout", type=float, default=30.0, help="a client's patience, seconds")
    parser.add_argument("--max-connections", type=int, default=1000)
    parser.add_argument("--preopen", action="store_true", help="open every connection before the first request (a pool)")
    parser.add_argument("--body-file", type=Path, required=True)
    parser.add_argument("--header", action="append", default=[])
    args = parser.parse_args()
    if not args.url.startswith("http://127.0.0.1:"):
        parser.error("loads go to http://127.0.0.1 only")
    headers = dict(h.split(": ", 1) for h in args.header)
    work = generate(args.url, args.body_file.read_bytes(), headers, args.rate, args.duration, args.timeout, args.max_connections, preopen=args.preopen)
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(work)
    else:
        result = uvloop.run(work)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
