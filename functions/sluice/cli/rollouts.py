"""`sluice rollout start | status | pause | resume | abort DEPLOYMENT`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sluice.cli import pieces
from sluice.cli.common import count, operator, print_json

if TYPE_CHECKING:
    import argparse

    from sluice.domain import Deployment


def _said(verb: str, dep: Deployment) -> None:
    r = dep.rollout
    state = f"{r.state} at {r.weight:g}% ({r.reason})" if r is not None else "no rollout"
    print(f"deployment {dep.name} revision {dep.revision}: rollout {verb}, {state}")
    print(f"policy -> {json.dumps(dep.policy)}")


def cmd_rollout_start(args: argparse.Namespace) -> int:
    dep = pieces.rollouts().start(
        operator(args), args.name, to=args.to, steps=args.steps, every=args.every, gates=args.gate,
        min_requests=args.min_requests, alarms=args.alarm or (), routing_key=args.routing_key,
        mirror_percent=args.mirror_percent,
    )  # fmt: skip
    _said("started", dep)
    return 0


def cmd_rollout_status(args: argparse.Namespace) -> int:
    from sluice.api.presenters import rollout_status_out

    status = rollout_status_out(*pieces.rollouts().status(operator(args), args.name))
    if args.json or status["rollout"] is None:
        print_json(status)
        return 0
    r: dict[str, Any] = status["rollout"]
    print(
        f"deployment {status['deployment']} (revision {status['revision']}): rollout to {r['to']} {r['state']}"
    )
    print(
        f"step {r['step'] + 1} of {len(r['steps'])}: {r['weight']:g}% (steps {', '.join(f'{s:g}' for s in r['steps'])}, every {r['every_s']:g} s)"
    )
    print(f"last decision: {r['reason']}")
    now = status.get("now")
    if now:
        m = now["metrics"]
        print(f"now: {now['next']} - {now['reason']}")
        if now.get("next_decision_at") is not None:
            import time

            at = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(now["next_decision_at"]))
            print(f"  next decision: {at} at the earliest (a failing gate rolls back at any look)")
        print(
            f"  candidate requests {m['candidate_requests']} (errors {m['candidate_errors']}, refused inputs {m.get('candidate_invalid_inputs', 0)}), stable requests {m['stable_requests']}, comparisons {m['compared']}"
            + (f" ({m['not_finite_rows']} rows left out: not finite)" if m.get("not_finite_rows") else "")
        )
        for gate, result in now["gates"].items():
            verdict = {True: "pass", False: "FAIL", None: "-"}[result["passes"]]
            print(
                f"  {gate:<24} {result['value'] if result['value'] is not None else '-'!s:<12} {verdict}"
            )
    return 0


def _command(verb: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        _said(
            f"{verb}d" if verb.endswith("e") else f"{verb}ed",
            getattr(pieces.rollouts(), verb)(operator(args), args.name),
        )
        return 0

    return run


def add_rollout_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    group = sub.add_parser("rollout", help="progressive rollouts of a deployment").add_subparsers(
        dest="action", required=True
    )
    start = group.add_parser("start", help="move a deployment to a new version step by step, gated")
    start.add_argument("name")
    start.add_argument("--to", required=True, metavar="MODEL:VERSION", help="the candidate version")
    start.add_argument(
        "--steps",
        default="1,5,25,50,100",
        help="percentages for the candidate, increasing, ending with 100",
    )
    start.add_argument(
        "--every", default="10m", help="how long each step lasts at least (30s, 10m, 1h)"
    )
    start.add_argument(
        "--gate", required=True, help="such as 'agreement>=0.98,error_rate<=0.005,p99_ratio<=1.2'"
    )
    start.add_argument(
        "--min-requests",
        type=count,
        default=100,
        help="candidate requests a step needs before it is judged",
    )
    start.add_argument(
        "--alarm",
        action="append",
        metavar="NAME",
        help="a CloudWatch alarm of the tenant's (TENANT/..., or one sluice made for its endpoints) that rolls back when it fires (AWS)",
    )
    start.add_argument(
        "--routing-key", help="sticky routing by this request field or header (such as x-user-id)"
    )
    start.add_argument(
        "--mirror-percent",
        type=float,
        default=100.0,
        help="share of stable requests the candidate also sees",
    )
    start.set_defaults(func=cmd_rollout_start)
    status = group.add_parser("status", help="the rollout's step, gates and numbers now")
    status.add_argument("name")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=cmd_rollout_status)
    for verb, help_text in (
        ("pause", "hold at the current step"),
        ("resume", "go on from the paused step"),
        ("abort", "go back to the stable policy"),
    ):
        p = group.add_parser(verb, help=help_text)
        p.add_argument("name")
        p.set_defaults(func=_command(verb))
