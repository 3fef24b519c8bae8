"""The local Triton's environment: the `tritonserver` build inside the nvidia-pytriton wheel
(python backend only), in a virtualenv of its own (`make triton-env`) because the wheel pins
NumPy below 2 and its python backend misbehaves under NumPy 2; and the three ports a server
takes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sluice import owner_only
from sluice.domain.errors import Conflict, Unavailable

ENV_VARIABLE = "SLUICE_TRITON_ENV"
DEFAULT_HTTP_PORT = 8100  # `sluice triton up`'s; gRPC and SageMaker take the next two
_SETUP_HINT = "run `make triton-env` in the sluice checkout, or point SLUICE_TRITON_ENV at such a virtualenv"
# Run inside the Triton env's own interpreter: where the wheel put the server and its parts.
_PROBE = """
import json, sys, sysconfig, pathlib
import pytriton
root = pathlib.Path(pytriton.__file__).parent
print(json.dumps({
    "version": f"{sys.version_info[0]}.{sys.version_info[1]}",
    "libdir": sysconfig.get_config_var("LIBDIR") or "",
    "pytriton": str(root),
}))
"""


def repo_root() -> Path:
    """The sluice checkout this package runs from (functions/sluice/endpoints/ -> root)."""
    return Path(__file__).resolve().parents[3]


# the environment ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TritonEnv:
    root: Path  # the virtualenv
    server: Path  # bin/tritonserver inside the wheel
    libs: Path  # the wheel's bundled shared libraries
    python_libdir: Path  # where libpython3.X.so lives, for the python backend stub
    python_version: str
    backend: Path  # the python backend: libtriton_python.so + triton_python_backend_utils.py
    stub: Path  # triton_python_backend_stub built for python_version

    @property
    def bin(self) -> Path:
        return self.root / "bin"


def env_candidates(explicit: Path | str | None = None, environ: dict[str, str] | None = None) -> list[Path]:
    environ = dict(os.environ) if environ is None else environ
    if explicit:
        return [Path(explicit).expanduser()]
    if environ.get(ENV_VARIABLE):
        return [Path(environ[ENV_VARIABLE]).expanduser()]
    return [repo_root() / ".venv-triton", Path("~/.sluice/triton-env").expanduser()]


def find_env(explicit: Path | str | None = None, environ: dict[str, str] | None = None) -> TritonEnv:
    """Locate the Triton virtualenv and the server parts inside its nvidia-pytriton wheel."""
    candidates = env_candidates(explicit, environ)
    root = next((c for c in candidates if (c / "bin" / "python").exists()), None)
    if root is None:
        where = " or ".join(str(c) for c in candidates)
        raise Unavailable(f"no local Triton environment at {where}; {_SETUP_HINT}", field="triton_env")
    try:
        probe = subprocess.run(
            [str(root / "bin" / "python"), "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"the Triton environment at {root} does not run ({type(exc).__name__}); {_SETUP_HINT}", field="triton_env") from None
    if probe.returncode != 0:
        raise Unavailable(f"the Triton environment at {root} has no nvidia-pytriton; {_SETUP_HINT}", field="triton_env")
    info = json.loads(probe.stdout.strip().splitlines()[-1])
    dist = Path(info["pytriton"]) / "tritonserver"
    env = TritonEnv(
        root=root,
        server=dist / "bin" / "tritonserver",
        libs=Path(info["pytriton"]).parent / "nvidia_pytriton.libs",
        python_libdir=Path(info["libdir"]),
        python_version=info["version"],
        backend=dist / "backends" / "python",
        stub=dist / "python_backend_stubs" / info["version"] / "triton_python_backend_stub",
    )
    for part in (env.server, env.libs, env.backend / "libtriton_python.so", env.stub):
        if not part.exists():
            raise Unavailable(f"the Triton environment at {root} lacks {part}; {_SETUP_HINT}", field="triton_env")
    return env


def prepare_backends(env: TritonEnv, folder: Path) -> Path:
    """A backend folder whose python backend has the stub for the env's Python next to it."""
    target = folder / "python"
    marker = target / ".source"
    source = f"{env.backend}|{env.stub}"
    if marker.exists() and marker.read_text() == source:
        return folder
    if target.exists():
        shutil.rmtree(target)
    owner_only.folder(target, exist_ok=False)
    for item in env.backend.iterdir():
        if item.is_file():
            owner_only.copy(item, target / item.name)
    owner_only.copy(env.stub, target / "triton_python_backend_stub")  # executable: 0700
    owner_only.write(marker, source.encode())
    return folder


# ports -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TritonPorts:
    http: int
    grpc: int
    sagemaker: int

    @classmethod
    def from_http(cls, port: int) -> TritonPorts:
        """The HTTP port, and gRPC and SageMaker on the two ports after it."""
        return cls(port, port + 1, port + 2)


def _port_free(port: int, address: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def check_ports(ports: TritonPorts) -> None:
    # Triton binds HTTP and gRPC where told (here 127.0.0.1); its SageMaker port always on 0.0.0.0.
    for what, port, address in (
        ("HTTP", ports.http, "127.0.0.1"),
        ("gRPC", ports.grpc, "127.0.0.1"),
        ("SageMaker", ports.sagemaker, "0.0.0.0"),
    ):
        if not 0 < port < 65536:
            raise Conflict(f"{what} port {port} is not a TCP port", field="port")
        if not _port_free(port, address):
            raise Conflict(
                f"{what} port {port} is already in use; pick another base port with --port "
                f"(the server takes it and the next two)",
                field="port",
            )


def free_base_port() -> int:
    """A base port whose next two ports are free too (for tests and benchmarks)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            base = sock.getsockname()[1]
        if base + 2 < 65536:
            try:
                check_ports(TritonPorts.from_http(base))
            except Conflict:
                continue
            return base
    raise Conflict("found no three consecutive free ports", field="port")
