"""Bytecode for Lambda assets, compiled by the runtime's own Python version.

`/opt` (layers) and `/var/task` (the function code) are read-only on Lambda, so Python cannot
cache what it compiles: without `__pycache__` in the asset, every cold start compiles every
module it imports from source (measured at 2.3x the import time with bytecode). A `.pyc` only
counts for the exact minor version that wrote it (its magic number), so the compiler must be
an interpreter of the runtime's version, found on this machine; without one the asset ships
sources only and the build says so.

The pycs are unchecked-hash pycs (PEP 552): Python loads them without comparing them with the
source's mtime or hash, so the timestamps a zip round trip changes do not matter.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_VERSION_CHECK = "import sys; print('%d.%d' % sys.version_info[:2])"


@dataclass(frozen=True)
class Compiled:
    """What one compilation did: which interpreter, how many files, and what failed."""

    interpreter: str | None
    files: int
    failures: tuple[str, ...] = ()

    @property
    def shipped(self) -> bool:
        return self.interpreter is not None and self.files > 0


def _version_of(candidate: str) -> str | None:
    try:
        result = subprocess.run(
            [candidate, "-c", _VERSION_CHECK], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def find_uv() -> str | None:
    """The uv beside the Python that runs the CDK app (the `cdk` extra installs it), else
    one on PATH."""
    try:
        from uv import find_uv_bin
    except ImportError:
        return shutil.which("uv")
    try:
        return find_uv_bin()
    except FileNotFoundError:
        return shutil.which("uv")


def _candidates(version: str) -> list[str]:
    """Interpreters that may be `version`: on PATH, uv's managed ones, pyenv's."""
    found: list[str] = []
    on_path = shutil.which(f"python{version}")
    if on_path:
        found.append(on_path)
    uv = find_uv()
    if uv:
        try:
            result = subprocess.run(
                [uv, "python", "find", "--no-project", version],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if result.returncode == 0 and result.stdout.strip():
                found.append(result.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.TimeoutExpired):
            pass
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    # Newest patch release first; a pyenv shim on PATH may point at no installed version.
    for root in sorted(pyenv_root.glob(f"versions/{version}.*"), reverse=True):
        if re.fullmatch(rf"{re.escape(version)}\.\d+", root.name):
            found.append(str(root / "bin" / f"python{version}"))
    return found


@functools.cache
def find_interpreter(version: str) -> str | None:
    """An interpreter of Python `version` (e.g. "3.12") on this machine, or None."""
    for candidate in _candidates(version):
        if _version_of(candidate) == version:
            return candidate
    return None


def compile_tree(root: Path, *, version: str, label: str) -> Compiled:
    """Compiles every module under `root` with Python `version` into `__pycache__` beside it.

    Files that do not compile (a module for another Python, a template) are listed and left
    as they are: they would not compile at run time either. No interpreter: a warning, and
    the tree is left as sources.
    """
    interpreter = find_interpreter(version)
    if interpreter is None:
        print(
            f"WARNING {label}: no Python {version} interpreter on this machine (looked for "
            f"python{version} on PATH, `uv python find {version}`, pyenv), so it ships without "
            f"bytecode and Lambda compiles its modules at every cold start. Install Python "
            f"{version} on the build machine (for example `uv python install {version}`) and "
            "synthesize again.",
            flush=True,
        )
        return Compiled(interpreter=None, files=0)
    result = subprocess.run(
        [
            interpreter,
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
            str(root),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    # compileall's quiet mode prints only the files that failed, as "*** Error compiling '…'".
    failures = tuple(re.findall(r"\*\*\* Error compiling '([^']+)'", result.stdout))
    if result.returncode != 0 and not failures:
        raise RuntimeError(
            f"{label}: compileall with {interpreter} failed:\n{result.stdout}{result.stderr}"
        )
    files = sum(1 for _ in root.rglob(f"__pycache__/*.cpython-{version.replace('.', '')}.pyc"))
    print(
        f"{label}: {files} modules compiled to bytecode by Python {version} ({interpreter})"
        + (f"; {len(failures)} did not compile and ship as sources" if failures else ""),
        flush=True,
    )
    return Compiled(interpreter=interpreter, files=files, failures=failures)


def ensure_interpreter(version: str) -> str | None:
    """`find_interpreter`, else one installed by `uv python install` (a CPython build uv
    downloads, where this machine reaches its downloads): what `make synth` runs first, so
    that the layers carry bytecode by default. None where neither gives one; the synthesis
    then warns, as `compile_tree` says."""
    found = find_interpreter(version)
    if found is not None:
        return found
    uv = find_uv()
    if uv is None:
        return None
    print(f"no Python {version} on this machine for the layers' bytecode: `uv python install {version}` …", flush=True)
    try:
        result = subprocess.run([uv, "python", "install", version], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"uv could not install Python {version}: {e}", flush=True)
        return None
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
        print(f"uv could not install Python {version}: {reason}", flush=True)
        return None
    find_interpreter.cache_clear()
    return find_interpreter(version)


def main(argv: list[str] | None = None) -> int:
    """`python -m infra.constructs.bytecode [CONFIG]`: an interpreter of the configured
    runtime's Python (`functions.python`), found or installed; says which. Never fails: a
    synthesis without one ships sources and warns."""
    from infra.config import DEFAULT_CONFIG, load_config

    args = sys.argv[1:] if argv is None else argv
    version = load_config(args[0] if args else DEFAULT_CONFIG).functions.python
    found = ensure_interpreter(version)
    print(
        f"layers' bytecode: Python {version} at {found}"
        if found
        else f"layers' bytecode: no Python {version} (the synthesis ships sources and warns)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
