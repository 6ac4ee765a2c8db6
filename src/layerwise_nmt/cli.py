"""`lwnmt`: one command with subcommands; every Snakemake rule calls one of them."""

from __future__ import annotations

import argparse
import logging
import os
import stat
import sys
from pathlib import Path
from typing import Callable

from . import UserError

log = logging.getLogger("layerwise_nmt")
FORMATS = ["plain", "xml", "wmt", "ted_tags", "nist"]  # = data.readers.READERS (tests check they agree)


# Subcommands are declared beside their handlers: @command(name, help, *arguments), each argument a function
# that adds itself to the subcommand's parser (`arg` makes one from add_argument's parameters).
COMMANDS: dict[str, tuple[str, tuple, Callable]] = {}


def command(name: str, help: str, *arguments: Callable[[argparse.ArgumentParser], None]):
    def register(handler: Callable) -> Callable:
        COMMANDS[name] = (help, arguments, handler)
        return handler
    return register


def arg(*flags: str, **options) -> Callable[[argparse.ArgumentParser], None]:
    return lambda parser: parser.add_argument(*flags, **options)


def checksum_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--sha256", help="expected sha256 of the resulting file")
    group.add_argument("--md5", help="expected md5 of the resulting file")
    group.add_argument("--git-blob", help="expected git blob id (`git hash-object`) of the resulting file")


config_files = arg("--config", action="append", metavar="FILE", help="a config file (default config.yaml); repeat "
                   "the option for overlays, later ones override: --config config.yaml --config config/demo.yaml")


@command("fetch", "download a file: each URL in order, resume, HTML refused, checksum",
    arg("out"),
    arg("--url", action="append", default=[], help="a source, tried in the order given (official first, then "
        "mirrors); none: the file needs a manual download (--manual says how)"),
    arg("--manual", help="what to do by hand when no URL gives the file"),
    arg("--expected-at", help="where the data mirror would hold the file (named when every source fails)"),
    arg("--checksum-source", help="where the expected checksum was published (named when it does not match)"),
    checksum_args)
def cmd_fetch(a) -> None:
    from .data.fetch import checksum_from, download

    download(a.url, a.out, checksum_from(a.sha256, a.git_blob, a.md5, a.checksum_source), a.manual, a.expected_at)


@command("extract", "take a raw file out of an archive (or copy it) and verify it",
    arg("input", help="an archive, or the file itself"),
    arg("out"),
    arg("--archive", action="store_true", help="input is an archive (.tgz/.tar/.zip/.gz)"),
    arg("--member", help="path inside the archive (wildcards: the sorted matches, each line-ended)"),
    arg("--pair-member", help="the other side's wildcard member: files paired by name, line counts checked"),
    arg("--archive-sha256"),
    arg("--archive-git-blob"),
    arg("--archive-md5"),
    arg("--archive-checksum-source", help="where the archive's checksum was published"),
    arg("--checksum-source", help="where the file's checksum was published"),
    arg("--where", default="its official URL", help="where to get a good copy (for errors)"),
    checksum_args)
def cmd_extract(a) -> None:
    from .data.fetch import checksum_from, copy_verified, extract_member

    archive_checksum = checksum_from(a.archive_sha256, a.archive_git_blob, a.archive_md5, a.archive_checksum_source)
    if archive_checksum is not None:  # an archive taken from a mirror is checked before use
        archive_checksum.verify(a.input, a.input, a.where)
    checksum = checksum_from(a.sha256, a.git_blob, a.md5, a.checksum_source)
    if a.archive:
        extract_member(a.input, a.member, a.out, checksum, a.where, a.pair_member)
    else:
        copy_verified(a.input, a.out, checksum, a.where)


@command("tokenize", "read segments of a raw file, normalise and tokenize them",
    arg("input"),
    arg("out"),
    arg("--lang", required=True),
    arg("--format", default="plain", choices=FORMATS),
    arg("--options", default="{}",
        help='JSON, e.g. {"tokenizer": "moses", "aggressive_dash_splits": true, "lowercase": true}'),
    arg("--normalize-only", action="store_true",
        help="normalise without tokenizing (the references of detokenized BLEU)"),
    arg("--workers", "-j", type=int, default=1))
