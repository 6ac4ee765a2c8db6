"""Fixed batch shapes for training (`bucket_growth_factor`): every batch is (rows, source length, target length)
from a small set, so that a GPU update can be captured as a CUDA graph, or compiled, once per shape instead of once
per batch.

Lengths (with </s>) are padded up to buckets: multiples of `multiple` that grow by at least `growth` from one to the
next, the last one the longest length a model takes (after MLPerf's Transformer, whose fairseq ran with
`--bucket_growth_factor 1.035 --seq-len-multiple 2`). A batch's source and target are padded to their own buckets,
the shorter side to no less than the bucket below the longer one's: at most three shapes per bucket (`all_shapes`),
where free pairs of buckets took twice as many on IWSLT14's lengths for 1.5 points less padding
(docs/benchmarks.md). Its rows are fixed by the longer side: max_tokens // that length, capped by max_sentences, so a
batch never holds more than max_tokens padded tokens, fairseq's measure (sentences × longest side). `make_batches`
packs sentences on their padded lengths; a batch with fewer sentences than its rows gets dummy rows in `collate`,
which count for nothing (`dummy_row`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class FixedShapes:
    """The buckets and rows of one training stage's batches (`training.update_batches.fixed_shapes`)."""

    growth: float  # ≥ 1
    multiple: int
    max_tokens: int | None
    max_sentences: int | None
    longest: int = 1024  # max_positions: a padded length beyond it has no position embedding

    @cached_property
    def lengths(self) -> np.ndarray:
        """The padded lengths, ascending; the last is `longest`."""
        lengths = [self.multiple]
        while lengths[-1] < self.longest:
            grown = math.ceil(lengths[-1] * self.growth / self.multiple) * self.multiple
            lengths.append(max(lengths[-1] + self.multiple, grown))
        lengths[-1] = min(lengths[-1], self.longest)
        return np.array(lengths)

    def padded(self, sizes: np.ndarray) -> np.ndarray:
        """Each length's bucket. Lengths beyond `longest` keep a bucket of their own (`make_batches` refuses them)."""
        sizes = np.asarray(sizes)
        at = np.searchsorted(self.lengths, sizes)
        return np.where(at < len(self.lengths), self.lengths[np.minimum(at, len(self.lengths) - 1)], sizes)

    def rows(self, length: int) -> int:
        """Rows of a batch whose longer side is padded to `length` (one at least: a sentence longer than max_tokens
        is a batch of its own, as in fairseq)."""
        rows = min(self.max_tokens // length if self.max_tokens else math.inf, self.max_sentences or math.inf)
        return max(1, int(rows))

    def shape(self, src_sizes: np.ndarray, tgt_sizes: np.ndarray) -> tuple[int, int, int]:
        """(rows, source length, target length) of the batch of sentences with these lengths."""
        src_len, tgt_len = int(self.padded(np.max(src_sizes))), int(self.padded(np.max(tgt_sizes)))
        longer = max(src_len, tgt_len)
        below = int(self.lengths[max(int(np.searchsorted(self.lengths, longer)) - 1, 0)])
        return self.rows(longer), max(src_len, below), max(tgt_len, below)

    def all_shapes(self) -> list[tuple[int, int, int]]:
        """Every shape a batch can have, ascending: what a CUDA graph or a compiler would prepare."""
        found = []
        for below, length in zip([self.lengths[0], *self.lengths[:-1]], self.lengths, strict=True):
            rows, length, below = self.rows(int(length)), int(length), int(below)
            found += sorted({(rows, length, length), (rows, below, length), (rows, length, below)})
        return found


def dummy_row(eos: int) -> np.ndarray:
    """What fills a batch's missing rows, as source and decoder input: a lone </s>, so that attention has one key to
    look at (an all-pad row would softmax over none: NaN); its target is all padding, which the loss ignores, and
    rows never mix, so it changes neither loss nor gradient."""
    return np.array([eos])


def batching_summary(
    src_sizes: np.ndarray, tgt_sizes: np.ndarray, batches: list[np.ndarray], shapes: FixedShapes | None
) -> dict:
    """How an epoch's batches fill their tensors: the distinct (rows, source, target) shapes, the share of padded
    token slots (source and target) that are padding, and the sentences per batch. shapes None: each batch padded to
    its own longest sentences, one row per sentence (`collate` without shapes)."""
    found, slots, real, sentences = set(), 0, 0, 0
    for ids in batches:
        src, tgt = src_sizes[ids], tgt_sizes[ids]
        shape = shapes.shape(src, tgt) if shapes else (len(ids), int(src.max()), int(tgt.max()))
        found.add(shape)
        slots += shape[0] * (shape[1] + shape[2])
        real += int(src.sum()) + int(tgt.sum())
        sentences += len(ids)
    return {
        "batches": len(batches),
        "shapes": len(found),
        "padding": 1 - real / slots if slots else 0.0,
        "sentences_per_batch": sentences / len(batches) if batches else 0.0,
    }
