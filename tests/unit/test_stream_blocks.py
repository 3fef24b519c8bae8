"""`sluice stream` reads its pipe in blocks of whole lines: no line is cut between blocks, the
last line counts without its newline (blank or not), a byte order mark opening the input is
not part of line 1, each block knows its first line's number, and once told to stop the reader
hands on what it has read and keeps a line read in part aside."""

from __future__ import annotations

import os
import threading

from sluice.codecs.lines import BOM, count_lines, lines_of
from sluice.stream.pipe import PipeReader


def _read(data: bytes, block_bytes: int, *, step: int = 5) -> tuple[PipeReader, list[tuple[int, bytes]]]:
    read, write = os.pipe()

    def feed() -> None:
        for at in range(0, len(data), step):  # in small writes, so reads end mid-line
            os.write(write, data[at : at + step])
        os.close(write)

    writer = threading.Thread(target=feed)
    writer.start()
    reader = PipeReader(read, max_wait_s=30.0, block_bytes=block_bytes)
    try:
        return reader, list(reader)
    finally:
        writer.join()
        os.close(read)


def _lines(blocks: list[tuple[int, bytes]]) -> list[bytes]:
    return [line for _, block in blocks for line in lines_of(block)]


def test_blocks_hold_whole_lines_and_the_last_line_needs_no_newline() -> None:
    lines = [f'{{"id": {n}, "pad": "{"x" * n}"}}'.encode() for n in range(40)]
    data = b"\n".join(lines) + b"\n" + b'{"id": "last"}'
    reader, blocks = _read(data, block_bytes=64)
    assert len(blocks) > 5 and all(b.endswith(b"\n") for _, b in blocks[:-1])
    assert _lines(blocks) == [*lines, b'{"id": "last"}']
    assert [first for first, _ in blocks] == [1 + sum(count_lines(b) for _, b in blocks[:i]) for i in range(len(blocks))]
    assert reader.lines == 41 and not reader.stopped and reader.cut == b""


def test_a_blank_tail_is_a_line_as_a_blank_line_inside_is() -> None:
    reader, blocks = _read(b'{"a": 1}\n\n{"b": 2}\n  ', block_bytes=1 << 20)
    assert _lines(blocks) == [b'{"a": 1}', b"", b'{"b": 2}', b"  "]
    assert reader.lines == 4
    _, ended = _read(b'{"a": 1}\n', block_bytes=1 << 20)
    assert _lines(ended) == [b'{"a": 1}']  # the newline ends the last line: none after it


def test_a_byte_order_mark_opens_the_input_but_is_no_part_of_line_1() -> None:
    for step in (1, 2, 5):  # the mark may come in pieces
        _, blocks = _read(BOM + b'{"a": 1}\n' + BOM + b'{"b": 2}\n', block_bytes=1 << 20, step=step)
        assert _lines(blocks) == [b'{"a": 1}', BOM + b'{"b": 2}']  # elsewhere it is a byte like any
    reader, alone = _read(BOM, block_bytes=1 << 20)
    assert alone == [] and reader.lines == 0
    _, almost = _read(BOM[:2], block_bytes=1 << 20)
    assert _lines(almost) == [BOM[:2]]  # not a mark: a line


def test_once_stopped_it_hands_on_the_whole_lines_read_and_keeps_the_cut_one_aside() -> None:
    read, write = os.pipe()
    stop_read, stop_write = os.pipe()
    try:
        os.write(write, b'{"a": 1}\n{"b": 2}\n{"c": ')  # the producer is still writing line 3
        reader = PipeReader(read, max_wait_s=3600.0, stop_fd=stop_read)
        blocks: list[tuple[int, bytes]] = []
        consumer = threading.Thread(target=lambda: blocks.extend(reader))
        consumer.start()
        while reader.lines < 2 and consumer.is_alive():  # it has read them, and waits for more (or its wait to pass)
            threading.Event().wait(0.01)
        os.write(stop_write, b"\0")  # as the first signal does; the pipe stays open
        consumer.join()
        assert blocks == [(1, b'{"a": 1}\n{"b": 2}\n')]
        assert reader.stopped and reader.cut == b'{"c": ' and reader.lines == 3
    finally:
        for fd in (read, write, stop_read, stop_write):
            os.close(fd)