def cmd_tokenize(a) -> None:
    import json

    from .data.prepare import tokenize_file
    from .data.tokenize import TokenizeOptions

    try:
        options = TokenizeOptions(a.lang, **json.loads(a.options))
    except TypeError as err:
        raise UserError(f"--options: {err}; expected keys of TokenizeOptions (src/layerwise_nmt/data/tokenize.py)")
    tokenize_file(a.input, a.out, a.format, options, a.workers, normalize_only=a.normalize_only)


@command("concat", "concatenate files line by line (an evaluation split's references)",
    arg("parts", nargs="+"),
    arg("--out", required=True),
    arg("--max-lines", type=int))
def cmd_concat(a) -> None:
    from .data.prepare import concatenate

    concatenate(a.parts, a.out, a.max_lines)


@command("assemble", "pair, clean and split tokenized parts into train/valid/test",
    arg("--spec", required=True,
        help="JSON: {split: {parts: [[raw_src, raw_tgt, tok_src, tok_tgt, format], ...], clean: {...}, "
             "hold_out_every: k}}"),
    arg("--src", required=True),
    arg("--tgt", required=True),
    arg("--out-dir", required=True),
    arg("--stats", required=True, help="where to write the per-split counts (JSON)"))
def cmd_assemble(a) -> None:
    import json

    from .data.prepare import assemble

    spec = json.loads(a.spec)
    outputs = {split: tuple(os.path.join(a.out_dir, f"{split}.{a.src}-{a.tgt}.{lang}") for lang in (a.src, a.tgt))
               for split in spec}
    assemble(spec, outputs, a.stats)


@command("learn-bpe", "learn joint BPE codes (subword-nmt)",
    arg("train", nargs="+"),
    arg("--out", required=True),
    arg("--merges", "-s", type=int, required=True),
    arg("--min-frequency", type=int, default=2))
def cmd_learn_bpe(a) -> None:
    from .data.prepare import learn_bpe

    learn_bpe(a.train, a.out, a.merges, a.min_frequency)


@command("apply-bpe", "apply BPE codes (subword-nmt)",
    arg("input"),
    arg("out"),
    arg("--codes", "-c", help="BPE codes; without them the text is copied (word-level tasks)"),
    arg("--workers", "-j", type=int, default=1))
def cmd_apply_bpe(a) -> None:
    from .data.prepare import apply_bpe

    apply_bpe(a.codes, a.input, a.out, a.workers)


@command("vocab", "build a fairseq-format dict.txt",
    arg("texts", nargs="+"),
    arg("--out", required=True),
    arg("--padding-factor", type=int, default=8),
    arg("--threshold", type=int, default=0),
    arg("--nwords", type=int, default=-1, help="keep the N most frequent symbols (word-level tasks)"))
def cmd_vocab(a) -> None:
    from .data.prepare import build_vocab

    build_vocab(a.texts, a.out, a.padding_factor, a.threshold, a.nwords)


@command("binarize", "token ids of a BPE text as memory-mappable .npy files",
    arg("input"),
    arg("prefix"),
    arg("--vocab", required=True))
def cmd_binarize(a) -> None:
    from .data.prepare import binarize_file

    binarize_file(a.input, a.vocab, a.prefix)


@command("check-reference", "compare outputs with a reference's git blob ids (e.g. fairseq)",
    arg("data_dir"),
    arg("--expected", required=True, help='JSON {"relative/path": "git blob id"}'),
    arg("--out", required=True))
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


def fairseq_train_flags(parser: argparse.ArgumentParser) -> None:
    for flag, (section, key, kind) in TRAIN_FLAGS.items():
        parser.add_argument(flag, type=kind, help=f"as fairseq-train's; overrides the spec's {section}.{key}")


def fairseq_generate_flags(parser: argparse.ArgumentParser) -> None:
    for flag, kind in (("--beam", int), ("--lenpen", float), ("--max-len-a", float), ("--max-len-b", int),
                       ("--min-len", int), ("--batch-size", int)):
        parser.add_argument(flag, type=kind, help="as fairseq-generate's; overrides --options")
    parser.add_argument("--amp", choices=["auto", "none", "bf16", "fp16"],
                        help="precision (default auto: bf16 where the device runs it natively, else fp32; "
                             "none = fp32, as fairseq-generate without --fp16/--bf16); overrides --options")


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


