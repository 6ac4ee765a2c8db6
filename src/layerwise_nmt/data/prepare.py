"""The preprocessing steps the workflow runs, one function per Snakemake rule (fairseq's prepare-iwslt14.sh order):

tokenize (per raw file and side) → assemble (pair, clean, hold out, concatenate: train/valid/test)
→ learn BPE → apply BPE → vocabularies → binarize
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import time
from collections import Counter
from pathlib import Path
from collections.abc import Iterable, Iterator

from .. import UserError
from . import bpe, clean, readers
from .binarize import binarize
from .checksums import first_use
from .io import atomic_path, count_lines, read_lines, write_lines
from .parallel import map_stream
from .tokenize import TokenizeOptions
from .vocab import ALL_WORDS, PADDING_FACTOR, THRESHOLD, Dictionary, count_tokens

log = logging.getLogger(__name__)


def tokenize_file(
    raw: str, out: str, fmt: str, options: TokenizeOptions, workers: int = 1, normalize_only: bool = False
) -> int:
    """Tokenize (or, with normalize_only, only normalise: the references of detokenized BLEU, all of them for a
    multi-reference set) a raw file."""
    segments = readers.read_all_references(raw, fmt) if normalize_only else readers.READERS[fmt](raw)[0]
    if not normalize_only:
        log_tokenizer(options, raw)
    build = functools.partial(options.build, normalize_only=normalize_only)
    n = write_lines(out, progress(map_stream(build, segments, workers), f"tokenize {Path(raw).name}"))
    log.info("%s %d segments of %s → %s", "normalised" if normalize_only else "tokenized", n, raw, out)
    return n


def log_tokenizer(options: TokenizeOptions, raw: str) -> None:
    """What the log must say about a side's tokenizer: skipped (already tokenized), or Moses without rules of its
    own for the language."""
    if options.tokenizer == "none":
        log.info(
            "%s: tokenizer none: the text comes tokenized (or BPE-segmented); only its whitespace is normalised", raw
        )
    elif options.tokenizer == "moses" and not moses_knows(options.lang):
        log.warning(
            "the Moses tokenizer has no rules for language %r: its default rules are used (English "
            "nonbreaking prefixes, as tokenizer.perl falls back to)",
            options.lang,
        )


def moses_knows(lang: str) -> bool:
    from sacremoses.corpus import NonbreakingPrefixes

    return lang in NonbreakingPrefixes().available_langs.values()


def progress(lines: Iterable[str], what: str, every: int = 1_000_000) -> Iterator[str]:
    """Log a line count with lines/s every `every` lines (the rules' logs show how far a big corpus got)."""
    start = time.perf_counter()
    for n, line in enumerate(lines, start=1):
        if n % every == 0:
            log.info("%s: %d lines (%.0f lines/s)", what, n, n / (time.perf_counter() - start))
        yield line


def assemble(splits: dict, outputs: dict, stats_out: str) -> dict:
    """Build train/valid/test text from tokenized parts, streaming (no split is held in memory).

    splits[split] = {parts: [(raw_src, raw_tgt, tok_src, tok_tgt, format), ...], clean: {...}, hold_out_every: k,
    max_lines: n}; outputs[split] = (src_path, tgt_path). Pairing is checked on the raw files (equal counts,
    matching <seg> ids) and every tokenized file must have one line per raw segment.
    """
    stats: dict = {}
    held_out = {split: spec["hold_out_every"] for split, spec in splits.items() if spec.get("hold_out_every")}
    for split in sorted(splits, key=lambda name: name != "train"):  # train first: held-out splits come from it
        spec = splits[split]
        if split in held_out:
            continue
        counts: Counter = Counter()
        pairs: Iterator[tuple[str, str]] = itertools.islice(_paired_lines(spec["parts"]), spec.get("max_lines"))
        empty = spec.get("empty_lines", "drop" if split == "train" else "refuse")
        if empty == "refuse":
            pairs = _require_nonempty(pairs, spec["parts"], split, Counter() if spec.get("clean") else counts)
        if spec.get("clean") is not None:
            pairs = clean.clean_pairs(pairs, clean.CleanOptions(**spec["clean"]), counts)
        elif empty == "drop":
            pairs = _drop_empty(pairs, counts)
        if split == "train" and held_out:  # prepare-iwslt14.sh: every k-th cleaned training line is validation
            ((other, k),) = held_out.items()
            kept, held = _write_pairs(pairs, outputs["train"], (k, outputs[other]))
            stats[other] = {"held_out_of_train_every": k, "kept": held}
            counts["after_hold_out"] = kept
        else:
            kept = _write_pairs(pairs, outputs[split])[0]
            if split == "train":
                counts["after_hold_out"] = kept
        for reason in ("empty", "too_long", "too_short", "ratio"):
            if counts[reason]:
                log.warning("%s: dropped %d pairs (%s)", split, counts[reason], reason.replace("_", " "))
        stats[split] = {**dict(counts), **stats.get(split, {})}
        log.info("%s: %s", split, dict(counts))
    for split, spec in splits.items():
        if spec.get("overlap_with_train") == "warn" and split not in held_out:
            stats[split]["in_train"] = _overlap(outputs[split][0], outputs["train"][0], split)
    with atomic_path(stats_out) as tmp:
        Path(tmp).write_text(json.dumps(stats, indent=2) + "\n")
    return stats


def _overlap(eval_src: str, train_src: str, split: str) -> int:
    """How many of an evaluation split's source sentences also occur as a training source (the split's own lines
    held in memory, the training text streamed), warned about when any do."""
    wanted = Counter(read_lines(eval_src))
    found = set()
    for line in read_lines(train_src):
        if line in wanted:
            found.add(line)
    count = sum(wanted[line] for line in found)
    if count:
        log.warning(
            "%s: %d of %d source sentences also occur in the training data (%s); its scores overstate how "
            "the models translate unseen text",
            split,
            count,
            sum(wanted.values()),
            train_src,
        )
    return count


def _paired_lines(parts) -> Iterator[tuple[str, str]]:
    for raw_src, raw_tgt, tok_src, tok_tgt, fmt in parts:
        try:
            n_raw = readers.check_parallel(raw_src, raw_tgt, fmt)
        except UserError as err:
            src_use, tgt_use = first_use(raw_src), first_use(raw_tgt)
            if src_use is None or tgt_use is None or not (src_use.origin and tgt_use.origin):
                raise
            raise UserError(f"{err} (copies of {src_use.origin} and {tgt_use.origin})") from None
        for pair in itertools.zip_longest(read_lines(tok_src), read_lines(tok_tgt)):
            if None in pair:
                break  # counted and named below
            yield pair
        n_src, n_tgt = count_lines(tok_src), count_lines(tok_tgt)
        for path, lines in ((tok_src, n_src), (tok_tgt, n_tgt)):
            if lines != n_raw:
                raise UserError(
                    f"{path} has {lines} lines, expected {n_raw} (one per segment of its raw "
                    f"file); delete it and re-run"
                )


def _drop_empty(pairs, counts: Counter) -> Iterator[tuple[str, str]]:
    for s, t in pairs:
        counts["read"] += 1
        if s.strip() and t.strip():
            counts["kept"] += 1
            yield s, t
        else:
            counts["empty"] += 1


def _write_pairs(pairs, paths: tuple[str, str], held_out: tuple[int, tuple[str, str]] | None = None) -> list[int]:
    """Write (src, tgt) pairs to `paths`, atomically; with held_out = (k, other paths), every k-th pair goes there
    instead (prepare-iwslt14.sh: awk 'NR%k==0' on the cleaned training text, 1-based). Returns the counts written."""
    k, other = held_out or (0, ())
    counts = [0, 0]
    with contextlib.ExitStack() as stack:
        tmps = [stack.enter_context(atomic_path(p)) for p in (*paths, *other)]
        files = [stack.enter_context(open(t, "w", encoding="utf-8", newline="\n")) for t in tmps]
        for number, (s, t) in enumerate(pairs, start=1):
            held = bool(k) and number % k == 0
            files[2 * held].write(s + "\n")
            files[2 * held + 1].write(t + "\n")
            counts[held] += 1
    return counts


def _require_nonempty(pairs, part_files, split: str, counts: Counter) -> Iterator[tuple[str, str]]:
    for number, (s, t) in enumerate(pairs, start=1):
        if not s.strip() or not t.strip():
            side = 0 if not s.strip() else 1
            files = ", ".join(p[2 + side] for p in part_files)
            kind = "evaluation sets must not have" if split != "train" else "the task refuses (empty_lines: refuse)"
            raise UserError(
                f"{split} line {number} (of {files}): empty segment (raw "
                f"{_raw_location(part_files, number, side)}, empty or whitespace only); {kind} empty "
                f"lines (remove the pair from both sides)"
            )
        counts["read"] += 1
        counts["kept"] += 1
        yield s, t


def _raw_location(part_files, number: int, side: int) -> str:
    """`raw file:line` of the number-th segment of a split's concatenated parts (plain files: line = segment)."""
    before = 0
    for part in part_files:
        segments = readers.count_segments(part[side], part[4])[0]
        if number <= before + segments:
            return f"{part[side]}:{number - before}"
        before += segments
    return f"{part_files[-1][side]}:{number - before}"


def concatenate(parts: list[str], out: str, max_lines: int | None = None) -> int:
    """An evaluation split's references (normalised, untokenized) from its parts, in order."""
    lines = itertools.chain.from_iterable(read_lines(p) for p in parts)
    return write_lines(out, itertools.islice(lines, max_lines))


def learn_bpe(train_files: list[str], codes: str, merges: int, min_frequency: int = bpe.MIN_FREQUENCY) -> None:
    bpe.learn(train_files, codes, merges, min_frequency)
    log.info("learned %d BPE merges from %s → %s", merges, " + ".join(train_files), codes)


def apply_bpe(codes: str | None, text: str, out: str, workers: int = 1) -> int:
    """Segment with BPE codes; without codes (word-level vocabularies: MLRF's NIST) the text is kept as it is."""
    if not codes:
        log.info("%s: no BPE codes for this side (it comes segmented, or the task is word-level): kept as it is", text)
    lines = bpe.apply(codes, read_lines(text), workers) if codes else read_lines(text)
    return write_lines(out, progress(lines, f"apply-bpe {Path(text).name}"))


def build_vocab(
    texts: list[str],
    out: str,
    padding_factor: int = PADDING_FACTOR,
    threshold: int = THRESHOLD,
    nwords: int = ALL_WORDS,
) -> int:
    counts = count_tokens(texts)
    if not counts:
        raise UserError(f"{' + '.join(texts)}: no words; expected the (BPE-segmented) training text")
    vocab = Dictionary.build(counts, threshold=threshold, nwords=nwords, padding_factor=padding_factor)
    vocab.save(out)
    log.info("vocabulary of %d symbols (with 4 specials) from %s → %s", len(vocab), " + ".join(texts), out)
    return len(vocab)


def binarize_file(text: str, vocab_path: str, prefix: str) -> dict:
    stats = binarize(text, Dictionary.load(vocab_path), prefix)
    log.info("binarized %s: %d sentences, %d tokens, %d <unk>", text, stats["sentences"], stats["tokens"], stats["unk"])
    return stats
