"""`sluice deployments create | set | list | show | delete | stats | promote`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sluice.cli import pieces
from sluice.cli.common import (
    load_json_arg,
    operator,
    print_json,
    table,
    version_number,
)
from sluice.cli.follows import add_follow_commands
from sluice.domain.errors import SluiceError

if TYPE_CHECKING:
    import argparse

    from sluice.services.deployments import DeploymentService

STATS_COLUMNS = ["kind", "name", "requests", "errors", "rows", "invalid_inputs", "p50_ms", "p95_ms", "p99_ms", "agreement", "mean_abs_diff", "max_abs_diff", "mean_reward"]


DEFAULT_CACHE_ENTRIES = 1024


def _policy_from_args(args: argparse.Namespace, service: DeploymentService) -> dict[str, Any] | None:
    if args.policy:
        if args.model or getattr(args, "version", None) is not None:  # which would it be? said, not guessed
            raise SluiceError("give --model (and --version) or --policy, not both", field="policy")
        policy = load_json_arg(args.policy, "policy")
        if not isinstance(policy, dict):  # `--policy null`, or a file holding a list
            raise SluiceError("the policy is a JSON object ({\"kind\": …})", field="policy")
        return policy
    if not args.model and getattr(args, "keep_policy", False):
        return None
    if not args.model:
        raise SluiceError("give --model (and optionally --version) or --policy", field="model")
    return service.resolve_shorthand(operator(args), args.model, args.version)


def _cache_line(dep: Any) -> str:
    c, b = dep.cache, dep.batching
    cache = f" (cache: ttl {c.ttl_s:g} s, {c.max_entries} entries)" if c is not None else ""
    if b is None:
        return cache
    extra = "".join(
        (f", preferred {','.join(map(str, b.preferred_batch_sizes))}" if b.preferred_batch_sizes else "",
         f", {b.instances} instances" if b.instances != 1 else "")
    )  # fmt: skip
    return cache + f" (batching: {b.max_batch_size} rows, {b.max_delay_us} µs{extra})"


def _capture_from_args(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.capture_percent is None:
        if args.capture_include or args.capture_redact:
            raise SluiceError("--capture-include and --capture-redact need --capture-percent", field="capture.sample_percent")
        return None
    capture: dict[str, Any] = {"sample_percent": args.capture_percent}
    if args.capture_include:
        capture["include"] = [p.strip() for p in args.capture_include.split(",") if p.strip()]
    if args.capture_redact:
        capture["redact"] = [p.strip() for p in args.capture_redact.split(",") if p.strip()]
    return capture


def _batching_from_args(args: argparse.Namespace, current: Any = None) -> dict[str, Any] | None:
    """`--batch-max-size` and `--batch-max-delay-us`: both to turn batching on; on `set`, one
    of them (or `--batch-preferred-sizes`, `--batch-instances`) changes that value of the
    batching already on, the others kept."""
    size, delay = args.batch_max_size, args.batch_max_delay_us
    preferred, instances = args.batch_preferred_sizes, args.batch_instances
    if current is not None:
        size = current.max_batch_size if size is None else size
        delay = current.max_delay_us if delay is None else delay
        preferred = list(current.preferred_batch_sizes) if preferred is None else preferred
        instances = current.instances if instances is None else instances
    if size is None or delay is None:
        missing = "--batch-max-size" if size is None else "--batch-max-delay-us"
        field = "batching.max_batch_size" if size is None else "batching.max_delay_us"
        raise SluiceError(f"adaptive batching needs {missing} too", field=field)
    batching: dict[str, Any] = {"max_batch_size": size, "max_delay_us": delay}
    if preferred:
        batching["preferred_batch_sizes"] = preferred
    if instances is not None:
        batching["instances"] = instances
    return batching


def _sizes(text: str) -> list[int]:
    """`--batch-preferred-sizes 8,16`: whole numbers, comma-separated."""
    import argparse

    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not whole numbers separated by commas: {text!r}") from None
    if any(size < 1 for size in sizes):
        raise argparse.ArgumentTypeError(f"batch sizes are at least 1: {text!r}")
    return sizes


def _asks_batching(args: argparse.Namespace) -> bool:
    return any(
        value is not None for value in (args.batch_max_size, args.batch_max_delay_us, args.batch_preferred_sizes, args.batch_instances)
    )


def cmd_deployments_create(args: argparse.Namespace) -> int:
    service = pieces.deployments()
    cache = None
    if args.cache_ttl is not None or args.cache_max_entries is not None:
        if args.cache_ttl is None:
            raise SluiceError("--cache-max-entries needs --cache-ttl", field="cache.ttl_s")
        entries = args.cache_max_entries
        cache = {"ttl_s": args.cache_ttl, "max_entries": DEFAULT_CACHE_ENTRIES if entries is None else entries}
    policy = _policy_from_args(args, service)
    assert policy is not None  # `create` keeps no policy: `_policy_from_args` gives one or raises
    batching = _batching_from_args(args) if _asks_batching(args) else None
    dep = service.create(
        operator(args), args.name, policy, description=args.description, cache=cache, capture=_capture_from_args(args),
        batching=batching,
    )  # fmt: skip
    print(f"created deployment {dep.name} -> {json.dumps(dep.policy)}{_cache_line(dep)}")
    return 0


def cmd_deployments_set(args: argparse.Namespace) -> int:
    service = pieces.deployments()
    principal = operator(args)
    changes: dict[str, Any] = {}
    if args.no_cache:
        if args.cache_ttl is not None or args.cache_max_entries is not None:
            raise SluiceError("--no-cache cannot go with --cache-ttl or --cache-max-entries", field="cache")
        changes["cache"] = None
    elif args.cache_ttl is not None or args.cache_max_entries is not None:
        current = service.get(principal, args.name).cache
        if args.cache_ttl is None and current is None:
            raise SluiceError("the cache is off: turn it on with --cache-ttl", field="cache.ttl_s")
        entries = args.cache_max_entries
        if entries is None:
            entries = current.max_entries if current is not None else DEFAULT_CACHE_ENTRIES
        ttl = args.cache_ttl if args.cache_ttl is not None else current.ttl_s  # type: ignore[union-attr]
        changes["cache"] = {"ttl_s": ttl, "max_entries": entries}
    if args.no_capture:
        if args.capture_percent is not None:
            raise SluiceError("--no-capture cannot go with --capture-percent", field="capture")
        changes["capture"] = None
    elif args.capture_percent is not None or args.capture_include or args.capture_redact:
        changes["capture"] = _capture_from_args(args)
    if args.no_batching:
        if _asks_batching(args):
            raise SluiceError("--no-batching cannot go with the --batch-… options", field="batching")
        changes["batching"] = None
    elif _asks_batching(args):
        changes["batching"] = _batching_from_args(args, service.get(principal, args.name).batching)
    args.keep_policy = bool(changes)  # only the cache, the capture or batching changes
    dep = service.update(principal, args.name, _policy_from_args(args, service), **changes)
    print(f"deployment {dep.name} revision {dep.revision} -> {json.dumps(dep.policy)}{_cache_line(dep)}")
    return 0


def cmd_deployments_list(args: argparse.Namespace) -> int:
    rows = [
        {"name": d.name, "revision": d.revision, "policy": json.dumps(d.policy)}
        for d in pieces.deployments().list(operator(args))
    ]
    table(rows, ["name", "revision", "policy"])
    return 0


def cmd_deployments_show(args: argparse.Namespace) -> int:
    from sluice.api.presenters import change_out, deployment_out

    service = pieces.deployments()
    principal = operator(args)
    data = deployment_out(service.get(principal, args.name))
    data["history"] = [change_out(c) for c in service.history(principal, args.name)]
    print_json(data)
    return 0


def cmd_deployments_delete(args: argparse.Namespace) -> int:
    pieces.deployments().delete(operator(args), args.name)
    print(f"deleted deployment {args.name}")
    return 0


def _stats_row(kind: str, name: str, s: dict[str, Any]) -> dict[str, Any]:
    lat = s["latency_ms"]
    agreement = s.get("agreement")
    ci = s.get("agreement_ci95")
    return {
        "kind": kind,
        "name": name,
        "requests": s["requests"],
        "errors": s["errors"],
        "rows": s.get("rows", "-"),  # a switch's case: the rows it took
        "invalid_inputs": s.get("invalid_inputs", 0),  # refused for their inputs: `invalid_input_rate`
        "p50_ms": lat["p50"],
        "p95_ms": lat["p95"],
        "p99_ms": lat["p99"],
        "agreement": f"{agreement:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if agreement is not None and ci else "-",
        "mean_abs_diff": f"{s['mean_abs_diff']:.4g}" if s.get("mean_abs_diff") is not None else "-",
        "max_abs_diff": f"{s['max_abs_diff']:.4g}" if s.get("max_abs_diff") is not None else "-",
        "mean_reward": s.get("mean_reward", "-"),
    }


def cmd_deployments_stats(args: argparse.Namespace) -> int:
    stats = pieces.deployments().stats(operator(args), args.name)
    if args.json:
        print_json(stats)
        return 0
    print(f"deployment {stats['deployment']} (revision {stats['revision']})")
    rows = [
        _stats_row(kind, name, s)
        for kind, items in (("variant", stats["variants"]), ("mirror", stats["mirrors"]), ("case", stats.get("cases", {})), ("step", stats.get("steps", {})), ("source", stats.get("sources", {})))
        for name, s in items.items()
    ]
    overall = stats["overall"]
    rows.insert(0, {"kind": "all", "name": "-", "requests": overall["requests"], "errors": overall["errors"], "rows": "-",
                    "invalid_inputs": overall.get("invalid_inputs", 0),
                    "p50_ms": overall["latency_ms"]["p50"], "p95_ms": overall["latency_ms"]["p95"], "p99_ms": overall["latency_ms"]["p99"],
                    "agreement": "-", "mean_abs_diff": "-", "max_abs_diff": "-", "mean_reward": "-"})  # fmt: skip
    table(rows, STATS_COLUMNS)
    if "cache_hits" in overall:  # the prediction cache's: requests answered from it, answers computed and kept
        rate = overall["cache_hit_rate"]
        print(f"prediction cache {overall['cache_hits']} hits, {overall['cache_misses']} misses (hit rate {'-' if rate is None else f'{rate:.3f}'})")
    if "fallback_rate" in stats:  # a precomputed node's rows answered live
        print(f"fallback rate {stats['fallback_rate']:.3f} (rows answered live: a new entity, or a stored answer too old)")
    for name, step in stats.get("steps", {}).items():  # a cached lookup's rows, from its feature cache or the store
        if "cache_hits" in step:
            print(f"step {name}: feature cache {step['cache_hits']} rows hit, {step['cache_misses']} read from the store")
    return 0


def cmd_deployments_promote(args: argparse.Namespace) -> int:
    dep = pieces.deployments().promote(operator(args), args.name, args.mirror)
    print(f"deployment {dep.name} revision {dep.revision} -> {json.dumps(dep.policy)}")
    return 0


def add_deployment_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    deps = sub.add_parser("deployments", help="create and route deployments").add_subparsers(dest="action", required=True)
    for name, func, help_text in (
        ("create", cmd_deployments_create, "create a deployment"),
        ("set", cmd_deployments_set, "point a deployment at a new target"),
    ):
        p = deps.add_parser(name, help=help_text)
        p.add_argument("name")
        p.add_argument("--model")
        p.add_argument("--version", type=version_number, help="default: the model's latest version")
        p.add_argument("--policy", help="a policy as JSON, or @file.json")
        if name == "create":
            p.add_argument("--description", default="")
        p.add_argument("--cache-ttl", type=float, metavar="SECONDS", help="cache answers this long (deterministic routes only)")
        p.add_argument(
            "--cache-max-entries", type=int, metavar="N", help=f"answers kept per container (default {DEFAULT_CACHE_ENTRIES})"
        )
        p.add_argument("--capture-percent", type=float, metavar="PERCENT", help="capture this share of requests (docs/capture.md)")
        p.add_argument("--capture-include", metavar="PARTS", help="inputs,outputs (default both)")
        p.add_argument("--capture-redact", metavar="FEATURES", help="features never written, comma-separated")
        p.add_argument("--batch-max-size", type=int, metavar="ROWS", help="adaptive batching: most rows in one joined runtime call")
        p.add_argument("--batch-max-delay-us", type=int, metavar="US", help="adaptive batching: longest a request waits for others")
        p.add_argument(
            "--batch-preferred-sizes", type=_sizes, metavar="ROWS,…", help="adaptive batching: sizes at which a batch leaves at once"
        )
        p.add_argument("--batch-instances", type=int, metavar="N", help="adaptive batching: calls of a version under way at once (1)")
        if name == "set":
            p.add_argument("--no-cache", action="store_true", help="turn the prediction cache off")
            p.add_argument("--no-capture", action="store_true", help="turn data capture off")
            p.add_argument("--no-batching", action="store_true", help="turn adaptive batching off")
        p.set_defaults(func=func)
    deps.add_parser("list", help="list deployments").set_defaults(func=cmd_deployments_list)
    for name, func in (("show", cmd_deployments_show), ("delete", cmd_deployments_delete)):
        p = deps.add_parser(name, help=f"{name} a deployment")
        p.add_argument("name")
        p.set_defaults(func=func)

    stats = deps.add_parser("stats", help="traffic, latency and shadow verdicts per variant and mirror; a switch's cases and a sequence's steps")
    stats.add_argument("name")
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.set_defaults(func=cmd_deployments_stats)
    promote = deps.add_parser("promote", help="make a shadow mirror the primary")
    promote.add_argument("name")
    promote.add_argument("mirror")
    promote.set_defaults(func=cmd_deployments_promote)
    add_follow_commands(deps)
