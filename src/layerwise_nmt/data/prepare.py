"""The preprocessing steps the workflow runs, one function per Snakemake rule (fairseq's prepare-iwslt14.sh order):

    tokenize (per raw file and side) → assemble (pair, clean, hold out, concatenate: train/valid/test)
    → learn BPE → apply BPE → vocabularies → binarize
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

from .. import UserError
from . import bpe, clean, readers
from .binarize import binarize
from .io import atomic_path, read_lines, write_lines
from .parallel import map_lines
from .tokenize import TokenizeOptions
from .vocab import Dictionary, count_tokens

log = logging.getLogger(__name__)


def tokenize_file(raw: str, out: str, fmt: str, options: TokenizeOptions, workers: int = 1) -> int:
    segments, _ = readers.READERS[fmt](raw)
    n = write_lines(out, map_lines(options.build, segments, workers))
    log.info("tokenized %d segments of %s → %s", n, raw, out)
    return n


def assemble(splits: dict, outputs: dict, stats_out: str) -> dict:
    """Build train/valid/test text from tokenized parts.

    splits[split] = {parts: [(raw_src, raw_tgt, tok_src, tok_tgt, format), ...], clean: {...}, hold_out_every: k};
    outputs[split] = (src_path, tgt_path). Pairing is checked on the raw files (equal counts, matching <seg> ids).
    """
    stats: dict = {}
    texts: dict[str, list[tuple[str, str]]] = {}
    for split in ("train", "valid", "test"):
        spec = splits[split]
        if spec.get("hold_out_every"):
            continue
        pairs: list[tuple[str, str]] = []
        for raw_src, raw_tgt, tok_src, tok_tgt, fmt in spec["parts"]:
            n_raw = len(readers.read_parallel(raw_src, raw_tgt, fmt)[0])
            side_src, side_tgt = list(read_lines(tok_src)), list(read_lines(tok_tgt))
            for path, side in ((tok_src, side_src), (tok_tgt, side_tgt)):
                if len(side) != n_raw:
                    raise UserError(f"{path} has {len(side)} lines, expected {n_raw} (one per segment of its raw "
                                    f"file); delete it and re-run")
            pairs.extend(zip(side_src, side_tgt))
        if spec.get("max_lines"):  # CI-sized runs: the first N segments only
            pairs = pairs[: spec["max_lines"]]
        counts: Counter = Counter()
        if spec.get("clean") is not None:
            pairs = list(clean.clean_pairs(pairs, clean.CleanOptions(**spec["clean"]), counts))
        elif split == "train":
            kept = [(s, t) for s, t in pairs if s.strip() and t.strip()]
            counts.update(read=len(pairs), empty=len(pairs) - len(kept), kept=len(kept))
            pairs = kept
        else:
            _require_nonempty(pairs, spec["parts"], split)
            counts.update(read=len(pairs), kept=len(pairs))
        for reason in ("empty", "too_long", "too_short", "ratio"):
            if counts[reason]:
                log.warning("%s: dropped %d pairs (%s)", split, counts[reason], reason.replace("_", " "))
        texts[split] = pairs
        stats[split] = dict(counts)
    for split in ("valid", "test"):
        k = splits[split].get("hold_out_every")
        if k:  # prepare-iwslt14.sh: every k-th cleaned training line is validation, the rest is train
            train = texts["train"]
            texts[split] = list(clean.every_kth(train, k, held_out=True))
            texts["train"] = list(clean.every_kth(train, k, held_out=False))
            stats[split] = {"held_out_of_train_every": k, "kept": len(texts[split])}
    stats["train"]["after_hold_out"] = len(texts["train"])
    for split, pairs in texts.items():
        write_lines(outputs[split][0], (s for s, _ in pairs))
        write_lines(outputs[split][1], (t for _, t in pairs))
        log.info("%s: %d pairs", split, len(pairs))
    with atomic_path(stats_out) as tmp:
        Path(tmp).write_text(json.dumps(stats, indent=2) + "\n")
    return stats


def _require_nonempty(pairs, part_files, split: str) -> None:
    for number, (s, t) in enumerate(pairs, start=1):
        if not s.strip() or not t.strip():
            files = ", ".join(p[2] if not s.strip() else p[3] for p in part_files)
            raise UserError(f"{split} line {number} (of {files}): empty segment; evaluation sets must not have "
                            f"empty lines (remove the pair from both sides)")


def learn_bpe(train_files: list[str], codes: str, merges: int, min_frequency: int = 2) -> None:
    bpe.learn(train_files, codes, merges, min_frequency)
    log.info("learned %d BPE merges from %s → %s", merges, " + ".join(train_files), codes)


def apply_bpe(codes: str, text: str, out: str, workers: int = 1) -> int:
    return write_lines(out, bpe.apply(codes, list(read_lines(text)), workers))


def build_vocab(texts: list[str], out: str, padding_factor: int = 8, threshold: int = 0) -> int:
    vocab = Dictionary.build(count_tokens(texts), threshold=threshold, padding_factor=padding_factor)
    vocab.save(out)
    log.info("vocabulary of %d symbols (with 4 specials) from %s → %s", len(vocab), " + ".join(texts), out)
    return len(vocab)


def binarize_file(text: str, vocab_path: str, prefix: str) -> dict:
    stats = binarize(text, Dictionary.load(vocab_path), prefix)
    log.info("binarized %s: %d sentences, %d tokens, %d <unk>", text, stats["sentences"], stats["tokens"],
             stats["unk"])
    return stats