@command("train", "train (resumes from SAVE_DIR/checkpoint_last.pt if present)",
    arg("--spec", default="{}", help='JSON {"model": name, "arch": {...}, "train": {...}} (default: '
                                     'the transformer with default settings)'),
    fairseq_train_flags,
    arg("--data", required=True, help="binarized data directory (bin-joint or bin-separate)"),
    arg("--src", required=True),
    arg("--tgt", required=True),
    arg("--save-dir", required=True, help="everything the run writes: checkpoints, metrics.csv, training.json, "
                                          "tensorboard/"),
    arg("--final", help="where to write the final model (the rule's output)"),
    arg("--threads", type=int, default=0, help="torch intra-op threads (0 = PyTorch default)"),
    arg("--gpus", type=int, default=0,
        help="GPUs for this job: claimed on a shared machine (CUDA_VISIBLE_DEVICES); >1 runs torchrun"),
    arg("--ranks", type=int, default=0, help="data-parallel ranks (default: --gpus); on CPU: gloo"),
    arg("--gpu-locks", default="results/.gpu-locks", help="lock files of the GPU allocator"))
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


@command("average", "average the last N checkpoints (fairseq average_checkpoints.py)",
    arg("save_dir"),
    arg("--out", required=True),
    arg("--num", "-n", type=int, default=10),
    arg("--by", choices=["epoch", "update"], default="epoch"))
def cmd_average(a) -> None:
    from .average import average
    from .checkpoint import last_checkpoints

    average(last_checkpoints(a.save_dir, a.num, a.by), a.out)


@command("translate", "beam-search decode raw text with a model directory (--model DIR) or an experiment's "
                      "model (--experiment), or a BPE'd source with --model FILE --data",
    arg("input", nargs="?", help="source text, one sentence per line, raw with --model DIR or --experiment, BPE'd "
                                 "with --model FILE: a file, or - / nothing for stdin"),
    arg("--experiment", help="translate raw text with this experiment's trained model: its task's "
                             "tokenization, BPE, decoding settings and detokenization"),
    arg("--seed", type=int, help="with --experiment: which seed's run (default: its first)"),
    config_files,
    arg("--model", help="a model directory (`lwnmt export`; translates raw text with nothing else), or a model.pt "
                        "(with --data, --src, --tgt)"),
    arg("--data", help="with --model FILE: the binarized data directory the model was trained on (or a fairseq one)"),
    arg("--src", help="source language; with --model DIR or --experiment, checked against the model's"),
    arg("--tgt", help="target language; with --model DIR or --experiment, checked against the model's"),
    arg("--out-prefix", help="writes PREFIX.bpe, PREFIX.txt, PREFIX.detok (with --detokenize, --model DIR or "
                             "--experiment), "
                             "PREFIX.nbest (with --nbest) and PREFIX.json (options, speed, model size); without it "
                             "the translations go to stdout, one line per input line"),
    arg("--nbest", type=int, default=0, metavar="N",
        help="fairseq-generate's output: S- (source), H-/D- (score in base 2, text), P- (per-token scores) lines "
             "of the N best hypotheses, in PREFIX.nbest or on stdout instead of the plain lines"),
    arg("--options", default="{}", help='JSON decoding options, e.g. {"beam": 5, "lenpen": 1.0}'),
    arg("--detokenize", action="store_true"),
    arg("--threads", type=int, default=0),
    arg("--gpus", type=int, default=0, help="0 or 1: decode on a claimed GPU when one is visible"),
    arg("--gpu-locks", default="results/.gpu-locks"),
    arg("--lenpen-from", help="JSON written by pick-lenpen: its lenpen replaces the options' one"),
    fairseq_generate_flags)
