"""`sluice deployments follow | unfollow` (a deployment following a model registry) and
`sluice registries poll` (one look at every MLflow binding; docs/registries.md)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sluice.cli import pieces
from sluice.cli.common import operator, print_json, table
from sluice.domain.errors import BadRequest

if TYPE_CHECKING:
    import argparse


def cmd_follow(args: argparse.Namespace) -> int:
    from sluice.api.presenters import follow_out

    service, principal = pieces.follows(), operator(args)
    if args.list:
        rows = []
        for f in service.list(principal):
            last = f.last
            said = f"{last.version}: {last.outcome}" + (f" ({last.reason})" if last.reason else "") if last else "-"
            error = f"{f.error.kind}: {f.error.message}" if f.error is not None else "-"
            rows.append({"deployment": f.deployment, "follows": f.source, "model": f.model, "state": f.state, "last": said, "poll error": error})
        table(rows, ["deployment", "follows", "model", "state", "last", "poll error"])
        return 0
    if not args.name:
        raise BadRequest("name the deployment (or give --list)", field="deployment")
    if args.show:
        print_json(follow_out(service.get(principal, args.name)))
        return 0
    if not args.registry or not args.rollout:
        raise BadRequest("give --registry and --rollout (or --show, --list)", field="registry")
    tracking = args.tracking_uri or (os.environ.get("MLFLOW_TRACKING_URI") if args.registry.startswith("models:/") else None)
    follow = service.follow(
        principal, args.name, source=args.registry, rollout=args.rollout, model=args.model,
        tracking_uri=tracking, tag_back=args.tag_back, operator=True,
    )  # fmt: skip
    print(f"deployment {follow.deployment} follows {follow.source}: each new version pushed into {follow.model}, rolled out {follow.plan}")
    return 0


def cmd_unfollow(args: argparse.Namespace) -> int:
    pieces.follows().unfollow(operator(args), args.name)
    print(f"deployment {args.name} follows no registry now")
    return 0


def cmd_registries_poll(args: argparse.Namespace) -> int:
    done = pieces.follower().poll_once()
    for name, what in done.items():
        print(f"{name}: {what}")
    if not done:
        print("no deployment follows a registry")
    return 1 if any(what.startswith("error:") for what in done.values()) else 0


def add_follow_commands(deps: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    follow = deps.add_parser("follow", help="follow a model registry: push and roll out each new version (docs/registries.md)")
    follow.add_argument("name", nargs="?")
    follow.add_argument("--registry", metavar="SOURCE", help="models:/NAME@ALIAS, models:/NAME/latest, or arn:…:model-package-group/GROUP")
    follow.add_argument("--rollout", metavar="PLAN", help="such as '1,10,50,100 every 10m gate agreement>=0.98'")
    follow.add_argument("--model", help="the model each new version is pushed into (default: the one the deployment routes to)")
    follow.add_argument("--tracking-uri", help="MLflow's tracking server (default: MLFLOW_TRACKING_URI), without credentials")
    follow.add_argument("--tag-back", action="store_true", help="tag each MLflow version with the deployment and revision serving it")
    follow.add_argument("--list", action="store_true", help="list the tenant's bindings")
    follow.add_argument("--show", action="store_true", help="show the binding and what became of each version, as JSON")
    follow.set_defaults(func=cmd_follow)
    unfollow = deps.add_parser("unfollow", help="stop following a registry (a running rollout goes on)")
    unfollow.add_argument("name")
    unfollow.set_defaults(func=cmd_unfollow)


def add_registry_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    group = sub.add_parser("registries", help="model registries that deployments follow").add_subparsers(dest="action", required=True)
    poll = group.add_parser("poll", help="one look at every followed MLflow alias: push and roll out what moved")
    poll.set_defaults(func=cmd_registries_poll)
