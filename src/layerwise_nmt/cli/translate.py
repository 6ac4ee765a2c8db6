"""The model commands: translate (the setup is translation.py's), export and import-fairseq."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from .. import UserError
from ..job_specs import ExportSpec, TranslateSpec
from ..inference.ctranslate2_export import NO_QUANTIZATION, QUANTIZATIONS
from ..settings import AMP_CHOICES, json_object
from . import common
from .common import add_config_files, add_user_code_flags, command, integer, refuse_beside_spec, user_code

log = logging.getLogger("layerwise_nmt")
SERVE_HINT = 'wrote {}; serve it with ctranslate2.Translator (docs/usage.md, "Serving a baseline with CTranslate2")'


def add_commands(sub) -> None:
    add_translate(sub)
    p = command(
        sub,
        "export",
        "a model directory that travels: weights, dictionaries, BPE codes, tokenizer, language "
        "pair, decoding defaults and a manifest (lwnmt translate --model DIR)",
        cmd_export,
    )
    p.add_argument(
        "target",
        help="an experiment of the config (its trained model: averaged or final, --seed's run), "
        "or a model.pt (with --data, --src, --tgt, and --codes and --tokenize for raw text); with --format "
        "ctranslate2 also a model directory `lwnmt export` wrote",
    )
    p.add_argument("--out", required=True, help="the directory to write (replaced whole)")
    p.add_argument(
        "--format",
        choices=("lwnmt", "ctranslate2"),
        default="lwnmt",
        help="lwnmt: a directory `lwnmt "
        "translate --model` serves; ctranslate2: a CTranslate2 model directory (the plain Transformer only; "
        "needs the ctranslate2 extra)",
    )
    p.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        help=f"with --format ctranslate2: CTranslate2's weight type (default {NO_QUANTIZATION}: float32, as trained)",
    )
    p.add_argument("--seed", type=int, help="with an experiment: which seed's run (default: its first)")
    add_config_files(p)
    p.add_argument(
        "--spec",
        help="the export job's spec, JSON (job_specs.ExportSpec, built by the export rule): what `export "
        "EXPERIMENT` reads from the config",
    )
    p.add_argument("--data", help="with a model.pt: the data directory it was trained on (its dictionaries)")
    p.add_argument("--src")
    p.add_argument("--tgt")
    p.add_argument("--codes", help="with a model.pt: subword-nmt BPE codes (none: a word-level model)")
    p.add_argument(
        "--tokenize",
        default="{}",
        help='with a model.pt: JSON TokenizeOptions of the source, e.g. {"tokenizer": "moses", "lowercase": true}',
    )
    p.add_argument("--decode", default="{}", help='with a model.pt: JSON decoding defaults, e.g. {"beam": 5}')

    p = command(
        sub, "import-fairseq", "convert a fairseq 0.12 Transformer checkpoint into our model.pt", cmd_import_fairseq
    )
    p.add_argument("checkpoint")
    p.add_argument("--data", required=True, help="the fairseq data directory it was trained on (dict.*.txt)")
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument(
        "--out", required=True, help="directory for model.pt and the dictionaries (a --data for lwnmt translate)"
    )


def add_translate(sub) -> None:
    p = command(
        sub,
        "translate",
        "beam-search decode raw text with a model directory (--model DIR) or an "
        "experiment's model (--experiment), or a BPE'd source with --model FILE --data",
        cmd_translate,
    )
    p.add_argument(
        "input",
        nargs="?",
        help="source text, one sentence per line, raw with --model DIR or "
        "--experiment, BPE'd with --model FILE: a file, or - / nothing for stdin",
    )
    p.add_argument(
        "--experiment",
        help="translate raw text with this experiment's trained model: its task's "
        "tokenization, BPE, decoding settings and detokenization",
    )
    p.add_argument("--seed", type=int, help="with --experiment: which seed's run (default: its first)")
    add_config_files(p)
    p.add_argument(
        "--model",
        help="a model directory (`lwnmt export`; translates raw text with nothing else), or a "
        "model.pt (with --data, --src, --tgt)",
    )
    p.add_argument(
        "--data", help="with --model FILE: the binarized data directory the model was trained on (or a fairseq one)"
    )
    p.add_argument("--src", help="source language; with --model DIR or --experiment, checked against the model's")
    p.add_argument("--tgt", help="target language; with --model DIR or --experiment, checked against the model's")
    p.add_argument(
        "--out-prefix",
        help="writes PREFIX.bpe, PREFIX.txt, PREFIX.detok (with --detokenize, --model "
        "DIR or --experiment), PREFIX.nbest (with --nbest) and PREFIX.json (options, speed, model "
        "size); without it the translations go to stdout, one line per input line",
    )
    p.add_argument(
        "--nbest",
        type=integer(0),
        default=0,
        metavar="N",
        help="fairseq-generate's output: S- (source), H-/D- "
        "(score in base 2, text), P- (per-token scores) lines of the N best hypotheses, in PREFIX.nbest "
        "or on stdout instead of the plain lines",
    )
    p.add_argument("--options", help='JSON decoding options, e.g. {"beam": 5, "lenpen": 1.0}')
    p.add_argument(
        "--detokenize",
        action="store_true",
        help="also write PREFIX.detok: the translations with BPE removed and Moses-detokenized (--model DIR or "
        "--experiment, which know the target language's tokenizer)",
    )
    p.add_argument("--threads", type=integer(0), default=0, help="torch intra-op threads (0 = PyTorch's default)")
    p.add_argument("--gpus", type=integer(0), default=0, help="0 or 1: decode on a claimed GPU when one is visible")
    p.add_argument("--gpu-locks", help="lock files of the GPU allocator (default: results/.gpu-locks)")
    p.add_argument("--lenpen-from", help="JSON written by pick-lenpen: its lenpen replaces the options' one")
    add_user_code_flags(p)
    p.add_argument(
        "--spec",
        help="the decoding job's spec, JSON (job_specs.TranslateSpec, built by the translate rules): its "
        "options, data, languages, tuned length penalty and model code, instead of those flags",
    )
    add_fairseq_generate_flags(p)


def add_fairseq_generate_flags(parser: argparse.ArgumentParser) -> None:
    for flag, kind in (
        ("--beam", int),
        ("--lenpen", float),
        ("--max-len-a", float),
        ("--max-len-b", int),
        ("--min-len", int),
        ("--batch-size", int),
    ):
        parser.add_argument(flag, type=kind, help="as fairseq-generate's; overrides --options")
    parser.add_argument(
        "--amp",
        choices=AMP_CHOICES,
        help="precision (default auto: bf16 where a probe of a few beam steps finds it faster, "
        "else TF32 on a GPU, fp32 on a CPU; fp16 on GPUs without bf16; none = fp32, as "
        "fairseq-generate without --fp16/--bf16; bf16-weights: a bf16 copy of the model, no autocast); "
        "overrides --options",
    )


def cmd_translate(a) -> None:
    import json
    import tempfile

    from ..grid.layout import GPU_LOCKS
    from ..training.gpu_lock import claim
    from ..training.threads import set_threads

    config = common.load_config(a) if a.experiment else None
    if config is not None:  # a misspelt name is said before any other line
        from ..grid.experiments import require_experiment

        require_experiment(config, a.experiment)
    if a.spec:
        take_spec(a, TranslateSpec.from_json(a.spec))
    set_threads(a.threads)  # before torch is imported: how OpenMP's threads wait is read once, when it loads
    locks = claim(a.gpus, a.gpu_locks or GPU_LOCKS)  # noqa: F841  (held until this process ends)
    from ..inference import translation
    from ..inference.decode import check_out_prefix
    from ..data.io import atomic_path
    from ..grid import trained_model

    check_out_prefix(a.out_prefix, a.input)
    options = translation.decoding_options(
        a.options or "{}", {k: getattr(a, k) for k in translation.FAIRSEQ_OPTIONS}, a.lenpen_from
    )
    request = translation.Request(
        **{key: getattr(a, key) for key in translation.REQUEST_ARGUMENTS},
        config=config,
        config_files=common.config_files(a),
    )
    with tempfile.TemporaryDirectory() as tmp:
        job = translation.prepare(request, options, Path(tmp), trained_model)
        stats, cfg = translation.translate(job, a.out_prefix, a.nbest, user_code(a))
    log.info(
        "%d sentences in %.1f s (%.2f sentences/s)", stats["sentences"], stats["seconds"], stats["sentences_per_second"]
    )
    if a.out_prefix:
        with atomic_path(f"{a.out_prefix}.json") as tmp_json, open(tmp_json, "w") as f:
            json.dump({"options": cfg.__dict__, **stats}, f, indent=2)


def take_spec(a, spec: TranslateSpec) -> None:
    """The spec's parts as the flags they stand for (a decoding the rules run is one a user can type); a one-line
    UserError when one of those flags is given beside it."""
    import json

    from ..grid.own_models import user_code_of

    stood_for = ("options", "data", "src", "tgt", "lenpen_from", "user_dir", "user_module")
    refuse_beside_spec(a, stood_for, "the decoding settings, data, languages, tuned length penalty and model code")
    a.options = json.dumps(spec.decode)
    for flag in ("data", "src", "tgt", "lenpen_from"):
        setattr(a, flag, getattr(spec, flag))
    for flag, value in user_code_of(spec.user_model).items():
        setattr(a, flag, value)


def cmd_export(a) -> None:
    from ..inference import ctranslate2_export, export

    if a.quantization and a.format != "ctranslate2":
        raise UserError(f"--quantization {a.quantization}: only with --format ctranslate2")
    if a.format == "ctranslate2" and Path(a.target).is_dir():
        print(SERVE_HINT.format(ctranslate2_export.convert(a.target, a.out, a.quantization or NO_QUANTIZATION)))
        return
    if a.spec:
        spec = ExportSpec.from_json(a.spec)
    elif Path(a.target).is_file():
        spec = export.spec_for_file(
            a.target,
            a.data,
            a.src,
            a.tgt,
            a.codes,
            json_object(a.tokenize, "--tokenize"),
            json_object(a.decode, "--decode"),
        )
    elif a.target.endswith(".pt"):
        raise UserError(f"{a.target}: no such file; expected a model.pt or an experiment name")
    else:
        spec = trained_spec_for(common.load_config(a), a.target, a.seed, common.config_files(a))
    model = a.target if Path(a.target).is_file() else spec.model
    if model is None:
        raise UserError(f'--spec: {a.target} is no model.pt and the export spec names no "model"; expected one')
    if a.format == "ctranslate2":
        print(SERVE_HINT.format(ctranslate2_export.write_spec(model, spec, a.out, a.quantization or NO_QUANTIZATION)))
        return
    out = export.write_spec(model, spec, a.out)
    print(f"wrote {out}; translate with: lwnmt translate --model {out} < raw.{spec.src}")


def trained_spec_for(config: dict, name: str, seed: int | None, config_files: list[str]) -> ExportSpec:
    """grid.export_spec(), once the experiment's model is trained (a UserError saying how to train it otherwise)."""
    from ..grid import export_spec
    from ..inference.export import not_trained

    spec = export_spec(config, name, seed)
    assert spec.model is not None  # an experiment's export names its run's model
    if not Path(spec.model).exists():
        raise not_trained(spec.model, config_files)
    return spec


def cmd_import_fairseq(a) -> None:
    from ..inference.fairseq_import import import_fairseq

    target = import_fairseq(a.checkpoint, a.data, a.src, a.tgt, a.out)
    log.info(
        "wrote %s; decode with: lwnmt translate INPUT --model %s --data %s --src %s --tgt %s --out-prefix OUT",
        target,
        target,
        a.out,
        a.src,
        a.tgt,
    )
