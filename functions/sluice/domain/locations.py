"""Locations a tenant names (a batch input, a manifest's entries, a model to import, the
optimizer's data), parsed once to one spelling and confined to one of the tenant's roots: the
counterpart of `origins.py` for files and objects.

A string prefix is no check: `file:///srv/batch/inbox/acme/%2e%2e/globex/x.csv` starts with
acme's inbox and names globex's file once decoded, and `…/acme/..` passes a search for
`/../`. So a location is parsed once, then compared on the parsed parts:

- `s3://bucket/key`: the key taken literally, as S3 and the AWS CLI take it. A key with a `.`,
  `..` or empty segment, a percent escape, a backslash, `?`, `#` or a control character is
  refused: some other client would read it as another key.
- `file:///path` (or `file://localhost/path`), decoded once, as `Path.as_uri` encodes; or an
  absolute path, taken literally. An encoded separator (`%2f`, `%5c`), a backslash, NUL or any
  control character, a raw `?` or `#`, or bytes that are not UTF-8 once decoded are refused.
  Dot segments and symbolic links are then resolved on this machine's disk (`realpath`), so a
  link inside a root that points out of it is outside.
- `<root>/<rest>` (`inbox/churn/day.csv`): relative to the tenant's root of that name, the
  spelling responses use (`Roots.shown`). Its segments may not be `.`, `..` or empty.

What callers read or write is `Location.uri`, built from the parsed and resolved parts, so
nothing decodes a location after it was checked: the key fetched is the key checked.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote_from_bytes, unquote_to_bytes

from sluice.domain.errors import BadRequest, Forbidden

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

MAX_LOCATION = 4096
HOME_SHOWN = "$SLUICE_HOME"
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_ROOT_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")
_UNSAFE_ESCAPES = {0x2F, 0x5C} | set(range(0x20)) | {0x7F}  # encoded '/', '\' and control characters


@dataclass(frozen=True, slots=True)
class Root:
    """A place a tenant's locations may lie: `name` is how responses call it (`inbox`), `uri`
    where it is (`s3://bucket/inbox/acme/`, or `file:///…/inbox/acme/` with links resolved)."""

    name: str
    uri: str

    @classmethod
    def of(cls, name: str, where: str | Path) -> Root:
        """A root at `where` (an `s3://` prefix, a `file://` URI or a path): one spelling,
        ending in `/`; a local root with its links resolved, so that resolved locations compare."""
        if not _ROOT_NAME.fullmatch(name):
            raise ValueError(f"not a root name: {name!r}")
        text = str(where)
        if text.startswith("s3://"):
            bucket, _, key = text[5:].partition("/")
            if not _BUCKET.fullmatch(bucket) or _bad_key(key, prefix=True):
                raise ValueError(f"not an S3 prefix: {text!r}")
            return cls(name, f"s3://{bucket}/{key}" if not key or key.endswith("/") else f"s3://{bucket}/{key}/")
        path = _file_path(text) if text.startswith("file:") else text
        if path is None or not os.path.isabs(os.path.expanduser(path)):
            raise ValueError(f"not an absolute folder: {text!r}")
        return cls(name, _folder_uri(os.path.realpath(os.path.expanduser(path))))

    @property
    def is_s3(self) -> bool:
        return self.uri.startswith("s3://")

    @property
    def path(self) -> str:
        """The folder (local roots): resolved, without a trailing separator (bar `/` itself)."""
        return _path_of(self.uri).rstrip("/") or "/"


@dataclass(frozen=True, slots=True)
class Location:
    """A location confined to `root`: `key` is what lies below it (`/`-separated, with no dot
    or empty segment; empty for the root itself; ending in `/` for a prefix)."""

    root: Root
    key: str

    @property
    def uri(self) -> str:
        """What to read or write: the root's URI and the key, encoded as `Path.as_uri` does for
        a local root (readers decode it once, to exactly the path that was checked)."""
        if self.root.is_s3:
            return self.root.uri + self.key
        path = Path(self.root.path, self.key) if self.key else Path(self.root.path)
        return _folder_uri(str(path)) if self.is_prefix else file_uri(path)

    @property
    def path(self) -> Path:
        if self.root.is_s3:
            raise ValueError("an S3 location has no local path")
        return Path(self.root.path, self.key) if self.key else Path(self.root.path)

    @property
    def is_prefix(self) -> bool:
        return not self.key or self.key.endswith("/")

    @property
    def shown(self) -> str:
        """How a response names it: `inbox/churn/day.csv` (an S3 location keeps its `s3://`
        URI: it is where the tenant puts and gets objects with its own tools)."""
        return self.uri if self.root.is_s3 else f"{self.root.name}/{self.key}"

    def child(self, name: str, *, field: str) -> Location:
        """The location of `name` below this prefix (a name a listing found): its segments
        checked as any key's. A local child is resolved again (it may be a link)."""
        if _bad_key(name, prefix=False) or _CONTROL.search(name):
            raise Forbidden(f"{self.shown}{name} is not a location sluice reads", field=field)
        base = self.key if self.is_prefix else self.key + "/"
        if self.root.is_s3:
            return Location(self.root, base + name)
        return confine(str(Path(self.root.path, base, name)), (self.root,), field=field)


