"""The evaluation commands: score, pick-lenpen and inspect."""

from __future__ import annotations

from pathlib import Path

from .. import UserError
from ..settings import json_object
from .common import add_user_code_flags, command, refuse_beside_spec, user_code


def add_commands(sub) -> None:
    p = command(
        sub, "pick-lenpen", "the length penalty with the best validation BLEU (decode.tune_lenpen)", cmd_pick_lenpen
    )
    p.add_argument("scores", nargs="+", help="score.json of the validation set decoded at each α, in --lenpen order")
    p.add_argument("--lenpen", type=float, nargs="+", required=True, help="the α of each score file")
    p.add_argument("--out", required=True)

    p = command(sub, "score", "BLEU with sacrebleu (tokenized / detokenized / lowercased / compound-split)", cmd_score)
    p.add_argument("hyp")
    p.add_argument("--ref", nargs="+", required=True, help="reference file(s), one per reference, each as long as HYP")
    p.add_argument(
        "--stacked-refs",
        action="store_true",
        help="each --ref file holds several references one after the other (a multiple of HYP's lines)",
    )
    p.add_argument("--source", help="source text (tokenized, no BPE) for length buckets")
    p.add_argument("--options", help='the scoring settings, JSON, e.g. {"tokenize": "none", "lowercase": true}')
    p.add_argument(
        "--spec",
        help="the score job's spec, JSON (job_specs.ScoreSpec, built by the score rule): the run and split "
        "scored, copied into score.json, and the scoring settings (instead of --options)",
    )
    p.add_argument("--decoding", help="the translate step's JSON (params, sentences/s), kept in score.json")
    p.add_argument(
        "--allow-bpe",
        action="store_true",
        help="score text that still has BPE's '@@ ' (refused by "
        "default: translate's .bpe output is not what BLEU compares)",
    )
    p.add_argument("--out", required=True)

    p = command(
        sub,
        "inspect",
        "read what a figure shows out of a trained model into JSON (aggregation shares, attention)",
        cmd_inspect,
    )
    p.add_argument("model")
    p.add_argument("--kind", choices=["aggregation_shares", "attention"], help="the readout (required without --spec)")
    p.add_argument(
        "--options",
        help='JSON, attention: {"data", "src", "tgt", "source", "hypothesis", "sentence", "module"}',
    )
    p.add_argument("--out", required=True)
    add_user_code_flags(p)
    p.add_argument(
        "--spec",
        help="the inspect job's spec, JSON (job_specs.InspectSpec, built by the inspect rule): its kind, "
        "options and model code, instead of those flags",
    )


def cmd_pick_lenpen(a) -> None:
    import json

    from ..data.io import atomic_path, check_writable
    from ..inference.config import pick_lenpen

    if len(a.scores) != len(a.lenpen):
        raise UserError(f"{len(a.scores)} score files for {len(a.lenpen)} --lenpen values; expected one each")
    check_writable(a.out)
    bleu = {alpha: score_bleu(path) for alpha, path in zip(a.lenpen, a.scores, strict=True)}
    best = pick_lenpen(bleu)
    print(
        f"lenpen {best:g}: valid BLEU {bleu[best]:.2f} (" + ", ".join(f"{k:g}: {v:.2f}" for k, v in bleu.items()) + ")"
    )
    with atomic_path(a.out) as tmp, open(tmp, "w") as f:
        json.dump(
            {
                "lenpen": best,
                "bleu": bleu[best],
                "bleu_by_lenpen": {f"{k:g}": v for k, v in bleu.items()},
                "scores": a.scores,
            },
            f,
            indent=2,
        )


def score_bleu(path: str) -> float:
    """The BLEU of a score.json `lwnmt score` wrote; anything else is one line naming the file."""
    import json

    try:
        bleu = json.loads(Path(path).read_text(encoding="utf-8")).get("bleu")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        bleu = None
    if isinstance(bleu, bool) or not isinstance(bleu, (int, float)):
        raise UserError(f'{path}: no BLEU in it; expected the score.json `lwnmt score` writes (a "bleu" number)')
    return float(bleu)


def cmd_score(a) -> None:
    import json

    from ..data.io import atomic_path, check_writable
    from ..job_specs import ScoreSpec
    from ..scoring.score import ScoreConfig, score_files

    check_writable(a.out)
    spec = ScoreSpec.from_json(a.spec) if a.spec else None
    if spec:
        refuse_beside_spec(a, ("options",), "the scoring settings")
    cfg = ScoreConfig.from_dict(spec.options if spec else json_object(a.options or "{}", "--options"))
    result = score_files(a.hyp, a.ref, cfg, a.source, a.stacked_refs, a.allow_bpe)
    result["options"] = {**cfg.__dict__, "buckets": list(cfg.buckets)}
    if spec:
        result.update(spec.label)
    if a.decoding:  # the translate step's record: model size and decoding speed travel with the score
        result["decoding"] = json.loads(Path(a.decoding).read_text())
    print(f"BLEU = {result['bleu']:.2f}  ({result['signature']})")
    with atomic_path(a.out) as tmp, open(tmp, "w") as f:
        json.dump(result, f, indent=2)


def cmd_inspect(a) -> None:
    from ..grid.own_models import user_code_of
    from ..inference.figure_readouts import write
    from ..job_specs import InspectSpec

    if a.spec:
        refuse_beside_spec(a, ("kind", "options", "user_dir", "user_module"), "the readout, its options and model code")
        spec = InspectSpec.from_json(a.spec)
        for flag, value in user_code_of(spec.user_model).items():
            setattr(a, flag, value)
    elif a.kind is None:
        raise UserError("inspect: no --kind; expected --kind aggregation_shares or attention, or a --spec")
    else:
        spec = InspectSpec(a.kind, json_object(a.options or "{}", "--options"))
    write(spec.kind, a.model, spec.options, a.out, user_code(a))
