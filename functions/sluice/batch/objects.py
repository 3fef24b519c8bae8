"""Inputs of many objects: a prefix (a folder) or a manifest listing objects.

- A **prefix**: a URI ending in `/` (`s3://lake/events/dt=2026-11-26/`), or a local folder.
  Every object under it, at any depth, in key order, except hidden ones: any part of its
  name below the prefix starting with `.` or `_` (`_SUCCESS`, `.part-0.crc`,
  `_manifest.json`, `_temporary/…`), as Spark and Hive skip them. Empty objects hold no
  rows and are skipped too.
- A **manifest**: an object whose name ends in `.json`, holding `{"files": [uri, …]}`: the
  objects in the order listed (each at most once). Each is an `s3://` or `file://` URI or an
  absolute path.

All the objects of one input are of one format, which their names say (`.parquet`, `.csv`,
`.jsonl`, …): objects of two formats are refused, naming one of each, as is an object whose
name says no format. A prefix with no object, or a manifest listing none, is refused.

Confinement: a job that the operator did not start (API, upload) may read only what lies in
its tenant's inbox. The input itself was confined when the job was submitted and again by
Plan; each object a prefix holds (a local one may be a link) and each object a manifest lists
is confined here, to the same root, by `sluice.domain.locations`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.batch.filestore import as_uploaded
from sluice.batch.uris import format_of, is_s3, join, local_path
from sluice.domain.errors import BadRequest, Forbidden, InvalidInput
from sluice.domain.locations import confine

if TYPE_CHECKING:
    from sluice.batch.filestore import FileStore, Stat
    from sluice.domain.locations import Root

MAX_MANIFEST_BYTES = 16 * 1024 * 1024
FORMAT_NAMES = {"parquet": "Parquet", "csv": "CSV", "jsonl": "JSON Lines"}


def is_prefix(uri: str) -> bool:
    if uri.endswith("/"):
        return True
    if is_s3(uri):
        return False
    return local_path(uri).is_dir()


def is_manifest(uri: str) -> bool:
    return uri.lower().endswith(".json")


def is_many(uri: str) -> bool:
    """Whether `uri` names many objects (a prefix, a folder, or a manifest)."""
    try:
        return is_manifest(uri) or is_prefix(uri)
    except BadRequest:
        return False


def hidden(name: str) -> bool:
    """A name (relative to its prefix) that readers skip: a part of it starts with . or _."""
    return any(part.startswith((".", "_")) for part in name.split("/") if part)


def list_objects(
    uri: str, files: FileStore, *, allowed: Root | None = None, version: str | None = None
) -> tuple[str, list[tuple[str, Stat]]]:
    """The format and the (non-empty) objects of a many-object input, each with its stat
    (`version`: an uploaded manifest's, see `as_uploaded`)."""
    if is_manifest(uri):
        uris = _manifest(uri, files, allowed, version)
        what = f"the manifest {uri}"
    else:
        prefix = uri if uri.endswith("/") else uri + "/"
        names = [name for name in sorted(files.names(prefix)) if not hidden(name)]
        if allowed is not None:
            where = confine(prefix, (allowed,), field="input_uri")
            uris = [where.child(name, field="input_uri").uri for name in names]
        else:
            uris = [_under(prefix, name) for name in names]
        what = f"the prefix {prefix}"
    if not uris:
        raise InvalidInput(f"{what} holds no Parquet, CSV or JSON Lines object to score", field="input_uri")
    formats: dict[str, str] = {}
    for each in uris:
        try:
            fmt = format_of(each)
        except BadRequest as exc:
            raise BadRequest(f"{what}: {exc.message}", field="input_uri") from None
        formats.setdefault(fmt, each)
        if len(formats) > 1:
            (one, a), (two, b) = list(formats.items())[:2]
            raise BadRequest(
                f"{what} mixes formats: {a} is {FORMAT_NAMES[one]}, {b} is {FORMAT_NAMES[two]}; "
                "one input is one format",
                field="input_uri",
            )
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(8, len(uris))) as pool:  # one HEAD (or stat) per object
        objects = list(zip(uris, pool.map(files.stat, uris), strict=True))
    objects = [(each, stat) for each, stat in objects if stat.size > 0]
    if not objects:
        raise InvalidInput(f"every object of {what} is empty (0 bytes): there is nothing to score", field="input_uri")
    return next(iter(formats)), objects


def listed_in(uri: str, files: FileStore, version: str | None = None) -> list[str]:
    """The object URIs a manifest lists, as Plan reads them (local paths resolved), without
    looking at each: what a job's output folder must not take for its own results."""
    return _manifest(uri, files, None, version)


def _manifest(uri: str, files: FileStore, allowed: Root | None, version: str | None) -> list[str]:
    import orjson

    stat = as_uploaded(files, uri, version)
    if stat.size > MAX_MANIFEST_BYTES:
        raise InvalidInput(f"the manifest {uri} is larger than 16 MiB", field="input_uri")
    try:
        document = orjson.loads(files.read_bytes(uri, stat.version))
    except orjson.JSONDecodeError:
        raise InvalidInput(f"the manifest {uri} is not JSON", field="input_uri") from None
    listed = document.get("files") if isinstance(document, dict) else None
    if not isinstance(listed, list) or not all(isinstance(f, str) and f.strip() for f in listed):
        raise InvalidInput(
            f'the manifest {uri} must be {{"files": ["s3://…", …]}}: a list of object URIs', field="files"
        )
    uris: list[str] = []
    for entry in listed:
        entry = entry.strip()
        if not is_s3(entry) and not entry.startswith(("file://", "/")):
            raise InvalidInput(
                f"the manifest {uri} lists {entry!r}: list s3:// or file:// URIs or absolute paths", field="files"
            )
        if allowed is not None:
            try:
                target = confine(entry, (allowed,), field="files").uri
            except Forbidden:
                raise Forbidden(
                    f"the manifest lists {entry}, which is outside your inbox: every object it lists must lie there",
                    field="files",
                ) from None
        else:
            target = entry if is_s3(entry) else _resolved(entry)  # a local path: "..", links resolved
        if target.endswith("/") or entry.endswith("/"):
            raise InvalidInput(f"the manifest {uri} lists a prefix ({entry}): list objects", field="files")
        uris.append(target)
    return list(dict.fromkeys(uris))


def _under(prefix: str, name: str) -> str:
    if is_s3(prefix):
        return join(prefix, name)
    return (local_path(prefix).absolute() / name).as_uri()  # quoted as a file URI is


def _resolved(location: str) -> str:
    return local_path(location).resolve().as_uri()

