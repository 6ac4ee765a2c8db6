"""Parallel data for training and decoding: binarized splits, fairseq-style token-count batches, padding.

fairseq's `--max-tokens` semantics: sentences are ordered by (target length, source length) after a seeded random
tie-break, packed greedily so that (number of sentences) × (longest sentence, source or target) ≤ max_tokens, and
the list of batches is shuffled each epoch with seed + epoch. One known difference: fairseq 0.12's code, despite
its comment, sorts by source length first (docs/benchmarks.md). `--max-sentences` caps sentences per batch (MLRF
trains with batches of 80 and then 32 sentences).

With `shapes` (batch_shapes.py), batches take their shapes from a small fixed set instead: sentences are sorted and
packed on their lengths padded to buckets, and `collate` pads each batch to its shape, dummy rows included.

Also here: merging an update's batches into fewer, larger passes (`merge_batches`) and collating them on a background
thread ahead of the step (`Prefetcher`), pinned for an asynchronous copy when the model is on a GPU.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from .. import UserError
from .batch_shapes import FixedShapes, dummy_row
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

    @cached_property
    def sizes(self) -> np.ndarray:
        """Each pair's longer side, in tokens: what a batch's padded size counts."""
        return np.maximum(self.src.sizes, self.tgt.sizes)

    def num_tokens(self, i: int) -> int:
        return max(self.src.sizes[i], self.tgt.sizes[i])


def make_batches(
    src_sizes: np.ndarray,
    tgt_sizes: np.ndarray,
    max_tokens: int | None,
    max_sentences: int | None,
    seed: int,
    max_positions: int = 1024,
    skip_longer_than: int = 0,
    shapes: FixedShapes | None = None,
) -> list[np.ndarray]:
    """Length-sorted batches of sentence indices (fixed for a dataset and seed; shuffle them per epoch).
    skip_longer_than: leave out pairs with more than this many subword units on either side (</s> not counted;
    MLRF's "more than 100 sub-word units"); 0 keeps every pair. shapes: sort and pack on the padded lengths, so that
    no batch outgrows the rows its shape has (`FixedShapes.rows`)."""
    if not max_tokens and not max_sentences:
        raise UserError("set max_tokens or max_sentences (or both)")
    sizes = np.maximum(src_sizes, tgt_sizes)
    keep = sizes - 1 <= skip_longer_than if skip_longer_than else np.ones(len(sizes), dtype=bool)
    too_long = np.flatnonzero(keep & (sizes > max_positions))
    if len(too_long):
        raise UserError(
            f"{len(too_long)} sentence pairs are longer than max_positions={max_positions} "
            f"(e.g. pair {too_long[0]} with {sizes[too_long[0]]} tokens); filter them or raise the limit"
        )
    if shapes is not None:  # sentences of one bucket are equals: the seeded order alone sorts them
        src_sizes, tgt_sizes = shapes.padded(src_sizes), shapes.padded(tgt_sizes)
        sizes = np.maximum(src_sizes, tgt_sizes)
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
    parts: int = 1  # how many of the configured batches were merged into this one (`merge_batches`)

    def to(self, device) -> Batch:
        """On `device`. non_blocking: from pinned memory (`pin_memory`) the copy to a GPU is queued behind the
        running kernels instead of waiting for them (a blocking copy synchronises the stream); from pageable memory
        it is staged at once, and CPU to CPU is no copy at all, so it is safe everywhere."""
        src, prev, tgt = (t.to(device, non_blocking=True) for t in (self.src, self.prev, self.tgt))
        return Batch(src, prev, tgt, self.ids, self.ntokens, self.parts)

    def pin_memory(self) -> Batch:
        """In page-locked host memory, which a GPU can copy from asynchronously (needs CUDA)."""
        return Batch(
            self.src.pin_memory(), self.prev.pin_memory(), self.tgt.pin_memory(), self.ids, self.ntokens, self.parts
        )


def pad(seqs: list[np.ndarray], pad_id: int, shape: tuple[int, int] | None = None) -> torch.Tensor:
    """The sequences as rows, right-padded to the longest, or to `shape` (rows beyond them all padding)."""
    out = torch.full(shape or (len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for row, seq in enumerate(seqs):
        out[row, : len(seq)] = torch.from_numpy(seq)
    return out


def collate(
    data: ParallelData, ids: np.ndarray, pad_id: int = 1, eos: int = 2, shapes: FixedShapes | None = None
) -> Batch:
    """The sentences `ids` as a batch padded to its longest source and target, or with `shapes` to the batch's
    fixed shape, whose missing rows are `dummy_row`s: `ids` and `ntokens` count the real sentences only."""
    return batch_of([data.src[i] for i in ids], [data.tgt[i] for i in ids], ids, pad_id, eos, shapes)


def batch_of(
    srcs: list[np.ndarray],
    tgts: list[np.ndarray],
    ids: np.ndarray,
    pad_id: int = 1,
    eos: int = 2,
    shapes: FixedShapes | None = None,
) -> Batch:
    """`collate`'s batch of these source and target sentences (each ending with </s>)."""
    prevs = [np.concatenate([[eos], t[:-1]]) for t in tgts]
    ntokens = int(sum(len(t) for t in tgts))
    if shapes is None:
        return Batch(pad(srcs, pad_id), pad(prevs, pad_id), pad(tgts, pad_id), ids, ntokens)
    rows, src_len, tgt_len = shapes.shape(np.array([len(s) for s in srcs]), np.array([len(t) for t in tgts]))
    dummies = [dummy_row(eos)] * (rows - len(ids))
    return Batch(
        pad(srcs + dummies, pad_id, (rows, src_len)),
        pad(prevs + dummies, pad_id, (rows, tgt_len)),
        pad(tgts, pad_id, (rows, tgt_len)),
        ids,
        ntokens,
    )


def merge_batches(batches: list[np.ndarray], sizes: np.ndarray, budget: int) -> list[tuple[np.ndarray, int]]:
    """An update's batches of sentence ids merged into fewer, larger ones of at most `budget` padded tokens
    ((sentences) × (longest sentence, source or target), `make_batches`'s measure); returns (ids, how many batches
    were merged) pairs. The same sentences, each once: the update's tokens do not change, only how many
    forward/backward passes carry them. Batches are taken shortest first, so that similar lengths share a pass and
    little of it is padding; one larger than the budget stays alone."""
    longest = [int(sizes[ids].max()) for ids in batches]
    merged: list[tuple[np.ndarray, int]] = []
    ids: list[np.ndarray] = []
    parts, width = 0, 0
    for i in sorted(range(len(batches)), key=longest.__getitem__):
        wider = max(width, longest[i])
        if parts and (sum(map(len, ids)) + len(batches[i])) * wider > budget:
            merged.append((np.concatenate(ids), parts))
            ids, parts, wider = [], 0, longest[i]
        ids, parts, width = ids + [batches[i]], parts + 1, wider
    return merged + [(np.concatenate(ids), parts)] if ids else merged


_DONE = object()


class Prefetcher:
    """`make(key)` for each key, computed on a background thread up to `depth` keys ahead of the consumer and
    yielded as (key, value) in the keys' order: the next update's batches are collated (and pinned) while the
    current update computes. collate draws no random numbers, so the RNG state a checkpoint records, and with it a
    resume, does not depend on how far ahead the thread got.

    A thread rather than torch's DataLoader: its in-process mode (num_workers=0) does not run ahead, and a worker
    process costs a start per epoch and a second process on a small CPU, for work (indexing an mmap'ed array,
    padding) that mostly runs in numpy and torch outside the GIL. Leave it with `close()` (or a `with` block): the
    thread stops after the item it is making."""

    def __init__(self, make: Callable, keys: Iterable, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(make, keys), name="prefetch-batches", daemon=True)
        self._thread.start()

    def _fill(self, make: Callable, keys: Iterable) -> None:
        try:
            for key in keys:
                if self._stop.is_set():
                    return
                self._queue.put((key, make(key)))
        except BaseException as err:  # handed to the consumer, which raises it where the item was expected
            self._queue.put(err)
            return
        self._queue.put(_DONE)

    def __iter__(self) -> Iterator:
        while (item := self._queue.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Stop the thread: emptying the queue releases a blocked put(), after which it sees the stop flag (one
        more put fits in the emptied queue)."""
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
