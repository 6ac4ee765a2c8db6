"""What `lwnmt translate` decodes, resolved in one place: the model, its dictionaries, the languages, the BPE'd
source and the decoding settings, from one of three requests:

    --model DIR            a model directory (`lwnmt export`): its own tokenization, BPE codes, dictionaries,
                           decoding settings and detokenization; nothing from the checkout or the current directory
    --experiment NAME      an experiment's trained model and its task's preprocessing, the model checked against the
                           experiment's current settings when it is loaded
    --model FILE --data    a BPE'd source, decoded as it is, with the data directory's dictionaries

Raw text is tokenized and BPE'd here (decode.prepare_raw) into a file under the caller's temporary directory;
`translate` then loads the model and runs the beam search (decode.translate).
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import UserError
from .beam_config import BeamConfig

log = logging.getLogger(__name__)
FAIRSEQ_OPTIONS = ("beam", "lenpen", "max_len_a", "max_len_b", "min_len", "batch_size", "amp")  # flags over --options
REQUEST_ARGUMENTS = ("input", "model", "data", "src", "tgt", "detokenize", "experiment", "seed")  # = Request's own


@dataclass
class Request:
    """What the user asked for (lwnmt translate's arguments); `config` is the loaded config, needed only with
    `experiment`, and `config_files` the files it came from (for the hint of a model not trained yet)."""

    input: str | None = None  # a file, or - / None for stdin
    model: str | None = None
    data: str | None = None
    src: str | None = None
    tgt: str | None = None
    detokenize: bool = False
    experiment: str | None = None
    seed: int | None = None
    config: dict | None = None
    config_files: list[str] = field(default_factory=list)


@dataclass
class Job:
    """What decoding needs: the model file, the directory of its dictionaries, the languages, the BPE'd source
    file and its name for messages, the detokenizer's language (None: none), the decoding options, and the
    experiment's settings the model must match (None: no such check)."""

    model: str
    data: str
    src: str
    tgt: str
    source: str
    label: str
    detok: str | None
    options: dict
    experiment: dict | None = None


def decoding_options(options: str, flags: dict, lenpen_from: str | None = None) -> dict:
    """--options (JSON) with the fairseq-style flags given laid over it, and the length penalty the pick-lenpen
    step tuned on the validation set (`lenpen_from`) over both."""
    merged = json.loads(options)
    merged.update({key: value for key, value in flags.items() if value is not None})
    if lenpen_from:
        merged["lenpen"] = json.loads(Path(lenpen_from).read_text())["lenpen"]
        log.info("length penalty %s, tuned on the validation set (%s)", merged["lenpen"], lenpen_from)
    return merged


def prepare(request: Request, options: dict, tmp: Path) -> Job:
    """The Job of `request`, its raw text (if any) tokenized and BPE'd into `tmp`; `options` override the model
    directory's or the experiment's decoding settings."""
    model = request.model
    if request.experiment:
        return experiment_job(request, options, tmp)
    if model and Path(model).is_dir():
        return model_dir_job(request, options, tmp)
    # a path that is not there, given without --data and not named like a model file, was meant as a directory
    if model and not request.data and Path(model).suffix != ".pt" and not Path(model).exists():
        raise UserError(f"--model {model}: no such model directory; expected a directory written by `lwnmt export` "
                        f"(or a model.pt file with --data, --src, --tgt)")
    return bpe_job(request, options, tmp)


def source_lines(request: Request) -> tuple[list[str], str]:
    """The input's lines and its name for messages: INPUT, or stdin for - or nothing."""
    from .data.io import decode_lines, read_lines

    if request.input in (None, "-"):
        return list(decode_lines(sys.stdin.buffer, "stdin")), "stdin"
    return list(read_lines(request.input)), request.input


def bpe_job(request: Request, options: dict, tmp: Path) -> Job:
    """`lwnmt translate [FILE|-] --model --data --src --tgt`: a BPE'd source, decoded as it is."""
    from .data.io import write_lines

    missing = [f"--{key}" for key in ("model", "data", "src", "tgt") if not getattr(request, key)]
    if missing:
        raise UserError(f"missing {', '.join(missing)}: give a BPE'd INPUT (a file or - for stdin) with --model "
                        f"--data --src --tgt, or raw text with --experiment NAME")
    source, label = request.input, request.input
    if request.input in (None, "-"):
        lines, label = source_lines(request)
        source = str(tmp / "input.bpe")
        write_lines(source, lines)
    return Job(request.model, request.data, request.src, request.tgt, source, label,
               request.tgt if request.detokenize else None, options)


def experiment_job(request: Request, options: dict, tmp: Path) -> Job:
    """`lwnmt translate [FILE|-] --experiment NAME`: tokenize → BPE (here) → beam search → detokenize (after)."""
    from . import grid as cfg
    from .export import not_trained

    setup = cfg.trained_model(request.config, request.experiment, request.seed)
    for flag, asked in (("--src", request.src), ("--tgt", request.tgt)):
        if asked is not None and asked != setup[flag[2:]]:
            raise UserError(f"{flag} {asked}: experiment {request.experiment} translates "
                            f"{setup['src']}→{setup['tgt']}")
    if request.model or request.data:
        raise UserError("--experiment NAME brings its own model and data; drop --model/--data (or --experiment)")
    if not Path(setup["model"]).exists():
        raise not_trained(setup["model"], request.config_files)
    source = raw_source(request, tmp, setup["src"], setup["tokenize"], setup["codes"])
    return Job(setup["model"], setup["data"], setup["src"], setup["tgt"], source[0], source[1], setup["tgt"],
               {**setup["decode"], **options}, setup.get("experiment"))


def model_dir_job(request: Request, options: dict, tmp: Path) -> Job:
    """`lwnmt translate [FILE|-] --model DIR`: everything from the directory's manifest (export.read checks it)."""
    from .export import read

    if request.data:
        raise UserError(f"--model {request.model} is a model directory with its own dictionaries; drop --data")
    manifest = read(request.model, request.src, request.tgt)
    source = raw_source(request, tmp, manifest["src"], manifest["tokenize"], manifest["paths"].get("bpe_codes"))
    return Job(manifest["paths"]["model"], manifest["dir"], manifest["src"], manifest["tgt"], source[0], source[1],
               manifest["tgt"], {**manifest["decode"], **options})


def raw_source(request: Request, tmp: Path, lang: str, tokenize: dict, codes: str | None) -> tuple[str, str]:
    """The raw input tokenized and BPE'd into tmp/input.bpe: (that file, the input's name for messages)."""
    from .data.io import write_lines
    from .decode import prepare_raw

    lines, label = source_lines(request)
    source = tmp / "input.bpe"
    write_lines(source, prepare_raw(lines, lang, tokenize, codes))
    return str(source), label


def translate(job: Job, out_prefix: str | None, nbest: int = 0) -> tuple[dict, BeamConfig]:
    """Decode `job`: the translations to PREFIX.* or stdout (decode.translate); returns the decoding's statistics
    (with the model's parameter count) and the settings it decoded with."""
    from .data.vocab import load_pair
    from .decode import load_model, translate as decode
    from .models.transformer import count_parameters

    cfg = BeamConfig.from_dict(job.options)
    if nbest > cfg.beam:
        raise UserError(f"--nbest {nbest} with beam {cfg.beam}; expected at most the beam's hypotheses")
    src_vocab, tgt_vocab = load_pair(job.data, job.src, job.tgt)
    model = load_model(job.model, src_vocab, tgt_vocab, job.src, job.tgt, job.experiment)
    stats = decode(model, job.source, src_vocab, tgt_vocab, cfg, out_prefix, detok_lang=job.detok, nbest=nbest,
                   label=job.label)
    stats["params"] = count_parameters(model)
    return stats, cfg
