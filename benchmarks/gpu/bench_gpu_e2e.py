"""End to end on a GPU: v2 requests to `sluice serve` (which calls Triton with binary tensors)
against the same requests sent to Triton directly, as JSON and as binary tensors.

The model and server are bench_gpu_triton.py's (the PyTorch MLP in Triton's python backend,
dynamic batching). In one run:

1. starts tritonserver on that repository;
2. starts `sluice serve --workers N` on a fresh home, registers the Triton model as a `triton`
   version (`POST /api/v1/models/mlp/versions` with `triton_url`) and a deployment `mlp`;
3. sends one row of `--features` floats to `/v2/models/mlp/infer`, the same body to both
   sluice (which talks binary tensors to Triton) and Triton's own HTTP endpoint, in two
   encodings: v2 JSON (JSON in, JSON out) and the binary tensor extension
   (`Inference-Header-Content-Length`, the output asked for as binary, as `tritonclient`
   sends by default); p50/p99 and requests per second at concurrency 1 and 16, in alternating
   rounds, each figure the median over rounds, and sluice/Triton ratios per encoding;
4. the server's statistics (rows per execution, queue and compute times).

    python bench_gpu_e2e.py --triton-root DIR [--stub-pythonpath P] [--workers 4] --out e2e.json

Needs what bench_gpu_triton.py needs plus sluice importable (`pip install -e .` in the
repository, or PYTHONPATH with its dependencies) and aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_gpu_triton as base  # noqa: E402  (the server, repository and statistics helpers)

DEPLOYMENT = base.MODEL_NAME


def _post(url: str, body: dict[str, Any], key: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")[:500]


def _post_binary(url: str, body: bytes, headers: dict[str, str]) -> tuple[bytes, Any]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read(), response.headers


class Sluice:
    """`sluice serve` as a process of its own, on a fresh home."""

    def __init__(self, python: str, home: Path, port: int, workers: int, triton_url: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "SLUICE_HOME": str(home),
            "SLUICE_TRITON_URL_PREFIXES": json.dumps([triton_url]),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(base.REPO / "functions"), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.log = (home / "serve.log").open("w")
        self.process = subprocess.Popen(
            [python, "-m", "sluice.cli", "serve", "--port", str(port), "--workers", str(workers)],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sluice serve exited: {self.log_tail()}")
            try:
                status, _ = base._get(f"{self.url}/healthz", timeout=1)
            except OSError:  # not listening yet
                status = 0
            if status == 200 and (self.home / "admin-key").exists():
                return (self.home / "admin-key").read_text().strip()
            time.sleep(0.2)
        raise RuntimeError(f"sluice serve not healthy after {timeout}s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        self.log.flush()
        text = (self.home / "serve.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.log.close()


def check_binary(payload: bytes, headers: Any, features: int) -> None:
    """A binary answer carries OUTPUT0 as `features` float32 after its JSON header."""
    size = int(headers["Inference-Header-Content-Length"])
    answer = json.loads(payload[:size])
    (output,) = answer["outputs"]
    if (
        output["parameters"]["binary_data_size"] != features * 4
        or len(payload) - size != features * 4
    ):
        raise RuntimeError(f"binary answer of the wrong size: {answer}")


def v2_json(x: np.ndarray) -> bytes:
    return json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "data": x.ravel().tolist(),
                }
            ]
        }
    ).encode()


Target = tuple[str, dict[str, str], bytes]  # url, headers, body


async def _round(session: Any, target: Target, concurrency: int, duration_s: float):
    latencies: list[float] = []
    url, headers, body = target

    async def call() -> None:
        async with session.post(url, data=body, headers=headers) as response:
            payload = await response.read()
            if response.status != 200:
                raise RuntimeError(f"{url}: HTTP {response.status}: {payload[:300]!r}")

    await asyncio.gather(*(call() for _ in range(concurrency)))  # warm connections
    stop_at = time.perf_counter() + duration_s

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            await call()
            latencies.append((time.perf_counter() - start) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    return {
        "requests": len(latencies),
        "p50_ms": round(base._pct(latencies, 50), 3),
        "p99_ms": round(base._pct(latencies, 99), 3),
        "rps": round(len(latencies) / elapsed, 1),
    }


def _median(rounds: list[dict[str, Any]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rounds) for key in ("p50_ms", "p99_ms", "rps")}


PAIRS = {"json": ("sluice_json", "triton_json"), "binary": ("sluice_binary", "triton_binary")}


async def measure(targets: dict[str, Target], rounds: int, duration_s: float):
    import aiohttp

    out: dict[str, Any] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:
        for concurrency in (1, 16):
            per: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
            for _ in range(rounds):  # alternate, so drift hits both sides alike
                for name, target in targets.items():
                    per[name].append(await _round(session, target, concurrency, duration_s))
            entry: dict[str, Any] = {name: _median(r) for name, r in per.items()}
            for encoding, (mine, peer) in PAIRS.items():
                if mine in entry and peer in entry:
                    ours, theirs = entry[mine], entry[peer]
                    entry[f"ratio_{encoding}"] = {
                        "p50": round(ours["p50_ms"] / theirs["p50_ms"], 3),
                        "p99": round(ours["p99_ms"] / theirs["p99_ms"], 3),
                        "rps": round(ours["rps"] / theirs["rps"], 3),
                    }
            entry["rounds"] = per
            out[f"concurrency_{concurrency}"] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton-root", required=True, type=Path)
    parser.add_argument("--stub-python", default=sys.executable)
    parser.add_argument("--stub-pythonpath", default="")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--queue-delay-us", type=int, default=100)
    parser.add_argument(
        "--sluice-python",
        default=sys.executable,
        help="the Python that runs `sluice serve` (default: this one)",
    )
    parser.add_argument(
        "--workers", type=int, default=4, help="sluice serve worker processes (default 4)"
    )
    parser.add_argument(
        "--encodings",
        default="json,binary",
        help="comma-separated: json, binary (default both)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per round (default 5)")
    parser.add_argument("--ready-timeout", type=float, default=240.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    report: dict[str, Any] = {
        "benchmark": "gpu_e2e_sluice_triton",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": base.gpu_info(),
        "cpus": os.cpu_count(),
        "sluice_workers": args.workers,
        "model": (
            f"float32 MLP {args.features}->{args.hidden}->{args.hidden}->{args.features} on "
            f"{args.device} in Triton's python backend; 1 row per request, v2 JSON and binary "
            "tensors, the same body to sluice and to Triton"
        ),
    }
    work = Path(tempfile.mkdtemp(prefix="gpue2e-"))
    repository = base.build_repository(
        work / "models",
        features=args.features,
        hidden=args.hidden,
        max_batch=args.max_batch,
        queue_delay_us=args.queue_delay_us,
        device=args.device,
    )
    server = base.Server(
        args.triton_root.resolve(),
        repository,
        work,
        stub_python=args.stub_python,
        stub_pythonpath=args.stub_pythonpath,
    )
    sluice: Sluice | None = None
    try:
        report["triton_ready_s"] = round(server.wait_ready(args.ready_timeout), 1)
        sluice = Sluice(
            args.sluice_python, work / "home", base._free_port(), args.workers, server.url
        )
        key = sluice.wait_ready(120)
        report["register"], detail = _post(
            f"{sluice.url}/api/v1/models/{DEPLOYMENT}/versions",
            {"triton_url": server.url, "model_name": base.MODEL_NAME},
            key,
        )
        if report["register"] != 201:
            raise RuntimeError(f"register: {detail}")
        report["deploy"], detail = _post(
            f"{sluice.url}/api/v1/deployments", {"name": DEPLOYMENT, "model": DEPLOYMENT}, key
        )
        if report["deploy"] != 201:
            raise RuntimeError(f"deploy: {detail}")
        x = np.random.default_rng(0).normal(size=(1, args.features)).astype(np.float32)
        triton_infer = f"{server.url}/v2/models/{base.MODEL_NAME}/infer"
        sluice_infer = f"{sluice.url}/v2/models/{DEPLOYMENT}/infer"
        # aiohttp asks for gzip by default, and Triton then compresses its answers (sluice
        # does not): every client here asks for none, so neither side pays for compression.
        bearer = {"authorization": f"Bearer {key}", "accept-encoding": "identity"}
        plain = {"accept-encoding": "identity"}
        encodings = {e.strip() for e in args.encodings.split(",") if e.strip()}
        targets: dict[str, Target] = {}
        if "json" in encodings:
            json_headers = {"content-type": "application/json"}
            targets["triton_json"] = (triton_infer, {**json_headers, **plain}, v2_json(x))
            targets["sluice_json"] = (sluice_infer, {**json_headers, **bearer}, v2_json(x))
        if "binary" in encodings:
            body, headers = base.v2_binary(x)
            for name, url, extra in (
                ("triton_binary", triton_infer, plain),
                ("sluice_binary", sluice_infer, bearer),
            ):
                check_binary(*_post_binary(url, body, {**headers, **extra}), args.features)
                targets[name] = (url, {**headers, **extra}, body)
        if not targets:
            raise SystemExit("--encodings: name json, binary or both")
        report["encodings"] = sorted(encodings)
        report["accept_encoding"] = "identity"
        report["latency"] = asyncio.run(measure(targets, args.rounds, args.duration))
        report["server_stats"] = base.server_stats(server.url)
    except Exception as exc:  # written into the report
        report["error"] = f"{type(exc).__name__}: {exc}"
        if sluice is not None:
            report["sluice_log_tail"] = sluice.log_tail().splitlines()
    finally:
        if sluice is not None:
            sluice.stop()
        server.stop()
        report["triton_log_tail"] = server.log_tail(10).splitlines()
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(report, indent=1)
    print(text, flush=True)
    if args.out:
        args.out.write_text(text + "\n")
    return 1 if "error" in report else 0


if __name__ == "__main__":
    sys.exit(main())
