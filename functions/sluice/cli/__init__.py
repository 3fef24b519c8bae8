"""`sluice`: serve, manage models/deployments/keys, and predict from the command line.

The CLI acts on the configured registry and store directly, as an operator of one tenant
(`--tenant`, default `default`); the HTTP API is for everyone else. Each command group lives
in its own module and adds its subcommands to the parser built here.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys

__all__ = ["build_parser", "main"]


# Each command, the module whose function adds it to the parser, in `sluice --help`'s order.
COMMANDS = {
    "serve": ("serve", "add_serve_command"),
    "models": ("models", "add_model_commands"),
    "deployments": ("deployments", "add_deployment_commands"),
    "predict": ("predict", "add_predict_command"),
    "keys": ("keys", "add_key_commands"),
    "batch": ("batch", "add_batch_commands"),
    "stream": ("stream", "add_stream_command"),
    "endpoints": ("endpoints", "add_endpoint_commands"),
    "triton": ("triton", "add_triton_commands"),
    "optimize": ("optimize", "add_optimize_command"),
    "cost": ("cost", "add_cost_command"),
    "rollout": ("rollouts", "add_rollout_commands"),
    "replay": ("replay", "add_replay_command"),
    "transforms": ("transforms", "add_transform_commands"),
    "monitor": ("monitor", "add_monitor_commands"),
    "registries": ("follows", "add_registry_commands"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of the command `only` alone: the same arguments, the
    same namespace, but only that command group's module imported (`sluice batch run` pays
    for no other group's imports)."""
    import importlib

    parser = argparse.ArgumentParser(prog="sluice", description="Serverless model inference, locally and on AWS.")
    parser.add_argument("--tenant", default=os.environ.get("SLUICE_TENANT", "default"), help="tenant to act in (default: default)")
    # One command's parser names every command in its usage, as the full one does (a refusal
    # prints the usage): the full parser's own spelling, which names the command when none is given.
    every = None if only is None else "{" + ",".join(COMMANDS) + "}"
    sub = parser.add_subparsers(dest="command", required=True, metavar=every)
    # The command groups imported here, not with the package: a process that imports one
    # module of it (`sluice serve`'s workers import `sluice.cli.serve`) pays for no other.
    for command, (module, add) in COMMANDS.items():
        if only is None or command == only:
            getattr(importlib.import_module(f"sluice.cli.{module}"), add)(sub)
    return parser


def _command_of(argv: list[str]) -> str | None:
    """The command `argv` names, when it is plain to see: the first word after the global
    options (`--tenant T`, `--tenant=T`, or a prefix of it). None for anything else (help, a
    word that is no command, an option argparse would refuse): the full parser then reads it,
    and answers as it always has."""
    words = iter(argv)
    for word in words:
        if word in COMMANDS:
            return word
        name, equals, _ = word.partition("=")
        if len(name) < 3 or not "--tenant".startswith(name):
            return None
        if not equals:
            next(words, None)  # the tenant
    return None


@functools.cache
def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser `main` reads with, built once a process (~20 ms for all some 60 subcommands;
    a command's own group when argv names it): a process that runs several commands (tests, a
    script calling `main`) builds each once. The tenant's default is read from the environment
    at each `main` instead (None: not given)."""
    parser = build_parser(only)
    parser.set_defaults(tenant=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Imported here, not with the package: `python -m sluice.cli` pauses the collector before
    # any of sluice's own imports (`sluice.cli.__main__`).
    from sluice.domain.errors import SluiceError
    from sluice.owner_only import umask

    # Prediction logs are for servers; the CLI's stdout is its answer, its warnings go to stderr.
    os.environ.setdefault("SLUICE_LOG_LEVEL", "WARNING")
    os.environ.setdefault("SLUICE_LOG_STREAM", "stderr")
    args = _parser(_command_of(sys.argv[1:] if argv is None else argv)).parse_args(argv)
    if args.tenant is None:
        args.tenant = os.environ.get("SLUICE_TENANT", "default")
    try:
        # What this run writes on this machine is its user's alone, libraries' files included
        # (SQLite's, pyarrow's, the metrics client's); `serve`'s workers inherit the umask.
        with umask():
            code: int = args.func(args)
            sys.stdout.flush()  # a reader that stopped reading is found here, not as the interpreter exits
            return code
    except KeyboardInterrupt:  # Ctrl-C: what the command did so far stands; no traceback
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        # The reader went away (`sluice ... | head`): the rest of the answer goes nowhere, quietly,
        # and the exit status is a shell's for a process a closed pipe stopped.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except SluiceError as exc:
        # A message that starts with its field (the API's own form, `since: …`) is printed as it is.
        where = f" [{exc.field}]" if exc.field and not exc.message.startswith(f"{exc.field}: ") else ""
        print(f"error{where}: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file not there, a folder given as a file, one not readable
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # settings that do not parse
        print(f"error: {exc}", file=sys.stderr)
        return 2
