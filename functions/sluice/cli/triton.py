"""`sluice triton`: a local Triton server, and Triton model repositories from registered versions.

    sluice triton up [--port 8100] [--models DIR] [--default-model NAME]
    sluice triton down
    sluice triton status
    sluice triton repo MODEL[:VERSION] --flavour local|sagemaker --out DIR/ | model.tar.gz
    sluice triton check model.tar.gz [--default-model NAME]

The work happens in `sluice.endpoints`; these functions parse, call and print.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sluice import owner_only
from sluice.cli import pieces
from sluice.cli.common import count, local_home
from sluice.domain.errors import BadRequest
from sluice.endpoints.triton_env import DEFAULT_HTTP_PORT


def _home() -> Path:
    return local_home()


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def cmd_triton_up(args: argparse.Namespace) -> int:
    from sluice.endpoints import local_triton

    home = _home()
    models = Path(args.models).expanduser() if args.models else local_triton.state_dir(home) / "models"
    if not args.models:
        owner_only.folder(models)
    env = local_triton.find_env(args.env)
    print(f"Starting Triton on {models} ...", flush=True)
    server = local_triton.start(
        models, home=home, port=args.port, default_model=args.default_model, env=env, ready_timeout_s=args.timeout
    )
    print(f"Triton is ready (pid {server.pid})")
    print(f"  HTTP       {server.http_url}      (runtime `triton`: config.url)")
    print(f"  gRPC       {server.grpc_address}")
    print(f"  SageMaker  {server.sagemaker_url}      (runtime `sagemaker`: endpoint_url)")
    print(f"  /invocations serves: {server.default_model or '(no default model)'}")
    print(f"  log        {server.log}")
    _say_if_not_allowed(server.http_url, server.grpc_address)
    return 0


def _say_if_not_allowed(http_url: str, grpc_address: str) -> None:
    """The allowlist admits the default ports only: another port needs the operator's word."""
    from sluice.domain.errors import SluiceError
    from sluice.domain.origins import check_origin
    from sluice.settings import get_settings

    try:
        check_origin(http_url, get_settings().sources.triton_allowlist, field="triton_url")
    except SluiceError:
        grpc_url = f"http://{grpc_address}"
        print(
            f"  note       sluice calls only the Triton servers SLUICE_TRITON_URL_PREFIXES names; to register "
            f"models from this one, add them: SLUICE_TRITON_URL_PREFIXES='[\"{http_url}\", \"{grpc_url}\"]'"
        )


def cmd_triton_down(args: argparse.Namespace) -> int:
    from sluice.endpoints import local_triton

    stopped = local_triton.stop(_home())
    print(f"stopped the local Triton (pid {stopped.pid})" if stopped else "no local Triton is running")
    return 0


def cmd_triton_status(args: argparse.Namespace) -> int:
    from sluice.endpoints import local_triton

    info = local_triton.status(_home())
    _print_json(info)
    return 0 if info.get("running") else 1


def _version_ref(ref: str) -> tuple[str, int | str]:
    from sluice.domain.values import parse_model_ref

    return parse_model_ref(ref, field="version")


def cmd_triton_repo(args: argparse.Namespace) -> int:
    from sluice.domain import Principal
    from sluice.endpoints.repository import TritonOptions, export_repository

    models, store = pieces.models(), pieces.store()
    principal = Principal(args.tenant, frozenset({"admin", "predict"}), "cli")
    name, number = _version_ref(args.version)
    version = models.get_version(principal, name, number)
    options = TritonOptions(
        max_batch_size=args.max_batch_size,
        preferred_batch_sizes=tuple(args.preferred_batch_size or ()),
        max_queue_delay_us=args.max_queue_delay_us,
        instance_kind=args.instance_kind,
        instance_count=args.instance_count,
        tensorrt_fp16=args.tensorrt_fp16,
    )
    out = export_repository(version, store, Path(args.out), flavour=args.flavour, options=options, name=args.name)
    model = args.name or version.model
    print(f"wrote the {args.flavour} repository of {version.ref} to {out} (Triton model '{model}', version {version.version})")
    return 0


def cmd_triton_check(args: argparse.Namespace) -> int:
    from sluice.endpoints.repository_check import validate_repository_tarball

    path = Path(args.archive).expanduser()
    if not path.is_file():
        raise BadRequest(f"no such file: {path}", field="archive")
    check = validate_repository_tarball(path, args.default_model)
    _print_json({"models": list(check.models), "default_model": check.default_model, "environment": check.environment})
    return 0


def add_triton_commands(subparsers: Any) -> None:
    """Add `triton up|down|status|repo|check` to the `sluice` parser's subcommands."""
    triton = subparsers.add_parser("triton", help="a local Triton server and Triton model repositories")
    actions = triton.add_subparsers(dest="action", required=True)

    up = actions.add_parser("up", help="start a local Triton (CPU) on a model repository folder")
    up.add_argument("--port", type=count, default=DEFAULT_HTTP_PORT, help=f"HTTP port; gRPC and SageMaker take the next two (default {DEFAULT_HTTP_PORT})")
    up.add_argument("--models", help="model repository folder (default: <SLUICE_HOME>/triton/models)")
    up.add_argument("--default-model", help="the model the SageMaker port's /invocations serves (default: the only one)")
    up.add_argument("--env", help="the Triton virtualenv (default: SLUICE_TRITON_ENV, ./.venv-triton, ~/.sluice/triton-env)")
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the models to load (default 90)")
    up.set_defaults(func=cmd_triton_up)

    actions.add_parser("down", help="stop the local Triton").set_defaults(func=cmd_triton_down)
    actions.add_parser("status", help="show the local Triton's ports and models").set_defaults(func=cmd_triton_status)

    repo = actions.add_parser("repo", help="write a version's Triton model repository (folder or model.tar.gz)")
    repo.add_argument("version", help="MODEL or MODEL:VERSION (a number or 'latest')")
    repo.add_argument("--flavour", choices=("local", "sagemaker"), required=True, help="local: python backend for `triton up`; sagemaker: the GPU container's onnxruntime config")
    repo.add_argument("--out", required=True, help="a folder, or a path ending in .tar.gz for SageMaker's model.tar.gz")
    repo.add_argument("--name", help="Triton model name (default: the model's name)")
    repo.add_argument("--max-batch-size", type=count, help="0 turns batching off (default: 64 when the model has a dynamic batch axis)")
    repo.add_argument("--preferred-batch-size", type=count, action="append", help="dynamic batching's preferred size; repeat for several")
    repo.add_argument("--max-queue-delay-us", type=count, default=100, help="how long dynamic batching waits to fill a batch (default 100)")
    repo.add_argument("--instance-kind", choices=("KIND_GPU", "KIND_CPU"), help="default: KIND_GPU for sagemaker, KIND_CPU for local")
    repo.add_argument("--instance-count", type=count, default=1, help="model instances per device (default 1)")
    repo.add_argument("--tensorrt-fp16", action="store_true", help="sagemaker: run through ONNX Runtime's TensorRT provider at FP16")
    repo.set_defaults(func=cmd_triton_repo)

    check = actions.add_parser("check", help="check a model.tar.gz has the layout SageMaker's Triton container accepts")
    check.add_argument("archive")
    check.add_argument("--default-model", help="the model SAGEMAKER_TRITON_DEFAULT_MODEL_NAME will name")
    check.set_defaults(func=cmd_triton_check)
