"""Split-and-merge map over lines on several processes: identical output to one process, by construction.

`map_stream` does the same over a corpus of any size in blocks of `block_lines`, so memory stays bounded (WMT14
En-Fr has 36M pairs): each block is one `map_lines` call.

The lines are cut into one contiguous shard per worker, balanced by characters (tokenizing cost grows with
length); forked workers inherit the shards (no pickling of the input) and send back one list each. Per-line
task queues cost more in inter-process traffic than they gain with few workers (benchmarks/preprocess.py).
"""

from __future__ import annotations

import bisect
import itertools
import multiprocessing as mp
from collections.abc import Callable, Iterable, Iterator

Factory = Callable[[], Callable[[str], str]]
_shared: tuple[Factory, list[list[str]]] | None = None  # set just before forking, read by the workers


def _run_shard(index: int) -> list[str]:
    assert _shared is not None
    factory, shards = _shared
    fn = factory()
    return [fn(line) for line in shards[index]]


def balanced_shards(lines: list[str], n: int) -> list[list[str]]:
    """n contiguous slices of `lines` with about equal total characters."""
    cumulative = list(itertools.accumulate(len(line) + 1 for line in lines))
    total = cumulative[-1] if cumulative else 0
    cuts = [0] + [bisect.bisect_left(cumulative, total * k / n) for k in range(1, n)] + [len(lines)]
    return [lines[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]


def map_lines(factory: Factory, lines: Iterable[str], workers: int = 1, min_lines_per_worker: int = 500) -> list[str]:
    """Apply `factory()` (built once per worker: tokenizers and BPE tables are costly to build) to every line."""
    global _shared
    lines = list(lines)
    workers = max(1, min(workers, len(lines) // min_lines_per_worker))
    if workers == 1:
        fn = factory()
        return [fn(line) for line in lines]
    _shared = (factory, balanced_shards(lines, workers))
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            results = pool.map(_run_shard, range(workers), chunksize=1)
    finally:
        _shared = None
    return [line for shard in results for line in shard]


def blocks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(lines)
    while block := list(itertools.islice(iterator, size)):
        yield block


def map_stream(factory: Factory, lines: Iterable[str], workers: int = 1, block_lines: int = 200_000) -> Iterator[str]:
    """`map_lines` over consecutive blocks: the same output, never more than one block in memory."""
    for block in blocks(lines, block_lines):
        yield from map_lines(factory, block, workers)
