"""Parallel data for training and decoding: binarized splits, fairseq-style token-count batches, padding.

fairseq's `--max-tokens` semantics: sentences are ordered by (target length, source length) after a seeded random
tie-break, packed greedily so that (number of sentences) × (longest sentence, source or target) ≤ max_tokens, and
the list of batches is shuffled each epoch with seed + epoch. One known difference: fairseq 0.12's code, despite
its comment, sorts by source length first (docs/benchmarks.md). `--max-sentences` caps sentences per batch (MLRF
trains with batches of 80 and then 32 sentences).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .. import UserError
from .binarize import IndexedDataset


class ParallelData:
    def __init__(self, data_dir: str | Path, split: str, src: str, tgt: str):
        prefix = Path(data_dir) / f"{split}.{src}-{tgt}"
        self.src = IndexedDataset(f"{prefix}.{src}")
        self.tgt = IndexedDataset(f"{prefix}.{tgt}")
        if len(self.src) != len(self.tgt):
            raise UserError(f"{prefix}.{{{src},{tgt}}}: {len(self.src)} source vs {len(self.tgt)} target sentences")

    def __len__(self) -> int:
        return len(self.src)

    def num_tokens(self, i: int) -> int:
        return max(self.src.sizes[i], self.tgt.sizes[i])


def make_batches(src_sizes: np.ndarray, tgt_sizes: np.ndarray, max_tokens: int | None, max_sentences: int | None,
                 seed: int, max_positions: int = 1024, skip_longer_than: int = 0) -> list[np.ndarray]:
    """Length-sorted batches of sentence indices (fixed for a dataset and seed; shuffle them per epoch).
    skip_longer_than: leave out pairs with more than this many subword units on either side (</s> not counted;
    MLRF's "more than 100 sub-word units"); 0 keeps every pair."""
    if not max_tokens and not max_sentences:
        raise UserError("set max_tokens or max_sentences (or both)")
    sizes = np.maximum(src_sizes, tgt_sizes)
    keep = sizes - 1 <= skip_longer_than if skip_longer_than else np.ones(len(sizes), dtype=bool)
    too_long = np.flatnonzero(keep & (sizes > max_positions))
    if len(too_long):
        raise UserError(f"{len(too_long)} sentence pairs are longer than max_positions={max_positions} "
                        f"(e.g. pair {too_long[0]} with {sizes[too_long[0]]} tokens); filter them or raise the limit")
    order = np.random.RandomState(seed).permutation(len(sizes))
    order = order[keep[order]]
    order = order[np.lexsort((src_sizes[order], tgt_sizes[order]))]  # by target, then source length
    batches, start, longest = [], 0, 0
    for end, i in enumerate(order):
        longest_with = max(longest, sizes[i])
        n = end - start + 1
        full = (max_tokens and n * longest_with > max_tokens) or (max_sentences and n > max_sentences)
        if full and n > 1:
            batches.append(order[start:end])
            start, longest_with = end, sizes[i]
        longest = longest_with
    batches.append(order[start:])
    return batches


def epoch_order(batches: list[np.ndarray], seed: int, epoch: int) -> list[np.ndarray]:
    rng = np.random.RandomState((seed + epoch) % 2**32)
    return [batches[i] for i in rng.permutation(len(batches))]


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) right-padded, ends with </s>
    prev: torch.Tensor  # (B, T) decoder input: </s> + target[:-1] (fairseq's prev_output_tokens)
    tgt: torch.Tensor  # (B, T) target, ends with </s>, pad elsewhere
    ids: np.ndarray
    ntokens: int  # non-pad target tokens

    def to(self, device) -> "Batch":
        return Batch(self.src.to(device), self.prev.to(device), self.tgt.to(device), self.ids, self.ntokens)


def pad(seqs: list[np.ndarray], pad_id: int) -> torch.Tensor:
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for row, seq in enumerate(seqs):
        out[row, : len(seq)] = torch.from_numpy(seq)
    return out


def collate(data: ParallelData, ids: np.ndarray, pad_id: int = 1, eos: int = 2) -> Batch:
    src = pad([data.src[i] for i in ids], pad_id)
    tgts = [data.tgt[i] for i in ids]
    tgt = pad(tgts, pad_id)
    prev = pad([np.concatenate([[eos], t[:-1]]) for t in tgts], pad_id)
    return Batch(src, prev, tgt, ids, int(sum(len(t) for t in tgts)))
