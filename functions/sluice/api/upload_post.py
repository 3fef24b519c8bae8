"""An upload's form posted to `sluice serve` (`POST /api/v1/uploads/{id}/body`, the local twin
of S3's POST Object), read as it streams and bounded in bytes and in time, since anyone holding
the form may post it, without an API key.

- Shape: multipart/form-data, named fields first, the body last as the part `file`, then the
  closing boundary. Anything else is a 400 naming the problem.
- Bytes: before the form's signed policy is checked (at the `file` part's headers) at most
  `FORM_OVERHEAD` bytes are read; after, at most that plus the size the policy allows (413).
  The form ends at its closing boundary: nothing after it is read, and it is answered at once.
- Time: the body has `SLUICE_UPLOAD_BODY_TIMEOUT_S`, plus a second for every
  `SLUICE_UPLOAD_BODY_MIN_RATE` bytes received (Apache's `RequestReadTimeout body=…,MinRate=…`);
  then 408.

The body is put in place at the closing boundary only, whole; any other ending (an error, a
timeout, a client gone) removes what was written of it. An answer given before the request's
body has all arrived closes the connection (`sluice.cli.protocol`): the rest is never read,
not even to drain it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool

from sluice.domain.errors import BadRequest, PayloadTooLarge, RequestTimeout, SluiceError
from sluice.inline import timeout

if TYPE_CHECKING:
    from starlette.types import Receive

    from sluice.storage.uploads import BodyWriter, FolderUploads

FORM_OVERHEAD = 64 * 1024  # the fields, the part headers and the boundaries around the body
MAX_FIELD_BYTES = 16 * 1024
MAX_PART_HEADER_BYTES = 8 * 1024
MAX_BOUNDARY = 70  # RFC 2046 § 5.1.1

# The parser warns of each malformed form, which the 400 says already: below ERROR its lines
# are dropped, so that a client posting bad forms cannot fill the log.
_PARSER_LOG = logging.getLogger(f"{__name__}.parser")
_PARSER_LOG.setLevel(logging.ERROR)


class ClientGone(Exception):
    """The client closed the connection before its form was whole."""

    def __init__(self, received: int) -> None:
        super().__init__(f"client gone after {received} bytes")
        self.received = received


class UploadPost:
    """One posted form, fed its body chunk by chunk (`feed`); no I/O but the body's file."""

    def __init__(self, store: FolderUploads, upload_id: str, content_type: str, *, declared: str | None, max_upload: int) -> None:
        media, options = parse_options_header(content_type)
        boundary = options.get(b"boundary", b"")
        if media != b"multipart/form-data":
            raise BadRequest("send the upload as multipart/form-data: the fields, then the body as `file`", field="content-type")
        if not 0 < len(boundary) <= MAX_BOUNDARY:
            raise BadRequest(f"the content-type's boundary must be 1 to {MAX_BOUNDARY} characters (RFC 2046)", field="content-type")
        if declared is not None and not (declared.isascii() and declared.isdigit() and len(declared) < 19 and int(declared) <= max_upload + FORM_OVERHEAD):
            raise PayloadTooLarge(f"the form is over {max_upload + FORM_OVERHEAD} bytes", field="file")
        self.store, self.upload_id = store, upload_id
        self.declared = int(declared) if declared is not None else None
        self.fields: dict[str, str] = {}
        self.limit = FORM_OVERHEAD  # raised by the size the policy allows, once it is checked
        self.read = 0
        self.complete = False  # the closing boundary is read and the body is in place
        self._stage = "preamble"  # then "headers", "data", "between" (a part ended)
        self._name = ""
        self._header, self._value = bytearray(), bytearray()
        self._headers: dict[bytes, bytes] = {}
        self._header_bytes = 0
        self._buffer = bytearray()
        self._most: int | None = None
        self._sink: BodyWriter | None = None
        self._file_ended = False
        self._exits = contextlib.ExitStack()
        self._parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._part_begin,
                "on_header_field": self._header_field,
                "on_header_value": self._header_value,
                "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished,
                "on_part_data": self._part_data,
                "on_part_end": self._part_end,
                "on_end": self._end,
            },
        )
        self._parser.logger = _PARSER_LOG

    def feed(self, chunk: bytes) -> None:
        """Parses `chunk` up to the form's end or its bound: the closing boundary completes the
        form (and puts the body in place); what follows it in the chunk is not parsed."""
        while chunk and not self.complete:
            room = self.limit - self.read
            if room <= 0:
                raise self._over()
            taken, chunk = chunk[:room], chunk[room:]
            self.read += len(taken)
            try:
                self._parser.write(taken)
            except FormParserError as exc:
                raise self._malformed(self.read - len(taken) + max(getattr(exc, "offset", 0), 0)) from None

    def cut_short(self) -> BadRequest:
        """The error for a request body that ended before the form's closing boundary."""
        return BadRequest(f"the form ends after {self.read} bytes, before its closing boundary: it was cut short", field="body")

    def close(self) -> None:
        """Removes what was written of a body not put in place; closes the file."""
        self._exits.close()

    # The parser's callbacks (each raises a domain error to refuse the form) -------------------
    def _part_begin(self) -> None:
        self._stage, self._headers, self._header_bytes = "headers", {}, 0

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header += data[start:end]
        self._count_header(end - start)

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]
        self._count_header(end - start)

    def _count_header(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > MAX_PART_HEADER_BYTES:
            raise BadRequest(f"a part's headers are over {MAX_PART_HEADER_BYTES} bytes", field="body")

    def _header_end(self) -> None:
        self._headers[bytes(self._header).lower()] = bytes(self._value)
        self._header, self._value = bytearray(), bytearray()

    def _headers_finished(self) -> None:
        disposition, params = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = params.get(b"name", b"").decode("utf-8", "replace")
        shown = name[:64]
        if disposition != b"form-data" or not name:
            raise BadRequest("a part of the form has no name: each names itself with `Content-Disposition: form-data; name=…`", field="body")
        if self._file_ended:
            raise BadRequest(f"form field '{shown}' follows the file: the body must be the form's last part", field=shown)
        if name in self.fields:
            raise BadRequest(f"form field '{shown}' is given twice", field=shown)
        self._stage, self._name, self._buffer = "data", name, bytearray()
        if name == "file":
            path, least, most = self.store.check_form(self.upload_id, self.fields)
            self._most, self.limit = most, FORM_OVERHEAD + most
            if self.declared is not None and self.declared > self.limit:
                raise PayloadTooLarge(f"the form is over its upload's size of {most} bytes plus {FORM_OVERHEAD} for its fields", field="file")
            self._sink = self._exits.enter_context(self.store.writer(path, least, most))

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._sink is not None:  # the file's data: nothing comes after it but the closing boundary
            self._sink.write(data[start:end])
            return
        self._buffer += data[start:end]
        if len(self._buffer) > MAX_FIELD_BYTES:
            # read before the form's signature can be checked: bounded, whoever sends it
            raise BadRequest(f"form field '{self._name[:64]}' is over {MAX_FIELD_BYTES} bytes", field=self._name[:64])

    def _part_end(self) -> None:
        self._stage = "between"
        if self._name == "file":
            self._file_ended = True
        else:
            self.fields[self._name] = self._buffer.decode("utf-8", "replace")

    def _end(self) -> None:
        if self._sink is None or not self._file_ended:
            raise BadRequest("the form has no `file` part (the body, after the fields)", field="file")
        self._sink.commit()  # whole: the body is in place
        self.complete = True

    # Errors -------------------------------------------------------------------------------------
    def _over(self) -> SluiceError:
        if self._most is None:
            return BadRequest(f"the form's fields and part headers are over {FORM_OVERHEAD} bytes", field="body")
        return PayloadTooLarge(f"the form is over its upload's size of {self._most} bytes plus {FORM_OVERHEAD} for its fields", field="file")

    def _malformed(self, at: int) -> BadRequest:
        problem = {
            "preamble": "the body does not open with the boundary its content-type names",
            "headers": "a part's headers are malformed or too long",
            "data": "a part's data is followed by neither a part nor the closing boundary",
            "between": "a boundary is followed by neither a part nor the form's end",
        }[self._stage]
        return BadRequest(f"{problem} (at byte {at} of the body)", field="body")


async def read_form(post: UploadPost, receive: Receive, *, timeout_s: float, min_rate: int) -> None:
    """Feeds `post` the request's body as it arrives, until its form is complete. Raises
    `RequestTimeout` when the body is too slow, `ClientGone` when the client left, and the
    form's own errors."""
    loop = asyncio.get_running_loop()
    started, received = loop.time(), 0
    while True:
        try:
            async with timeout(at=started + timeout_s + received / min_rate):
                message = await receive()
        except TimeoutError:
            raise RequestTimeout(
                f"the form did not arrive in time: {timeout_s:g} s, plus one for every {min_rate} bytes received "
                f"({received} were)",
                field="body",
            ) from None
        if message["type"] == "http.disconnect":
            raise ClientGone(received)
        body, more = message.get("body", b""), message.get("more_body", False)
        received += len(body)
        if body:
            await run_in_threadpool(post.feed, body)
        if post.complete:
            return
        if not more:
            raise post.cut_short()
