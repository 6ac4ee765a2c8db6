"""What `lwnmt translate` decodes, resolved in one place: the model, its dictionaries, the languages, the BPE'd
source and the decoding settings, from one of three requests:

    --model DIR            a model directory (`lwnmt export`): its own tokenization, BPE codes, dictionaries,
                           decoding settings and detokenization; nothing from the checkout or the current directory
    --experiment NAME      an experiment's trained model and its task's preprocessing, the model checked against the
                           experiment's current settings when it is loaded
    --model FILE --data    a BPE'd source, decoded as it is, with the data directory's dictionaries

Raw text is tokenized and BPE'd here (decode.prepare_raw) into a file under the caller's temporary directory;
`translate` then loads the model and runs the beam search (decode.translate_file). A line the model cannot read — its
tokens mostly unknown to the model's dictionary, or characters lost on the way (unknown tokens become <unk>;
normalisation and tokenization may remove characters; tags and entities escaped and split into pieces it never saw
whole) — gets one warning naming it (`input_warnings`): a fluent translation would otherwise hide it.
"""

from __future__ import annotations

import html
import json
import logging
import re
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from collections.abc import Callable, Iterable

from .. import UserError
from ..settings import json_object
from .config import BeamConfig

log = logging.getLogger(__name__)
FAIRSEQ_OPTIONS = ("beam", "lenpen", "max_len_a", "max_len_b", "min_len", "batch_size", "amp")  # flags over --options
REQUEST_ARGUMENTS = ("input", "model", "data", "src", "tgt", "detokenize", "experiment", "seed")  # = Request's own
MOSTLY_UNKNOWN = 0.5  # a line with more of its tokens unknown than this is not what the model translates
LISTED = 10  # unknown tokens or removed characters a warning lists before "and N more"


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
    file and its name for messages, the detokenizer's language (None: none), the decoding options, the
    experiment's settings the model must match (None: no such check), and for raw text the characters of each
    line that normalisation and tokenization removed (None: a BPE'd source, decoded as given)."""

    model: str
    data: str
    src: str
    tgt: str
    source: str
    label: str
    detok: str | None
    options: dict
    experiment: dict | None = None
    removed: list[list[str]] | None = None
    # per line of raw text, each tag or entity in it and the tokens it became (`markup_tokens`)
    markup: list[list[tuple[str, list[str]]]] | None = None


def decoding_options(options: str, flags: dict, lenpen_from: str | None = None) -> dict:
    """--options (JSON) with the fairseq-style flags given laid over it, and the length penalty the pick-lenpen
    step tuned on the validation set (`lenpen_from`) over both."""
    merged = json_object(options, "--options")
    merged.update({key: value for key, value in flags.items() if value is not None})
    if lenpen_from:
        merged["lenpen"] = tuned_lenpen(lenpen_from)
        log.info("length penalty %s, tuned on the validation set (%s)", merged["lenpen"], lenpen_from)
    return merged


def tuned_lenpen(path: str) -> float:
    """The length penalty in `lwnmt pick-lenpen`'s JSON, or a one-line UserError naming the file."""
    try:
        tuned = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"--lenpen-from {path}: not JSON ({err}); expected the file lwnmt pick-lenpen writes") from None
    if not isinstance(tuned, dict) or not isinstance(tuned.get("lenpen"), (int, float)):
        raise UserError(f"--lenpen-from {path}: no number under 'lenpen'; expected the file lwnmt pick-lenpen writes")
    return tuned["lenpen"]


def prepare(request: Request, options: dict, tmp: Path, trained_model: Callable[..., dict] | None = None) -> Job:
    """The Job of `request`, its raw text (if any) tokenized and BPE'd into `tmp`; `options` override the model
    directory's or the experiment's decoding settings. `trained_model(config, experiment, seed)`, what an experiment
    translates with (grid.trained_model: the grid is above this folder, so the caller hands it in), is needed only
    with `request.experiment`."""
    model = request.model
    if request.experiment:
        assert trained_model is not None, "an experiment's request needs trained_model"
        return experiment_job(request, options, tmp, trained_model)
    if model and Path(model).is_dir():
        return model_dir_job(request, options, tmp)
    # a path that is not there, given without --data and not named like a model file, was meant as a directory
    if model and not request.data and Path(model).suffix != ".pt" and not Path(model).exists():
        raise UserError(
            f"--model {model}: no such model directory; expected a directory written by `lwnmt export` "
            f"(or a model.pt file with --data, --src, --tgt)"
        )
    return bpe_job(request, options, tmp)


def source_lines(request: Request) -> tuple[list[str], str]:
    """The input's lines and its name for messages: INPUT, or stdin for - or nothing."""
    from ..data.io import read_lines, utf8_lines

    if request.input in (None, "-"):
        return list(utf8_lines(sys.stdin.buffer, "stdin")), "stdin"
    return list(read_lines(request.input)), request.input