@dataclass(frozen=True, slots=True)
class Roots:
    """One tenant's roots, by name, and the home they lie in (for naming what lies elsewhere)."""

    roots: tuple[Root, ...]
    home: str = ""  # the local home, resolved; "" when there is none (AWS)

    def named(self, *names: str) -> tuple[Root, ...]:
        return tuple(root for root in self.roots if root.name in names)

    def locate(self, uri: str) -> Location | None:
        """The location of a URI sluice itself wrote (a job's input or output), or None when it
        lies under none of the roots. No check here: confinement is `confine`'s."""
        for root in self.roots:
            if root.is_s3 and uri.startswith(root.uri):
                return Location(root, uri[len(root.uri) :])
            if not root.is_s3 and uri.startswith("file:"):
                path = _file_path(uri)
                if path is not None and _under(path, root.path):
                    key = os.path.relpath(path, root.path) if path.rstrip("/") != root.path else ""
                    key = "" if key == "." else key
                    return Location(root, key + ("/" if path.endswith("/") and key else ""))
        return None

    def shown(self, uri: str) -> str:
        """A URI as a response may say it: relative to its root (`inbox/day.csv`; one given so
        stays as it is), under the home as `$SLUICE_HOME/…`, an S3 URI as it is; never another
        server path."""
        located = self.locate(uri)
        if located is not None:
            return located.shown
        if uri.startswith("s3://") or not uri:
            return uri
        head, slash, _ = uri.partition("/")
        if slash and any(r.name == head for r in self.roots) and ".." not in uri.split("/"):
            return uri  # already relative to its root, as a tenant writes it (a schedule's template)
        path = _file_path(uri) if uri.startswith("file:") else uri
        if path is None:
            return "(a local file)"
        if self.home and _under(path, self.home):
            return HOME_SHOWN + "/" + os.path.relpath(path, self.home)
        return "…/" + os.path.basename(path.rstrip("/"))

    def scrub(self, text: str | None) -> str | None:
        """A message with every local root, and the home, said as `shown` says them: job errors
        and messages quote the URIs they were given, which are server paths locally."""
        if not text:
            return text
        for root in sorted((r for r in self.roots if not r.is_s3), key=lambda r: -len(r.path)):
            for spelling in (root.uri, root.path + "/"):
                text = text.replace(spelling, f"{root.name}/")
        if self.home:
            for spelling in (_folder_uri(self.home), self.home + "/", Path(self.home).as_uri() + "/"):
                text = text.replace(spelling, HOME_SHOWN + "/")
        return text

    def describe(self, names: Iterable[str]) -> str:
        """The roots of `names`, as an error message says them: an S3 prefix as it is, a local
        root by name and where it lies under the home (`imports/ ($SLUICE_HOME/imports/acme/)`)."""
        said = []
        for root in self.roots:
            if root.name not in names:
                continue
            if root.is_s3:
                said.append(root.uri)
            elif self.home and _under(root.path, self.home):
                said.append(f"{root.name}/ ({HOME_SHOWN}/{os.path.relpath(root.path, self.home)}/)")
            else:
                said.append(f"{root.name}/ (a folder of the server)")
        return ", ".join(dict.fromkeys(said)) or "none"


