"""Bytecode in the Lambda assets: compiled by the runtime's own Python, unchecked-hash pycs,
and used as they are by a read-only import of every handler."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from infra.config import FunctionsConfig
from infra.constructs import bytecode
from infra.constructs.bytecode import compile_tree, find_interpreter

from tests.infra.synth import cdk_context

pytestmark = pytest.mark.usefixtures("cdk_runtime")  # constructs of its own: on the CDK's worker (tests/conftest.py)

# The runtime these tests build for: the config's default (`functions.python`), what a
# deployment gets unless it chooses; skipped where this machine has no such Python.
RUNTIME: str = FunctionsConfig.model_fields["python"].default
# Imported with the runtime's interpreter; counts every module compiled from source.
PROBE = r"""
import importlib._bootstrap_external as external, json, sys, time
roots = sys.argv[1:3]
compiled = []
original = external.SourceLoader.source_to_code
def counting(self, data, path, *args, **kwargs):
    if str(path).startswith(tuple(roots)):
        compiled.append(str(path))
    return original(self, data, path, *args, **kwargs)
external.SourceLoader.source_to_code = counting
started = time.perf_counter()
for name in sys.argv[3:]:
    __import__(name)
ms = (time.perf_counter() - started) * 1000
from_assets = [m for m in list(sys.modules.values())
               if str(getattr(m, "__file__", "") or "").startswith(tuple(roots))]
print(json.dumps({"ms": ms, "compiled": compiled, "from_assets": len(from_assets)}))
"""


@pytest.fixture
def runtime_python() -> None:
    """Skips the test where this machine has no Python RUNTIME (looked for when the test runs,
    not at collection: the search starts interpreters, and every worker collects every test)."""
    if find_interpreter(RUNTIME) is None:
        pytest.skip(f"no Python {RUNTIME} on this machine to compile and import with")


needs_runtime_python = pytest.mark.usefixtures("runtime_python")


def _pyc_flags(pyc: Path) -> int:
    # PEP 552: magic (4 bytes), then a flags word: bit 0 hash-based, bit 1 check the source.
    return int.from_bytes(pyc.read_bytes()[4:8], "little")


@needs_runtime_python
def test_compiles_unchecked_hash_pycs_and_lists_what_does_not_compile(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (tmp_path / "pkg" / "py2_only.py").write_text("print 'no'\n")
    compiled = compile_tree(tmp_path, version=RUNTIME, label="t")
    assert compiled.shipped and compiled.files == 1
    assert compiled.failures == (str(tmp_path / "pkg" / "py2_only.py"),)
    (pyc,) = (tmp_path / "pkg" / "__pycache__").glob("*.pyc")
    assert pyc.name == f"__init__.cpython-{RUNTIME.replace('.', '')}.pyc"
    assert _pyc_flags(pyc) == 0b01  # hash-based, never checked against the source


def test_without_the_runtimes_python_the_build_says_so_and_ships_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bytecode, "_candidates", lambda version: ["/nonexistent/python"])
    bytecode.find_interpreter.cache_clear()
    try:
        (tmp_path / "m.py").write_text("X = 1\n")
        compiled = compile_tree(tmp_path, version="3.99", label="code")
    finally:
        bytecode.find_interpreter.cache_clear()
    assert not compiled.shipped
    assert not list(tmp_path.rglob("*.pyc"))
    out = capsys.readouterr().out
    assert "WARNING code: no Python 3.99 interpreter on this machine" in out
    assert "ships without bytecode" in out


def _read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def build_assets(outdir: Path, python: str = RUNTIME) -> tuple[Path, Path]:
    """The core layer and the function code, built as `cdk synth` builds them."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_lambda as lambda_
    from infra.constructs.functions import FunctionPlatform
    from infra.constructs.python_layer import staged_path

    context = cdk_context()
    context.pop("aws:cdk:bundling-stacks")  # build for real
    app = App(context=context, outdir=str(outdir))
    stack = Stack(app, "Assets")
    platform = FunctionPlatform(
        python=python,
        architecture_name="x86_64",
        log_retention_days=30,
        retain_logs=False,
        environment={},
    )
    layer = platform.layer(stack, "Core", name="core", description="core")
    function = lambda_.Function(
        stack,
        "Fn",
        runtime=platform.runtime,
        handler="sluice.handlers.api.handler",
        code=platform.code(),
    )
    return staged_path(layer.layer) / "python", staged_path(function)


@pytest.mark.slow
@needs_runtime_python
def test_every_handler_imports_from_the_built_assets_without_compiling(tmp_path: Path) -> None:
    layer, code = build_assets(tmp_path / "cdk.out")
    handlers = sorted(
        f"sluice.handlers.{p.stem}"
        for p in (code / "sluice" / "handlers").glob("*.py")
        if p.stem != "__init__"
    )
    assert {"sluice.handlers.api", "sluice.handlers.batch", "sluice.handlers.shadow"} <= set(
        handlers
    )
    # The web console (`make console`) ships in the code asset, served by the API function.
    console = Path(__file__).resolve().parents[2] / "functions" / "sluice" / "console" / "static" / "index.html"
    if console.exists():
        assert (code / "sluice" / "console" / "static" / "index.html").read_bytes() == console.read_bytes()
    tag = f"cpython-{RUNTIME.replace('.', '')}"
    for root in (layer, code):
        pycs = list(root.rglob(f"__pycache__/*.{tag}.pyc"))
        assert len(pycs) > 100 and all(_pyc_flags(p) == 0b01 for p in pycs[:50])
        assert not list(root.rglob("__pycache__/*.cpython-311.pyc"))
    before = sorted(str(p) for p in [*layer.rglob("*"), *code.rglob("*")])
    _read_only(layer)
    _read_only(code)
    try:
        result = subprocess.run(
            [
                find_interpreter(RUNTIME),
                "-c",
                PROBE,
                str(layer),
                str(code),
                *handlers,
                "onnxruntime",  # what the SnapStart preload imports
            ],
            env={
                "PATH": os.environ["PATH"],
                "PYTHONPATH": f"{code}:{layer}",
                # Lambda's /opt and /var/task cannot be written (root ignores the mode bits).
                "PYTHONDONTWRITEBYTECODE": "1",
                "AWS_REGION": "us-east-1",
            },
            capture_output=True,
            text=True,
            check=False,
            timeout=240,
        )
    finally:
        _writable(layer)
        _writable(code)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["compiled"] == []  # not one module from source
    assert report["from_assets"] > 300
    assert sorted(str(p) for p in [*layer.rglob("*"), *code.rglob("*")]) == before
