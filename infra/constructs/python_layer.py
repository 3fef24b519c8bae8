"""A Lambda layer built from a requirements file by uv on this machine, without Docker.

uv is told which platform and Python the Lambda runtime has and may use wheels only, so the
result is what the runtime would have installed itself: it resolves, environment markers and
`Requires-Python` included, for that Python and CPU, not for the Python that runs the CDK app.
CDK calls the builder through its local-bundling hook; when it cannot build there is no Docker
fallback: synthesis stops and says why.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, ILocalBundling, Stack, Stage
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.constructs.bytecode import compile_tree, find_interpreter, find_uv

MB = 1_000_000
# Lambda's limit on a function's code plus all its layers, unzipped.
UNZIPPED_LIMIT_BYTES = 250 * 1024 * 1024

# Bumped when the way a layer is built changes, so cached builds are not reused
# (3: uv instead of pip).
_BUILDER_VERSION = "3"
# Removed from every layer before it is compiled: never imported by a function, and
# bytecode some wheel may carry for another Python.
_STRIPPED_DIRS = frozenset({"__pycache__", "tests", "test"})
_STRIPPED_SUFFIXES = (".pyc", ".pyo")

# The glibc of each runtime's Amazon Linux: python3.12 and later run on AL2023 (2.34).
# uv's `<arch>-manylinux_2_34` target accepts every manylinux tag from 2_34 down to 2_17
# (manylinux2014), such as the 2_27 and 2_28 wheels numpy and onnxruntime publish.
_GLIBC_MINOR = {"3.12": 34, "3.13": 34, "3.14": 34}
_WHEEL_ARCH = {"x86_64": "x86_64", "arm64": "aarch64"}


def python_platform(*, architecture: str, python: str) -> str:
    """uv's `--python-platform` for a Lambda architecture and Python runtime."""
    return f"{_WHEEL_ARCH[architecture]}-manylinux_2_{_GLIBC_MINOR[python]}"


def directory_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def read_excludes(path: Path) -> list[str]:
    """Glob patterns, one a line, `#` comments; a missing file excludes nothing."""
    if not path.is_file():
        return []
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def strip_layer(root: Path, excludes: Sequence[str] = ()) -> None:
    for pattern in excludes:
        for match in sorted(root.glob(pattern), reverse=True):
            if match.is_dir() and not match.is_symlink():
                shutil.rmtree(match)
            elif match.exists() or match.is_symlink():
                match.unlink()
    for directory in sorted(
        (d for d in root.rglob("*") if d.is_dir() and d.name in _STRIPPED_DIRS), reverse=True
    ):
        if directory.exists():
            shutil.rmtree(directory)
    for file in root.rglob("*"):
        if file.is_file() and file.suffix in _STRIPPED_SUFFIXES:
            file.unlink()


class LayerBuildError(RuntimeError):
    pass


def check_unzipped_size(owner: str, *, code_bytes: int, layers: dict[str, int]) -> int:
    """The function's code plus its layers, unzipped; raises when Lambda would refuse it."""
    total = code_bytes + sum(layers.values())
    if total > UNZIPPED_LIMIT_BYTES:
        parts = ", ".join(f"{name} {size / MB:.1f} MB" for name, size in layers.items())
        raise ValueError(
            f"{owner}: code ({code_bytes / MB:.1f} MB) and layers ({parts}) come to "
            f"{total / MB:.1f} MB unzipped, over Lambda's 250 MiB "
            f"({UNZIPPED_LIMIT_BYTES / MB:.1f} MB) limit. Trim a requirements file under "
            "layers/ (or its exclude.txt), or split the function's layers."
        )
    return total


