"""`sluice stream` reads its pipe in blocks of whole lines: no line is cut between blocks, the
last line counts without its newline, and each block knows its first line's number."""

from __future__ import annotations

import os
import threading

from sluice.cli.stream import _numbered, lines_of, read_blocks


def _blocks(data: bytes, block_bytes: int) -> list[bytes]:
    read, write = os.pipe()

    def feed() -> None:
        for at in range(0, len(data), 5):  # in small writes, so reads end mid-line
            os.write(write, data[at : at + 5])
        os.close(write)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        return list(read_blocks(read, max_wait_s=30.0, block_bytes=block_bytes))
    finally:
        writer.join()
        os.close(read)


def test_blocks_hold_whole_lines_and_the_last_line_needs_no_newline() -> None:
    lines = [f'{{"id": {n}, "pad": "{"x" * n}"}}'.encode() for n in range(40)]
    data = b"\n".join(lines) + b"\n" + b'{"id": "last"}'
    blocks = _blocks(data, block_bytes=64)
    assert len(blocks) > 5 and all(b.endswith(b"\n") for b in blocks[:-1])
    assert [line for block in blocks for line in lines_of(block)] == [*lines, b'{"id": "last"}']
    numbered = list(_numbered(iter(blocks)))
    assert [first for first, _ in numbered] == [1 + sum(len(lines_of(b)) for b in blocks[:i]) for i in range(len(blocks))]


def test_a_blank_tail_is_no_line_but_a_blank_line_inside_is() -> None:
    blocks = _blocks(b'{"a": 1}\n\n{"b": 2}\n  ', block_bytes=1 << 20)
    assert [line for block in blocks for line in lines_of(block)] == [b'{"a": 1}', b"", b'{"b": 2}']
