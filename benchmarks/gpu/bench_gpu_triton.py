"""Triton on a GPU: a PyTorch MLP served by tritonserver's python backend, against the floor.

Self-contained (it does not need sluice's local-Triton setup; sluice's triton runtime is
measured when `sluice` and `tritonclient` import). In one run:

1. floor: the same MLP (model.py's build_mlp, same seed) run directly in PyTorch on the GPU,
   numpy in and numpy out (host->device copy, forward, device->host copy), at batch 1 and 16;
2. starts tritonserver (the nvidia-pytriton 2.51 build: python backend only) on a repository
   holding model.py with dynamic batching, checks one answer against the floor's;
3. latency p50/p99 and throughput at concurrency 1 and 16, in alternating rounds, through
   raw HTTP v2 with binary tensors (aiohttp), raw tritonclient (asyncio), and sluice's
   TritonRuntime; ratios of sluice to the raw clients;
4. the server's own statistics (requests, executions: how well the batcher batched).

Writes one JSON document (--out, and stdout).

    python bench_gpu_triton.py --triton-root DIR [--stub-pythonpath P] [--duration 8] --out results.json

DIR holds `pytriton/tritonserver/` and `nvidia_pytriton.libs/` (the wheel's site-packages, or
the unpacked build/triton.tar.xz), and optionally `libpython/` with a libpython3.X.so.1.0 for
machines whose Python has no shared library.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MODEL_NAME = "mlp"
ROUNDS = 4


# helpers ----------------------------------------------------------------------------------
def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def _summary(latencies_ms: list[float], elapsed_s: float, rows: int) -> dict[str, float]:
    return {
        "requests": len(latencies_ms),
        "p50_ms": round(_pct(latencies_ms, 50), 3),
        "p99_ms": round(_pct(latencies_ms, 99), 3),
        "mean_ms": round(float(np.mean(latencies_ms)), 3) if latencies_ms else float("nan"),
        "throughput_rps": round(len(latencies_ms) / elapsed_s, 1),
        "rows_per_s": round(len(latencies_ms) * rows / elapsed_s, 1),
    }


def _get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url), timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gpu_info() -> dict[str, Any]:
    info: dict[str, Any] = {}
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout.strip()
        info["nvidia_smi"] = out or None
    except (OSError, subprocess.TimeoutExpired):
        info["nvidia_smi"] = None
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            info["torch_device"] = torch.cuda.get_device_name(0)
            info["torch_cuda"] = torch.version.cuda
    except ImportError:
        info["torch"] = None
    return info


def _load_model_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_mlp_model", HERE / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# 1. the floor -----------------------------------------------------------------------------
def floor(features: int, hidden: int, device: str, duration_s: float) -> tuple[dict[str, Any], Any]:
    import torch

    mod = _load_model_module()
    device = mod.pick_device(device)
    model = mod.build_mlp(features, hidden, device)
    params = sum(p.numel() for p in model.parameters())
    cuda = device.startswith("cuda")
    result: dict[str, Any] = {
        "device": device,
        "parameters": params,
        "weights_mb": round(params * 4 / 1e6, 1),
    }
    rng = np.random.default_rng(0)
    for rows in (1, 16, 64):
        x = rng.normal(size=(rows, features)).astype(np.float32)
        with torch.inference_mode():
            for _ in range(20):
                model(torch.from_numpy(x).to(device)).cpu().numpy()
            latencies = []
            stop = time.perf_counter() + duration_s / 3
            began = time.perf_counter()
            while time.perf_counter() < stop:
                start = time.perf_counter()
                model(torch.from_numpy(x).to(device)).cpu().numpy()
                latencies.append((time.perf_counter() - start) * 1000)
            elapsed = time.perf_counter() - began
            entry = _summary(latencies, elapsed, rows)
            if cuda:  # the GPU's own time for the forward pass, input already on the device
                xd = torch.from_numpy(x).to(device)
                begin, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                torch.cuda.synchronize()
                begin.record()
                for _ in range(200):
                    model(xd)
                end.record()
                torch.cuda.synchronize()
                entry["gpu_forward_ms"] = round(begin.elapsed_time(end) / 200, 4)
        result[f"batch_{rows}"] = entry
    reference_x = np.random.default_rng(7).normal(size=(4, features)).astype(np.float32)
    with torch.inference_mode():
        reference_y = model(torch.from_numpy(reference_x).to(device)).cpu().numpy()
    del model
    if cuda:
        torch.cuda.empty_cache()
    return result, (reference_x, reference_y)


# 2. the server ----------------------------------------------------------------------------
_PROBE = (
    "import json, sys, sysconfig, ctypes\n"
    "v = f'{sys.version_info[0]}.{sys.version_info[1]}'\n"
    "name = sysconfig.get_config_var('INSTSONAME') or f'libpython{v}.so.1.0'\n"
    "libdir = sysconfig.get_config_var('LIBDIR') or ''\n"
    "try:\n"
    "    ctypes.CDLL(name); loadable = True\n"
    "except OSError:\n"
    "    loadable = False\n"
    "print(json.dumps({'version': v, 'libdir': libdir, 'soname': name, 'loadable': loadable, 'exe': sys.executable}))\n"
)


def build_repository(
    root: Path, *, features: int, hidden: int, max_batch: int, queue_delay_us: int, device: str
) -> Path:
    version = root / MODEL_NAME / "1"
    version.mkdir(parents=True)
    shutil.copy2(HERE / "model.py", version / "model.py")
    (root / MODEL_NAME / "config.pbtxt").write_text(
        f'name: "{MODEL_NAME}"\n'
        'backend: "python"\n'
        f"max_batch_size: {max_batch}\n"
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {features} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {features} ] }} ]\n'
        f"dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}\n"
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        "parameters [\n"
        f'  {{ key: "features" value: {{ string_value: "{features}" }} }},\n'
        f'  {{ key: "hidden" value: {{ string_value: "{hidden}" }} }},\n'
        f'  {{ key: "device" value: {{ string_value: "{device}" }} }}\n'
        "]\n"
    )
    return root


def wrapper_venv(python: str, first: list[str], folder: Path) -> str:
    """A venv whose sys.path holds `first` ahead of `python`'s own site-packages (a .pth file).

    The backend stub embeds Python and ignores PYTHONPATH; it takes the prefix of whatever
    `python3` is first on PATH, so a venv is how to put e.g. numpy<2 ahead of numpy 2."""
    own = json.loads(
        subprocess.run(
            [
                python,
                "-c",
                "import json, site, sysconfig; print(json.dumps([sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib'], *site.getsitepackages()]))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    subprocess.run([python, "-m", "venv", "--without-pip", str(folder)], check=True)
    exe = folder / "bin" / "python3"
    purelib = subprocess.run(
        [str(exe), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    lines = [str(Path(p).resolve()) for p in first if p] + list(dict.fromkeys(own))
    (Path(purelib) / "_gpubench_paths.pth").write_text("\n".join(lines) + "\n")
    return str(exe)


class Server:
    def __init__(
        self,
        triton_root: Path,
        repository: Path,
        work: Path,
        *,
        stub_python: str,
        stub_pythonpath: str,
    ) -> None:
        dist = triton_root / "pytriton" / "tritonserver"
        libs = triton_root / "nvidia_pytriton.libs"
        if stub_pythonpath:
            stub_python = wrapper_venv(stub_python, stub_pythonpath.split(":"), work / "stubenv")
        probe = json.loads(
            subprocess.run(
                [stub_python, "-c", _PROBE], capture_output=True, text=True, check=True
            ).stdout
        )
        self.probe = probe
        stub = dist / "python_backend_stubs" / probe["version"] / "triton_python_backend_stub"
        if not stub.exists():
            raise SystemExit(f"no python backend stub for Python {probe['version']} under {dist}")
        backends = work / "backends"
        (backends / "python").mkdir(parents=True)
        for item in (dist / "backends" / "python").iterdir():
            shutil.copy2(item, backends / "python" / item.name)
        shutil.copy2(stub, backends / "python" / "triton_python_backend_stub")
        library_path = [str(libs)]
        if Path(probe["libdir"], probe["soname"]).exists():
            library_path.insert(0, probe["libdir"])
            probe["libpython"] = str(Path(probe["libdir"], probe["soname"]))
        elif probe["loadable"]:
            probe["libpython"] = "system loader path"
        elif (triton_root / "libpython" / probe["soname"]).exists():
            library_path.insert(0, str(triton_root / "libpython"))
            probe["libpython"] = f"carried: {triton_root / 'libpython' / probe['soname']}"
        else:
            probe["libpython"] = "missing"
        self.http_port = _free_port()
        self.log_path = work / "server.log"
        command = [
            str(dist / "bin" / "tritonserver"),
            f"--model-repository={repository}",
            f"--backend-directory={backends}",
            "--http-address=127.0.0.1",
            f"--http-port={self.http_port}",
            "--allow-grpc=false",
            "--allow-metrics=false",
            "--model-control-mode=explicit",
            "--load-model=*",
            "--strict-readiness=true",
            "--exit-timeout-secs=5",
            "--log-verbose=0",
            "--backend-config=python,shm-default-byte-size=16777216",
            "--backend-config=python,shm-growth-byte-size=1048576",
            f"--backend-config=python,shm-region-prefix-name=gpubench_{os.getpid()}_",
        ]
        environ = dict(os.environ)
        if environ.get("LD_LIBRARY_PATH"):
            library_path.append(environ["LD_LIBRARY_PATH"])
        environ["LD_LIBRARY_PATH"] = ":".join(library_path)
        # The stub embeds Python and finds its prefix (a venv's too) from `python3` on PATH.
        environ["PATH"] = f"{Path(probe['exe']).parent}:{environ.get('PATH', '')}"
        environ.pop("VIRTUAL_ENV", None)
        environ.pop("PYTHONPATH", None)  # the stub ignores it: extra paths go through wrapper_venv
        self.command = command
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=environ,
            start_new_session=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            return ""
        kept = [ln for ln in text.splitlines() if ln.strip() and ln.strip()[0] not in "+|"]
        return "\n".join(kept[-lines:])

    def wait_ready(self, timeout_s: float) -> float:
        began = time.perf_counter()
        deadline = began + timeout_s
        while time.perf_counter() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"tritonserver exited ({self.process.returncode}):\n{self.log_tail()}"
                )
            text = self.log_path.read_bytes().decode("utf-8", errors="replace")
            for marker in (
                "Failed to preinitialize Python stub",
                "failed to load '",
                "error: creating server",
            ):
                if marker in text:
                    raise RuntimeError(f"tritonserver failed ({marker}):\n{self.log_tail()}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                if (
                    _get(f"{self.url}/v2/health/ready")[0] == 200
                    and _get(f"{self.url}/v2/models/{MODEL_NAME}/ready")[0] == 200
                ):
                    return time.perf_counter() - began
            time.sleep(0.25)
        raise RuntimeError(f"tritonserver not ready in {timeout_s}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        self.log.close()


# 3. the clients ---------------------------------------------------------------------------
def v2_binary(x: np.ndarray) -> tuple[bytes, dict[str, str]]:
    """The binary tensor extension's body and headers for `x` as INPUT0, OUTPUT0 asked for as
    binary (also what `bench_gpu_e2e.py` sends)."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return header + x.tobytes(), {
        "Inference-Header-Content-Length": str(len(header)),
        "Content-Type": "application/octet-stream",
    }