def confine(
    text: object,
    roots: Iterable[Root],
    *,
    field: str,
    resolve: Callable[[str], str] = os.path.realpath,
) -> Location:
    """Parse `text` once (see the module) and admit it only if it lies under one of `roots`;
    BadRequest for what does not parse, Forbidden for what lies elsewhere, both naming `field`."""
    roots = tuple(roots)
    if not isinstance(text, str) or not text.strip():
        raise BadRequest(f"{field} must be an s3:// or file:// URI, an absolute path or inbox/…", field=field)
    if len(text) > MAX_LOCATION:
        raise BadRequest(f"{field} is longer than {MAX_LOCATION} characters", field=field)
    if _CONTROL.search(text) or "\\" in text:
        raise BadRequest(f"{field} may not contain control characters or backslashes", field=field)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (valid JSON, `\udc80`): no file or key is named by it
            raise BadRequest(f"{field} is not text: it holds a lone surrogate", field=field) from None
    scheme, sep, rest = text.partition("://")
    if sep and scheme.lower() == "s3":
        return _confine_s3(rest, roots, field=field)
    if sep and scheme.lower() != "file":
        raise BadRequest(f"{field} must be an s3:// or file:// URI, an absolute path or inbox/…", field=field)
    if sep:
        path = _file_path(text, field=field)
    elif text.startswith(("/", "~")):
        path = os.path.expanduser(text)
    else:
        return _confine_relative(text, roots, field=field, resolve=resolve)
    prefix = path.endswith("/")
    real = resolve(path)
    for root in roots:
        if not root.is_s3 and _under(real, root.path):
            key = os.path.relpath(real, root.path) if real != root.path else ""
            key = "" if key == "." else key
            return Location(root, key + "/" if prefix and key else key)
    raise _outside(roots, field)


def _confine_s3(rest: str, roots: tuple[Root, ...], *, field: str) -> Location:
    bucket, _, key = rest.partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise BadRequest(f"{field} names no valid S3 bucket", field=field)
    if _bad_key(key, prefix=True) or "%" in key:
        raise BadRequest(
            f"{field} is not an S3 key sluice reads: no '.', '..' or empty segment, percent escape, '?' or '#'",
            field=field,
        )
    where = f"s3://{bucket}/{key}"
    for root in roots:
        if root.is_s3 and where.startswith(root.uri):
            return Location(root, where[len(root.uri) :])
    raise _outside(roots, field)


def _confine_relative(
    text: str, roots: tuple[Root, ...], *, field: str, resolve: Callable[[str], str]
) -> Location:
    name, _, key = text.partition("/")
    found = next((root for root in roots if root.name == name), None)
    if found is None:
        raise BadRequest(
            f"{field} must be an s3:// or file:// URI, an absolute path, or relative to one of your "
            f"roots ({', '.join(dict.fromkeys(r.name + '/' for r in roots)) or 'none'})",
            field=field,
        )
    if key and _bad_key(key, prefix=True):
        raise BadRequest(f"{field} may not have '.', '..' or empty segments", field=field)
    if found.is_s3:  # checked as the same key spelled as an s3:// URI would be
        return _confine_s3(found.uri[len("s3://") :] + key, (found,), field=field)
    # A local root: links below it are resolved, and must not lead out of it.
    return confine(str(Path(found.path, key)) + ("/" if key.endswith("/") else ""), (found,), field=field, resolve=resolve)


def _outside(roots: tuple[Root, ...], field: str) -> Forbidden:
    names = [root.uri if root.is_s3 else f"{root.name}/" for root in roots]
    return Forbidden(
        f"{field} must lie in {' or '.join(dict.fromkeys(names)) or 'none of your folders'}", field=field
    )


def unsafe_s3_key(key: str) -> bool:
    """An object key some reader would take for another (`_bad_key`, or a percent escape): the
    rule for keys sluice is given whole, as its results' (`sluice.storage.results`)."""
    return _bad_key(key, prefix=False) or "%" in key


