"""`sluice endpoints`: a deployment's SageMaker endpoint.

    sluice endpoints deploy NAME --instance-type ml.g5.xlarge [--instance-count 1]
                                 [--min-instances 1 --max-instances 4 --target 100] [--triton-version 25.09] [--wait]
    sluice endpoints deploy NAME --mode async --instance-type ml.g5.xlarge [--min-instances 0 --max-instances 2]
                                 [--output-path s3://...] [--create-topics | --success-topic ARN --error-topic ARN]
                                 [--max-concurrent-invocations 4] [--backlog-per-instance 5]
    sluice endpoints deploy NAME --mode components --instance-type ml.g5.xlarge [--min-instances 0 --max-instances 2]
                                 [--copies 1 | --copies VARIANT=N ...] [--min-copies 0 --max-copies 4]
                                 [--cpus 2 --memory-mb 8192 --gpus 1] [--invocations-per-copy 50] [--fallback in-process]
    sluice endpoints status NAME [--wait]
    sluice endpoints scale NAME [--min N] [--max N] [--desired N] [--target X] [--variant V]
    sluice endpoints weights NAME VARIANT=WEIGHT ...
    sluice endpoints undeploy NAME

The work happens in `sluice.services.endpoints`; these functions parse, call and print. A
refused option is reported by its flag (`error [--min-instances]: ...`), exit status 2.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from sluice.cli import pieces
from sluice.cli.common import count
from sluice.domain.errors import BadRequest, SluiceError

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.services.endpoints import EndpointService

SETTLED = ("InService", "Failed", "OutOfService")
MODES = ("realtime", "async", "components")  # sluice.endpoints.control.MODES, checked again there
# The flag each request field is given by, to name it when it is refused.
FLAGS = {
    "instance_type": "--instance-type",
    "instance_count": "--instance-count",
    "min_instances": "--min-instances",
    "max_instances": "--max-instances",
    "target_invocations_per_instance": "--target",
    "triton_version": "--triton-version",
    "max_batch_size": "--max-batch-size",
    "mode": "--mode",
    "output_path": "--output-path",
    "success_topic": "--success-topic",
    "error_topic": "--error-topic",
    "create_topics": "--create-topics",
    "max_concurrent_invocations": "--max-concurrent-invocations",
    "backlog_per_instance": "--backlog-per-instance",
    "copies": "--copies",
    "min_copies": "--min-copies",
    "max_copies": "--max-copies",
    "invocations_per_copy": "--invocations-per-copy",
    "cpus": "--cpus",
    "memory_mb": "--memory-mb",
    "gpus": "--gpus",
    "fallback": "--fallback",
}


def _service() -> EndpointService:
    return pieces.endpoints()


def _operator(args: argparse.Namespace) -> Principal:
    from sluice.domain import Principal

    return Principal(args.tenant, frozenset({"admin", "predict"}), "cli")


def _print(report: dict[str, Any]) -> None:
    print(json.dumps(report, indent=2, default=str))


def _wait(service: EndpointService, args: argparse.Namespace, report: dict[str, Any]) -> dict[str, Any]:
    """Poll until the endpoint settles; each look also binds it once it is InService."""
    deadline = time.monotonic() + args.timeout
    while report["status"] not in SETTLED and time.monotonic() < deadline:
        print(f"{report['endpoint_name']}: {report['status']} ...", flush=True)
        time.sleep(args.poll)
        report = service.status(_operator(args), args.name)
    return report


def _settled(report: dict[str, Any]) -> int:
    return 1 if report["status"] == "Failed" else 0


def parse_copies(values: list[str] | None) -> int | dict[str, int] | None:
    """`--copies N` for every version, or `--copies VARIANT=N` (repeated) by variant."""
    if not values:
        return None
    bare = [v for v in values if "=" not in v]
    if bare and (len(bare) > 1 or len(values) > 1):
        raise BadRequest("give --copies once as a number, or as VARIANT=N for each variant", field="copies")
    try:
        if bare:
            return count(bare[0])
        out = {}
        for pair in values:
            variant, _, value = pair.partition("=")
            if not variant:
                raise argparse.ArgumentTypeError(pair)
            out[variant] = count(value)
        return out
    except argparse.ArgumentTypeError:
        raise BadRequest(f"give copies as N or VARIANT=N (whole numbers), not {values}", field="copies") from None


def deploy_request(args: argparse.Namespace) -> Any:
    from sluice.services.endpoint_requests import DeployRequest

    return DeployRequest(
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        min_instances=args.min,
        max_instances=args.max,
        target_invocations_per_instance=args.target,
        triton_version=args.triton_version,
        max_batch_size=args.max_batch_size,
        mode=args.mode,
        output_path=args.output_path,
        success_topic=args.success_topic,
        error_topic=args.error_topic,
        create_topics=args.create_topics,
        max_concurrent_invocations=args.max_concurrent_invocations,
        backlog_per_instance=args.backlog_per_instance,
        copies=parse_copies(args.copies),
        min_copies=args.min_copies,
        max_copies=args.max_copies,
        invocations_per_copy=args.invocations_per_copy,
        cpus=args.cpus,
        memory_mb=args.memory_mb,
        gpus=args.gpus,
        fallback=args.fallback.replace("-", "_") if args.fallback else None,
    )


def cmd_deploy(args: argparse.Namespace) -> int:
    service = _service()
    try:
        report = service.deploy(_operator(args), args.name, deploy_request(args))
    except SluiceError as exc:
        flag = FLAGS.get((exc.field or "").split(".")[0])
        if flag is None:
            raise
        raise type(exc)(exc.message, field=flag, **exc.details) from None
    if args.wait:
        report = _wait(service, args, report)
    _print(report)
    return _settled(report)


def cmd_status(args: argparse.Namespace) -> int:
    service = _service()
    report = service.status(_operator(args), args.name)
    if args.wait:
        report = _wait(service, args, report)
    _print(report)
    return _settled(report)


def cmd_scale(args: argparse.Namespace) -> int:
    from sluice.services.endpoint_requests import ScaleRequest

    request = ScaleRequest(
        min_instances=args.min,
        max_instances=args.max,
        desired_instances=args.desired,
        target_invocations_per_instance=args.target,
        variant=args.variant,
    )
    _print(_service().scale(_operator(args), args.name, request))
    return 0


def parse_weights(pairs: list[str]) -> dict[str, float]:
    weights: dict[str, float] = {}
    for pair in pairs:
        variant, sep, value = pair.partition("=")
        try:
            if not sep or not variant:
                raise ValueError
            weights[variant] = float(value)
        except ValueError:
            raise BadRequest(f"give weights as VARIANT=WEIGHT, not {pair!r}", field="weights") from None
    return weights


def cmd_weights(args: argparse.Namespace) -> int:
    _print(_service().set_weights(_operator(args), args.name, parse_weights(args.weights)))
    return 0


def cmd_undeploy(args: argparse.Namespace) -> int:
    _print(_service().undeploy(_operator(args), args.name))
    return 0


def _waiting(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait", action="store_true", help="poll until InService or Failed (binding the deployment when InService)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds --wait waits at most (default 1800)")
    parser.add_argument("--poll", type=float, default=15.0, help="seconds between looks (default 15)")


def add_endpoint_commands(subparsers: Any) -> None:
    """Add `endpoints deploy|status|scale|weights|undeploy` to the `sluice` parser's subcommands."""
    endpoints = subparsers.add_parser("endpoints", help="a deployment's SageMaker endpoint: deploy, scale, undeploy")
    actions = endpoints.add_subparsers(dest="action", required=True)

    deploy = actions.add_parser("deploy", help="build, upload and deploy the deployment's versions to a SageMaker endpoint")
    deploy.add_argument("name", help="the deployment (one version, or a split of versions)")
    deploy.add_argument("--instance-type", required=True, help="e.g. ml.g5.xlarge (GPU) or ml.c5.xlarge (CPU image)")
    deploy.add_argument("--instance-count", type=count, default=1, help="instances per variant at creation (default 1)")
    deploy.add_argument(
        "--mode", choices=MODES, default="realtime",
        help="realtime (a variant per version), async (SageMaker's queue; scales to zero on its backlog) or "
        "components (each version an inference component; copies and instances scale to zero)",
    )  # fmt: skip
    deploy.add_argument("--min-instances", "--min", dest="min", type=count, help="autoscaling: fewest instances (0 for async or components, their default)")
    deploy.add_argument("--max-instances", "--max", dest="max", type=count, help="autoscaling: most instances")
    deploy.add_argument("--target", type=float, help="realtime autoscaling: invocations per instance per minute to hold (default 100)")
    deploy.add_argument("--triton-version", help="SageMaker Triton image version (default: SLUICE_SAGEMAKER_TRITON_VERSION)")
    deploy.add_argument("--max-batch-size", type=count, help="Triton max_batch_size (default 64 when the model batches)")
    queued = deploy.add_argument_group("--mode async")
    queued.add_argument("--output-path", help="s3:// path for answers, under the tenant's results (default: <results>sagemaker)")
    queued.add_argument("--success-topic", help="SNS topic ARN told of each answer")
    queued.add_argument("--error-topic", help="SNS topic ARN told of each error")
    queued.add_argument("--create-topics", action="store_true", help="make two encrypted SNS topics (deleted at undeploy)")
    queued.add_argument("--max-concurrent-invocations", type=count, help="requests one instance works on at once (default 4)")
    queued.add_argument("--backlog-per-instance", type=float, help="autoscaling: queued requests per instance to hold (default 5)")
    parts = deploy.add_argument_group("--mode components")
    parts.add_argument("--copies", action="append", metavar="N|VARIANT=N", help="copies of each version at creation (default 1)")
    parts.add_argument("--min-copies", type=count, help="autoscaling: fewest copies (default 0: scale to zero)")
    parts.add_argument("--max-copies", type=count, help="autoscaling: most copies (default: the most asked for, at least 1)")
    parts.add_argument("--invocations-per-copy", type=float, help="autoscaling: invocations per copy per minute to hold (default 50)")
    parts.add_argument("--cpus", type=float, help="CPU cores one copy needs")
    parts.add_argument("--memory-mb", type=count, help="memory one copy needs (default 4096)")
    parts.add_argument("--gpus", type=count, help="GPUs one copy needs (default 1 on a GPU instance)")
    parts.add_argument("--fallback", choices=("in-process", "in_process"), help="answer in process from the ONNX artifact while a copy starts")
    _waiting(deploy)
    deploy.set_defaults(func=cmd_deploy)

    status = actions.add_parser("status", help="the endpoint's mode, status, instances, variants or components and scaling")
    status.add_argument("name")
    _waiting(status)
    status.set_defaults(func=cmd_status)

    scale = actions.add_parser("scale", help="change autoscaling range, target or instance count")
    scale.add_argument("name")
    scale.add_argument("--min-instances", "--min", dest="min", type=count)
    scale.add_argument("--max-instances", "--max", dest="max", type=count)
    scale.add_argument("--desired", type=count, help="instances now, within the autoscaling range")
    scale.add_argument("--target", type=float, help="invocations per instance per minute")
    scale.add_argument("--variant", help="only this variant (default: every one)")
    scale.set_defaults(func=cmd_scale)

    weights = actions.add_parser("weights", help="shift traffic between the endpoint's variants")
    weights.add_argument("name")
    weights.add_argument("weights", nargs="+", metavar="VARIANT=WEIGHT")
    weights.set_defaults(func=cmd_weights)

    undeploy = actions.add_parser("undeploy", help="route back to the source versions, then delete the endpoint and all it used")
    undeploy.add_argument("name")
    undeploy.set_defaults(func=cmd_undeploy)
