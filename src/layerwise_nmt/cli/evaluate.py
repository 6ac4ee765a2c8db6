"""The evaluation commands: score, pick-lenpen and inspect."""

from __future__ import annotations

from pathlib import Path

from .. import UserError
from ..settings import json_object
from .common import add_user_code_flags, command, user_code


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
    p.add_argument("--options", default="{}", help='JSON, e.g. {"tokenize": "none", "lowercase": true}')
    p.add_argument(
        "--meta",
        help="the run and split scored, JSON (job_specs.ScoreLabel: experiment, task, seed, split), copied into "
        "score.json",
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
    p.add_argument("--kind", required=True, choices=["aggregation_shares", "attention"])
    p.add_argument(
        "--options",
        default="{}",
        help='JSON, attention: {"data", "src", "tgt", "source", "hypothesis", "sentence", "module"}',
    )
    p.add_argument("--out", required=True)
    add_user_code_flags(p)


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
    from ..job_specs import ScoreLabel
    from ..scoring.score import ScoreConfig, score_files

    check_writable(a.out)
    cfg = ScoreConfig.from_dict(json_object(a.options, "--options"))
    result = score_files(a.hyp, a.ref, cfg, a.source, a.stacked_refs, a.allow_bpe)
    result["options"] = {**cfg.__dict__, "buckets": list(cfg.buckets)}
    if a.meta:
        result.update(ScoreLabel.from_json(a.meta, "--meta").as_dict())
    if a.decoding:  # the translate step's record: model size and decoding speed travel with the score
        result["decoding"] = json.loads(Path(a.decoding).read_text())
    print(f"BLEU = {result['bleu']:.2f}  ({result['signature']})")
    with atomic_path(a.out) as tmp, open(tmp, "w") as f:
        json.dump(result, f, indent=2)


def cmd_inspect(a) -> None:
    from ..inference.figure_readouts import write

    write(a.kind, a.model, json_object(a.options, "--options"), a.out, user_code(a))
