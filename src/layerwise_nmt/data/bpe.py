"""Byte-pair encoding with subword-nmt (learn on the training text; apply on all splits, in parallel)."""

from __future__ import annotations

import codecs
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator

from subword_nmt.apply_bpe import BPE
from subword_nmt.learn_bpe import learn_bpe as _learn_bpe

from .. import UserError
from .io import atomic_path, read_lines
from .parallel import blocks, map_lines


MIN_FREQUENCY = 2  # subword-nmt learn_bpe's --min-frequency: a pair seen less often is never merged


def learn(train_files: Iterable[str], codes_out: str, merges: int, min_frequency: int = MIN_FREQUENCY) -> None:
    """Joint BPE as prepare-iwslt14.sh does it: `cat train.L1 train.L2 | learn_bpe.py -s MERGES`."""
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as joined:
        for path in train_files:
            with open(path, "rb") as f:
                shutil.copyfileobj(f, joined)
    try:
        with open(joined.name, "rb") as text:
            has_words = any(line.strip() for line in text)
        if not has_words:
            raise UserError(
                f"{' + '.join(map(str, train_files))}: no words to learn BPE from; expected the training text"
            )
        with (
            atomic_path(codes_out) as tmp,
            codecs.open(joined.name, encoding="utf-8") as src,
            codecs.open(tmp, "w", encoding="utf-8") as dst,
        ):
            _learn_bpe(src, dst, merges, min_frequency=min_frequency)
    except UnicodeDecodeError:
        for path in train_files:  # which file and line (read_lines names them); only on failure, the corpus is large
            for _ in read_lines(path):
                pass
        raise
    finally:
        os.unlink(joined.name)


def check_codes(codes: str) -> None:
    """A UserError naming the file and line when `codes` is not a BPE codes file (subword-nmt would exit with a
    message that names neither, or a traceback for a binary file)."""
    for number, line in enumerate(read_lines(codes), start=1):
        if number == 1 and line.startswith("#version"):
            continue
        if len([unit for unit in line.strip("\r\n ").split(" ") if unit]) != 2:
            raise UserError(
                f"{codes}:{number}: {line[:60]!r} is not a merge; expected two symbols separated by a space "
                f"(a codes file from `lwnmt learn-bpe` or subword-nmt's learn_bpe.py)"
            )


class Segmenter:
    """Factory for `parallel.map_lines` over single words: each worker loads the codes once."""

    def __init__(self, codes: str, separator: str = "@@"):
        self.codes, self.separator = codes, separator

    def __call__(self):
        with codecs.open(self.codes, encoding="utf-8") as f:
            bpe = BPE(f, separator=self.separator)
        return lambda word: " ".join(bpe.segment_tokens([word]))


def apply(
    codes: str, lines: Iterable[str], workers: int = 1, separator: str = "@@", block_lines: int = 200_000
) -> Iterator[str]:
    """`apply_bpe.py -c codes` on every line, identical output, with each distinct word segmented once.

    subword-nmt segments words independently (it splits lines on single spaces), so the distinct words are
    segmented in parallel and lines are then rebuilt by lookup: this beats splitting the lines
    (benchmarks/preprocess.py), where every worker would re-segment the words its shard shares with the others. Lines
    are read in blocks; the word table grows to the corpus vocabulary, the lines never stay in memory.
    """
    check_codes(codes)
    table: dict[str, str] = {}
    for block in blocks(lines, block_lines):
        cores = [line.strip("\r\n ") for line in block]  # process_line keeps surrounding whitespace as it was
        new = list(dict.fromkeys(w for core in cores for w in core.split(" ") if w and w not in table))
        table.update(zip(new, map_lines(Segmenter(codes, separator), new, workers), strict=True))
        for line, core in zip(block, cores, strict=True):
            head = line[: len(line) - len(line.lstrip("\r\n "))]
            tail = line[len(line.rstrip("\r\n ")) :] if core else ""
            yield head + " ".join(table[word] for word in core.split(" ") if word) + tail
