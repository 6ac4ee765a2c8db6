"""The data commands: fetch, extract, tokenize, concat, assemble, learn-bpe, apply-bpe, vocab, binarize,
check-reference. None of them imports torch."""

from __future__ import annotations

import argparse
import logging
import os

from .. import UserError
from ..job_specs import AssembleSpec
from ..settings import json_object
from ..data.bpe import MIN_FREQUENCY
from ..data.vocab import ALL_WORDS, PADDING_FACTOR, THRESHOLD
from ..grid.tasks import SPLIT_FORMAT
from .common import command, integer

log = logging.getLogger("layerwise_nmt")
FORMATS = ["plain", "xml", "wmt", "ted_tags", "nist"]  # = data.readers.READERS (tests check they agree)


def add_commands(sub) -> None:
    p = command(sub, "fetch", "download a file: each URL in order, resume, HTML refused, checksum", cmd_fetch)
    p.add_argument("out")
    p.add_argument(
        "--url",
        action="append",
        default=[],
        help="a source, tried in the order given (official first, "
        "then mirrors); none: the file needs a manual download (--manual says how)",
    )
    p.add_argument("--manual", help="what to do by hand when no URL gives the file")
    p.add_argument("--expected-at", help="where the data mirror would hold the file (named when every source fails)")
    p.add_argument("--checksum-source", help="where the expected checksum was published (named when it does not match)")
    add_checksums(p)

    p = command(sub, "extract", "take a raw file out of an archive (or copy it) and verify it", cmd_extract)
    p.add_argument("input", help="an archive, or the file itself")
    p.add_argument("out")
    p.add_argument("--archive", action="store_true", help="input is an archive (.tgz/.tar/.zip/.gz)")
    p.add_argument("--member", help="path inside the archive (wildcards: the sorted matches, each line-ended)")
    p.add_argument("--pair-member", help="the other side's wildcard member: files paired by name, line counts checked")
    p.add_argument("--archive-sha256")
    p.add_argument("--archive-git-blob")
    p.add_argument("--archive-md5")
    p.add_argument("--archive-checksum-source", help="where the archive's checksum was published")
    p.add_argument("--checksum-source", help="where the file's checksum was published")
    p.add_argument("--where", default="its official URL", help="where to get a good copy (for errors)")
    p.add_argument(
        "--text",
        action="store_true",
        help="the file is UTF-8 text, one sentence per line (a corpus of "
        "the user's own): every line checked, an invalid one named as file:line",
    )
    p.add_argument(
        "--make-input",
        metavar="JSON",
        help="when INPUT is not there: the lwnmt command that makes it "
        "first, as a JSON list of arguments (a download into the cache, an outer archive's extraction)",
    )
    add_checksums(p)

    p = command(sub, "tokenize", "read segments of a raw file, normalise and tokenize them", cmd_tokenize)
    p.add_argument("input")
    p.add_argument("out")
    p.add_argument("--lang", required=True)
    p.add_argument("--format", default=SPLIT_FORMAT, choices=FORMATS)
    p.add_argument(
        "--options",
        default="{}",
        help='JSON, e.g. {"tokenizer": "moses", "aggressive_dash_splits": true, "lowercase": true}',
    )
    p.add_argument(
        "--normalize-only",
        action="store_true",
        help="normalise without tokenizing (the references of detokenized BLEU)",
    )
    p.add_argument("--workers", "-j", type=integer(1), default=1)

    p = command(sub, "concat", "concatenate files line by line (an evaluation split's references)", cmd_concat)
    p.add_argument("parts", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--max-lines", type=integer(1))

    p = command(sub, "assemble", "pair, clean and split tokenized parts into train/valid/test", cmd_assemble)
    p.add_argument(
        "--spec",
        required=True,
        help="the assemble job's spec, JSON (job_specs.AssembleSpec, built by the assemble rule): "
        '{"splits": {split: {"parts": [[raw_src, raw_tgt, tok_src, tok_tgt, format], ...], "clean": {...}}}}',
    )
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--stats", required=True, help="where to write the per-split counts (JSON)")
    add_subword_commands(sub)


def add_subword_commands(sub) -> None:
    p = command(sub, "learn-bpe", "learn joint BPE codes (subword-nmt)", cmd_learn_bpe)
    p.add_argument("train", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--merges", "-s", type=integer(1), required=True)
    p.add_argument("--min-frequency", type=integer(1), default=MIN_FREQUENCY)

    p = command(sub, "apply-bpe", "apply BPE codes (subword-nmt)", cmd_apply_bpe)
    p.add_argument("input")
    p.add_argument("out")
    p.add_argument("--codes", "-c", help="BPE codes; without them the text is copied (word-level tasks)")
    p.add_argument("--workers", "-j", type=integer(1), default=1)

    p = command(sub, "vocab", "build a fairseq-format dict.txt", cmd_vocab)
    p.add_argument("texts", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--padding-factor", type=integer(1), default=PADDING_FACTOR)
    p.add_argument("--threshold", type=integer(0), default=THRESHOLD)
    p.add_argument(
        "--nwords",
        type=integer(ALL_WORDS),
        default=ALL_WORDS,
        help=f"keep the N most frequent symbols (word-level tasks; {ALL_WORDS}: all)",
    )

    p = command(sub, "binarize", "token ids of a BPE text as memory-mappable .npy files", cmd_binarize)
    p.add_argument("input")
    p.add_argument("prefix")
    p.add_argument("--vocab", required=True)

    p = command(
        sub, "check-reference", "compare outputs with a reference's git blob ids (e.g. fairseq)", cmd_check_reference
    )
    p.add_argument("data_dir")
    p.add_argument(
        "--spec",
        required=True,
        help='the check\'s spec, JSON (job_specs.ReferenceCheckSpec): {"expected": {"relative/path": "git blob id"}}',
    )
    p.add_argument("--out", required=True)


def add_checksums(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--sha256", help="expected sha256 of the resulting file")
    group.add_argument("--md5", help="expected md5 of the resulting file")
    group.add_argument("--git-blob", help="expected git blob id (`git hash-object`) of the resulting file")


def cmd_fetch(a) -> None:
    from ..data.checksums import checksum_from
    from ..data.fetch import download

    download(a.url, a.out, checksum_from(a.sha256, a.git_blob, a.md5, a.checksum_source), a.manual, a.expected_at)


def cmd_extract(a) -> None:
    from ..data.checksums import checksum_from
    from ..data.extract import copy_verified, extract_member

    if a.make_input and not os.path.exists(a.input):
        import json

        first = a.parser.parse_args(json.loads(a.make_input))
        first.func(first)
    archive_checksum = checksum_from(a.archive_sha256, a.archive_git_blob, a.archive_md5, a.archive_checksum_source)
    if archive_checksum is not None:  # an archive taken from a mirror is checked before use
        archive_checksum.verify(a.input, a.input, a.where)
    checksum = checksum_from(a.sha256, a.git_blob, a.md5, a.checksum_source)
    if a.archive:
        extract_member(a.input, a.member, a.out, checksum, a.where, a.pair_member, text=a.text)
    else:
        copy_verified(a.input, a.out, checksum, a.where, text=a.text)


def cmd_tokenize(a) -> None:
    from ..data.prepare import tokenize_file
    from ..data.tokenize import TokenizeOptions

    try:
        options = TokenizeOptions.from_dict({**json_object(a.options, "--options"), "lang": a.lang})
    except UserError as err:
        raise UserError(f"--options: {err}") from None
    tokenize_file(a.input, a.out, a.format, options, a.workers, normalize_only=a.normalize_only)


def cmd_concat(a) -> None:
    from ..data.prepare import concatenate

    concatenate(a.parts, a.out, a.max_lines)


def cmd_assemble(a) -> None:
    from ..data.prepare import assemble

    spec = AssembleSpec.from_json(a.spec).splits
    # train's paths even when only an evaluation split is assembled: its overlap is checked against them
    outputs = {
        split: tuple(os.path.join(a.out_dir, f"{split}.{a.src}-{a.tgt}.{lang}") for lang in (a.src, a.tgt))
        for split in {"train", *spec}
    }
    assemble(spec, outputs, a.stats)


def cmd_learn_bpe(a) -> None:
    from ..data.prepare import learn_bpe

    learn_bpe(a.train, a.out, a.merges, a.min_frequency)


def cmd_apply_bpe(a) -> None:
    from ..data.prepare import apply_bpe

    apply_bpe(a.codes, a.input, a.out, a.workers)


def cmd_vocab(a) -> None:
    from ..data.prepare import build_vocab

    build_vocab(a.texts, a.out, a.padding_factor, a.threshold, a.nwords)


def cmd_binarize(a) -> None:
    from ..data.prepare import binarize_file

    binarize_file(a.input, a.vocab, a.prefix)


def cmd_check_reference(a) -> None:
    import json

    from ..data.checksums import Checksum
    from ..data.io import atomic_path

    report = {}
    from ..job_specs import ReferenceCheckSpec

    for path, blob in ReferenceCheckSpec.from_json(a.spec).expected.items():
        actual = Checksum("git_blob", blob).compute(os.path.join(a.data_dir, path))
        report[path] = {"expected_git_blob": blob, "git_blob": actual, "identical": actual == blob}
        if actual != blob:
            log.warning("%s differs from the reference (git blob %s, expected %s)", path, actual, blob)
    same = sum(r["identical"] for r in report.values())
    log.info("%d of %d files identical to the reference", same, len(report))
    with atomic_path(a.out) as tmp, open(tmp, "w") as f:
        json.dump({"identical": same, "files": len(report), "by_file": report}, f, indent=2)
