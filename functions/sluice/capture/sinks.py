"""Where captured records go: JSON Lines files under a folder (locally) or a Firehose
delivery stream (AWS), whose S3 prefix partitions them the same way."""

from __future__ import annotations

import os
import threading
import uuid
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sluice import owner_only
from sluice.capture.records import partition
from sluice.observability import get_logger

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Unpack

    from sluice.clients import AwsArgs, AwsSource

# PutRecordBatch takes at most 500 records and 4 MiB a call, 1,000 KiB a record.
FIREHOSE_BATCH_RECORDS = 500
FIREHOSE_BATCH_BYTES = 4 * 1024 * 1024
FIREHOSE_RECORD_BYTES = 1000 * 1024


class Sink(Protocol):
    def write(self, records: Sequence[dict[str, Any]]) -> tuple[int, int]:
        """Write the records; returns how many were dropped (too large) and how many failed
        (refused), the others written; raises when the write failed as a whole."""
        ...


def _other(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays orjson does not write itself
    return tolist() if tolist is not None else str(value)


def line_of(record: dict[str, Any]) -> bytes:
    """One JSON line; numeric arrays written directly (float32 in its shortest form)."""
    import orjson

    return orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE, default=_other)


class FolderSink:
    """`<root>/tenant=T/deployment=D/dt=YYYY-MM-DD/hour=HH/part-<process>.jsonl`, appended to
    in whole lines (a write that fails partway is cut back: `owner_only.append_lines`); every
    folder and file its owner's alone (`sluice.owner_only`)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.part = f"part-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        self._lock = threading.Lock()

    def write(self, records: Sequence[dict[str, Any]]) -> tuple[int, int]:
        grouped: dict[str, list[bytes]] = defaultdict(list)
        for record in records:
            grouped[partition(record)].append(line_of(record))
        with self._lock:
            for where, lines in grouped.items():
                folder = owner_only.folder(self.root / where)
                fd = owner_only.descriptor(folder / self.part, "ab")
                try:
                    owner_only.append_lines(fd, b"".join(lines))
                finally:
                    os.close(fd)
        return 0, 0


class FirehoseSink:
    """`put_record_batch` in calls of at most 500 records and 4 MiB; records Firehose
    refused are sent once more, then counted failed, one by one; a call that raises fails its
    records, and the next call is made all the same."""

    def __init__(self, stream: str, **aws: Unpack[AwsArgs]) -> None:
        from sluice.clients import lazy_client

        self.stream = stream
        self._firehose = lazy_client("firehose", aws, region=aws.get("region"))

    @classmethod
    def from_url(cls, url: str, **aws: Unpack[AwsSource]) -> FirehoseSink:
        return cls(url.removeprefix("firehose://").strip("/"), **aws)

    @property
    def client(self) -> Any:
        return self._firehose()

    def write(self, records: Sequence[dict[str, Any]]) -> tuple[int, int]:
        dropped = failed = 0
        batch: list[bytes] = []
        size = 0
        for record in records:
            data = line_of(record)
            if len(data) > FIREHOSE_RECORD_BYTES:
                dropped += 1
                continue
            if batch and (len(batch) == FIREHOSE_BATCH_RECORDS or size + len(data) > FIREHOSE_BATCH_BYTES):
                failed += self._put(batch)
                batch, size = [], 0
            batch.append(data)
            size += len(data)
        if batch:
            failed += self._put(batch)
        return dropped, failed

    def _put(self, batch: list[bytes]) -> int:
        """One call (and one more for the records it refused); how many records failed."""
        pending = batch
        try:
            for _ in range(2):
                answer = self.client.put_record_batch(DeliveryStreamName=self.stream, Records=[{"Data": d} for d in pending])
                if not answer.get("FailedPutCount"):
                    return 0
                pending = [d for d, r in zip(pending, answer["RequestResponses"], strict=True) if r.get("ErrorCode")]
        except Exception:
            get_logger().exception("capture: a Firehose call failed", extra={"records": len(pending)})
            return len(pending)
        get_logger().warning("capture: Firehose refused records twice", extra={"records": len(pending)})
        return len(pending)
