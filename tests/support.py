"""Small test doubles and helpers shared by the tiers: moto credentials, a hand-moved clock,
CLI homes, batch scoring that fails or waits on cue, deployment policies, an ASGI app served
on loopback."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator

    import httpx
    import pytest
    from hypothesis.strategies import SearchStrategy


@dataclass
class LambdaContext:
    """What the Lambda runtime passes as `context`, with the fields powertools reads."""

    function_name: str = "sluice-api"
    function_version: str = "$LATEST"
    invoked_function_arn: str = "arn:aws:lambda:eu-west-1:123456789012:function:sluice-api"
    memory_limit_in_mb: int = 1024
    aws_request_id: str = "0f2a4e8e-1111-2222-3333-444455556666"
    log_group_name: str = "/aws/lambda/sluice-api"
    log_stream_name: str = "2026/11/21/[$LATEST]abc"

    def get_remaining_time_in_millis(self) -> int:
        return 29_000


def forget_settings() -> None:
    """Clear this process's cached settings and container, so the next `sluice` command (or
    handler) reads the environment again."""
    from sluice.settings import get_settings
    from sluice.wiring import get_container

    get_settings.cache_clear()
    get_container.cache_clear()


@contextmanager
def cli_environment(monkeypatch: pytest.MonkeyPatch, home: Path, **environment: str) -> Iterator[Path]:
    """`home` (and any other `SLUICE_…` variables) for the `sluice` commands this process
    runs, with the settings and container caches cleared before and after."""
    monkeypatch.setenv("SLUICE_HOME", str(home))
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    forget_settings()
    try:
        yield home
    finally:
        forget_settings()


class Clock:
    """A clock a test moves by hand: `clock.now += 60`."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def share_botocore_data() -> None:
    """Every botocore session of this process reads AWS's service descriptions through one
    loader. boto3 keeps them per session, and moto gives each test a new default session, as
    sluice's client factory does for each container: parsing the JSON again (SageMaker's alone
    is megabytes) made building a client ~0.2 CPU-s, ten times one from a warm loader. The
    loader only reads files and keeps what it parsed, so sharing it changes nothing a client
    does."""
    import botocore.loaders
    import botocore.session

    if not hasattr(botocore.session.create_loader, "cache_info"):  # once
        botocore.session.create_loader = cache(botocore.loaders.create_loader)


def fake_aws_credentials(monkeypatch: pytest.MonkeyPatch, region: str) -> None:
    """Credentials and a region for moto, whatever the environment running the tests has."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": region,
    }.items():
        monkeypatch.setenv(name, value)


class OneCallAtATime:
    """A client whose calls run one at a time. moto's backend is not thread-safe (a transaction
    deep-copies tables that other threads are writing), while DynamoDB runs each request
    atomically: serializing calls, not the steps between them, keeps the races under test."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


def fail_chunks(
    monkeypatch: pytest.MonkeyPatch, error: type[Exception], message: str, *, chunks: Collection[int] | None = None
) -> None:
    """Batch scoring raises `error(message)` on each try of the chunks numbered in `chunks`
    (of every chunk where None) and scores the others as it would."""
    from sluice.batch.score import ChunkScorer

    real = ChunkScorer.score

    def failing(self: ChunkScorer, spec: Any, chunk: Any, **kw: Any) -> Any:
        if chunks is None or chunk.index in chunks:
            raise error(message)
        return real(self, spec, chunk, **kw)

    monkeypatch.setattr(ChunkScorer, "score", failing)


def hold_chunks(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Batch scoring of each chunk sets `planned`, then waits (10 s at most) for `gate` before
    it scores: (planned, gate)."""
    from sluice.batch.score import ChunkScorer

    planned, gate = threading.Event(), threading.Event()
    real = ChunkScorer.score

    def held(self: ChunkScorer, spec: Any, chunk: Any, **kw: Any) -> Any:
        planned.set()
        gate.wait(10)
        return real(self, spec, chunk, **kw)

    monkeypatch.setattr(ChunkScorer, "score", held)
    return planned, gate


def free_port() -> int:
    """A port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connection_refused(port: int) -> bool:
    """Whether a connection to `port` on loopback is refused (nothing listens there)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:  # accepted into a listener that closed meanwhile: a caller polling looks again
        return False
    return False


@contextmanager
def serving(app: Any, *, port: int | None = None, http: str = "auto") -> Iterator[str]:
    """The ASGI `app` served by uvicorn on a thread, on loopback at `port` (a free one by
    default); yields its URL once it listens, and stops it when the block ends. `http`:
    uvicorn's protocol (`sluice serve`'s is `sluice.cli.protocol:GuardedHttpToolsProtocol`)."""
    import uvicorn

    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", http=http))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def single(model: str, version: int) -> dict[str, Any]:
    """A deployment policy serving one model version."""
    return {"kind": "single", "model": model, "version": version}


def split_policy(variants: dict[str, tuple[float, dict[str, Any]]], *, routing_key: str | None = None) -> dict[str, Any]:
    """A split policy over `{name: (weight, target)}`, sticky by `routing_key` where given."""
    return {
        "kind": "split",
        **({"routing_key": routing_key} if routing_key is not None else {}),
        "variants": [{"name": name, "weight": weight, "target": target} for name, (weight, target) in variants.items()],
    }


class Together:
    """A registry whose `method` each thread enters only once `parties` threads have reached
    it: whatever a caller read before its write, every other caller read too. That is the
    moment a guard made of a read and a later write loses (both callers pass the check, both
    write); a guard that is one atomic write refuses one of them. A thread's later calls of
    `method` go straight through."""

    def __init__(self, registry: object, method: str, parties: int, timeout_s: float = 10.0) -> None:
        self._registry = registry
        self._method = method
        self._barrier = threading.Barrier(parties, timeout=timeout_s)
        self._waited = threading.local()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._registry, name)
        if name != self._method:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if not getattr(self._waited, "done", False):
                self._waited.done = True
                self._barrier.wait()
            return attr(*args, **kwargs)

        return call


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run each call on a thread of its own, all released together: what each returned, or
    the exception it raised, in the order given."""
    start = threading.Barrier(len(calls))
    outcomes: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        start.wait()
        try:
            outcomes[index] = calls[index]()
        except Exception as exc:  # the outcome under test
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


