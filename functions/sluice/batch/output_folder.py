"""What a job's Plan may clear from its output folder: the part and error files an earlier
job left there (`BatchRunner._clear_results`), never a file of the job's own input. Submit
refuses the plain case (an output folder that is or holds the input: `uris.holds_input`); this
is the rule every spelling meets — the places compared where they are (`uris.where`: a local
path resolved, so `..`, links, `dt%3D1` and `dt=1` alike), a manifest's listed files, and an
output folder inside the input's holding results only as an earlier job's manifest lists them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sluice.batch.manifest import MANIFEST
from sluice.batch.objects import hidden, is_manifest, listed_in
from sluice.batch.uris import join, where
from sluice.domain.errors import BadRequest, SluiceError

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.batch.filestore import FileStore
    from sluice.domain.jobs import BatchJob


def input_of(files: FileStore, job: BatchJob, *, vetted: bool = False) -> Callable[[str], bool]:
    """Whether a URI is a file of the job's input: the input itself, one Plan reads under its
    prefix, or one its manifest lists (read as Plan reads it: its error where it cannot be read,
    and nothing cleared). An output folder inside the input's holds the job's own results once
    it is past Plan (`vetted`: Plan found none of its input there), else those an earlier job's
    manifest there lists; any other file in it is input Plan would read."""
    results: set[str] = set()
    prefix = None
    if is_manifest(job.input_uri):
        inputs = {where(uri) for uri in listed_in(job.input_uri, files, job.input_version)} | {where(job.input_uri)}
    else:
        inputs = {where(job.input_uri)}
        prefix = where(job.input_uri).rstrip("/") + "/"
        output = where(job.output_uri).rstrip("/") + "/"
        if output.startswith(prefix) and output != prefix:  # an output folder inside the input's
            if vetted:
                prefix = None
            else:
                results = earlier_results(files, job)
    return lambda uri: (found := where(uri)) in inputs or (prefix is not None and read_as_input(found, prefix) and found not in results)


def earlier_results(files: FileStore, job: BatchJob) -> set[str]:
    """The part and error files an earlier job's manifest in the job's output folder lists
    (where it names this folder as its output), each where it is; none without such a manifest."""
    try:
        document = json.loads(files.read_bytes(join(job.output_uri, MANIFEST)))
    except (SluiceError, OSError, ValueError):
        return set()
    if not isinstance(document, dict):
        return set()
    said = document.get("output")
    if not isinstance(said, str) or where(said).rstrip("/") != where(job.output_uri).rstrip("/"):
        return set()
    listed = [entry.get("uri") for key in ("parts", "errors") for entry in document.get(key) or () if isinstance(entry, dict)]
    return {where(uri) for uri in listed if isinstance(uri, str)}


def refuse_clearing_input(files: FileStore, job: BatchJob, stale: list[str]) -> None:
    """BadRequest (naming `output_uri`, nothing deleted) where a result name to clear is a
    file of the job's input (`input_of`)."""
    is_input = input_of(files, job)
    for name in stale:
        if is_input(join(job.output_uri, name)):
            raise BadRequest(
                f"the output folder {job.output_uri} holds the input's {name}: a job's results replace the part files an "
                "earlier job left in its output folder, which here are its input; give another output folder",
                field="output_uri",
            )


def read_as_input(place: str, prefix: str) -> bool:
    """Whether Plan reads the file at `place` as input of the prefix `prefix` (both `where`'s):
    under it, and no part of its name hidden (`_SUCCESS`, `_manifest.json`, `.x` are never read)."""
    return place.startswith(prefix) and not hidden(place[len(prefix) :])
