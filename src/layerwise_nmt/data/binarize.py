"""A memory-mappable dataset: all token ids of a split in one flat .npy array, plus sentence offsets.

`<prefix>.tokens.npy` (uint16 when the vocabulary fits, else int32) and `<prefix>.offsets.npy` (int64, n+1 entries).
np.load(mmap_mode="r") opens them without reading them, so every DataLoader worker shares the page cache.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import UserError
from .io import atomic_path, read_lines
from .vocab import Dictionary


def binarize(text_path: str, vocab: Dictionary, prefix: str) -> dict:
    ids: list[int] = []
    offsets = [0]
    unknown = 0
    for number, line in enumerate(read_lines(text_path), start=1):
        if not line.strip():
            raise UserError(f"{text_path}:{number}: empty line; every segment must have at least one token")
        encoded = vocab.encode(line)
        unknown += encoded.count(vocab.unk)
        ids.extend(encoded)
        offsets.append(len(ids))
    dtype = np.uint16 if len(vocab) <= np.iinfo(np.uint16).max else np.int32
    for suffix, array in (("tokens", np.asarray(ids, dtype=dtype)), ("offsets", np.asarray(offsets, np.int64))):
        with atomic_path(f"{prefix}.{suffix}.npy") as tmp, open(tmp, "wb") as f:
            np.save(f, array)
    return {"sentences": len(offsets) - 1, "tokens": len(ids), "unk": unknown}


class IndexedDataset:
    """Read side: dataset[i] is sentence i's ids (with the trailing </s>) as an int64 array."""

    def __init__(self, prefix: str | Path):
        self.tokens = np.load(f"{prefix}.tokens.npy", mmap_mode="r")
        self.offsets = np.load(f"{prefix}.offsets.npy")
        self.sizes = np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> np.ndarray:
        return np.asarray(self.tokens[self.offsets[i] : self.offsets[i + 1]], dtype=np.int64)
