"""Text rows that remember where they came from: a batch job's text column as Parquet stores
it, a dictionary of distinct values and each row's index in it.

`CodedText` is an object array of the rows' strings (what every other part of sluice reads)
that also keeps `codes` (each row's index) and `dictionary` (the distinct values, an Arrow
string array). A lookup keyed by such a column finds each distinct value once and spreads the
answer to the rows by their codes (`sluice.runtimes.lookups`), instead of one key at a time.

Rows taken from it along its one axis (a slice, a mask, an index array) keep their codes;
anything else made from it (a reshape, a copy, a ufunc's answer) is a plain array of the same
strings with `codes` None, which every reader treats as text without codes.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class CodedText(np.ndarray):  # type: ignore[type-arg]
    """`self[i] == dictionary[codes[i]]` (as a Python string) for every row i."""

    codes: np.ndarray | None = None
    dictionary: Any = None  # a pyarrow string array

    @classmethod
    def of(cls, values: np.ndarray, codes: np.ndarray, dictionary: Any) -> CodedText:
        """`values`: the rows' strings (an object array, `dictionary`'s values at `codes`)."""
        out = values.view(cls)
        out.codes, out.dictionary = codes, dictionary
        return out

    def __array_finalize__(self, obj: Any) -> None:
        self.codes = self.dictionary = None  # a view or a copy made otherwise than by __getitem__

    def __getitem__(self, at: Any) -> Any:
        out = super().__getitem__(at)
        if isinstance(out, CodedText) and self.codes is not None and self.ndim == 1 and out.ndim == 1:
            out.codes, out.dictionary = self.codes[at], self.dictionary
        return out

    def __reduce__(self) -> Any:  # pickled as the plain array of its strings
        return np.asarray(self).__reduce__()


def coded(array: np.ndarray) -> CodedText | None:
    """`array` where it is text rows with their codes, else None."""
    return array if isinstance(array, CodedText) and array.codes is not None and array.ndim == 1 else None
