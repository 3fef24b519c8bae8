"""An upload: a request body too large for the API's own request limit, put by the client
straight into the store (an S3 presigned POST on AWS, a signed form on `sluice serve`), then
named by its id in a prediction request.

An upload belongs to one tenant and one deployment, holds at most the size it was declared
with, and may be predicted from until `usable_until` (as often as wanted: an asynchronous
endpoint reads it from the store later, so it is never consumed on use); the store's
lifecycle deletes it after that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

UPLOAD_ID = re.compile(r"^[0-9a-f]{32}\Z")
JSON_BODY = "application/json"
OCTET_STREAM = "application/octet-stream"


@dataclass(frozen=True, slots=True)
class Upload:
    id: str
    tenant: str
    deployment: str
    content_type: str  # as stored: application/json, or binary+json with its json-header-size
    size: int  # bytes received
    uri: str  # where the body lies (s3:// or file://): an asynchronous endpoint's InputLocation
    header_size: int | None = None  # binary bodies: the JSON header's length
    created_at: float = 0.0
    usable_until: float = 0.0
    reader: Callable[[int, int | None], bytes] | None = field(default=None, compare=False, repr=False)

    def read(self, start: int = 0, length: int | None = None) -> bytes:
        """The body's bytes from `start`, `length` of them (None: to the end)."""
        if self.reader is None:
            raise RuntimeError("this upload has no reader")
        return self.reader(start, length)


@dataclass(frozen=True, slots=True)
class UploadForm:
    """How the client sends the body: `method` to `url` as multipart/form-data with `fields`
    first and the body last as the form's `file` part (S3's browser-based POST)."""

    url: str
    fields: dict[str, str]
    method: str = "POST"
