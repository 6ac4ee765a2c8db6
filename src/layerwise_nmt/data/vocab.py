"""Vocabularies in fairseq's `dict.txt` format ("symbol count" per line, specials implicit).

Index order follows fairseq's Dictionary so that users can swap dictionaries between the two:
<s>=0, <pad>=1, </s>=2, <unk>=3, then symbols by descending count (ties alphabetical), padded with
`madeupwordNNNN` to a multiple of `padding_factor` (fairseq's default 8, which keeps GPU matmuls aligned).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from collections.abc import Iterable

from .. import UserError
from .io import atomic_path, read_lines

BOS, PAD, EOS, UNK = "<s>", "<pad>", "</s>", "<unk>"
SPECIALS = (BOS, PAD, EOS, UNK)


PADDING_FACTOR = 8  # fairseq-preprocess's --padding-factor
THRESHOLD = 0  # fairseq-preprocess's --thresholdsrc/--thresholdtgt: keep every symbol seen
ALL_WORDS = -1  # fairseq-preprocess's --nwords -1: no cap on the number of symbols


class Dictionary:
    def __init__(self, symbols: list[str], counts: list[int]):
        self.symbols = list(SPECIALS) + symbols
        self.counts = [1] * len(SPECIALS) + counts
        self.index = {s: i for i, s in enumerate(self.symbols)}
        if len(self.index) != len(self.symbols):
            raise UserError("vocabulary has duplicate symbols")
        self.path: str | Path | None = None  # the file it was loaded from, for messages

    bos, pad, eos, unk = (SPECIALS.index(s) for s in SPECIALS)

    def __len__(self) -> int:
        return len(self.symbols)

    @classmethod
    def build(
        cls, counter: Counter, threshold: int = THRESHOLD, nwords: int = ALL_WORDS, padding_factor: int = PADDING_FACTOR
    ) -> Dictionary:
        ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
        ranked = [(s, c) for s, c in ranked if c >= threshold and s not in SPECIALS]
        if nwords >= 0:
            ranked = ranked[:nwords]
        symbols, counts = [s for s, _ in ranked], [c for _, c in ranked]
        while padding_factor > 1 and (len(symbols) + len(SPECIALS)) % padding_factor:
            symbols.append(f"madeupword{len(symbols) + len(SPECIALS):04d}")
            counts.append(0)
        return cls(symbols, counts)

    @classmethod
    def load(cls, path: str | Path) -> Dictionary:
        symbols, counts = [], []
        for number, line in enumerate(read_lines(path), start=1):
            symbol, _, count = line.rpartition(" ")
            if not symbol or not count.isdigit():
                raise UserError(f"{path}:{number}: expected 'symbol count', got {line!r}")
            symbols.append(symbol)
            counts.append(int(count))
        if not symbols:
            raise UserError(
                f"{path}: no symbols; expected one 'symbol count' line per symbol (`lwnmt vocab` writes it)"
            )
        dictionary = cls(symbols, counts)
        dictionary.path = path
        return dictionary

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            for symbol, count in zip(self.symbols[len(SPECIALS) :], self.counts[len(SPECIALS) :], strict=True):
                f.write(f"{symbol} {count}\n")

    def fingerprint(self) -> str:
        """What a model trained on this dictionary depends on: its symbols in index order (counts aside)."""
        return hashlib.sha256("\n".join(self.symbols).encode("utf-8")).hexdigest()[:16]

    def encode(self, line: str) -> list[int]:
        """Token ids of a line plus </s>, as fairseq-preprocess binarizes it."""
        return [self.index.get(tok, self.unk) for tok in line.split()] + [self.eos]

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.symbols[i] for i in ids if i not in (self.bos, self.pad, self.eos))


def count_tokens(paths: Iterable[str]) -> Counter:
    counter: Counter = Counter()
    for path in paths:
        for line in read_lines(path):
            counter.update(line.split())
    return counter


def load_pair(data_dir: str | Path, src: str, tgt: str) -> tuple[Dictionary, Dictionary]:
    """The (source, target) dictionaries of a binarized data directory: bin-joint → vocab/dict.joint.txt twice,
    bin-separate → vocab/dict.<src>.txt and vocab/dict.<tgt>.txt; a fairseq data directory (or `lwnmt
    import-fairseq`'s output) → its own dict.<src>.txt and dict.<tgt>.txt."""
    own = [Path(data_dir) / f"dict.{lang}.txt" for lang in (src, tgt)]
    if all(path.exists() for path in own):
        return Dictionary.load(own[0]), Dictionary.load(own[1])
    vocab_dir = Path(data_dir).parent / "vocab"
    if Path(data_dir).name not in ("bin-joint", "bin-separate"):
        raise UserError(
            f"--data {data_dir}: expected a binarized data directory, results/<task>/data/bin-joint or "
            f"bin-separate (its dictionaries are in the vocab/ beside it), or a fairseq data directory "
            f"with dict.{src}.txt and dict.{tgt}.txt"
        )
    if Path(data_dir).name == "bin-joint":
        joint = Dictionary.load(vocab_dir / "dict.joint.txt")
        return joint, joint
    return Dictionary.load(vocab_dir / f"dict.{src}.txt"), Dictionary.load(vocab_dir / f"dict.{tgt}.txt")
