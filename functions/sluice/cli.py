"""`sluice`: serve, manage models/deployments/keys, and predict from the command line.

The CLI acts on the configured registry and store directly, as an operator of one tenant
(`--tenant`, default `default`); the HTTP API is for everyone else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.cli_batch import add_batch_commands
from sluice.cli_endpoints import add_endpoint_commands
from sluice.cli_triton import add_triton_commands
from sluice.domain import Principal
from sluice.domain.errors import SluiceError

if TYPE_CHECKING:
    from sluice.wiring import Container

ADMIN_KEY_FILE = "admin-key"


def _container() -> Container:
    from sluice.wiring import get_container

    return get_container()


def _operator(args: argparse.Namespace) -> Principal:
    return Principal(args.tenant, frozenset({"admin", "predict"}), "cli")


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    if not rows:
        print("(none)")
        return
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns))


def _load_json_arg(value: str, what: str) -> Any:
    text = Path(value[1:]).read_text() if value.startswith("@") else value
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SluiceError(f"{what} is not valid JSON: {exc.msg} at column {exc.colno}", field=what) from None


# serve --------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from sluice.settings import get_settings

    settings = get_settings()
    home = settings.home_path
    home.mkdir(parents=True, exist_ok=True)
    container = _container()
    principal = _operator(args)
    key_file = home / ADMIN_KEY_FILE
    if not key_file.exists():
        _, plain = container.keys.create(args.tenant, ["admin", "predict"], name="local admin")
        key_file.write_text(plain + "\n")
        key_file.chmod(0o600)
        print(f"Local admin key for tenant '{args.tenant}' (saved to {key_file}):\n\n    {plain}\n", flush=True)
    else:
        print(f"Local admin key: {key_file}", flush=True)
    if args.demo:
        from sluice.demo import install_demo

        added = install_demo(container, principal)
        names = ", ".join(d.name for d in container.deployments.list(principal))
        print(f"Demo deployments: {names}" + (f" (added {', '.join(added)})" if added else ""), flush=True)
    from sluice.batch.inbox import InboxWatcher

    inbox = settings.batch_inbox_path
    InboxWatcher(container.batch, inbox, args.tenant, interval_s=settings.batch_inbox_poll_s).start()
    print(f"Batch inbox: {inbox}/<deployment>/<file> (results under {container.batch.paths.root}outbox/)", flush=True)
    workers = args.workers or max(1, os.cpu_count() or 1)
    print(f"Serving on http://{args.host}:{args.port} (docs: /docs), {workers} worker(s)", flush=True)
    uvicorn.run(
        "sluice.api.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=workers,
        access_log=False,
        log_level="warning",
    )
    return 0


# models -------------------------------------------------------------------------------
def cmd_models_push(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise SluiceError(f"no such file: {path}", field="file")
    names = [n.strip() for n in args.feature_names.split(",")] if args.feature_names else None
    config = _load_json_arg(args.config, "config") if args.config else None
    version = _container().models.push(
        _operator(args),
        args.name,
        path.read_bytes(),
        runtime=args.runtime,
        config=config,
        feature_names=names,
        description=args.description,
    )
    print(f"pushed {version.model} version {version.version} (sha256 {version.sha256[:12]}, {version.size_bytes} bytes)")
    return 0


def cmd_models_register_triton(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.feature_names.split(",")] if args.feature_names else None
    version = asyncio.run(
        _container().models.register_triton(
            _operator(args), args.name, args.url, model_name=args.model_name, model_version=args.model_version or "", feature_names=names
        )
    )
    print(f"registered {version.model} version {version.version} -> {args.url} model {version.config.get('model_name')}")
    return 0


def cmd_models_list(args: argparse.Namespace) -> int:
    container = _container()
    rows = []
    for model in container.models.list_models(_operator(args)):
        versions = container.registry.list_versions(args.tenant, model.name)
        rows.append({"name": model.name, "versions": len(versions), "latest": versions[-1].version if versions else "-", "description": model.description})
    _table(rows, ["name", "versions", "latest", "description"])
    return 0


def cmd_models_show(args: argparse.Namespace) -> int:
    from sluice.api.presenters import version_out

    container = _container()
    principal = _operator(args)
    if args.version:
        _print_json(version_out(container.models.get_version(principal, args.name, args.version)))
    else:
        versions = container.models.list_versions(principal, args.name)
        _print_json({"name": args.name, "versions": [version_out(v) for v in versions]})
    return 0


# deployments --------------------------------------------------------------------------
def _policy_from_args(args: argparse.Namespace, container: Container) -> dict[str, Any]:
    if args.policy:
        return _load_json_arg(args.policy, "policy")
    if not args.model:
        raise SluiceError("give --model (and optionally --version) or --policy", field="model")
    return container.deployments.resolve_shorthand(_operator(args), args.model, args.version)


def cmd_deployments_create(args: argparse.Namespace) -> int:
    container = _container()
    dep = container.deployments.create(_operator(args), args.name, _policy_from_args(args, container), description=args.description)
    print(f"created deployment {dep.name} -> {json.dumps(dep.policy)}")
    return 0


def cmd_deployments_set(args: argparse.Namespace) -> int:
    container = _container()
    dep = container.deployments.update(_operator(args), args.name, _policy_from_args(args, container))
    print(f"deployment {dep.name} revision {dep.revision} -> {json.dumps(dep.policy)}")
    return 0


def cmd_deployments_list(args: argparse.Namespace) -> int:
    rows = [
        {"name": d.name, "revision": d.revision, "policy": json.dumps(d.policy)}
        for d in _container().deployments.list(_operator(args))
    ]
    _table(rows, ["name", "revision", "policy"])
    return 0


def cmd_deployments_show(args: argparse.Namespace) -> int:
    from sluice.api.presenters import change_out, deployment_out

    container = _container()
    principal = _operator(args)
    data = deployment_out(container.deployments.get(principal, args.name))
    data["history"] = [change_out(c) for c in container.deployments.history(principal, args.name)]
    _print_json(data)
    return 0


def cmd_deployments_delete(args: argparse.Namespace) -> int:
    _container().deployments.delete(_operator(args), args.name)
    print(f"deleted deployment {args.name}")
    return 0


def cmd_deployments_stats(args: argparse.Namespace) -> int:
    stats = _container().deployments.stats(_operator(args), args.name)
    if args.json:
        _print_json(stats)
        return 0
    print(f"deployment {stats['deployment']} (revision {stats['revision']})")
    rows = []
    for kind, items in (("variant", stats["variants"]), ("mirror", stats["mirrors"])):
        for name, s in items.items():
            lat = s["latency_ms"]
            agreement = s.get("agreement")
            ci = s.get("agreement_ci95")
            rows.append({
                "kind": kind,
                "name": name,
                "requests": s["requests"],
                "errors": s["errors"],
                "p50_ms": lat["p50"],
                "p95_ms": lat["p95"],
                "p99_ms": lat["p99"],
                "agreement": f"{agreement:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if agreement is not None and ci else "-",
                "mean_abs_diff": f"{s['mean_abs_diff']:.4g}" if s.get("mean_abs_diff") is not None else "-",
                "max_abs_diff": f"{s['max_abs_diff']:.4g}" if s.get("max_abs_diff") is not None else "-",
                "mean_reward": s.get("mean_reward", "-"),
            })
    overall = stats["overall"]
    rows.insert(0, {"kind": "all", "name": "-", "requests": overall["requests"], "errors": overall["errors"],
                    "p50_ms": overall["latency_ms"]["p50"], "p95_ms": overall["latency_ms"]["p95"], "p99_ms": overall["latency_ms"]["p99"],
                    "agreement": "-", "mean_abs_diff": "-", "max_abs_diff": "-", "mean_reward": "-"})
    _table(rows, ["kind", "name", "requests", "errors", "p50_ms", "p95_ms", "p99_ms", "agreement", "mean_abs_diff", "max_abs_diff", "mean_reward"])
    return 0


def cmd_deployments_promote(args: argparse.Namespace) -> int:
    dep = _container().deployments.promote(_operator(args), args.name, args.mirror)
    print(f"deployment {dep.name} revision {dep.revision} -> {json.dumps(dep.policy)}")
    return 0


# predict ------------------------------------------------------------------------------
def cmd_predict(args: argparse.Namespace) -> int:
    from sluice.api.present import plain_body
    from sluice.domain.requests import PredictionRequest, RowInputs

    given = {k: _load_json_arg(v, k) for k in ("inputs", "features", "batch") if (v := getattr(args, k))}
    if len(given) != 1:
        raise SluiceError("give exactly one of --inputs, --features or --batch", field="inputs")
    container = _container()
    request = PredictionRequest(
        deployment=args.deployment,
        inputs=RowInputs(**given),
        version=args.version,
        variant=args.variant,
        routing_key=args.routing_key,
    )
    prediction = asyncio.run(container.predictions.predict(_operator(args), request))
    container.mirror.drain()  # type: ignore[union-attr]  # a short-lived process: let mirrors finish
    container.predictions.stats.flush()
    _print_json(plain_body(prediction, several="batch" in given))
    return 0


# keys ---------------------------------------------------------------------------------
def cmd_keys_create(args: argparse.Namespace) -> int:
    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
    key, plain = _container().keys.create(args.tenant, scopes, name=args.name)
    print(f"key id {key.key_id}, tenant {key.tenant}, scopes {','.join(sorted(key.scopes))}")
    print(f"key (shown once): {plain}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    key = _container().keys.revoke(_operator(args), args.key_id)
    print(f"revoked {key.key_id}")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    rows = [
        {"key_id": k.key_id, "name": k.name, "scopes": ",".join(sorted(k.scopes)), "active": k.active}
        for k in _container().keys.list(_operator(args))
    ]
    _table(rows, ["key_id", "name", "scopes", "active"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description="Serverless model inference, locally and on AWS.")
    parser.add_argument("--tenant", default=os.environ.get("SLUICE_TENANT", "default"), help="tenant to act in (default: default)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the API on this machine")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=0, help="uvicorn worker processes (default: one per core)")
    serve.add_argument("--demo", action="store_true", help="register the demo models and deployments")
    serve.set_defaults(func=cmd_serve)

    models = sub.add_parser("models", help="push and inspect models").add_subparsers(dest="action", required=True)
    push = models.add_parser("push", help="push an ONNX file as the model's next version")
    push.add_argument("name")
    push.add_argument("file")
    push.add_argument("--feature-names", help="comma-separated names of the input's columns")
    push.add_argument("--description", default="")
    push.add_argument("--runtime", default="onnx", choices=["onnx", "sagemaker"], help="where the version runs")
    push.add_argument("--config", help='runtime config as JSON (sagemaker: {"endpoint_name": ...}), or @file.json')
    push.set_defaults(func=cmd_models_push)
    triton = models.add_parser("register-triton", help="register a model a Triton server serves (signature read from it)")
    triton.add_argument("name")
    triton.add_argument("--url", required=True, help="the server's HTTP address, e.g. http://127.0.0.1:8000")
    triton.add_argument("--model-name", help="its name on the server (default: NAME)")
    triton.add_argument("--model-version", help="a version on the server (default: latest)")
    triton.add_argument("--feature-names")
    triton.set_defaults(func=cmd_models_register_triton)
    models.add_parser("list", help="list models").set_defaults(func=cmd_models_list)
    show = models.add_parser("show", help="show a model's versions, or one version")
    show.add_argument("name")
    show.add_argument("--version", help="a number or 'latest'")
    show.set_defaults(func=cmd_models_show)

    deps = sub.add_parser("deployments", help="create and route deployments").add_subparsers(dest="action", required=True)
    for name, func, help_text in (
        ("create", cmd_deployments_create, "create a deployment"),
        ("set", cmd_deployments_set, "point a deployment at a new target"),
    ):
        p = deps.add_parser(name, help=help_text)
        p.add_argument("name")
        p.add_argument("--model")
        p.add_argument("--version", type=int, help="default: the model's latest version")
        p.add_argument("--policy", help="a policy as JSON, or @file.json")
        if name == "create":
            p.add_argument("--description", default="")
        p.set_defaults(func=func)
    deps.add_parser("list", help="list deployments").set_defaults(func=cmd_deployments_list)
    for name, func in (("show", cmd_deployments_show), ("delete", cmd_deployments_delete)):
        p = deps.add_parser(name, help=f"{name} a deployment")
        p.add_argument("name")
        p.set_defaults(func=func)

    stats = deps.add_parser("stats", help="traffic, latency and shadow verdicts per variant and mirror")
    stats.add_argument("name")
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.set_defaults(func=cmd_deployments_stats)
    promote = deps.add_parser("promote", help="make a shadow mirror the primary")
    promote.add_argument("name")
    promote.add_argument("mirror")
    promote.set_defaults(func=cmd_deployments_promote)

    predict = sub.add_parser("predict", help="predict with a deployment, in this process")
    predict.add_argument("deployment")
    predict.add_argument("--features", help='one row as JSON: {"name": value, ...}')
    predict.add_argument("--inputs", help="rows as JSON: [[...], ...] or {input: rows}")
    predict.add_argument("--batch", help="several rows as JSON, or @file.json")
    predict.add_argument("--version", type=int)
    predict.add_argument("--routing-key", help="sticky routing key for splits (e.g. a user id)")
    predict.add_argument("--variant", help="ask for a split's variant by name")
    predict.set_defaults(func=cmd_predict)

    keys = sub.add_parser("keys", help="issue and revoke API keys").add_subparsers(dest="action", required=True)
    create = keys.add_parser("create", help="create a key in --tenant")
    create.add_argument("--scopes", default="predict", help="comma-separated: predict, admin")
    create.add_argument("--name", default="")
    create.set_defaults(func=cmd_keys_create)
    revoke = keys.add_parser("revoke", help="revoke a key of --tenant")
    revoke.add_argument("key_id")
    revoke.set_defaults(func=cmd_keys_revoke)
    keys.add_parser("list", help="list keys of --tenant").set_defaults(func=cmd_keys_list)
    add_batch_commands(sub)
    add_endpoint_commands(sub)
    add_triton_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Prediction logs are for servers; the CLI's stdout is its answer.
    os.environ.setdefault("SLUICE_LOG_LEVEL", "WARNING")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SluiceError as exc:
        where = f" [{exc.field}]" if exc.field else ""
        print(f"error{where}: {exc.message}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # settings that do not parse
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
