"""`sluice endpoints`: a deployment's SageMaker endpoint.

    sluice endpoints deploy NAME --instance-type ml.g5.xlarge [--instance-count 1]
                                 [--min 1 --max 4 --target 100] [--triton-version 25.09] [--wait]
    sluice endpoints status NAME [--wait]
    sluice endpoints scale NAME [--min N] [--max N] [--desired N] [--target X] [--variant V]
    sluice endpoints weights NAME VARIANT=WEIGHT ...
    sluice endpoints undeploy NAME

The work happens in `sluice.services.endpoints`; these functions parse, call and print.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from sluice.cli.common import count
from sluice.domain.errors import BadRequest

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.services.endpoints import EndpointService

SETTLED = ("InService", "Failed", "OutOfService")


def _service() -> EndpointService:
    from sluice.wiring import get_container

    return get_container().endpoints


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


def cmd_deploy(args: argparse.Namespace) -> int:
    from sluice.services.endpoints import DeployRequest

    service = _service()
    request = DeployRequest(
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        min_instances=args.min,
        max_instances=args.max,
        target_invocations_per_instance=args.target,
        triton_version=args.triton_version,
        max_batch_size=args.max_batch_size,
    )
    report = service.deploy(_operator(args), args.name, request)
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
    from sluice.services.endpoints import ScaleRequest

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
    deploy.add_argument("--min", type=count, help="autoscaling: fewest instances per variant")
    deploy.add_argument("--max", type=count, help="autoscaling: most instances per variant")
    deploy.add_argument("--target", type=float, help="autoscaling: invocations per instance per minute to hold (default 100)")
    deploy.add_argument("--triton-version", help="SageMaker Triton image version (default: SLUICE_SAGEMAKER_TRITON_VERSION)")
    deploy.add_argument("--max-batch-size", type=count, help="Triton max_batch_size (default 64 when the model batches)")
    _waiting(deploy)
    deploy.set_defaults(func=cmd_deploy)

    status = actions.add_parser("status", help="the endpoint's status, variants, weights and scaling")
    status.add_argument("name")
    _waiting(status)
    status.set_defaults(func=cmd_status)

    scale = actions.add_parser("scale", help="change autoscaling range, target or instance count")
    scale.add_argument("name")
    scale.add_argument("--min", type=count)
    scale.add_argument("--max", type=count)
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
