"""A Lambda layer built from a requirements file by pip on this machine, without Docker.

pip is told which platform and Python the Lambda runtime has and may use wheels only, so the
result is what the runtime would have installed itself. CDK calls the builder through its
local-bundling hook; when it cannot build there is no Docker fallback: synthesis stops and
says why.
"""

from __future__ import annotations

import hashlib
import importlib.util
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

from infra.constructs.bytecode import compile_tree, find_interpreter

MB = 1_000_000
# Lambda's limit on a function's code plus all its layers, unzipped.
UNZIPPED_LIMIT_BYTES = 250 * 1024 * 1024

# Bumped when the way a layer is built changes, so cached builds are not reused.
_BUILDER_VERSION = "2"
# Removed from every layer before it is compiled: never imported by a function, and
# bytecode some wheel may carry for another Python.
_STRIPPED_DIRS = frozenset({"__pycache__", "tests", "test"})
_STRIPPED_SUFFIXES = (".pyc", ".pyo")

# The glibc of each runtime's Amazon Linux: python3.12 and later run on AL2023 (2.34).
# pip only expands manylinux2014 to older tags, so the newer manylinux_2_x tags that numpy
# and onnxruntime publish (2_27, 2_28) must be listed one by one.
_GLIBC_MINOR = {"3.12": 34, "3.13": 34, "3.14": 34}
_PIP_ARCH = {"x86_64": "x86_64", "arm64": "aarch64"}


def platform_tags(*, architecture: str, python: str) -> list[str]:
    """Wheel platform tags the runtime accepts, newest first."""
    arch = _PIP_ARCH[architecture]
    newest = _GLIBC_MINOR[python]
    return [f"manylinux_2_{minor}_{arch}" for minor in range(newest, 16, -1)] + [
        f"manylinux2014_{arch}"
    ]


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
class PipInstall:
    """The local bundler: `pip install --target <out>/python` for the runtime's platform."""

    def __init__(
        self,
        *,
        name: str,
        requirements: Path,
        platforms: list[str],
        python: str,
        excludes: list[str] | None = None,
        bytecode: bool = False,
    ) -> None:
        self.name = name
        self.requirements = requirements
        self.excludes = excludes or []
        self.platforms = platforms
        self.python = python
        self.bytecode = bytecode

    def command(self, target: Path) -> list[str]:
        platform_args = [arg for tag in self.platforms for arg in ("--platform", tag)]
        return [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--target",
            str(target),
            "--implementation",
            "cp",
            "--python-version",
            self.python,
            "--only-binary=:all:",
            *platform_args,
            "--requirement",
            str(self.requirements),
        ]

    def try_bundle(self, output_dir: str, *_options: Any, **_keywords: Any) -> bool:
        # jsii passes the bundling options positionally; they hold nothing this builder needs.
        if importlib.util.find_spec("pip") is None:
            raise LayerBuildError(
                f"layer {self.name!r}: pip is not installed for {sys.executable}. Layers are "
                "built with pip on this machine, never in Docker: install pip into the "
                "environment that runs the CDK app (`make synth` does)."
            )
        target = Path(output_dir) / "python"
        result = subprocess.run(self.command(target), capture_output=True, text=True, check=False)
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()[-15:]
            raise LayerBuildError(
                f"layer {self.name!r} could not be built without Docker: pip failed on "
                f"{self.requirements}. Usually some requirement has no binary wheel for "
                f"python {self.python} on {self.platforms[0]} (or an older manylinux tag), or "
                "the package index cannot be reached; layers are built from wheels only, so pin "
                "versions that publish manylinux wheels for this runtime and architecture.\n"
                "pip said:\n" + "\n".join(detail)
            )
        strip_layer(target, self.excludes)
        if self.bytecode:
            compile_tree(target, version=self.python, label=f"layer {self.name}")
        return True


class PythonLayer(Construct):
    """A layer of third-party packages from `layers/<name>/requirements.txt`.

    `unzipped_bytes` is the built size, or None when this synthesis skips bundling.
    `bytecode` ships `__pycache__` compiled by the runtime's Python (see bytecode.py); it adds
    about 13% to the layer's size (the core layer for 3.12: 131 -> 148 MB unzipped).
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
        platforms = platform_tags(architecture=architecture.name, python=python)
        excludes = read_excludes(requirements_dir / "exclude.txt")
        self.pip = bundler = PipInstall(
            name=self.name,
            requirements=requirements,
            platforms=platforms,
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
                    *platforms,
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