def cmd_translate(a) -> None:
    import json
    import tempfile

    import torch

    from .data.io import atomic_path
    from .data.vocab import load_pair
    from .decode import BeamConfig, translate
    from .export import load_model
    from .gpus import claim
    from .models.transformer import count_parameters

    locks = claim(a.gpus, a.gpu_locks)  # noqa: F841  (held until this process ends)
    if a.threads:
        torch.set_num_threads(a.threads)
    options = json.loads(a.options)
    options.update({key: getattr(a, key) for key in ("beam", "lenpen", "max_len_a", "max_len_b", "min_len",
                                                      "batch_size", "amp") if getattr(a, key) is not None})
    if a.lenpen_from:  # the α the pick_lenpen step chose on the validation set
        options["lenpen"] = json.loads(Path(a.lenpen_from).read_text())["lenpen"]
        log.info("length penalty %s, tuned on the validation set (%s)", options["lenpen"], a.lenpen_from)
    with tempfile.TemporaryDirectory() as tmp:
        # raw text: a model directory, or the experiment's trained model and its task's preprocessing
        job = raw_text_job(a, options, Path(tmp)) if a.experiment else model_dir_job(a, options, Path(tmp)) \
            if a.model and Path(a.model).is_dir() else bpe_job(a, options, Path(tmp))
        cfg = BeamConfig.from_dict(job["options"])
        if a.nbest > cfg.beam:
            raise UserError(f"--nbest {a.nbest} with beam {cfg.beam}; expected at most the beam's hypotheses")
        src_vocab, tgt_vocab = load_pair(job["data"], job["src"], job["tgt"])
        model = load_model(job["model"], src_vocab, tgt_vocab, job["src"], job["tgt"], job.get("experiment"))
        stats = translate(model, job["source"], src_vocab, tgt_vocab, cfg, a.out_prefix, detok_lang=job["detok"],
                          nbest=a.nbest, label=job["label"])
    stats["params"] = count_parameters(model)
    log.info("%d sentences in %.1f s (%.2f sentences/s)", stats["sentences"], stats["seconds"],
             stats["sentences_per_second"])
    if a.out_prefix:
        with atomic_path(f"{a.out_prefix}.json") as tmp_json, open(tmp_json, "w") as f:
            json.dump({"options": cfg.__dict__, **stats}, f, indent=2)


def source_lines(a) -> tuple[list[str], str]:
    """The input's lines and its name for messages: INPUT, or stdin for - or nothing."""
    from .data.io import decode_lines, read_lines

    if a.input in (None, "-"):
        return list(decode_lines(sys.stdin.buffer, "stdin")), "stdin"
    return list(read_lines(a.input)), a.input


def bpe_job(a, options: dict, tmp: Path) -> dict:
    """`lwnmt translate [FILE|-] --model --data --src --tgt`: a BPE'd source, decoded as it is."""
    from .data.io import write_lines

    missing = [f"--{k.replace('_', '-')}" for k in ("model", "data", "src", "tgt") if not getattr(a, k)]
    if missing:
        raise UserError(f"missing {', '.join(missing)}: give a BPE'd INPUT (a file or - for stdin) with --model "
                        f"--data --src --tgt, or raw text with --experiment NAME")
    source, label = a.input, a.input
    if a.input in (None, "-"):
        lines, label = source_lines(a)
        source = str(tmp / "input.bpe")
        write_lines(source, lines)
    return {"model": a.model, "data": a.data, "src": a.src, "tgt": a.tgt, "source": source, "label": label,
            "detok": a.tgt if a.detokenize else None, "options": options}


def raw_text_job(a, options: dict, tmp: Path) -> dict:
    """`lwnmt translate [FILE|-] --experiment NAME`: tokenize → BPE (here) → beam search → detokenize (after); the
    model is checked against the experiment's current settings when it is loaded."""
    from . import config as cfg
    from .data.io import write_lines
    from .decode import prepare_raw

    setup = cfg.trained_model(load_config(a), a.experiment, a.seed)
    for flag, asked in (("--src", a.src), ("--tgt", a.tgt)):
        if asked is not None and asked != setup[flag[2:]]:
            raise UserError(f"{flag} {asked}: experiment {a.experiment} translates {setup['src']}→{setup['tgt']}")
    if a.model or a.data:
        raise UserError("--experiment NAME brings its own model and data; drop --model/--data (or --experiment)")
    if not Path(setup["model"]).exists():
        raise UserError(f"{setup['model']}: not trained yet; run `snakemake {setup['model']}{overlay_flags(a)}` "
                        f"first")
    lines, label = source_lines(a)
    source = tmp / "input.bpe"
    write_lines(source, prepare_raw(lines, setup["src"], setup["tokenize"], setup["codes"]))
    return {"model": setup["model"], "data": setup["data"], "src": setup["src"], "tgt": setup["tgt"],
            "source": str(source), "label": label, "detok": setup["tgt"], "options": {**setup["decode"], **options},
            "experiment": setup.get("experiment")}