@jsii.implements(ILocalBundling)
class UvInstall:
    """The local bundler: `uv pip install --target <out>/python` for the runtime's platform."""

    def __init__(
        self,
        *,
        name: str,
        requirements: Path,
        platform: str,
        python: str,
        excludes: list[str] | None = None,
        bytecode: bool = False,
    ) -> None:
        self.name = name
        self.requirements = requirements
        self.excludes = excludes or []
        self.platform = platform
        self.python = python
        self.bytecode = bytecode

    def arguments(self, target: Path) -> list[str]:
        """What follows the uv executable."""
        return [
            "pip",
            "install",
            "--quiet",
            "--color",
            "never",
            # Reproducible whatever folder the app runs in: no uv.toml, and not this project's
            # [tool.uv] (its overrides are for the dev install). The index is PyPI unless the
            # environment names another (UV_DEFAULT_INDEX, UV_INDEX).
            "--no-config",
            # The interpreter uv starts from (CPython, as Lambda's; the scripts' shebangs):
            # the Python and platform the wheels are chosen for are the two options below.
            "--python",
            sys.executable,
            "--target",
            str(target),
            "--python-version",
            self.python,
            "--python-platform",
            self.platform,
            "--only-binary",
            ":all:",
            # The layer's files are its own, never hard links into uv's cache.
            "--link-mode",
            "copy",
            "--requirement",
            str(self.requirements),
        ]

    def try_bundle(self, output_dir: str, *_options: Any, **_keywords: Any) -> bool:
        # jsii passes the bundling options positionally; they hold nothing this builder needs.
        uv = find_uv()
        if uv is None:
            raise LayerBuildError(
                f"layer {self.name!r}: uv is not installed for {sys.executable} nor on PATH. "
                "Layers are built with uv on this machine, never in Docker: install uv into the "
                "environment that runs the CDK app (the `cdk` extra has it; `make synth` does)."
            )
        target = Path(output_dir) / "python"
        result = subprocess.run(
            [uv, *self.arguments(target)], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()[-15:]
            raise LayerBuildError(
                f"layer {self.name!r} could not be built without Docker: uv failed on "
                f"{self.requirements}. Usually some requirement has no binary wheel for "
                f"python {self.python} on {self.platform} (or an older manylinux tag), or "
                "the package index cannot be reached; layers are built from wheels only, so pin "
                "versions that publish manylinux wheels for this runtime and architecture.\n"
                "uv said:\n" + "\n".join(detail)
            )
        # uv's lock on the folder it installed into: nothing the runtime reads.
        (target / ".lock").unlink(missing_ok=True)
        strip_layer(target, self.excludes)
        if self.bytecode:
            compile_tree(target, version=self.python, label=f"layer {self.name}")
        return True


class PythonLayer(Construct):
    """A layer of third-party packages from `layers/<name>/requirements.txt`.

    `unzipped_bytes` is the built size, or None when this synthesis skips bundling.
    `bytecode` ships `__pycache__` compiled by the runtime's Python (see bytecode.py); it adds
    about 13% to the layer's size (the core layer for 3.13: 131 -> 149 MB unzipped).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        requirements_dir: Path,
        runtime: lambda_.Runtime,
        architecture: lambda_.Architecture,
        python: str,
        description: str,
        bytecode: bool = True,
    ) -> None:
        super().__init__(scope, id)
        self.name = requirements_dir.name
        requirements = requirements_dir / "requirements.txt"
        if not requirements.is_file():
            raise FileNotFoundError(
                f"layer {self.name!r} has no requirements file at {requirements}"
            )
        platform = python_platform(architecture=architecture.name, python=python)
        excludes = read_excludes(requirements_dir / "exclude.txt")
        self.installer = bundler = UvInstall(
            name=self.name,
            requirements=requirements,
            platform=platform,
            python=python,
            excludes=excludes,
            bytecode=bytecode,
        )
        # Whether bytecode can be compiled here is part of the build: a machine that gains
        # the interpreter rebuilds the layer instead of reusing the one without bytecode.
        compiler = "sources-only"
        if bytecode:
            compiler = f"bytecode-{python}" if find_interpreter(python) else "no-compiler"
        self.bytecode = compiler.startswith("bytecode")
        fingerprint = hashlib.sha256(
            "\n".join(
                [
                    _BUILDER_VERSION,
                    requirements.read_text(),
                    python,
                    platform,
                    *excludes,
                    *sorted(_STRIPPED_DIRS),
                    compiler,
                ]
            ).encode()
        ).hexdigest()
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(
                str(requirements_dir),
                asset_hash_type=AssetHashType.CUSTOM,
                asset_hash=fingerprint,
                bundling=BundlingOptions(
                    # Never started: the local bundler either builds the layer or raises.
                    image=runtime.bundling_image,
                    local=bundler,
                ),
            ),
            compatible_runtimes=[runtime],
            compatible_architectures=[architecture],
            description=description,
        )
        self.unzipped_bytes: int | None = None
        if Stack.of(self).bundling_required:
            self.unzipped_bytes = directory_size(staged_path(self.layer))
            print(
                f"layer {self.name}: {self.unzipped_bytes / MB:.1f} MB unzipped "
                f"(python {python}, {architecture.name})",
                flush=True,
            )


def staged_path(owner: Construct) -> Path:
    """Where the code asset of a Lambda function or layer was staged in the cloud assembly."""
    from aws_cdk import aws_s3_assets as s3_assets

    asset = owner.node.find_child("Code")
    if not isinstance(asset, s3_assets.Asset):
        raise TypeError(f"{owner.node.path} has no staged code asset")
    path = Path(asset.asset_path)
    if not path.is_absolute():
        path = Path(Stage.of(owner).outdir) / path
    return path
