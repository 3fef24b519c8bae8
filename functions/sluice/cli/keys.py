"""`sluice keys create | revoke | list`: API keys of `--tenant`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.cli import pieces
from sluice.cli.common import operator, table

if TYPE_CHECKING:
    import argparse


def cmd_keys_create(args: argparse.Namespace) -> int:
    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
    key, plain = pieces.keys().create(args.tenant, scopes, name=args.name)
    print(f"key id {key.key_id}, tenant {key.tenant}, scopes {','.join(sorted(key.scopes))}")
    print(f"key (shown once): {plain}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    key = pieces.keys().revoke(operator(args), args.key_id)
    print(f"revoked {key.key_id}")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    rows = [
        {"key_id": k.key_id, "name": k.name, "scopes": ",".join(sorted(k.scopes)), "active": k.active}
        for k in pieces.keys().list(operator(args))
    ]
    table(rows, ["key_id", "name", "scopes", "active"])
    return 0


def add_key_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys = sub.add_parser("keys", help="issue and revoke API keys").add_subparsers(dest="action", required=True)
    create = keys.add_parser("create", help="create a key in --tenant")
    create.add_argument("--scopes", default="predict", help="comma-separated: predict, admin")
    create.add_argument("--name", default="")
    create.set_defaults(func=cmd_keys_create)
    revoke = keys.add_parser("revoke", help="revoke a key of --tenant")
    revoke.add_argument("key_id")
    revoke.set_defaults(func=cmd_keys_revoke)
    keys.add_parser("list", help="list keys of --tenant").set_defaults(func=cmd_keys_list)