def overlay_flags(a) -> str:
    """The --config files after config.yaml, as Snakemake takes them: a command printed in a hint must run as
    printed (the demo's models need --configfile config/demo.yaml)."""
    overlays = [f for f in (a.config or [])[1:]]
    return f" --configfile {' '.join(overlays)}" if overlays else ""


def model_dir_job(a, options: dict, tmp: Path) -> dict:
    """`lwnmt translate [FILE|-] --model DIR`: a model directory's own tokenization, BPE codes, dictionaries,
    decoding settings and detokenization; nothing from the checkout or the current directory."""
    from .data.io import write_lines
    from .decode import prepare_raw
    from .export import read

    if a.data:
        raise UserError(f"--model {a.model} is a model directory with its own dictionaries; drop --data")
    manifest = read(a.model, a.src, a.tgt)
    lines, label = source_lines(a)
    source = tmp / "input.bpe"
    write_lines(source, prepare_raw(lines, manifest["src"], manifest["tokenize"],
                                    manifest["paths"].get("bpe_codes")))
    return {"model": manifest["paths"]["model"], "data": manifest["dir"], "src": manifest["src"],
            "tgt": manifest["tgt"], "source": str(source), "label": label, "detok": manifest["tgt"],
            "options": {**manifest["decode"], **options}}


@command("export", "a model directory that travels: weights, dictionaries, BPE codes, tokenizer, language pair, "
                   "decoding defaults and a manifest (lwnmt translate --model DIR)",
    arg("target", help="an experiment of the config (its trained model: averaged or final, --seed's run), or a "
                       "model.pt (with --data, --src, --tgt, and --codes and --tokenize for raw text)"),
    arg("--out", required=True, help="the directory to write (replaced whole)"),
    arg("--seed", type=int, help="with an experiment: which seed's run (default: its first)"),
    config_files,
    arg("--spec", help="JSON (the workflow's export rule): what `export EXPERIMENT` reads from the config"),
    arg("--data", help="with a model.pt: the data directory it was trained on (its dictionaries)"),
    arg("--src"),
    arg("--tgt"),
    arg("--codes", help="with a model.pt: subword-nmt BPE codes (none: a word-level model)"),
    arg("--tokenize", default="{}", help='with a model.pt: JSON TokenizeOptions of the source, e.g. '
                                         '{"tokenizer": "moses", "lowercase": true}'),
    arg("--decode", default="{}", help='with a model.pt: JSON decoding defaults, e.g. {"beam": 5}'))
def cmd_export(a) -> None:
    import json

    from .data.vocab import load_pair
    from .export import write_spec

    if a.spec:
        spec = json.loads(a.spec)
    elif Path(a.target).is_file():
        missing = [f"--{k}" for k in ("data", "src", "tgt") if not getattr(a, k)]
        if missing:
            raise UserError(f"{a.target}: a model.pt needs {', '.join(missing)} (its data directory and languages)")
        dicts = load_pair(a.data, a.src, a.tgt)
        spec = {"src": a.src, "tgt": a.tgt, "src_dict": dicts[0].path, "tgt_dict": dicts[1].path, "codes": a.codes,
                "tokenize": json.loads(a.tokenize), "decode": json.loads(a.decode)}
    else:
        from .export import spec_for

        if a.target.endswith(".pt"):
            raise UserError(f"{a.target}: no such file; expected a model.pt or an experiment name")
        spec = spec_for(load_config(a), a.target, a.seed)
        if not Path(spec["model"]).exists():
            raise UserError(f"{spec['model']}: not trained yet; run `snakemake {spec['model']}{overlay_flags(a)}` "
                            f"first")
    out = write_spec(a.target if Path(a.target).is_file() else spec["model"], spec, a.out)
    print(f"wrote {out}; translate with: lwnmt translate --model {out} < raw.{spec['src']}")


