"""A local Triton server: SageMaker's Triton container's twin on a laptop, CPU only.

The server is the `tritonserver` build inside the nvidia-pytriton wheel (python backend
only; found by `sluice.endpoints.triton_env`). It serves repositories of the
`local` flavour (see `sluice.endpoints.repository`) over Triton's HTTP port, its gRPC port and
the SageMaker port (`/ping`, `/invocations`) that the real container exposes.

One server per sluice home: its pid, ports and log are kept in `<home>/triton/state.json`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sluice import owner_only
from sluice.domain.errors import Conflict, NotFound, Unavailable
from sluice.endpoints.repository_check import DEFAULT_MODEL_ENV
from sluice.endpoints.triton_env import (
    DEFAULT_HTTP_PORT,
    TritonEnv,
    TritonPorts,
    check_ports,
    find_env,
    prepare_backends,
)
from sluice.endpoints.triton_env import (
    free_base_port as free_base_port,  # for callers that start servers
)

LOG_TAIL_LINES = 30
_SHM = Path("/dev/shm")


# the server's state ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LocalTriton:
    pid: int
    ports: TritonPorts
    model_repository: str
    default_model: str | None
    log: str
    env: str
    started_at: float
    shm_prefix: str = ""  # its python backend's shared-memory regions, removed when it stops

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.http}"

    @property
    def sagemaker_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.sagemaker}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.ports.grpc}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LocalTriton:
        return cls(**{**data, "ports": TritonPorts(**data["ports"])})


def state_dir(home: Path) -> Path:
    return Path(home).expanduser() / "triton"


def _state_file(home: Path) -> Path:
    return state_dir(home) / "state.json"


def read_state(home: Path) -> LocalTriton | None:
    try:
        return LocalTriton.from_dict(json.loads(_state_file(home).read_text()))
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
        return None


def _write_state(home: Path, server: LocalTriton) -> None:
    owner_only.write(_state_file(home), json.dumps(server.to_dict(), indent=2).encode())


# Processes this interpreter started, so stopping one also reaps it.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def is_running(pid: int) -> bool:
    """Whether `pid` is a live tritonserver (not a zombie, not a reused pid)."""
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    proc = Path(f"/proc/{pid}")
    if not proc.exists():  # no procfs (macOS): the signal check is all there is
        return True
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = (proc / "cmdline").read_bytes()
    except (OSError, IndexError):
        return False
    return state != "Z" and b"tritonserver" in cmdline


def log_tail(path: Path | str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    # Triton draws tables (models, backends, options) under otherwise empty log lines; cut
    # short they carry nothing, and the errors that matter are written on lines of their own.
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "+|" or stripped.endswith("]"):
            continue
        kept.append(line)
    return "\n".join(kept[-lines:])


def _get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _post(url: str, body: bytes, timeout: float = 5.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def is_ready(server: LocalTriton) -> bool:
    """Whether Triton is ready (its models loaded) and its SageMaker port answers /ping."""
    return _ready(server)


def _ready(server: LocalTriton) -> bool:
    try:
        return _get(f"{server.http_url}/v2/health/ready")[0] == 200 and _get(f"{server.sagemaker_url}/ping")[0] == 200
    except (OSError, urllib.error.URLError):
        return False


# Failures after which tritonserver would hang instead of exiting (a python backend stub that
# cannot start leaves the model loading forever).
_FATAL_MARKERS = ("Failed to preinitialize Python stub", "failed to load '", "error: creating server")


def _startup_failure(log_path: Path) -> str | None:
    try:
        text = log_path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None
    return next((marker.rstrip(" '") for marker in _FATAL_MARKERS if marker in text), None)


def _hint(log: str) -> str:
    if "backend 'onnxruntime'" in log or 'backend "onnxruntime"' in log:
        return (
            " (the repository is of the sagemaker flavour; the local Triton has only the python "
            "backend: build it with `sluice triton repo ... --flavour local`)"
        )
    return ""


def _model_dirs(repository: Path) -> list[str]:
    return sorted(p.name for p in repository.iterdir() if p.is_dir() and (p / "config.pbtxt").exists())


# start, stop, status -----------------------------------------------------------------------
def start(
    model_repository: Path,
    *,
    home: Path,
    port: int = DEFAULT_HTTP_PORT,
    default_model: str | None = None,
    env: TritonEnv | None = None,
    ready_timeout_s: float = 90.0,
) -> LocalTriton:
    """Start tritonserver on `model_repository`, loading every model in it, and wait until it
    is ready. `default_model` is what the SageMaker port's /invocations serves (the only model
    when there is one). Errors say what to do: set up the env, free a port, or read the log."""
    existing = read_state(home)
    if existing is not None and is_running(existing.pid):
        raise Conflict(
            f"a local Triton is already running (pid {existing.pid}, HTTP port {existing.ports.http}); "
            "stop it with `sluice triton down`",
            field="triton",
        )
    repository = Path(model_repository).expanduser().resolve()
    if not repository.is_dir():
        raise NotFound(f"no model repository folder at {repository}", field="models")
    env = env or find_env()
    ports = TritonPorts.from_http(port)
    check_ports(ports)
    models = _model_dirs(repository)
    if default_model is None and len(models) == 1:
        default_model = models[0]
    if default_model is not None and default_model not in models:
        raise NotFound(f"default model '{default_model}' is not in {repository} ({', '.join(models) or 'empty'})", field="default_model")
    folder = owner_only.folder(state_dir(home))
    backends = prepare_backends(env, folder / "backends")
    log_path = folder / "server.log"
    shm_prefix = f"sluice_triton_{secrets.token_hex(4)}_"
    command = [
        str(env.server),
        f"--model-repository={repository}",
        f"--backend-directory={backends}",
        "--allow-sagemaker=true",
        f"--sagemaker-port={ports.sagemaker}",
        "--http-address=127.0.0.1",
        f"--http-port={ports.http}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={ports.grpc}",
        "--allow-metrics=false",
        # explicit, as in SageMaker's container: load what is there now, more through the API later
        "--model-control-mode=explicit",
        "--load-model=*",
        "--strict-readiness=true",
        "--exit-timeout-secs=5",
        "--log-verbose=0",
        # the container's python backend shared-memory defaults (16 MiB, growing 1 MiB)
        "--backend-config=python,shm-default-byte-size=16777216",
        "--backend-config=python,shm-growth-byte-size=1048576",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
    ]
    environ = dict(os.environ)
    library_path = [str(env.python_libdir), str(env.libs)]
    if environ.get("LD_LIBRARY_PATH"):
        library_path.append(environ["LD_LIBRARY_PATH"])
    environ["LD_LIBRARY_PATH"] = ":".join(library_path)
    # The python backend stub embeds Python and finds its prefix (and site-packages) on PATH.
    environ["PATH"] = f"{env.bin}:{environ.get('PATH', '')}"
    environ.pop("PYTHONPATH", None)
    environ.pop("VIRTUAL_ENV", None)
    if default_model is not None:
        environ[DEFAULT_MODEL_ENV] = default_model
    with owner_only.open_file(log_path) as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=environ, start_new_session=True
        )
    _CHILDREN[process.pid] = process
    server = LocalTriton(
        pid=process.pid,
        ports=ports,
        model_repository=str(repository),
        default_model=default_model,
        log=str(log_path),
        env=str(env.root),
        started_at=round(time.time(), 3),
        shm_prefix=shm_prefix,
    )
    _write_state(home, server)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        code = process.poll()
        failure = None if code is not None else _startup_failure(log_path)
        if failure:
            # A fatal line is often the last thing a server prints before it exits: give it a
            # moment, so a server that exits is reported as exited and one that hangs as hung.
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = process.wait(timeout=2.0)
        if code is not None:
            _forget(home, process.pid)
            tail = log_tail(log_path)
            if "already in use" in tail:
                raise Conflict(f"a port the local Triton needs is taken; pick another with --port. Its log ends:\n{tail}", field="port")
            raise Unavailable(
                f"the local Triton exited with code {code} while starting{_hint(tail)}. Its log ({log_path}) ends:\n{tail}",
                field="triton",
            )
        if not failure and _ready(server):
            return server
        if failure:
            _terminate(process.pid, timeout_s=5.0)
            _forget(home, process.pid)
            tail = log_tail(log_path)
            raise Unavailable(
                f"the local Triton failed to start: {failure}{_hint(tail)}. Its log ({log_path}) ends:\n{tail}",
                field="triton",
            )
        time.sleep(0.1)
    _terminate(process.pid, timeout_s=5.0)
    _forget(home, process.pid)
    raise Unavailable(
        f"the local Triton was not ready after {ready_timeout_s:.0f} s. Its log ({log_path}) ends:\n{log_tail(log_path)}",
        field="triton",
    )


def _forget(home: Path, pid: int) -> None:
    state = read_state(home)
    if state is not None and state.pid == pid:
        _state_file(home).unlink(missing_ok=True)
        # A server killed mid-start leaves its python backend's shared memory behind.
        if state.shm_prefix and _SHM.is_dir():
            for region in _SHM.glob(f"{state.shm_prefix}*"):
                region.unlink(missing_ok=True)
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=1)


def _terminate(pid: int, *, timeout_s: float) -> None:
    if not is_running(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_running(pid):
            return
        time.sleep(0.05)
    # Its session (started for it) holds the python backend stubs too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def stop(home: Path, *, timeout_s: float = 15.0) -> LocalTriton | None:
    """Stop the server this home started; None when none was running."""
    state = read_state(home)
    if state is None:
        return None
    running = is_running(state.pid)
    _terminate(state.pid, timeout_s=timeout_s)
    _forget(home, state.pid)
    return state if running else None


def status(home: Path) -> dict[str, Any]:
    """What runs, where, and which models are ready."""
    state = read_state(home)
    if state is None:
        return {"running": False}
    if not is_running(state.pid):
        return {"running": False, "stale_state": True, "log": state.log, "log_tail": log_tail(state.log, 10)}
    info: dict[str, Any] = {
        "running": True,
        "ready": _ready(state),
        **state.to_dict(),
        "http_url": state.http_url,
        "sagemaker_url": state.sagemaker_url,
        "grpc_address": state.grpc_address,
    }
    try:
        code, body = _post(f"{state.http_url}/v2/repository/index", b"{}")
        if code == 200:
            info["models"] = [
                {"name": m.get("name"), "version": m.get("version"), "state": m.get("state")} for m in json.loads(body)
            ]
    except (OSError, urllib.error.URLError, json.JSONDecodeError):
        info["models"] = None
    return info
