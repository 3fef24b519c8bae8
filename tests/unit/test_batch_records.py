"""The CSV record scanner agrees with pyarrow's CSV parser on where records end, whatever the
quoting and however the bytes are cut into blocks."""

from __future__ import annotations

import io
import random

import pyarrow.csv as pv
import pytest

from sluice.batch.records import RecordScanner

FIELDS = ["a", "bb", "1", "", '"x"', '"y\nz"', '"q""r"', '""', '","', '"\n"', 'z"w', "5'10\"", 'a""', '"""s"""', '"t\r\nu"']


def _records_by_pyarrow(data: bytes) -> int:
    skipped = [0]

    def skip(row: object) -> str:
        skipped[0] += 1
        return "skip"

    table = pv.read_csv(
        io.BytesIO(data),
        read_options=pv.ReadOptions(column_names=["a", "b", "c"], use_threads=False),
        parse_options=pv.ParseOptions(ignore_empty_lines=False, invalid_row_handler=skip, newlines_in_values=True),
    )
    return table.num_rows + skipped[0]


def _records_by_scanner(data: bytes, rng: random.Random) -> int:
    scanner = RecordScanner(0)
    ends: list[int] = []
    at = 0
    while at < len(data):
        stop = min(len(data), at + rng.randint(1, 9))
        ends += scanner.feed(data[at:stop], final=stop == len(data)).tolist()
        at = stop
    assert not scanner.inside
    return len([e for e in ends if e < len(data) - 1]) + 1


@pytest.mark.parametrize("seed", range(4))
def test_the_scanner_finds_the_records_the_csv_parser_reads(seed: int) -> None:
    rng = random.Random(seed)
    checked = 0
    for _ in range(400):
        rows = [",".join(rng.choice(FIELDS) for _ in range(3)) for _ in range(rng.randint(1, 6))]
        data = ("\n".join(rows) + "\n").encode()
        try:
            expected = _records_by_pyarrow(data)
        except Exception:  # a file the parser refuses outright: nothing to agree on
            continue
        assert _records_by_scanner(data, rng) == expected, data
        checked += 1
    assert checked > 200


def test_a_run_of_quotes_split_between_blocks_counts_as_one_run() -> None:
    data = b'a,"x""\n""y",b\nc,d,e\n'  # the doubled quotes are cut apart below
    for cut in range(1, len(data)):
        scanner = RecordScanner(0)
        ends = scanner.feed(data[:cut]).tolist() + scanner.feed(data[cut:], final=True).tolist()
        assert ends == [13, 19], cut
