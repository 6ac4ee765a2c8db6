"""Moses `clean-corpus-n.perl` semantics (fairseq's every-k-th-line hold-out is in prepare._write_pairs)."""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from collections.abc import Iterable, Iterator

log = logging.getLogger(__name__)
WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class CleanOptions:
    """clean-corpus-n.perl -ratio R CORPUS L1 L2 OUT MIN MAX (fairseq IWSLT14: ratio 1.5, lengths 1..175)."""

    ratio: float = 1.5
    min_len: int = 1
    max_len: int = 175


def normalize(line: str) -> str:
    # clean-corpus-n.perl: s/\|//g; s/\s+/ /g; s/^ //; s/ $//
    return WHITESPACE.sub(" ", line.replace("|", "")).strip(" ")


def clean_pairs(pairs: Iterable[tuple[str, str]], opts: CleanOptions, counts: Counter) -> Iterator[tuple[str, str]]:
    """Yield the pairs clean-corpus-n keeps (normalized as it writes them); `counts` gets the reason per drop."""
    for src, tgt in pairs:
        src, tgt = normalize(src), normalize(tgt)
        counts["read"] += 1
        if not src or not tgt:
            counts["empty"] += 1
            continue
        n_src, n_tgt = src.count(" ") + 1, tgt.count(" ") + 1
        if max(n_src, n_tgt) > opts.max_len:
            counts["too_long"] += 1
        elif min(n_src, n_tgt) < opts.min_len:
            counts["too_short"] += 1
        elif n_src / n_tgt > opts.ratio or n_tgt / n_src > opts.ratio:
            counts["ratio"] += 1
        else:
            counts["kept"] += 1
            yield src, tgt