@command("import-fairseq", "convert a fairseq 0.12 Transformer checkpoint into our model.pt",
    arg("checkpoint"),
    arg("--data", required=True, help="the fairseq data directory it was trained on (dict.*.txt)"),
    arg("--src", required=True),
    arg("--tgt", required=True),
    arg("--out", required=True, help="directory for model.pt and the dictionaries (a --data for "
                                     "lwnmt translate)"))
def cmd_import_fairseq(a) -> None:
    from .fairseq_import import import_fairseq

    target = import_fairseq(a.checkpoint, a.data, a.src, a.tgt, a.out)
    log.info("wrote %s; decode with: lwnmt translate INPUT --model %s --data %s --src %s --tgt %s --out-prefix OUT",
             target, target, a.out, a.src, a.tgt)


@command("pick-lenpen", "the length penalty with the best validation BLEU (decode.tune_lenpen)",
    arg("scores", nargs="+", help="score.json of the validation set decoded at each α, in --lenpen order"),
    arg("--lenpen", type=float, nargs="+", required=True, help="the α of each score file"),
    arg("--out", required=True))
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


@command("score", "BLEU with sacrebleu (tokenized / detokenized / lowercased / compound-split)",
    arg("hyp"),
    arg("--ref", nargs="+", required=True, help="reference file(s), one per reference, each as long as HYP"),
    arg("--stacked-refs", action="store_true",
        help="each --ref file holds several references one after the other (a multiple of HYP's lines)"),
    arg("--source", help="source text (tokenized, no BPE) for length buckets"),
    arg("--options", default="{}", help='JSON, e.g. {"tokenize": "none", "lowercase": true}'),
    arg("--meta", help="JSON merged into score.json (experiment, seed, ...)"),
    arg("--decoding", help="the translate step's JSON (params, sentences/s), kept in score.json"),
    arg("--allow-bpe", action="store_true", help="score text that still has BPE's '@@ ' (refused by default: "
                                                 "translate's .bpe output is not what BLEU compares)"),
    arg("--out", required=True))
def cmd_score(a) -> None:
    import json

    from .data.io import atomic_path
    from .score import ScoreConfig, score_files

    cfg = ScoreConfig.from_dict(json.loads(a.options))
    result = score_files(a.hyp, a.ref, cfg, a.source, a.stacked_refs, a.allow_bpe)
    result["options"] = {**cfg.__dict__, "buckets": list(cfg.buckets)}
    if a.meta:
        result.update(json.loads(a.meta))
    if a.decoding:  # the translate step's record: model size and decoding speed travel with the score
        result["decoding"] = json.loads(Path(a.decoding).read_text())
    print(f"BLEU = {result['bleu']:.2f}  ({result['signature']})")
    with atomic_path(a.out) as tmp, open(tmp, "w") as f:
        json.dump(result, f, indent=2)


@command("table", "regenerate one paper table (md + csv) from score.json files",
    arg("--spec", required=True, help="JSON table spec (built by workflow/rules/report.smk)"),
    arg("--out-prefix", required=True))
def cmd_table(a) -> None:
    import json

    from .report.tables import write

    write(json.loads(a.spec), a.out_prefix)
    print(Path(f"{a.out_prefix}.md").read_text(encoding="utf-8"))


@command("summary", "every row of every table in one md + csv (paper, ours, delta, status)",
    arg("tables", nargs="+", help="the tables' CSV files (results/tables/<paper>/<table>.csv)"),
    arg("--out-prefix", required=True))
def cmd_summary(a) -> None:
    from .report.tables import summary

    summary(a.tables, a.out_prefix)


@command("inspect", "read what a figure shows out of a trained model into JSON (aggregation shares, attention)",
    arg("model"),
    arg("--kind", required=True, choices=["aggregation_shares", "attention"]),
    arg("--options", default="{}", help='JSON, attention: {"data", "src", "tgt", "source", "hypothesis", '
                                        '"sentence", "module"}'),
    arg("--out", required=True))
