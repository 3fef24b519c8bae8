"""What every command group shares: the home, the operator principal, JSON arguments and the
two ways of printing an answer (a JSON document, or a table). The services a command uses are
in `sluice.cli.pieces`."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice import owner_only
from sluice.domain import Principal
from sluice.domain.errors import SluiceError
from sluice.domain.values import parse_version

if TYPE_CHECKING:
    from collections.abc import Callable


def local_home() -> Path:
    """The home of this machine's state; one open to other users (an older sluice made it
    0755) is made 0700 first, and the operator told so on stderr."""
    from sluice.settings import get_settings

    home = get_settings().home_path
    said = owner_only.secure_home(home)
    if said:
        print(f"sluice: {said}", file=sys.stderr, flush=True)
    return home


def operator(args: argparse.Namespace) -> Principal:
    """The CLI acts as an operator of `--tenant`: every scope, on that tenant only."""
    return Principal(args.tenant, frozenset({"admin", "predict"}), "cli")


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=_plain))


def _plain(value: Any) -> Any:
    """A value JSON has no form for: an array or a NumPy number as the API writes it (a tensor
    of a v2 answer was printed as its Python text, `"[9.8e-01 1.8e-02]"`), anything else as text."""
    if type(value).__module__ == "numpy":
        import orjson

        return orjson.loads(orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY))
    return str(value)


def table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Rows as aligned columns; a cell's unprintable characters (a terminal's controls, kept in
    records from before they were refused) shown escaped, never sent to the terminal."""
    if not rows:
        print("(none)")
        return
    cells = [{c: _printable(str(r.get(c, ""))) for c in columns} for r in rows]
    widths = {c: max(len(c), *(len(r[c]) for r in cells)) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for row in cells:
        print("  ".join(row[c].ljust(widths[c]) for c in columns))


def _printable(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii") for c in text)


def load_json_arg(value: str, what: str) -> Any:
    """JSON given inline, or `@file.json`."""
    from sluice.codecs.json_text import NestedTooDeep, loads_as_python

    text = read_text_file(value[1:], what) if value.startswith("@") else value
    try:
        return loads_as_python(text)
    except json.JSONDecodeError as exc:
        raise SluiceError(f"{what} is not valid JSON: {exc.msg} at column {exc.colno}", field=what) from None
    except NestedTooDeep as exc:
        raise NestedTooDeep(f"{what}: {exc.message}", field=what) from None


def read_text_file(name: str, what: str) -> str:
    """A file an argument names, as UTF-8 text, or a message naming the argument and what is
    wrong (not there, a folder, not readable, not text) rather than the operating system's."""
    path = Path(name)
    if path.is_dir():
        raise SluiceError(f"{what}: {name} is a folder, not a file", field=what)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SluiceError(f"{what}: no such file: {name}", field=what) from None
    except UnicodeDecodeError:
        raise SluiceError(f"{what}: {name} is not UTF-8 text", field=what) from None
    except OSError as exc:
        raise SluiceError(f"{what}: {name} cannot be read ({exc.strerror or type(exc).__name__})", field=what) from None


def existing_file(name: str, what: str) -> Path:
    """A file an argument names, there and not a folder, or a message saying which."""
    path = Path(name)
    if path.is_dir():
        raise SluiceError(f"{name} is a folder, not a file", field=what)
    if not path.is_file():
        raise SluiceError(f"no such file: {name}", field=what)
    return path


def feature_names(value: str | None) -> list[str] | None:
    return [n.strip() for n in value.split(",")] if value else None


def count(text: str) -> int:
    """A whole number on the command line: ASCII digits only (`int()` would read `٣` as 3),
    within 64 bits, so every store can hold it."""
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (ASCII digits)")
    return int(text)


def worker_processes(text: str) -> int:
    """Worker processes (0: one per core), at most `max_workers()`: each loads the models it
    serves, so thousands would take the machine's memory before any answered."""
    value = count(text)
    most = max_workers()
    if value > most:
        raise argparse.ArgumentTypeError(f"{text} is more worker processes than this machine runs usefully: at most {most} (four per core; 0 for one per core)")
    return value


def max_workers() -> int:
    import os

    return max(8, 4 * (os.cpu_count() or 1))


def port(text: str) -> int:
    """A TCP port, 0 to 65535: a larger one would fail only as the server binds it."""
    value = count(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return value


def positive(text: str) -> int:
    """A count of at least 1 (`--limit`, `--windows`): 0 would answer nothing, as if there were nothing."""
    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not at least 1")
    return value


def number_between(low: float, high: float = math.inf, *, refusal: str) -> Callable[[str], float]:
    """An argparse type: a number from `low` to `high`; `refusal` says what one outside is."""

    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not low <= value <= high:  # NaN too
            raise argparse.ArgumentTypeError(refusal)
        return value

    return number


def version_number(text: str) -> int:
    """A version, as every door reads it (`sluice.domain.values`)."""
    try:
        return parse_version(text, field="version")
    except SluiceError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def publish_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """`--publish TABLE --publish-key COLUMN [--publish-ttl SECONDS]` as a job's `publish`."""
    if not args.publish:
        if args.publish_key or args.publish_ttl is not None:
            raise SluiceError("--publish-key and --publish-ttl go with --publish TABLE", field="publish")
        return None
    if not args.publish_key:
        raise SluiceError("--publish needs --publish-key COLUMN: the input column holding each row's entity", field="publish.key")
    found: dict[str, Any] = {"table": args.publish, "key": args.publish_key}
    if args.publish_ttl is not None:
        found["ttl_s"] = args.publish_ttl
    return found


def publish_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--publish", metavar="TABLE", help="once the job succeeds, serve its answers from this table of precomputed answers")
    p.add_argument("--publish-key", metavar="COLUMN", help="the input column holding each row's entity (a row without one fails)")
    p.add_argument("--publish-ttl", type=int, metavar="SECONDS", help="how long the published answers are kept (default: 7 days)")