class RawHTTP:
    """v2 inference over HTTP with binary tensors: JSON header, then raw bytes."""

    def __init__(self, url: str) -> None:
        import aiohttp

        self._aiohttp = aiohttp
        self.url = f"{url}/v2/models/{MODEL_NAME}/infer"
        self.session: Any = None

    async def infer(self, x: np.ndarray) -> np.ndarray:
        if self.session is None:
            self.session = self._aiohttp.ClientSession(
                connector=self._aiohttp.TCPConnector(limit=64)
            )
        data, headers = v2_binary(x)
        async with self.session.post(
            self.url,
            data=data,
            headers={
                **headers,
                # aiohttp asks for gzip by default, and Triton then compresses every answer:
                # the floor asks for none, as sluice's runtime does.
                "Accept-Encoding": "identity",
            },
        ) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {body[:300]!r}")
            size = int(response.headers["Inference-Header-Content-Length"])
        meta = json.loads(body[:size])
        out = meta["outputs"][0]
        return np.frombuffer(body[size:], dtype=np.float32).reshape(out["shape"])

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


class RawTritonClient:
    def __init__(self, url: str) -> None:
        import tritonclient.http as triton_http
        import tritonclient.http.aio as triton_aio

        self.http = triton_http
        self.client = triton_aio.InferenceServerClient(url.removeprefix("http://"), conn_limit=64)

    async def infer(self, x: np.ndarray) -> np.ndarray:
        tensor = self.http.InferInput("INPUT0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=True)
        result = await self.client.infer(
            MODEL_NAME,
            [tensor],
            outputs=[self.http.InferRequestedOutput("OUTPUT0", binary_data=True)],
        )
        return result.as_numpy("OUTPUT0")

    async def close(self) -> None:
        await self.client.close()


class SluiceRuntime:
    def __init__(self, url: str) -> None:
        from sluice.runtimes.triton import TritonRuntime

        self.runtime = TritonRuntime()
        # TritonRuntime reads `model` and `config` from a version; nothing else on this path.
        self.version = SimpleNamespace(
            model=MODEL_NAME, config={"url": url, "model_name": MODEL_NAME}
        )

    async def infer(self, x: np.ndarray) -> np.ndarray:
        result = await self.runtime.infer(self.version, {"INPUT0": x})
        return result.outputs["OUTPUT0"]

    async def close(self) -> None:
        await self.runtime.close()


async def _phase(
    call, x: np.ndarray, *, concurrency: int, duration_s: float
) -> tuple[list[float], float]:
    latencies: list[float] = []
    stop_at = time.perf_counter() + duration_s

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            await call(x)
            latencies.append((time.perf_counter() - start) * 1000)

    await asyncio.gather(*(call(x) for _ in range(concurrency)))  # warm connections
    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - began


async def measure(
    url: str, features: int, rows: int, duration_s: float, reference: tuple[np.ndarray, np.ndarray]
) -> dict[str, Any]:
    clients: dict[str, Any] = {"raw_http_v2_binary": RawHTTP(url)}
    skipped: dict[str, str] = {}
    for name, factory in (
        ("raw_tritonclient", RawTritonClient),
        ("sluice_triton_runtime", SluiceRuntime),
    ):
        try:
            clients[name] = factory(url)
        except Exception as exc:  # reported, not fatal
            skipped[name] = f"{type(exc).__name__}: {exc}"
    ref_x, ref_y = reference
    checks = {}
    for name, client in clients.items():
        got = await client.infer(ref_x)
        checks[name] = {
            "shape": list(got.shape),
            "max_abs_diff_vs_floor": float(np.max(np.abs(got - ref_y))),
        }
    x = np.random.default_rng(0).normal(size=(rows, features)).astype(np.float32)
    results: dict[str, Any] = {"answers_vs_floor": checks, "skipped": skipped}
    try:
        for concurrency in (1, 16):
            samples = {name: [] for name in clients}
            elapsed = dict.fromkeys(clients, 0.0)
            for _ in range(ROUNDS):  # alternate short rounds so drift hits every side alike
                for name, client in clients.items():
                    got, took = await _phase(
                        client.infer, x, concurrency=concurrency, duration_s=duration_s / ROUNDS
                    )
                    samples[name] += got
                    elapsed[name] += took
            entry = {name: _summary(samples[name], elapsed[name], rows) for name in clients}
            if "sluice_triton_runtime" in entry:
                ours = entry["sluice_triton_runtime"]
                for base in ("raw_tritonclient", "raw_http_v2_binary"):
                    if base in entry:
                        floor_ = entry[base]
                        entry[f"sluice_vs_{base}"] = {
                            "p50_ratio": round(ours["p50_ms"] / floor_["p50_ms"], 3),
                            "p99_ratio": round(ours["p99_ms"] / floor_["p99_ms"], 3),
                            "throughput_ratio": round(
                                ours["throughput_rps"] / floor_["throughput_rps"], 3
                            ),
                        }
            results[f"concurrency_{concurrency}"] = entry
    finally:
        for client in clients.values():
            await client.close()
    return results


def server_stats(url: str) -> dict[str, Any]:
    status, body = _get(f"{url}/v2/models/{MODEL_NAME}/stats", timeout=10)
    if status != 200:
        return {"error": status}
    stats = json.loads(body)["model_stats"][0]
    inference, execution = (
        int(stats.get("inference_count", 0)),
        int(stats.get("execution_count", 0)),
    )
    out: dict[str, Any] = {
        "inference_count": inference,
        "execution_count": execution,
        "mean_rows_per_execution": round(inference / execution, 2) if execution else None,
    }
    s = stats.get("inference_stats", {})
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        part = s.get(key, {})
        if part.get("count"):
            out[f"{key}_mean_us"] = round(part["ns"] / part["count"] / 1000, 1)
    return out


# main -------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton-root", required=True, type=Path)
    parser.add_argument(
        "--stub-python",
        default=sys.executable,
        help="the Python the backend stub embeds (its site-packages)",
    )
    parser.add_argument(
        "--stub-pythonpath",
        default="",
        help="folders (a:b) the stub puts ahead of its own site-packages, e.g. numpy<2",
    )
    parser.add_argument(
        "--device", default="auto", help="auto (cuda:0 when there is one), cuda:0 or cpu"
    )
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=1, help="rows per request (default 1)")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--queue-delay-us", type=int, default=100)
    parser.add_argument(
        "--duration", type=float, default=8.0, help="seconds per client and concurrency (default 8)"
    )
    parser.add_argument("--floor-duration", type=float, default=6.0)
    parser.add_argument("--ready-timeout", type=float, default=240.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "functions"))

    report: dict[str, Any] = {
        "benchmark": "gpu_triton",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            **gpu_info(),
        },
        "model": f"float32 MLP {args.features}->{args.hidden}->{args.hidden}->{args.features} (ReLU), PyTorch, random seeded weights",
        "rows_per_request": args.rows,
    }

    def write() -> None:
        text = json.dumps(report, indent=2)
        print(text, flush=True)
        if args.out:
            args.out.write_text(text + "\n")

    began = time.perf_counter()
    report["floor_pytorch_direct"], reference = floor(
        args.features, args.hidden, args.device, args.floor_duration
    )
    print(f"floor done in {time.perf_counter() - began:.1f}s", file=sys.stderr, flush=True)
    work = Path(tempfile.mkdtemp(prefix="gpubench-"))
    repository = build_repository(
        work / "models",
        features=args.features,
        hidden=args.hidden,
        max_batch=args.max_batch,
        queue_delay_us=args.queue_delay_us,
        device=args.device,
    )
    server = Server(
        args.triton_root.resolve(),
        repository,
        work,
        stub_python=args.stub_python,
        stub_pythonpath=args.stub_pythonpath,
    )
    report["server"] = {
        "binary": "tritonserver 2.51 from the nvidia-pytriton 0.7 wheel (python backend only)",
        "config": {
            "max_batch_size": args.max_batch,
            "dynamic_batching_max_queue_delay_us": args.queue_delay_us,
            "instances": 1,
        },
        "stub_python": server.probe,
        "stub_pythonpath": args.stub_pythonpath,
    }
    try:
        report["server"]["ready_after_s"] = round(server.wait_ready(args.ready_timeout), 1)
        print(
            f"server ready after {report['server']['ready_after_s']}s", file=sys.stderr, flush=True
        )
        report["latency"] = asyncio.run(
            measure(server.url, args.features, args.rows, args.duration, reference)
        )
        report["server_stats"] = server_stats(server.url)
    except Exception as exc:  # written into the report
        report["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        server.stop()
        report["server"]["log_tail"] = server.log_tail(25).splitlines()
        shutil.rmtree(work, ignore_errors=True)
    write()
    return 1 if "error" in report else 0


if __name__ == "__main__":
    sys.exit(main())