def cmd_inspect(a) -> None:
    import json

    from .inspection import write

    write(a.kind, a.model, json.loads(a.options), a.out)


@command("figure", "draw one paper figure (png + pdf) from our runs",
    arg("--spec", required=True, help="JSON figure spec (built by workflow/rules/report.smk)"),
    arg("--out-prefix", required=True))
def cmd_figure(a) -> None:
    import json

    from .report.figures import write

    missing = write(json.loads(a.spec), a.out_prefix)
    print(f"wrote {a.out_prefix}.png and .pdf" + (f"; not drawn: {'; '.join(missing)}" if missing else ""))


def load_config(a) -> dict:
    """The --config files merged and checked as `snakemake -n` checks them (schema, references, stage settings)."""
    from . import config as cfg
    from .checks import check_experiments

    files = a.config or ["config.yaml"]
    config = cfg.load(*files)
    try:
        check_experiments(config)
    except UserError as err:
        raise cfg.located(err, files) from None
    return config


@command("params", "exact parameter count of each experiment's model beside the paper's",
    arg("experiments", nargs="*", help="default: every experiment in the config"),
    config_files,
    arg("--vocab", type=int, help="joint vocabulary size (no data needed)"),
    arg("--src-vocab", type=int),
    arg("--tgt-vocab", type=int),
    arg("--format", choices=["table", "csv"], default="table"))
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


@command("plan", "GPU-hours each table needs, estimated before running anything",
    config_files,
    arg("--gpu", default="a100", help="the GPU to price on: h200, h100, a100 (default), l40s, a10, v100, t4"),
    arg("--mfu", type=float, default=0.33, help="assumed model FLOP utilisation: sustained / dense peak (0.33)"),
    arg("--tflops", type=float, help="instead of --mfu: sustained mixed-precision TFLOP/s per GPU (tf32 and fp32 "
        "rows scaled by the GPU's peak ratios)"),
    arg("--format", choices=["table", "csv"], default="table"))
def cmd_plan(a) -> None:
    from .plan import GPUS, Pricing, plan, render, render_budgets, rows

    if a.gpu not in GPUS:
        raise UserError(f"--gpu {a.gpu}: unknown GPU; known: {', '.join(GPUS)}")
    if not 0 < a.mfu <= 1:
        raise UserError(f"--mfu {a.mfu}: expected a fraction in (0, 1]")
    pricing = Pricing(a.gpu, a.mfu, a.tflops)
    config = load_config(a)
    records = plan(config)
    if a.format == "csv":
        import csv

        table = rows(records, pricing, config)
        writer = csv.DictWriter(sys.stdout, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
        return
    print(render(records, pricing))
    print()
    print(render_budgets(config))


@command("readme", "put a run's table and figures into the README's results section",
    arg("--readme", default="README.md"),
    arg("--table", required=True, help="a results/tables/<paper>/<table>.md"),
    arg("--figure", nargs="*", default=[], help="figures to show (copied to docs/demo/)"),
    arg("--commit", help="the commit the run was made from (default: this checkout's HEAD)"))
def cmd_readme(a) -> None:
    import subprocess

    from .report.readme import update

    commit = a.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True).stdout.strip() or None
    update(a.readme, a.table, a.figure, commit)


@command("docs", "rewrite the generated blocks of README.md and docs/*.md (plan, parameter counts, figure kinds) "
                 "from config.yaml",
    arg("--check", action="store_true", help="change nothing; exit 1 naming every stale block"))
def cmd_docs(a) -> None:
    from .docs import update

    stale = update(check=a.check)
    if a.check and stale:
        raise UserError(f"stale generated blocks: {'; '.join(stale)}; run `lwnmt docs` (or `make docs`)")
    print(f"{len(stale)} generated block(s) {'stale' if a.check else 'rewritten'}"
          + (f": {'; '.join(stale)}" if stale else ""))


