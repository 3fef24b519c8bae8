"""v2 inference with JSON tensors vs binary tensors (the binary tensor extension, tritonclient's
default), for one iris row and for a 1 MiB FP32 tensor (1024 rows of 256 into a narrow MLP the
project's script makes, so that the model's own time does not hide the encoding's). Both in
process (the ASGI app, no socket) and over loopback (`sluice serve`, 1 worker, 1 connection);
p50 and requests per second, binary against JSON. Requests alternate between the two forms."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import PYTHON, REPO, bench_env, figure, free_port, percentile, server

HEADER = "Inference-Header-Content-Length"


def _prepare(home: Path) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    from make_demo_models import large_mlp

    from sluice.domain import Principal
    from sluice.settings import Settings
    from sluice.wiring import Container

    container = Container.from_settings(Settings(mode="local", home=home, log_level="WARNING"))
    principal = Principal("default", frozenset({"admin", "predict"}), "bench")
    container.models.push(principal, "iris", (REPO / "models" / "iris.onnx").read_bytes())
    container.deployments.create(principal, "iris", {"kind": "single", "model": "iris", "version": 1})
    container.models.push(principal, "wide", large_mlp(width=16, depth=1))
    container.deployments.create(principal, "wide", {"kind": "single", "model": "wide", "version": 1})


def _bodies() -> dict[str, dict[str, tuple[bytes, dict[str, str]]]]:
    """Per case, the JSON and the binary request, as tritonclient builds them."""
    import tritonclient.http as httpclient

    cases = {
        "1 row": ("iris", np.array([[5.9, 3.0, 5.1, 1.8]], dtype=np.float32)),
        "1 MiB FP32": ("wide", np.random.default_rng(0).standard_normal((1024, 256)).astype(np.float32)),
    }
    out: dict[str, dict[str, tuple[bytes, dict[str, str]]]] = {}
    for case, (model, rows) in cases.items():
        out[case] = {}
        for form, binary in (("json", False), ("binary", True)):
            tensor = httpclient.InferInput("input", list(rows.shape), "FP32")
            tensor.set_data_from_numpy(rows, binary_data=binary)
            wanted = None if binary else [httpclient.InferRequestedOutput(o, binary_data=False) for o in _outputs(model)]
            body, size = httpclient.InferenceServerClient.generate_request_body([tensor], outputs=wanted)
            out[case][form] = (model.encode() + b"\0" + body, {HEADER: str(size)} if size else {})
    return out


def _outputs(model: str) -> list[str]:
    return ["output_label", "output_probability"] if model == "iris" else ["output"]


def _measure(post: Any, bodies: dict[str, tuple[bytes, dict[str, str]]], n: int) -> dict[str, tuple[float, float]]:
    times: dict[str, list[float]] = {"json": [], "binary": []}
    walls = dict.fromkeys(times, 0.0)
    for i in range(2 * n):
        form = "json" if i % 2 == 0 else "binary"
        tagged, headers = bodies[form]
        model, body = tagged.split(b"\0", 1)
        started = time.perf_counter()
        status = post(f"/v2/models/{model.decode()}/infer", body, headers)
        elapsed = time.perf_counter() - started
        assert status == 200, status
        times[form].append(elapsed * 1e6)
        walls[form] += elapsed
    return {form: (percentile(values, 50), len(values) / walls[form]) for form, values in times.items()}


def _in_process(home: Path, bodies: dict[str, Any], n: int) -> dict[str, dict[str, tuple[float, float]]]:
    import httpx

    from sluice.api.app import create_app
    from sluice.settings import Settings
    from sluice.wiring import Container

    app = create_app(Container.from_settings(Settings(mode="local", home=home, log_level="WARNING")))
    auth = {"Authorization": f"Bearer {(home / 'admin-key').read_text().strip()}"}

    async def go() -> dict[str, dict[str, tuple[float, float]]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers=auth) as client:
            results = {}
            for case, forms in bodies.items():
                samples: dict[str, list[float]] = {"json": [], "binary": []}
                walls = dict.fromkeys(samples, 0.0)
                for i in range(2 * (n + 20)):
                    form = "json" if i % 2 == 0 else "binary"
                    tagged, headers = forms[form]
                    model, body = tagged.split(b"\0", 1)
                    started = time.perf_counter()
                    r = await client.post(f"/v2/models/{model.decode()}/infer", content=body, headers=headers)
                    elapsed = time.perf_counter() - started
                    assert r.status_code == 200, r.text
                    if i >= 40:  # the first 20 of each warm up
                        samples[form].append(elapsed * 1e6)
                        walls[form] += elapsed
                results[case] = {f: (percentile(v, 50), len(v) / walls[f]) for f, v in samples.items()}
            return results

    return asyncio.run(go())


def run(quick: bool) -> dict[str, Any]:
    import httpx

    n = 100 if quick else 400
    bodies = _bodies()
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        _prepare(home)
        port = free_port()
        command = [PYTHON, "-m", "sluice.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        env = bench_env(SLUICE_HOME=str(home), SLUICE_LOG_LEVEL="WARNING")
        with server(command, ready_url=f"http://127.0.0.1:{port}/healthz", log=home / "serve.log", env=env, cwd=REPO, quiet_stdout=True):
            key = (home / "admin-key").read_text().strip()
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:

                def post(path: str, body: bytes, headers: dict[str, str]) -> int:
                    return client.post(path, content=body, headers=headers).status_code

                loopback = {}
                for case, forms in bodies.items():
                    _measure(post, forms, 20)  # warm: sessions loaded, connection open
                    loopback[case] = _measure(post, forms, n)
        in_process = _in_process(home, bodies, n)
    for where, results in (("in process", in_process), ("loopback", loopback)):
        for case, forms in results.items():
            slug = f"binary.{where.replace(' ', '_')}.{case.replace(' ', '_').lower()}"
            figures += [
                figure(f"{slug}.p50", f"v2 {case}, {where}: p50, binary+JSON vs JSON tensors", "µs", "binary", [forms["binary"][0]], reference="json", ref_values=[forms["json"][0]]),
                figure(f"{slug}.rps", f"v2 {case}, {where}: requests/s at concurrency 1", "req/s", "binary", [forms["binary"][1]], reference="json", ref_values=[forms["json"][1]], better="higher"),
            ]  # fmt: skip
    notes = ["no local Triton comparison: not measured here"]
    return {"title": "Binary tensors vs JSON tensors (v2)", "figures": figures, "notes": notes}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
