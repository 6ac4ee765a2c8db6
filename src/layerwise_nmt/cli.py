"""`lwnmt`: one command with subcommands; every Snakemake rule calls one of them."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from . import UserError

log = logging.getLogger("layerwise_nmt")
FORMATS = ["plain", "xml", "wmt", "ted_tags", "nist"]  # = data.readers.READERS (tests check they agree)


def _checksum_args(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--sha256", help="expected sha256 of the resulting file")
    group.add_argument("--md5", help="expected md5 of the resulting file")
    group.add_argument("--git-blob", help="expected git blob id (`git hash-object`) of the resulting file")


def cmd_fetch(a) -> None:
    from .data.fetch import checksum_from, download

    if a.manual:  # terms of use: a person downloads it
        raise UserError(f"{Path(a.out).name} cannot be downloaded by the workflow: {a.manual} "
                        f"(data mirror layout: <data_mirror>/<dataset mirror dir>/{Path(a.out).name})")
    download(a.url, a.out, checksum_from(a.sha256, a.git_blob, a.md5))


def cmd_extract(a) -> None:
    from .data.fetch import checksum_from, copy_verified, extract_member

    archive_checksum = checksum_from(a.archive_sha256, a.archive_git_blob, a.archive_md5)
    if archive_checksum is not None:  # an archive taken from a mirror is checked before use
        archive_checksum.verify(a.input, a.input, a.where)
    checksum = checksum_from(a.sha256, a.git_blob, a.md5)
    if a.archive:
        extract_member(a.input, a.member, a.out, checksum, a.where)
    else:
        copy_verified(a.input, a.out, checksum, a.where)


def cmd_tokenize(a) -> None:
    import json

    from .data.prepare import tokenize_file
    from .data.tokenize import TokenizeOptions

    try:
        options = TokenizeOptions(a.lang, **json.loads(a.options))
    except TypeError as err:
        raise UserError(f"--options: {err}; expected keys of TokenizeOptions (src/layerwise_nmt/data/tokenize.py)")
    tokenize_file(a.input, a.out, a.format, options, a.workers, normalize_only=a.normalize_only)


def cmd_concat(a) -> None:
    from .data.prepare import concatenate

    concatenate(a.parts, a.out, a.max_lines)


def cmd_assemble(a) -> None:
    import json

    from .data.prepare import assemble

    spec = json.loads(a.spec)
    outputs = {split: tuple(os.path.join(a.out_dir, f"{split}.{a.src}-{a.tgt}.{lang}") for lang in (a.src, a.tgt))
               for split in spec}
    assemble(spec, outputs, a.stats)


def cmd_learn_bpe(a) -> None:
    from .data.prepare import learn_bpe

    learn_bpe(a.train, a.out, a.merges, a.min_frequency)


def cmd_apply_bpe(a) -> None:
    from .data.prepare import apply_bpe

    apply_bpe(a.codes, a.input, a.out, a.workers)


def cmd_vocab(a) -> None:
    from .data.prepare import build_vocab

    build_vocab(a.texts, a.out, a.padding_factor, a.threshold, a.nwords)


def cmd_binarize(a) -> None:
    from .data.prepare import binarize_file

    binarize_file(a.input, a.vocab, a.prefix)


def cmd_check_reference(a) -> None:
    import json

    from .data.fetch import Checksum
    from .data.io import atomic_path

    report = {}
    for path, blob in json.loads(a.expected).items():
        actual = Checksum("git_blob", blob).compute(os.path.join(a.data_dir, path))
        report[path] = {"expected_git_blob": blob, "git_blob": actual, "identical": actual == blob}
        if actual != blob:
            log.warning("%s differs from the reference (git blob %s, expected %s)", path, actual, blob)
    same = sum(r["identical"] for r in report.values())
    log.info("%d of %d files identical to the reference", same, len(report))
    with atomic_path(a.out) as tmp, open(tmp, "w") as f:
        json.dump({"identical": same, "files": len(report), "by_file": report}, f, indent=2)


# fairseq-train flags `lwnmt train` takes as overrides of --spec: flag → (spec section, key, type)
TRAIN_FLAGS = {
    "--arch": ("arch", "preset", str), "--dropout": ("arch", "dropout", float),
    "--max-tokens": ("train", "max_tokens", int), "--batch-size": ("train", "max_sentences", int),
    "--update-freq": ("train", "update_freq", int), "--lr": ("train", "lr", float),
    "--lr-scheduler": ("train", "lr_scheduler", str), "--warmup-updates": ("train", "warmup_updates", int),
    "--max-update": ("train", "max_update", int), "--max-epoch": ("train", "max_epoch", int),
    "--clip-norm": ("train", "clip_norm", float), "--label-smoothing": ("train", "label_smoothing", float),
    "--patience": ("train", "patience", int), "--seed": ("train", "seed", int),
}


def train_spec(a) -> dict:
    """--spec with the fairseq-style flags given on the command line laid over it (--arch: a fairseq arch name or
    one of our presets)."""
    import json

    from .models.transformer import FAIRSEQ_ARCHS

    spec = json.loads(a.spec)
    spec.setdefault("model", "transformer")
    for flag, (section, key, _) in TRAIN_FLAGS.items():
        value = getattr(a, flag[2:].replace("-", "_"))
        if value is not None:
            spec.setdefault(section, {})[key] = FAIRSEQ_ARCHS.get(value, value) if flag == "--arch" else value
    return spec


def cmd_train(a) -> None:
    import torch

    from .gpus import claim, run_ranks, under_torchrun
    from .train import train

    ranks = a.ranks or a.gpus
    if not under_torchrun():
        locks = claim(a.gpus, a.gpu_locks)  # noqa: F841  (held until this process ends)
        if ranks > 1:  # data-parallel: this process becomes torchrun's parent and waits for the ranks
            sys.exit(run_ranks(ranks, sys.argv[1:]))
    if a.threads:
        torch.set_num_threads(a.threads)
    train(train_spec(a), a.data, a.src, a.tgt, a.save_dir, a.final)


def cmd_average(a) -> None:
    from .average import average
    from .checkpoint import last_checkpoints

    average(last_checkpoints(a.save_dir, a.num, a.by), a.out)


def cmd_translate(a) -> None:
    import json

    import torch

    from .data.io import atomic_path
    from .data.vocab import load_pair
    from .decode import BeamConfig, load_model, translate
    from .gpus import claim
    from .models.transformer import count_parameters

    locks = claim(a.gpus, a.gpu_locks)  # noqa: F841  (held until this process ends)
    if a.threads:
        torch.set_num_threads(a.threads)
    options = json.loads(a.options)
    options.update({key: getattr(a, key) for key in ("beam", "lenpen", "max_len_a", "max_len_b", "min_len",
                                                      "batch_size") if getattr(a, key) is not None})
    if a.lenpen_from:  # the α the pick_lenpen step chose on the validation set
        options["lenpen"] = json.loads(Path(a.lenpen_from).read_text())["lenpen"]
        log.info("length penalty %s, tuned on the validation set (%s)", options["lenpen"], a.lenpen_from)
    if a.experiment:  # raw text, with the experiment's trained model and its task's preprocessing
        return translate_raw(a, options)
    missing = [f"--{k.replace('_', '-')}" for k in ("model", "data", "src", "tgt", "out_prefix") if not getattr(a, k)]
    if missing or not a.input or a.input == "-":
        raise UserError(f"missing {', '.join(missing) or 'INPUT'}: give a BPE'd INPUT file with --model --data --src "
                        f"--tgt --out-prefix, or raw text (a file or - for stdin) with --experiment NAME")
    cfg = BeamConfig.from_dict(options)
    src_vocab, tgt_vocab = load_pair(a.data, a.src, a.tgt)
    model = load_model(a.model)
    stats = translate(model, a.input, src_vocab, tgt_vocab, cfg, a.out_prefix,
                      detok_lang=a.tgt if a.detokenize else None)
    stats["params"] = count_parameters(model)
    log.info("%d sentences in %.1f s (%.2f sentences/s)", stats["sentences"], stats["seconds"],
             stats["sentences_per_second"])
    with atomic_path(f"{a.out_prefix}.json") as tmp, open(tmp, "w") as f:
        json.dump({"options": cfg.__dict__, **stats}, f, indent=2)


def translate_raw(a, options: dict) -> None:
    """`lwnmt translate [FILE|-] --experiment NAME`: tokenize → BPE → beam search → detokenize, printed one line per
    input line (also kept as --out-prefix files when given)."""
    import tempfile

    from . import config as cfg
    from .data.io import read_lines, write_lines
    from .data.vocab import load_pair
    from .decode import BeamConfig, load_model, prepare_raw, translate

    setup = cfg.trained_model(load_config(a), a.experiment, a.seed)
    if not Path(setup["model"]).exists():
        raise UserError(f"{setup['model']}: not trained yet; run snakemake {setup['model']} first")
    lines = sys.stdin.read().splitlines() if a.input in (None, "-") else list(read_lines(a.input))
    beam = BeamConfig.from_dict({**setup["decode"], **options})
    src_vocab, tgt_vocab = load_pair(setup["data"], setup["src"], setup["tgt"])
    with tempfile.TemporaryDirectory() as tmp:
        source, prefix = Path(tmp) / "input.bpe", a.out_prefix or str(Path(tmp) / "out")
        write_lines(source, prepare_raw(lines, setup["src"], setup["tokenize"], setup["codes"]))
        translate(load_model(setup["model"]), str(source), src_vocab, tgt_vocab, beam, prefix, detok_lang=setup["tgt"])
        for line in read_lines(f"{prefix}.detok"):
            print(line)


def cmd_import_fairseq(a) -> None:
    from .fairseq_import import import_fairseq

    target = import_fairseq(a.checkpoint, a.data, a.src, a.tgt, a.out)
    log.info("wrote %s; decode with: lwnmt translate INPUT --model %s --data %s --src %s --tgt %s --out-prefix OUT",
             target, target, a.out, a.src, a.tgt)


def cmd_pick_lenpen(a) -> None:
    import json

    from .data.io import atomic_path
    from .decode import pick_lenpen

    if len(a.scores) != len(a.lenpen):
        raise UserError(f"{len(a.scores)} score files for {len(a.lenpen)} --lenpen values; expected one each")
    bleu = {alpha: json.loads(Path(path).read_text())["bleu"] for alpha, path in zip(a.lenpen, a.scores)}
    best = pick_lenpen(bleu)
    print(f"lenpen {best:g}: valid BLEU {bleu[best]:.2f} (" + ", ".join(f"{k:g}: {v:.2f}" for k, v in bleu.items())
          + ")")
    with atomic_path(a.out) as tmp, open(tmp, "w") as f:
        json.dump({"lenpen": best, "bleu": bleu[best], "bleu_by_lenpen": {f"{k:g}": v for k, v in bleu.items()},
                   "scores": a.scores}, f, indent=2)


def cmd_score(a) -> None:
    import json

    from .data.io import atomic_path
    from .score import ScoreConfig, score_files

    cfg = ScoreConfig.from_dict(json.loads(a.options))
    result = score_files(a.hyp, a.ref, cfg, a.source)
    result["options"] = {**cfg.__dict__, "buckets": list(cfg.buckets)}
    if a.meta:
        result.update(json.loads(a.meta))
    if a.decoding:  # the translate step's record: model size and decoding speed travel with the score
        result["decoding"] = json.loads(Path(a.decoding).read_text())
    print(f"BLEU = {result['bleu']:.2f}  ({result['signature']})")
    with atomic_path(a.out) as tmp, open(tmp, "w") as f:
        json.dump(result, f, indent=2)


def cmd_table(a) -> None:
    import json

    from .report.tables import write

    write(json.loads(a.spec), a.out_prefix)
    print(Path(f"{a.out_prefix}.md").read_text(encoding="utf-8"))


def cmd_summary(a) -> None:
    from .report.tables import summary

    summary(a.tables, a.out_prefix)


def cmd_figure(a) -> None:
    import json

    from .report.figures import write

    missing = write(json.loads(a.spec), a.out_prefix)
    print(f"wrote {a.out_prefix}.png and .pdf" + (f"; not drawn: {'; '.join(missing)}" if missing else ""))


def load_config(a) -> dict:
    """The --config files merged and checked as `snakemake -n` checks them (schema, references, stage settings)."""
    from . import config as cfg
    from .checks import check_experiments

    config = cfg.load(*(a.config or ["config.yaml"]))
    check_experiments(config)
    return config


def cmd_params(a) -> None:
    from .params import parameter_rows

    config = load_config(a)
    vocab = (a.src_vocab or a.vocab, a.tgt_vocab or a.vocab) if (a.vocab or a.src_vocab) else None
    rows = parameter_rows(config, a.experiments or list(config.get("experiments", {})), vocab)
    if a.format == "csv":
        import csv

        writer = csv.DictWriter(sys.stdout, fieldnames=["experiment", "paper", "table", "row", "params",
                                                        "paper_params", "other_readings"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**r, "other_readings": ";".join(f"{k}:{v}" for k, v in r["other_readings"].items())}
                         for r in rows)
        return
    print(f"{'experiment':<34} {'model':<12} {'vocab (src/tgt)':<16} {'params':>12} {'paper':>9}  row")
    for r in rows:
        paper = f"{r['paper_params']:.2f}M" if r["paper_params"] is not None else "—"
        count = f"{r['params']:,}" if r["params"] is not None else r["note"]
        readings = "".join(f"  [{k}: {v:,}]" for k, v in r["other_readings"].items())
        print(f"{r['experiment']:<34} {r['model']:<12} {r['vocab']:<16} {count:>12} {paper:>9}  "
              f"{r['paper']} {r['table']} {r['row']}{readings}".rstrip())


def cmd_plan(a) -> None:
    from .plan import plan, render, render_budgets, rows

    config = load_config(a)
    records = plan(config)
    if a.format == "csv":
        import csv

        table = rows(records, a.tflops, config)
        writer = csv.DictWriter(sys.stdout, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
        return
    print(render(records, a.tflops))
    print()
    print(render_budgets(config))


def cmd_readme(a) -> None:
    from .report.readme import update

    update(a.readme, a.table, a.figure)


def cmd_rehearse(a) -> None:
    from .rehearsal.run import rehearse

    mirror = a.mirror or os.environ.get("LWNMT_DATA_MIRROR")
    if not mirror or not Path(mirror).is_dir():
        raise UserError(f"--mirror {mirror!r} is not a directory; the rehearsal builds its stand-ins from the data "
                        f"mirror (../shared/data-mirror, or $LWNMT_DATA_MIRROR)")
    sys.exit(rehearse(Path(a.dir), Path(mirror), a.cores, a.snakemake_args))


def cmd_status(a) -> None:
    from . import config as cfg

    config = load_config(a)
    rows = cfg.all_statuses(config)
    width = max(len(s.name) for s in rows)
    for kind in ("task", "experiment", "row"):
        selected = [s for s in rows if s.kind == kind]
        ready = sum(s.runnable for s in selected)
        print(f"\n{kind}s: {ready} of {len(selected)} can run")
        for s in selected:
            print(f"  {s.state:<7} {s.name:<{width}}  {'' if s.runnable else s.reason}")
    from .plan import budget_warnings

    flagged = budget_warnings(config)
    print(f"\nbudgets: {len(flagged)} experiments whose averaging, early stopping, warm-up or restart cannot work "
          f"as configured (estimated from each task's `estimate`; `lwnmt plan` lists every budget)")
    for line in flagged:
        print(f"  flagged {line}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lwnmt", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    config_arg = dict(action="append", metavar="FILE", help="a config file (default config.yaml); repeat the "
                      "option for overlays, later ones override: --config config.yaml --config config/demo.yaml")

    p = sub.add_parser("fetch", help="download a file (retries, resume, checksum)")
    p.add_argument("url")
    p.add_argument("out")
    p.add_argument("--manual", help="the file needs a manual download; this says how (the command only reports it)")
    _checksum_args(p)
    p.set_defaults(func=cmd_fetch)

    p = sub.add_parser("extract", help="take a raw file out of an archive (or copy it) and verify it")
    p.add_argument("input", help="an archive, or the file itself")
    p.add_argument("out")
    p.add_argument("--archive", action="store_true", help="input is an archive (.tgz/.tar/.zip/.gz)")
    p.add_argument("--member", help="path inside the archive")
    p.add_argument("--archive-sha256")
    p.add_argument("--archive-git-blob")
    p.add_argument("--archive-md5")
    p.add_argument("--where", default="its official URL", help="where to get the file again (for errors)")
    _checksum_args(p)
    p.set_defaults(func=cmd_extract)

    p = sub.add_parser("tokenize", help="read segments of a raw file, normalise and tokenize them")
    p.add_argument("input")
    p.add_argument("out")
    p.add_argument("--lang", required=True)
    p.add_argument("--format", default="plain", choices=FORMATS)
    p.add_argument("--options", default="{}",
                   help='JSON, e.g. {"tokenizer": "moses", "aggressive_dash_splits": true, "lowercase": true}')
    p.add_argument("--normalize-only", action="store_true",
                   help="normalise without tokenizing (the references of detokenized BLEU)")
    p.add_argument("--workers", "-j", type=int, default=1)
    p.set_defaults(func=cmd_tokenize)

    p = sub.add_parser("concat", help="concatenate files line by line (an evaluation split's references)")
    p.add_argument("parts", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--max-lines", type=int)
    p.set_defaults(func=cmd_concat)

    p = sub.add_parser("assemble", help="pair, clean and split tokenized parts into train/valid/test")
    p.add_argument("--spec", required=True,
                   help="JSON: {split: {parts: [[raw_src, raw_tgt, tok_src, tok_tgt, format], ...], clean: {...}, "
                        "hold_out_every: k}}")
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--stats", required=True, help="where to write the per-split counts (JSON)")
    p.set_defaults(func=cmd_assemble)

    p = sub.add_parser("learn-bpe", help="learn joint BPE codes (subword-nmt)")
    p.add_argument("train", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--merges", "-s", type=int, required=True)
    p.add_argument("--min-frequency", type=int, default=2)
    p.set_defaults(func=cmd_learn_bpe)

    p = sub.add_parser("apply-bpe", help="apply BPE codes (subword-nmt)")
    p.add_argument("input")
    p.add_argument("out")
    p.add_argument("--codes", "-c", help="BPE codes; without them the text is copied (word-level tasks)")
    p.add_argument("--workers", "-j", type=int, default=1)
    p.set_defaults(func=cmd_apply_bpe)

    p = sub.add_parser("vocab", help="build a fairseq-format dict.txt")
    p.add_argument("texts", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--padding-factor", type=int, default=8)
    p.add_argument("--threshold", type=int, default=0)
    p.add_argument("--nwords", type=int, default=-1, help="keep the N most frequent symbols (word-level tasks)")
    p.set_defaults(func=cmd_vocab)

    p = sub.add_parser("binarize", help="token ids of a BPE text as memory-mappable .npy files")
    p.add_argument("input")
    p.add_argument("prefix")
    p.add_argument("--vocab", required=True)
    p.set_defaults(func=cmd_binarize)

    p = sub.add_parser("check-reference", help="compare outputs with a reference's git blob ids (e.g. fairseq)")
    p.add_argument("data_dir")
    p.add_argument("--expected", required=True, help='JSON {"relative/path": "git blob id"}')
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_check_reference)

    p = sub.add_parser("train", help="train (resumes from SAVE_DIR/checkpoint_last.pt if present)")
    p.add_argument("--spec", default="{}", help='JSON {"model": name, "arch": {...}, "train": {...}} (default: '
                                                'the transformer with default settings)')
    for flag, (section, key, kind) in TRAIN_FLAGS.items():
        p.add_argument(flag, type=kind, help=f"as fairseq-train's; overrides the spec's {section}.{key}")
    p.add_argument("--data", required=True, help="binarized data directory (bin-joint or bin-separate)")
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--save-dir", required=True)
    p.add_argument("--final", help="where to write the final model (the rule's output)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = PyTorch default)")
    p.add_argument("--gpus", type=int, default=0,
                   help="GPUs for this job: claimed on a shared machine (CUDA_VISIBLE_DEVICES); >1 runs torchrun")
    p.add_argument("--ranks", type=int, default=0, help="data-parallel ranks (default: --gpus); on CPU: gloo")
    p.add_argument("--gpu-locks", default="results/.gpu-locks", help="lock files of the GPU allocator")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("average", help="average the last N checkpoints (fairseq average_checkpoints.py)")
    p.add_argument("save_dir")
    p.add_argument("--out", required=True)
    p.add_argument("--num", "-n", type=int, default=10)
    p.add_argument("--by", choices=["epoch", "update"], default="epoch")
    p.set_defaults(func=cmd_average)

    p = sub.add_parser("translate", help="beam-search decode a BPE'd source file, or raw text with --experiment")
    p.add_argument("input", nargs="?", help="BPE'd source text, one sentence per line; with --experiment raw text "
                                            "(a file, or - / nothing for stdin)")
    p.add_argument("--experiment", help="translate raw text with this experiment's trained model: its task's "
                                        "tokenization, BPE, decoding settings and detokenization")
    p.add_argument("--seed", type=int, help="with --experiment: which seed's run (default: its first)")
    p.add_argument("--config", **config_arg)
    p.add_argument("--model")
    p.add_argument("--data", help="the binarized data directory the model was trained on (or a fairseq one)")
    p.add_argument("--src")
    p.add_argument("--tgt")
    p.add_argument("--out-prefix", help="writes PREFIX.bpe, PREFIX.txt, PREFIX.detok, PREFIX.json")
    p.add_argument("--options", default="{}", help='JSON decoding options, e.g. {"beam": 5, "lenpen": 1.0}')
    p.add_argument("--detokenize", action="store_true")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--gpus", type=int, default=0, help="0 or 1: decode on a claimed GPU when one is visible")
    p.add_argument("--gpu-locks", default="results/.gpu-locks")
    p.add_argument("--lenpen-from", help="JSON written by pick-lenpen: its lenpen replaces the options' one")
    for flag, kind in (("--beam", int), ("--lenpen", float), ("--max-len-a", float), ("--max-len-b", int),
                       ("--min-len", int), ("--batch-size", int)):
        p.add_argument(flag, type=kind, help="as fairseq-generate's; overrides --options")
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("import-fairseq", help="convert a fairseq 0.12 Transformer checkpoint into our model.pt")
    p.add_argument("checkpoint")
    p.add_argument("--data", required=True, help="the fairseq data directory it was trained on (dict.*.txt)")
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--out", required=True, help="directory for model.pt and the dictionaries (a --data for "
                                                "lwnmt translate)")
    p.set_defaults(func=cmd_import_fairseq)

    p = sub.add_parser("pick-lenpen", help="the length penalty with the best validation BLEU (decode.tune_lenpen)")
    p.add_argument("scores", nargs="+", help="score.json of the validation set decoded at each α, in --lenpen order")
    p.add_argument("--lenpen", type=float, nargs="+", required=True, help="the α of each score file")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_pick_lenpen)

    p = sub.add_parser("score", help="BLEU with sacrebleu (tokenized / detokenized / lowercased / compound-split)")
    p.add_argument("hyp")
    p.add_argument("--ref", nargs="+", required=True)
    p.add_argument("--source", help="source text (tokenized, no BPE) for length buckets")
    p.add_argument("--options", default="{}", help='JSON, e.g. {"tokenize": "none", "lowercase": true}')
    p.add_argument("--meta", help="JSON merged into score.json (experiment, seed, ...)")
    p.add_argument("--decoding", help="the translate step's JSON (params, sentences/s), kept in score.json")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("table", help="regenerate one paper table (md + csv) from score.json files")
    p.add_argument("--spec", required=True, help="JSON table spec (built by workflow/rules/report.smk)")
    p.add_argument("--out-prefix", required=True)
    p.set_defaults(func=cmd_table)

    p = sub.add_parser("summary", help="every row of every table in one md + csv (paper, ours, delta, status)")
    p.add_argument("tables", nargs="+", help="the tables' CSV files (results/tables/<paper>/<table>.csv)")
    p.add_argument("--out-prefix", required=True)
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("figure", help="draw one paper figure (png + pdf) from our runs")
    p.add_argument("--spec", required=True, help="JSON figure spec (built by workflow/rules/report.smk)")
    p.add_argument("--out-prefix", required=True)
    p.set_defaults(func=cmd_figure)

    p = sub.add_parser("params", help="exact parameter count of each experiment's model beside the paper's")
    p.add_argument("experiments", nargs="*", help="default: every experiment in the config")
    p.add_argument("--config", **config_arg)
    p.add_argument("--vocab", type=int, help="joint vocabulary size (no data needed)")
    p.add_argument("--src-vocab", type=int)
    p.add_argument("--tgt-vocab", type=int)
    p.add_argument("--format", choices=["table", "csv"], default="table")
    p.set_defaults(func=cmd_params)

    p = sub.add_parser("plan", help="GPU-hours each table needs, estimated before running anything")
    p.add_argument("--config", **config_arg)
    p.add_argument("--tflops", type=float, default=100.0, help="assumed sustained TFLOP/s per GPU (default 100)")
    p.add_argument("--format", choices=["table", "csv"], default="table")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("readme", help="put a run's table and figures into the README's results section")
    p.add_argument("--readme", default="README.md")
    p.add_argument("--table", required=True, help="a results/tables/<paper>/<table>.md")
    p.add_argument("--figure", nargs="*", default=[], help="figures to show (copied to docs/demo/)")
    p.set_defaults(func=cmd_readme)

    p = sub.add_parser("rehearse", help="run every row of config.yaml at toy size on stand-in data, through "
                                        "Snakemake, and summarise what ran and what failed")
    p.add_argument("--dir", default="rehearsal", help="working directory (results, stand-ins, summary)")
    p.add_argument("--mirror", help="the data mirror (default: $LWNMT_DATA_MIRROR)")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    p.add_argument("snakemake_args", nargs="*", help="passed on to snakemake (after --)")
    p.set_defaults(func=cmd_rehearse)

    p = sub.add_parser("status", help="which tasks, experiments and table rows can run, and why not")
    p.add_argument("--config", **config_arg)
    p.set_defaults(func=cmd_status)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        args.func(args)
    except UserError as err:
        print(f"lwnmt {args.command}: error: {err}", file=sys.stderr)
        sys.exit(1)
    except OSError as err:  # a path given on the command line that is not there (or not readable)
        if args.verbose or err.filename is None:
            raise
        print(f"lwnmt {args.command}: error: {err.filename}: {err.strerror} (--verbose for the traceback)",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
