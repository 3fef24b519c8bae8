"""Batch file URIs: `s3://bucket/key`, or `file:///path` (a plain path means the same), and
the input format a name says."""

from __future__ import annotations

from pathlib import Path

from sluice.domain.errors import BadRequest
from sluice.domain.locations import file_path
from sluice.storage.folder import path_of_file_url


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def split_s3(uri: str) -> tuple[str, str]:
    """Bucket and key, the key taken literally (as S3 takes it): `#` and `?` are part of it."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not is_s3(uri) or not bucket:
        raise BadRequest(f"not an s3://bucket/key URI: {uri!r}", field="input_uri")
    return bucket, key


def local_path(uri: str) -> Path:
    if uri.startswith("file://"):
        return path_of_file_url(uri)
    if "://" in uri:
        raise BadRequest(f"batch files are s3:// or file:// URIs, not {uri!r}", field="input_uri")
    return Path(uri).expanduser()


def as_uri(location: str | Path, *, field: str = "input_uri") -> str:
    """A URI for a path or URI: s3:// and file:// stay, paths become absolute file:// URIs. A
    file URI that names no one path on this machine (another host, `file://server/x`, read as
    the local `/x`; a `?` or `#`, dropped as a query or fragment) is a 400 naming `field`, as
    a tenant's is (`sluice.domain.locations`)."""
    text = str(location)
    if text[:5].lower() == "s3://":  # `S3://b/k` too (a scheme is a scheme in any case), spelled as every check does
        return "s3://" + text[5:]
    uri = file_url(text)
    if uri is not None:
        file_path(uri, field=field)
        return uri
    return Path(text).expanduser().resolve().as_uri()  # a path, `file:name` (a file so named) too


def file_url(text: str) -> str | None:
    """`text` as a file URL, its scheme spelled as every check spells it (`file://`), where it is
    one: `file:///x`, `FILE://host/x`, RFC 8089's `file:/x`; None for anything else (a path,
    `file:name` a file so named)."""
    scheme, colon, rest = text.partition(":")
    if not colon or scheme.lower() != "file" or not rest.startswith("/"):
        return None
    return "file:" + rest if rest.startswith("//") else "file://" + rest


def join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def bucket_and_key(uri: str) -> tuple[str | None, str | None]:
    return split_s3(uri) if is_s3(uri) else (None, None)


SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def format_of(uri: str) -> str:
    """The input format its name says; compressed text is refused (it cannot be split)."""
    name = uri.rsplit("/", 1)[-1].lower()
    for suffix, fmt in SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    if name.endswith((".gz", ".bz2", ".zst", ".zip", ".xz")):
        raise BadRequest(
            "compressed inputs cannot be split into chunks; upload Parquet (compressed inside) "
            "or uncompressed CSV or JSON Lines",
            field="input_uri",
        )
    raise BadRequest(
        f"cannot tell the format of {name!r}: name it .parquet, .csv or .jsonl, or give the format",
        field="format",
    )


def holds_input(output_uri: str, input_uri: str) -> bool:
    """Whether the output folder `output_uri` (ending in /) is, or holds, the input (a file or
    a prefix), each where it is (`where`): the one folder a job may not write to (its Plan
    clears the part files an earlier job left there; Plan checks each file it would clear too)."""
    return (where(input_uri).rstrip("/") + "/").startswith(where(output_uri).rstrip("/") + "/")


def where(uri: str) -> str:
    """`uri` as the place it names, to tell two spellings of one place apart: a local file URL
    as its resolved path (`..`, links and percent-quoting undone: `dt%3D1` is `dt=1`), kept with
    a trailing slash where it has one; an S3 URI as it is (S3 keys are their own text)."""
    if not uri.startswith("file:"):
        return uri
    resolved = str(path_of_file_url(uri).resolve())
    return resolved + "/" if uri.endswith("/") and not resolved.endswith("/") else resolved