def _bad_key(key: str, *, prefix: bool) -> bool:
    """A key (or a name below a prefix) some reader would take for another: dot or empty
    segments (a trailing `/` allowed where `prefix`), `?`, `#`, backslashes, control characters."""
    if any(c in key for c in "?#\\") or _CONTROL.search(key):
        return True
    parts = key.split("/")
    if prefix and key.endswith("/"):
        parts = parts[:-1]
    return bool(key) and any(part in ("", ".", "..") for part in parts)


def file_path(uri: str, *, field: str) -> str:
    """The path of a `file:` URI, decoded once, or a 400 naming `field` for one that names no
    one path on this machine (`_file_path`)."""
    path = _file_path(uri, field=field)
    assert path is not None  # refused naming `field` otherwise
    return path


def _file_path(uri: str, *, field: str | None = None) -> str | None:
    """The path of a `file:` URI, decoded once; None (or BadRequest naming `field`) for one
    that is ambiguous: another host, a query or fragment, an encoded separator or control
    character, bytes that are not UTF-8."""

    def refuse(why: str) -> None:
        if field is not None:
            raise BadRequest(f"{field}: {why}", field=field)

    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower() != "file":
        refuse("not a file:// URI")
        return None
    if "?" in rest or "#" in rest:
        refuse("a file:// URI may not carry '?' or '#' (write them %3F and %23)")
        return None
    host, slash, path = rest.partition("/")
    if host.lower() not in ("", "localhost", "~") or not slash:
        refuse("a file:// URI names a path on this machine: file:///path")
        return None
    if any(int(code, 16) in _UNSAFE_ESCAPES for code in _ESCAPE.findall(path)):
        refuse("an encoded '/', '\\' or control character is refused")
        return None
    try:
        decoded = unquote_to_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        refuse("the path is not UTF-8 once decoded")
        return None
    if _CONTROL.search(decoded) or "\\" in decoded:
        refuse("the path may not contain control characters or backslashes")
        return None
    return os.path.expanduser("~/" + decoded) if host == "~" else "/" + decoded


def _path_of(uri: str) -> str:
    path = _file_path(uri)
    if path is None:
        raise ValueError(f"not a file URI: {uri!r}")
    return path


def file_uri(path: str | Path) -> str:
    """A `file://` URI for an absolute path, escaping only what a URI path may not hold
    (`%`, `?`, `#`, spaces, control and non-ASCII characters): `dt=2026-11-28` stays readable."""
    return "file://" + quote_from_bytes(os.fsencode(str(path)), safe="/:@!$&'()*+,;=~")


def _folder_uri(path: str) -> str:
    uri = file_uri(path)
    return uri if uri.endswith("/") else uri + "/"


def _under(path: str, folder: str) -> bool:
    path = path.rstrip("/") or "/"
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@dataclass(frozen=True, slots=True)
class Layout:
    """Where every tenant's roots lie, from settings: `roots(tenant)` names them.

    - `inbox`: batch inputs (`<batch>inbox/<tenant>/`); `outbox`: batch results
      (`<batch>outbox/<tenant>/`, catalog tables under `tables/`);
    - `store`: the tenant's own artifacts in the artifact store (`<store>` with `{tenant}`);
    - `imports`: the prefixes push-by-URI and the optimizer's data may read (each with `{tenant}`).
    """

    batch: str = ""
    store: str = ""
    imports: tuple[str, ...] = ()
    home: str = ""

    def roots(self, tenant: str) -> Roots:
        return _roots(self, tenant)


def _roots_uncached(layout: Layout, tenant: str) -> Roots:
    if not tenant or "/" in tenant or tenant in (".", "..") or "{" in tenant:
        raise ValueError(f"not a tenant: {tenant!r}")
    found: list[Root] = []
    if layout.batch:
        found += [Root.of("inbox", f"{layout.batch}inbox/{tenant}/"), Root.of("outbox", f"{layout.batch}outbox/{tenant}/")]
    if layout.store:
        found.append(Root.of("store", layout.store.replace("{tenant}", tenant)))
    found += [Root.of("imports", prefix.replace("{tenant}", tenant)) for prefix in layout.imports]
    home = os.path.realpath(os.path.expanduser(layout.home)) if layout.home else ""
    return Roots(tuple(found), home)


def _cached() -> Callable[[Layout, str], Roots]:
    from functools import lru_cache

    return lru_cache(maxsize=1024)(_roots_uncached)


_roots = _cached()