FORM_BOUNDARY = "b0undary"


def form_part(name: str, value: bytes, extra: str = "") -> bytes:
    """One part of multipart/form-data, its boundary before it."""
    return f'--{FORM_BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"{extra}\r\n\r\n'.encode() + value + b"\r\n"


def upload_form(fields: dict[str, str], data: bytes | None, *, after: dict[str, str] | None = None) -> bytes:
    """An upload's form as S3 takes it (multipart/form-data, boundary `FORM_BOUNDARY`): the
    fields, the body as `file` (None: no file), any fields `after` it, the closing boundary."""
    parts = [form_part(k, v.encode()) for k, v in fields.items()]
    if data is not None:
        parts.append(form_part("file", data, '; filename="body"\r\nContent-Type: application/octet-stream'))
    parts += [form_part(k, v.encode()) for k, v in (after or {}).items()]
    return b"".join(parts) + f"--{FORM_BOUNDARY}--\r\n".encode()


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@cache
def sampled(values: tuple[Any, ...]) -> SearchStrategy[Any]:
    """`st.sampled_from(values)`, one strategy for each tuple of values. Hypothesis validates a
    strategy object on its first draw (and works out its label and whether it can be empty): a
    strategy built anew inside a composite is validated at every draw, much of the cost of drawing
    a record. The same strategy drawn the same way: the same examples."""
    from hypothesis import strategies as st

    return st.sampled_from(values)


@cache
def _tls() -> Any:
    import ssl

    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def http_client(**options: Any) -> httpx.Client:
    """`httpx.Client(**options)` (a connection pool of its own) with one TLS context for the
    whole run: httpx builds one for every client, and for every `httpx.get`/`httpx.post`, by
    loading certifi's bundle (~85 ms CPU each), which plain HTTP on loopback never uses."""
    import httpx

    return httpx.Client(verify=_tls(), **options)


def http(method: str, url: str, **options: Any) -> httpx.Response:
    """`httpx.request(method, url, **options)`: one request on a connection of its own, with
    the run's TLS context (`http_client`)."""
    with http_client() as client:
        return client.request(method, url, **options)


def run_folder() -> Path | None:
    """A folder that the pytest-xdist workers of this run share, named by the run's id (None
    outside xdist); removed as the run ends (tests/conftest.py)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return Path(tempfile.gettempdir()) / f"sluice-tests-{run}" if run else None


def built_once(name: str, build: Callable[[], Any]) -> Any:
    """`build()`, a JSON value, as one process of the run built it: every pytest-xdist worker
    collects every module, though one runs a module's tests, so what a module needs to name its
    tests is built by the first worker to get here and read by the others (under a lock, from
    `run_folder()`). Outside xdist, built here; either way, read back from JSON."""
    folder = run_folder()
    if folder is None:
        return json.loads(json.dumps(build()))
    import fcntl

    folder.mkdir(exist_ok=True)
    shared = folder / name
    with (folder / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not shared.exists():
            partial = folder / f"{name}.{os.getpid()}"
            partial.write_text(json.dumps(build()))
            partial.replace(shared)
    return json.loads(shared.read_text())


def steady(value: Any, volatile: Collection[str] = ("latency_ms", "request_id")) -> Any:
    """An answer without what differs between two answers of one request (its latency, its
    id), at any depth: what two paths that must answer alike are compared on."""
    if isinstance(value, dict):
        return {k: steady(v, volatile) for k, v in value.items() if k not in volatile}
    return [steady(v, volatile) for v in value] if isinstance(value, list) else value


# Numeric v2 datatypes: each one's little-endian NumPy dtype, and values of it that a test may
# send (small, finite) by JSON, by gRPC's typed contents or as binary tensor data.
V2_DTYPES = {"FP32": "<f4", "FP64": "<f8", "INT64": "<i8", "INT32": "<i4", "BOOL": "?"}


def v2_values(datatype: str) -> SearchStrategy[Any]:
    from hypothesis import strategies as st

    small = {"FP32": st.floats(-10, 10, width=32), "FP64": st.floats(-10, 10), "BOOL": st.booleans()}
    return small.get(datatype, st.integers(-5, 5))



class ReadThen:
    """A registry whose method `method`, the first time it is called with arguments `args`,
    runs `then` after the read and before the read returns: what happens while a request holds
    a read it is about to trust."""

    def __init__(self, registry: Any, method: str, args: tuple[Any, ...], then: Callable[[], None]) -> None:
        self.registry, self.method, self.args, self.then = registry, method, args, then
        self.done = False

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.registry, name)
        if name != self.method:
            return found

        def read(*args: Any) -> Any:
            record = found(*args)
            if args == self.args and not self.done:
                self.done = True
                self.then()
            return record

        return read