@command("rehearse", "run every row of config.yaml at toy size on stand-in data, through Snakemake, and summarise "
                     "what ran and what failed",
    arg("--dir", default="rehearsal", help="working directory (results, stand-ins, summary)"),
    arg("--mirror", help="the data mirror (default: $LWNMT_DATA_MIRROR)"),
    arg("--cores", type=int, default=os.cpu_count() or 1),
    arg("snakemake_args", nargs="*", help="passed on to snakemake (after --)"))
def cmd_rehearse(a) -> None:
    from .rehearsal.run import rehearse

    mirror = a.mirror or os.environ.get("LWNMT_DATA_MIRROR")
    if not mirror or not Path(mirror).is_dir():
        raise UserError(f"--mirror {mirror!r} is not a directory; the rehearsal builds its stand-ins from the data "
                        f"mirror (--mirror DIR or $LWNMT_DATA_MIRROR; README.md describes its layout)")
    sys.exit(rehearse(Path(a.dir), Path(mirror), a.cores, a.snakemake_args))


@command("status", "which tasks, experiments and table rows can run, and why not",
    config_files)
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
            print(f"  {s.state:<8} {s.name:<{width}}  {'' if s.state == 'ok' else s.reason}")
    from .plan import budget_warnings

    flagged = budget_warnings(config)
    print(f"\nbudgets: {len(flagged)} experiments whose averaging, early stopping, warm-up or restart cannot work "
          f"as configured (estimated from each task's `estimate`; `lwnmt plan` lists every budget)")
    for line in flagged:
        print(f"  flagged {line}")
    from .data.fetch import unpinned_downloads

    unpinned = unpinned_downloads(config)
    print(f"\nunpinned: {len(unpinned)} downloaded files no published checksum pins (checked by Content-Length and "
          f"against the size and sha256 of their first copy, recorded beside it in <file>.sha256)")
    for datasets, name, why in unpinned:
        print(f"  unpinned {name} ({', '.join(datasets)}): {why}")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="lwnmt", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and tracebacks")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help, arguments, handler) in COMMANDS.items():
        p = sub.add_parser(name, help=help)
        # also after the subcommand; SUPPRESS keeps a -v given before it
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="debug logging and tracebacks")
        for add in arguments:
            add(p)
        p.set_defaults(func=handler)
    return parser


# Set by the workflow (workflow/rules/common.smk) for its jobs, whose stderr is a log file and whose stdout is
# Snakemake's console: the one-line error is copied there, so the console shows it, not only a CalledProcessError.
ERRORS_ON_STDOUT = "LWNMT_ERRORS_ON_STDOUT"


def print_error(line: str) -> None:
    """The one-line error on stderr; also on stdout inside a workflow job (ERRORS_ON_STDOUT) when stderr is a log
    file. Never otherwise: a user's stdout is data (`lwnmt translate … > hyp.txt 2> err.log`), and an error line in
    it would be scored as a translation."""
    print(line, file=sys.stderr)
    if not os.environ.get(ERRORS_ON_STDOUT):
        return
    try:
        err, out = os.fstat(sys.stderr.fileno()), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):  # captured streams without a file descriptor (tests)
        return
    if stat.S_ISREG(err.st_mode) and (err.st_dev, err.st_ino) != (out.st_dev, out.st_ino):
        print(line, flush=True)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        args.func(args)
    except UserError as err:
        print_error(f"lwnmt {args.command}: error: {err}")
        sys.exit(1)
    except OSError as err:  # a path given on the command line that is not there (or not readable)
        if args.verbose or err.filename is None:
            raise
        print_error(f"lwnmt {args.command}: error: {err.filename}: {err.strerror} (--verbose for the traceback)")
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C outside a training loop (which checkpoints and exits 75 by itself)
        if args.verbose:
            raise
        print_error(f"lwnmt {args.command}: interrupted (Ctrl-C)")
        sys.exit(130)  # 128 + SIGINT, as a shell reports it


def run() -> None:
    """The program `lwnmt` (and `python -m layerwise_nmt`): main(), then, once the command has succeeded, the
    process ends without Python's teardown, which after importing torch takes 0.3-0.6 s (~5% of a test set's
    decoding, paid by each of a run's hundreds of jobs). Every command has closed its files by then; the streams
    and log handlers are flushed here. An error (SystemExit, an exception) ends the process the usual way."""
    main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    run()