def bpe_job(request: Request, options: dict, tmp: Path) -> Job:
    """`lwnmt translate [FILE|-] --model --data --src --tgt`: a BPE'd source, decoded as it is."""
    from ..data.io import write_lines

    missing = [f"--{key}" for key in ("model", "data", "src", "tgt") if not getattr(request, key)]
    if missing:
        raise UserError(
            f"missing {', '.join(missing)}: give a BPE'd INPUT (a file or - for stdin) with --model "
            f"--data --src --tgt, or raw text with --experiment NAME"
        )
    assert request.model and request.data and request.src and request.tgt  # checked just above
    if request.input is None or request.input == "-":
        lines, label = source_lines(request)
        source = str(tmp / "input.bpe")
        write_lines(source, lines)
    else:
        source, label = request.input, request.input
    return Job(
        request.model,
        request.data,
        request.src,
        request.tgt,
        source,
        label,
        request.tgt if request.detokenize else None,
        options,
    )


def experiment_job(request: Request, options: dict, tmp: Path, trained_model: Callable[..., dict]) -> Job:
    """`lwnmt translate [FILE|-] --experiment NAME`: tokenize → BPE (here) → beam search → detokenize (after)."""
    from .export import not_trained

    assert request.config is not None and request.experiment is not None  # --experiment: the CLI loads the config
    setup = trained_model(request.config, request.experiment, request.seed)
    for flag, asked in (("--src", request.src), ("--tgt", request.tgt)):
        if asked is not None and asked != setup[flag[2:]]:
            raise UserError(f"{flag} {asked}: experiment {request.experiment} translates {setup['src']}→{setup['tgt']}")
    if request.model or request.data:
        raise UserError("--experiment NAME brings its own model and data; drop --model/--data (or --experiment)")
    if not Path(setup["model"]).exists():
        raise not_trained(setup["model"], request.config_files)
    source = raw_source(request, tmp, setup["src"], setup["tokenize"], setup["codes"])
    return Job(
        setup["model"],
        setup["data"],
        setup["src"],
        setup["tgt"],
        source[0],
        source[1],
        setup["tgt"],
        {**setup["decode"], **options},
        setup.get("experiment"),
        *source[2:],
    )


def model_dir_job(request: Request, options: dict, tmp: Path) -> Job:
    """`lwnmt translate [FILE|-] --model DIR`: everything from the directory's manifest (export.read checks it)."""
    from .export import read

    if request.data:
        raise UserError(f"--model {request.model} is a model directory with its own dictionaries; drop --data")
    assert request.model is not None  # `prepare` sends a --model DIR here
    manifest = read(request.model, request.src, request.tgt)
    source = raw_source(request, tmp, manifest["src"], manifest["tokenize"], manifest["paths"].get("bpe_codes"))
    return Job(
        manifest["paths"]["model"],
        manifest["dir"],
        manifest["src"],
        manifest["tgt"],
        source[0],
        source[1],
        manifest["tgt"],
        {**manifest["decode"], **options},
        removed=source[2],
        markup=source[3],
    )


def raw_source(
    request: Request, tmp: Path, lang: str, tokenize: dict, codes: str | None
) -> tuple[str, str, list[list[str]], list[list[tuple[str, list[str]]]]]:
    """The raw input tokenized and BPE'd into tmp/input.bpe: (that file, the input's name for messages, each line's
    characters that normalisation and tokenization removed, each line's markup and the tokens it became)."""
    from ..data import bpe
    from ..data.io import write_lines
    from ..data.tokenize import TokenizeOptions
    from .decode import prepare_raw

    lines, label = source_lines(request)
    options = TokenizeOptions(lang, **tokenize)
    tokenized = prepare_raw(lines, lang, tokenize, None)
    escaped = options.escape and options.tokenizer != "none"
    removed = [removed_characters(line, out, escaped) for line, out in zip(lines, tokenized, strict=True)]
    source = tmp / "input.bpe"
    write_lines(source, bpe.apply(codes, tokenized) if codes else tokenized)
    return str(source), label, removed, markup_tokens(lines, lang, tokenize, codes)


# HTML/XML tags and character entities: the corpora's readers strip them, so a model has seen them only as text
MARKUP = re.compile(r"</?[A-Za-z][\w:.-]*(?:\s[^<>]*)?/?>|<!--.*?-->|&(?:#\d+|#[xX][0-9A-Fa-f]+|[A-Za-z][A-Za-z0-9]*);")


def markup_tokens(lines: list[str], lang: str, tokenize: dict, codes: str | None) -> list[list[tuple[str, list[str]]]]:
    """Per line, each tag or entity as written and the model's tokens for it (tokenized and BPE'd on its own)."""
    from .decode import prepare_raw

    found = [list(dict.fromkeys(MARKUP.findall(line))) for line in lines]
    pieces = sorted({piece for line in found for piece in line})
    tokens = dict(zip(pieces, prepare_raw(pieces, lang, tokenize, codes), strict=True)) if pieces else {}
    return [[(piece, tokens[piece].split()) for piece in line] for line in found]


