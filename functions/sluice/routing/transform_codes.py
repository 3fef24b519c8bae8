"""A transform's vocabularies and hashes (`one_hot`, `ordinal`, `hash`, `sluice.routing.transforms`):
each value's code read in C where the vocabulary is text, the distinct values of a column, and
the stable bucket of a value, the same in every process."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

MORE_CODES = 1024  # text outside a vocabulary remembered per op (a bound, whatever the traffic)


class Codes(dict):  # type: ignore[type-arg]
    """A text vocabulary's codes by value, read in C (`codes[value]`). A value it does not
    hold (a word outside it, bytes, a number) is read as text once and given its code or
    `unknown`; text and bytes are remembered, up to MORE_CODES of them."""

    __slots__ = ("most", "unknown")

    def __init__(self, vocabulary: list[str], codes: Any, unknown: Any) -> None:
        super().__init__(zip(vocabulary, codes, strict=True))
        self.unknown = unknown
        self.most = len(vocabulary) + MORE_CODES

    def __missing__(self, value: Any) -> Any:
        text = text_of(value)
        code = self.unknown if text is value else self.get(text, self.unknown)
        if type(value) in (str, bytes) and len(self) < self.most:  # never a number: 1 == 1.0 == True
            self[value] = code
        return code

    def lookup(self, x: np.ndarray, dtype: Any) -> np.ndarray:
        values = x.reshape(-1).tolist()
        try:
            return np.fromiter(map(self.__getitem__, values), dtype=dtype, count=len(values))
        except TypeError:  # a value that is not hashable: read as text
            return np.array([self[text_of(v)] for v in values], dtype=dtype)


def text_of(value: Any) -> str:
    """A value as text: bytes as UTF-8, and bytes that are not UTF-8 kept byte for byte
    (`surrogateescape`: two such values stay two, none in any vocabulary; it was a 500)."""
    return value if type(value) is str else value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def positions(op: Any, x: np.ndarray, text: Codes | None) -> np.ndarray:
    """Each row's index in the op's vocabulary, -1 for a value not in it."""
    if text is not None and x.dtype == object:
        return text.lookup(x, np.int64)
    values, inverse = distinct(x)
    found = np.array([op.index.get(v, -1) for v in values], dtype=np.int64)
    return found[inverse] if len(values) else np.empty(0, dtype=np.int64)


def distinct(x: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """Each distinct value once (text as str) and, per row, the index of its value."""
    flat = x.reshape(-1)
    if flat.dtype == object:
        flat = np.array([text_of(v) for v in flat], dtype=object) if flat.size else flat
        # As Python's str, compared whole: NumPy's fixed-width text (`astype(str)`) drops
        # trailing NULs, and "a\0" would be "a".
        values, inverse = np.unique(flat, return_inverse=True)
    else:
        values, inverse = np.unique(flat, return_inverse=True)
    return values.tolist(), inverse.reshape(-1)


def stable_bucket(value: Any, buckets: int) -> int:
    """BLAKE2b of the value's text, as an unsigned 64-bit number, modulo `buckets`."""
    digest = hashlib.blake2b(str(value).encode("utf-8", "surrogateescape"), digest_size=8).digest()  # text_of's bytes as they came
    return int.from_bytes(digest, "little") % buckets
