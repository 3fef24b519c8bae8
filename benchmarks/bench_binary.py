"""v2 inference through each protocol a Triton client speaks (JSON tensors, binary+JSON tensors
(the binary tensor extension, tritonclient.http's default), gRPC), sluice beside the local Triton
serving the same ONNX files through the same protocol. Two requests: one row of the diabetes MLP
(the protocol's overhead) and a 1 MiB FP32 tensor (1024 rows of 256 into a narrow MLP the
project's script makes, so that the model's own time does not hide the encoding's).

Over loopback: `sluice serve` (1 worker serving HTTP and gRPC, an API key checked per call)
against `tritonserver` (python backend running ONNX Runtime, 1 CPU instance, no key), each
called by one client in turn (concurrency 1): p50 and req/s, sluice against Triton. In process:
the ASGI app (no socket) against ONNX Runtime alone on the same input, the floor. Subjects and
forms alternate; every figure is the median (min-max) of its repeats. Without `make
triton-env` the Triton rows are left out with a note. (`bench_grpc` measures gRPC at
concurrency 1, 8 and 32 with two workers.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import PYTHON, REPO, bench_env, figure, free_port, percentile, server

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

HEADER = "Inference-Header-Content-Length"
TENANT = "default"
FORMS = ("json", "binary")
PROTOCOLS = {"json": "JSON tensors", "binary": "binary+JSON tensors", "grpc": "gRPC"}
Stats = tuple[float, float]  # p50 µs, req/s


def _cases() -> dict[str, tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return {
        "1 row": ("diabetes", rng.normal(0, 0.05, (1, 10)).astype(np.float32)),
        "1 MiB FP32": ("wide", rng.standard_normal((1024, 256)).astype(np.float32)),
    }


def _prepare(home: Path) -> Any:
    sys.path.insert(0, str(REPO / "scripts"))
    from make_demo_models import large_mlp

    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=home, log_level="WARNING"))
    principal = Principal(TENANT, frozenset({"admin", "predict"}), "bench")
    for name, data in (("diabetes", (REPO / "models" / "diabetes_mlp.onnx").read_bytes()), ("wide", large_mlp(width=16, depth=1))):
        version = container.models.push(principal, name, data)
        container.deployments.create(principal, name, {"kind": "single", "model": name, "version": version.version})
    return container


def _bodies(cases: dict[str, tuple[str, np.ndarray]]) -> dict[str, dict[str, tuple[bytes, dict[str, str]]]]:
    """Per case, the JSON and the binary request body and headers, as tritonclient builds them."""
    import tritonclient.http as httpclient

    out: dict[str, dict[str, tuple[bytes, dict[str, str]]]] = {}
    for case, (model, rows) in cases.items():
        out[case] = {}
        for form in FORMS:
            binary = form == "binary"
            tensor = httpclient.InferInput("input", list(rows.shape), "FP32")
            tensor.set_data_from_numpy(rows, binary_data=binary)
            names = ["variable"] if model == "diabetes" else ["output"]
            wanted = None if binary else [httpclient.InferRequestedOutput(o, binary_data=False) for o in names]
            body, size = httpclient.InferenceServerClient.generate_request_body([tensor], outputs=wanted)
            out[case][form] = (body, {HEADER: str(size)} if size else {})
    return out


def _time(call: Callable[[], None], n: int) -> Stats:
    """p50 and rate of `n` sequential calls after a short warm-up."""
    for _ in range(5):
        call()
    times = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return percentile([t * 1e6 for t in times], 50), n / sum(times)


def _http_round(client: Any, model: str, forms: dict[str, tuple[bytes, dict[str, str]]], n: int) -> dict[str, Stats]:
    """JSON and binary requests in alternating blocks of ten, so drift hits both alike."""
    times: dict[str, list[float]] = {form: [] for form in FORMS}
    for form in FORMS:  # warm: connection open, session loaded
        for _ in range(5):
            assert client.post(f"/v2/models/{model}/infer", content=forms[form][0], headers=forms[form][1]).status_code == 200
    for block in range(2 * max(1, n // 10)):
        form = FORMS[block % 2]
        body, headers = forms[form]
        for _ in range(10):
            started = time.perf_counter()
            r = client.post(f"/v2/models/{model}/infer", content=body, headers=headers)
            times[form].append(time.perf_counter() - started)
            assert r.status_code == 200, r.text[:300]
    return {f: (percentile([t * 1e6 for t in v], 50), len(v) / sum(v)) for f, v in times.items()}


def _grpc_round(url: str, headers: dict[str, str], model: str, rows: np.ndarray, n: int) -> Stats:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput("input", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    try:
        return _time(lambda: client.infer(model, [tensor], headers=headers), n)
    finally:
        client.close()


@contextlib.contextmanager
def _triton(container: Any, work: Path, notes: list[str]) -> Iterator[Any]:
    """The local Triton serving the same versions, or None (and a note) without its env."""
    from sluice.domain.errors import SluiceError
    from sluice.endpoints import local_triton
    from sluice.endpoints.repository import TritonOptions, build_repository

    try:
        env = local_triton.find_env()
    except SluiceError as exc:
        notes.append(f"no Triton rows: {exc.message}")
        yield None
        return
    root, home = work / "triton-models", work / "triton-home"
    root.mkdir(parents=True)
    for name in ("diabetes", "wide"):
        version = container.registry.latest_version(TENANT, name)
        build_repository(root, version, container.store, flavour="local", options=TritonOptions(max_batch_size=2048), name=name)
    started = local_triton.start(root, home=home, port=local_triton.free_base_port(), env=env)
    try:
        yield started
    finally:
        local_triton.stop(home)


@contextlib.contextmanager
def _sluice(home: Path) -> Iterator[tuple[str, str, str]]:
    """`sluice serve` with its gRPC port: the HTTP URL, the gRPC address and the key."""
    import tritonclient.grpc as grpcclient

    port, grpc_port = free_port(), free_port()
    command = [PYTHON, "-m", "sluice.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--grpc-port", str(grpc_port)]
    env = bench_env(SLUICE_HOME=str(home), SLUICE_LOG_LEVEL="WARNING")
    with server(command, ready_url=f"http://127.0.0.1:{port}/healthz", log=home / "serve.log", env=env, cwd=REPO, quiet_stdout=True):
        address = f"127.0.0.1:{grpc_port}"
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(Exception):
                if grpcclient.InferenceServerClient(address).is_server_live():
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("sluice's gRPC port did not open in 30 s")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}", address, (home / "admin-key").read_text().strip()


def _loopback(container: Any, home: Path, cases: dict[str, Any], bodies: dict[str, Any], repeats: int, n: int, notes: list[str]) -> dict[tuple[str, str, str], list[Stats]]:
    """(who, case, protocol) -> one (p50, req/s) per repeat."""
    import httpx

    results: dict[tuple[str, str, str], list[Stats]] = {}
    with _triton(container, home / "triton", notes) as triton, _sluice(home) as (http_url, grpc_url, key):
        subjects = {"sluice": (http_url, grpc_url, {"Authorization": f"Bearer {key}"})}
        if triton is not None:
            subjects["Triton"] = (triton.http_url, triton.grpc_address, {})
        # identity: httpx asks gzip by default (and both servers would compress): the forms are measured, not zlib
        clients = {who: httpx.Client(base_url=url, headers={**auth, "Accept-Encoding": "identity"}, timeout=30) for who, (url, _, auth) in subjects.items()}
        try:
            for repeat in range(repeats):
                order = list(subjects) if repeat % 2 == 0 else list(reversed(subjects))
                for case, (model, rows) in cases.items():
                    count = n if case == "1 row" else max(20, n // 4)
                    for who in order:
                        _, grpc_address, auth = subjects[who]
                        for form, stats in _http_round(clients[who], model, bodies[case], count).items():
                            results.setdefault((who, case, form), []).append(stats)
                        grpc_headers = {k.lower(): v for k, v in auth.items()}
                        results.setdefault((who, case, "grpc"), []).append(_grpc_round(grpc_address, grpc_headers, model, rows, count))
        finally:
            for client in clients.values():
                client.close()
    return results


def _in_process(home: Path, cases: dict[str, Any], bodies: dict[str, Any], repeats: int, n: int) -> dict[tuple[str, str, str], list[Stats]]:
    """The ASGI app without a socket, and ONNX Runtime alone on the same rows (the floor)."""
    import httpx
    import onnxruntime as ort

    from sluice.api.app import create_app
    from sluice.settings import Settings
    from sluice.wiring import Container

    sessions = {
        "diabetes": ort.InferenceSession(str(REPO / "models" / "diabetes_mlp.onnx"), providers=["CPUExecutionProvider"]),
        "wide": ort.InferenceSession(_wide_model(), providers=["CPUExecutionProvider"]),
    }
    app = create_app(Container.from_settings(Settings(mode="local", home=home, log_level="WARNING")))
    auth = {"Authorization": f"Bearer {(home / 'admin-key').read_text().strip()}"}
    results: dict[tuple[str, str, str], list[Stats]] = {}

    async def sluice_round(client: httpx.AsyncClient, model: str, form: str, forms: dict[str, Any], count: int) -> Stats:
        body, headers = forms[form]
        times = []
        for i in range(count + 5):
            started = time.perf_counter()
            r = await client.post(f"/v2/models/{model}/infer", content=body, headers=headers)
            elapsed = time.perf_counter() - started
            assert r.status_code == 200, r.text[:300]
            if i >= 5:
                times.append(elapsed)
        return percentile([t * 1e6 for t in times], 50), len(times) / sum(times)

    async def go() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers={**auth, "Accept-Encoding": "identity"}) as client:
            for _ in range(repeats):
                for case, (model, rows) in cases.items():
                    count = n if case == "1 row" else max(20, n // 4)
                    for form in FORMS:
                        results.setdefault(("sluice", case, form), []).append(await sluice_round(client, model, form, bodies[case], count))
                    session = sessions[model]
                    results.setdefault(("ORT", case, "run"), []).append(_time(lambda s=session, x=rows: s.run(None, {"input": x}), count))

    asyncio.run(go())
    return results


def _wide_model() -> bytes:
    from make_demo_models import large_mlp  # scripts/ is on the path once _prepare ran

    return large_mlp(width=16, depth=1)


def run(quick: bool) -> dict[str, Any]:
    repeats, n = (2, 100) if quick else (3, 300)
    cases = _cases()
    bodies = _bodies(cases)
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        container = _prepare(home)
        loopback = _loopback(container, home, cases, bodies, repeats, n, notes)
        in_process = _in_process(home, cases, bodies, repeats, n)
    figures: list[dict[str, Any]] = []
    for case in cases:
        slug = case.replace(" ", "_").lower()
        for protocol, label in PROTOCOLS.items():
            ours = loopback[("sluice", case, protocol)]
            theirs = loopback.get(("Triton", case, protocol))
            ref = {"reference": "Triton", "ref_values": None} if theirs else {}
            for i, (metric, unit, better) in enumerate((("p50", "µs", "lower"), ("rps", "req/s", "higher"))):
                if theirs:
                    ref["ref_values"] = [s[i] for s in theirs]
                figures.append(figure(
                    f"protocols.loopback.{slug}.{protocol}.{metric}", f"{label}, {case}, loopback: {'p50' if i == 0 else 'req/s at concurrency 1'}",
                    unit, "sluice", [s[i] for s in ours], better=better, **ref,
                ))  # fmt: skip
        floor = in_process[("ORT", case, "run")]
        for form in FORMS:
            ours = in_process[("sluice", case, form)]
            for i, (metric, unit, better) in enumerate((("p50", "µs", "lower"), ("rps", "req/s", "higher"))):
                figures.append(figure(
                    f"protocols.in_process.{slug}.{form}.{metric}", f"{PROTOCOLS[form]}, {case}, in process: {'p50' if i == 0 else 'req/s'}",
                    unit, "sluice", [s[i] for s in ours], reference="ORT alone", ref_values=[s[i] for s in floor], better=better,
                ))  # fmt: skip
    notes.append(
        "concurrency 1, one client per subject in turn; sluice checks an API key per call, Triton none. "
        "Triton: python backend running ONNX Runtime, 1 CPU instance; sluice: 1 worker serving HTTP and gRPC."
    )
    return {"title": "Protocols: JSON vs binary+JSON vs gRPC, sluice beside Triton", "figures": figures, "notes": notes}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