def removed_characters(raw: str, tokenized: str, escaped: bool) -> list[str]:
    """The characters of `raw` that its normalised, tokenized form lost outright, each once, in order: a character
    replaced by another (punctuation normalised, diacritics removed) or changed in case is not lost; Moses'
    escapes (&amp; …) stand for what they escape."""
    seen = html.unescape(tokenized) if escaped else tokenized
    before = [c for c in raw.casefold() if not c.isspace()]
    after = [c for c in seen.casefold() if not c.isspace()]
    if not Counter(before) - Counter(after):
        return []
    lost = [
        c
        for tag, i, j, _, _ in SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
        if tag == "delete"
        for c in before[i:j]
    ]
    return list(dict.fromkeys(lost))


def input_warnings(
    lines: Iterable[str],
    vocab,
    label: str,
    removed: list[list[str]] | None = None,
    markup: list[list[tuple[str, list[str]]]] | None = None,
) -> list[str]:
    """One line per source line the model cannot fully read: the share of its tokens unknown to the source
    dictionary (<unk> to the model) when they are most of it, else which tokens are unknown; the characters
    that normalisation and tokenization removed (`removed`, per line, for raw text); and the tags and entities
    (`markup`, per line, for raw text) that became tokens the model never saw whole."""
    warnings = []
    for number, line in enumerate(lines, start=1):
        tokens = line.split()
        unseen = unseen_markup(markup[number - 1] if markup is not None else [], vocab)
        inside = {t for _, pieces in unseen for t in pieces}  # named by their tag or entity instead
        unknown = list(dict.fromkeys(t for t in tokens if t not in vocab.index and t not in inside))
        lost = removed[number - 1] if removed is not None else []
        if not unknown and not lost and not unseen:
            continue
        shown = [html.unescape(t) if removed is not None else t for t in unknown]
        where = f"the model's dictionary ({vocab.path})" if vocab.path else "the model's dictionary"
        count = sum(t not in vocab.index and t not in inside for t in tokens)
        parts = []
        if tokens and count / len(tokens) > MOSTLY_UNKNOWN:
            parts.append(
                f"{count} of {len(tokens)} source tokens ({count / len(tokens):.0%}) are unknown to "
                f"{where}, so its translation cannot be of this line: {listing(shown)}"
            )
        elif unknown:
            parts.append(f"dropped from its translation: {listing(shown)}, unknown to {where}")
        if unseen:
            shown = [f"{piece} (as {' '.join(pieces)})" for piece, pieces in unseen]
            parts.append(
                f"markup translated as text, in tokens the model never saw as such: {listing(shown)} "
                f"(strip tags and unescape entities first)"
            )
        if lost:
            parts.append(f"{listing(lost, named=True)} removed by normalisation or tokenization")
        warnings.append(f"{label}:{number}: " + "; ".join(parts))
    return warnings


def unseen_markup(found: list[tuple[str, list[str]]], vocab) -> list[tuple[str, list[str]]]:
    """The tags and entities whose tokens the model never saw as such: one unknown to its dictionary, or a piece
    BPE split into subwords (`&@@ l@@ t@@ ;` for the escape of `<`), which the model met, if ever, as parts of
    other words."""
    return [(piece, tokens) for piece, tokens in found if any(t not in vocab.index or t.endswith("@@") for t in tokens)]


def listing(items: list[str], named: bool = False) -> str:
    """Tokens or characters as a warning lists them: a symbol (not a letter or digit) or an invisible character
    with its code point and name (named=True: every one), the first LISTED only."""

    def described(text: str) -> str:
        if len(text) != 1 or not (named or unicodedata.category(text)[0] not in "LN"):
            return text
        code = f"U+{ord(text):04X} {unicodedata.name(text, '(a control character)')}"
        return f"{text} ({code})" if text.isprintable() else code

    more = f", and {len(items) - LISTED} more" if len(items) > LISTED else ""
    return ", ".join(described(item) for item in items[:LISTED]) + more


def translate(job: Job, out_prefix: str | None, nbest: int = 0, user_code=None) -> tuple[dict, BeamConfig]:
    """Decode `job`: the translations to PREFIX.* or stdout (decode.translate_file); returns the decoding's statistics
    (with the model's parameter count) and the settings it decoded with. `user_code` (a models.UserCode): the code
    the user named (--user-dir, --user-module) for a model from outside the package."""
    from ..data.vocab import load_pair
    from .decode import load_model, translate_file
    from ..models.transformer import count_parameters

    cfg = BeamConfig.from_dict(job.options)
    if nbest > cfg.beam:
        raise UserError(f"--nbest {nbest} with beam {cfg.beam}; expected at most the beam's hypotheses")
    from ..data.io import read_lines

    src_vocab, tgt_vocab = load_pair(job.data, job.src, job.tgt)
    for warning in input_warnings(read_lines(job.source), src_vocab, job.label, job.removed, job.markup):
        log.warning("%s", warning)
    model = load_model(job.model, src_vocab, tgt_vocab, job.src, job.tgt, job.experiment, user_code)
    stats = translate_file(
        model, job.source, src_vocab, tgt_vocab, cfg, out_prefix, detok_lang=job.detok, nbest=nbest, label=job.label
    )
    stats["params"] = count_parameters(model)
    return stats, cfg
