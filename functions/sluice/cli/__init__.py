"""`sluice`: serve, manage models/deployments/keys, and predict from the command line.

The CLI acts on the configured registry and store directly, as an operator of one tenant
(`--tenant`, default `default`); the HTTP API is for everyone else. Each command group lives
in its own module and adds its subcommands to the parser built here.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

from sluice.domain.errors import SluiceError
from sluice.owner_only import umask

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    # The command groups imported here, not with the package: a process that imports one
    # module of it (`sluice serve`'s workers import `sluice.cli.serve`) pays for no other.
    from sluice.cli.batch import add_batch_commands
    from sluice.cli.cost import add_cost_command
    from sluice.cli.deployments import add_deployment_commands
    from sluice.cli.endpoints import add_endpoint_commands
    from sluice.cli.follows import add_registry_commands
    from sluice.cli.keys import add_key_commands
    from sluice.cli.models import add_model_commands
    from sluice.cli.monitor import add_monitor_commands
    from sluice.cli.optimize import add_optimize_command
    from sluice.cli.predict import add_predict_command
    from sluice.cli.replay import add_replay_command
    from sluice.cli.rollouts import add_rollout_commands
    from sluice.cli.serve import add_serve_command
    from sluice.cli.stream import add_stream_command
    from sluice.cli.transforms import add_transform_commands
    from sluice.cli.triton import add_triton_commands

    parser = argparse.ArgumentParser(prog="sluice", description="Serverless model inference, locally and on AWS.")
    parser.add_argument("--tenant", default=os.environ.get("SLUICE_TENANT", "default"), help="tenant to act in (default: default)")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        add_serve_command, add_model_commands, add_deployment_commands, add_predict_command,
        add_key_commands, add_batch_commands, add_stream_command, add_endpoint_commands, add_triton_commands,
        add_optimize_command, add_cost_command, add_rollout_commands, add_replay_command, add_transform_commands,
        add_monitor_commands,
        add_registry_commands,
    ):  # fmt: skip
        add(sub)
    return parser


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The parser `main` reads with, built once a process (~20 ms: some 60 subcommands): a
    process that runs several commands (tests, a script calling `main`) builds it once. The
    tenant's default is read from the environment at each `main` instead (None: not given)."""
    parser = build_parser()
    parser.set_defaults(tenant=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Prediction logs are for servers; the CLI's stdout is its answer, its warnings go to stderr.
    os.environ.setdefault("SLUICE_LOG_LEVEL", "WARNING")
    os.environ.setdefault("SLUICE_LOG_STREAM", "stderr")
    args = _parser().parse_args(argv)
    if args.tenant is None:
        args.tenant = os.environ.get("SLUICE_TENANT", "default")
    try:
        # What this run writes on this machine is its user's alone, libraries' files included
        # (SQLite's, pyarrow's, the metrics client's); `serve`'s workers inherit the umask.
        with umask():
            return args.func(args)
    except SluiceError as exc:
        # A message that starts with its field (the API's own form, `since: …`) is printed as it is.
        where = f" [{exc.field}]" if exc.field and not exc.message.startswith(f"{exc.field}: ") else ""
        print(f"error{where}: {exc.message}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # settings that do not parse
        print(f"error: {exc}", file=sys.stderr)
        return 2
