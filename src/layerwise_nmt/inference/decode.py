"""Batched beam search over any model exposing `start(src) -> state` and `step(last_tokens, state) -> logits`,
where `state.reorder(rows, sentences)` keeps the hypotheses' rows `rows` and, unless None, the sentences
`sentences` (a state keeps what is per sentence, its encoded source, once per sentence). Cached states: each step
feeds one token per hypothesis; a sentence's hypotheses are consecutive rows.

Semantics are fairseq 0.12's SequenceGenerator, step for step (tests/test_fairseq_parity.py decodes a fairseq
model both ways): the decoder starts from </s>; </s> is barred before `min_len` tokens; a hypothesis ends when it
emits </s>, which is only accepted from the top `beam` of the 2·beam candidates of a step; a sentence is done when it
has `beam` finished hypotheses; at the length limit a·|src| + b only </s> is allowed. One deliberate difference:
|src| is each sentence's own length (with its </s>), where fairseq takes the batch's padded width, so our output
never depends on how sentences were batched. Two length penalties, chosen by name:
  fairseq: score / len^α               (fairseq --lenpen)
  gnmt:    score / ((5 + len) / 6)^α   (Wu et al. 2016; tensor2tensor; LWC's α = 1.1 / 0.6)
where len counts the generated tokens including </s>.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .. import UserError
from .config import BeamConfig, pick_lenpen  # noqa: F401  (pick_lenpen: re-exported)
from ..data.batching import pad as pad_batch
from ..data.io import write_lines
from ..data.vocab import Dictionary
from ..models.user import UserCode, UserModel
from ..training.master_weights import bf16_params
from ..training.precision import cuda_kernels, resolve
from ..training.precision_probe import Workload, autocast as probe_autocast, full_precision, model_shape, probe_step

log = logging.getLogger(__name__)


@dataclass
class Hypothesis:
    tokens: list[int]  # without the leading </s>, with the final </s>
    score: float  # length-normalised
    raw_score: float  # sum of log-probabilities
    positional: list[float] = field(default_factory=list)  # each token's log-probability (fairseq's P- line)


@torch.no_grad()
def beam_search(model, src: torch.Tensor, cfg: BeamConfig, eos: int = 2, pad: int = 1) -> list[list[Hypothesis]]:
    """src (B, S) right-padded → per sentence, its finished hypotheses, best first."""
    B, beam, device = src.size(0), cfg.beam, src.device
    max_lens = (cfg.max_len_a * (src != pad).sum(1).float() + cfg.max_len_b).long()
    max_lens = max_lens.clamp(max=model.config.max_positions - 1)
    state = model.start(src)  # the encoder once per sentence
    active = torch.arange(B, device=device)  # original sentence ids still being decoded
    # step 0 decodes one hypothesis per sentence (fairseq decodes `beam` identical ones, all but the first at -inf);
    # its 2·beam best continuations then make the beams
    tokens = torch.full((B, 1), eos, dtype=torch.long, device=device)
    scores = torch.zeros(B, 1, device=device)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    # fairseq's cands_to_ignore: beam slots that had to be filled with an ended candidate (more than `beam` of the
    # 2·beam candidates ended); the candidates at those ranks of the next step neither finish nor continue.
    ignore = torch.zeros(B, beam, dtype=torch.bool, device=device)
    history = torch.zeros(B, 0, device=device)  # each row's cumulative score after each of its tokens
    for step in range(int(max_lens.max()) + 1):
        lprobs = F.log_softmax(model.step(tokens[:, -1], state), dim=-1, dtype=torch.float32)  # (n·width, V)
        lprobs.nan_to_num_(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))  # fairseq: NaN → -inf
        lprobs[:, pad] = float("-inf")
        if step < cfg.min_len:
            lprobs[:, eos] = float("-inf")
        n, V = len(active), lprobs.size(-1)
        width = scores.size(1)  # hypotheses per sentence: 1 at step 0, then `beam`
        if width * V < 2 * beam:
            raise UserError(f"beam={beam} needs a target vocabulary of at least {2 * beam} symbols, not {V}")
        lprobs = lprobs.view(n, width, V)
        at_limit = step >= max_lens[active]
        if at_limit.any():  # only </s> may follow at the length limit
            eos_scores = lprobs[at_limit, :, eos].clone()
            lprobs[at_limit] = float("-inf")
            lprobs[at_limit, :, eos] = eos_scores
        cand_scores, cand = best_candidates(lprobs, scores, 2 * beam)  # (n, 2·beam)
        cand_beam, cand_tok = cand // V, cand % V
        ended = (cand_tok == eos) & (cand_scores > float("-inf"))
        ended[:, :beam] &= ~ignore
        i, j = torch.nonzero(ended[:, :beam], as_tuple=True)  # row-major: fairseq's order of finalisation
        if len(i):  # fetched in one go: a tensor op per hypothesis would cost more than the step's matmuls
            rows = i * width + cand_beam[i, j]
            for sentence, score, hyp, past in zip(
                active[i].tolist(),
                cand_scores[i, j].tolist(),
                tokens.index_select(0, rows)[:, 1:].tolist(),
                history.index_select(0, rows).tolist(),
                strict=True,
            ):
                if len(finished[sentence]) < beam:
                    cumulative = past + [score]
                    positional = [b - a for a, b in zip([0.0] + cumulative, cumulative, strict=False)]
                    finished[sentence].append(Hypothesis(hyp + [eos], score / cfg.penalty(step + 1), score, positional))
        # the next beams: the first `beam` candidates that did not end (fairseq's active_mask trick)
        ended[:, :beam] |= ignore
        rank, pick = (ended.long() * (2 * beam) + torch.arange(2 * beam, device=device)).topk(
            beam, dim=1, largest=False
        )
        next_scores, next_beam, next_tok = (t.gather(1, pick) for t in (cand_scores, cand_beam, cand_tok))
        keep = torch.tensor([len(finished[s]) < beam for s in active.tolist()], dtype=torch.bool, device=device)
        keep &= ~at_limit  # a sentence ends at its length limit, however many hypotheses it finished (fairseq)
        if not keep.any():
            break
        rows = (torch.arange(n, device=device)[:, None] * width + next_beam)[keep].view(-1)
        state.reorder(rows, None if bool(keep.all()) else keep.nonzero().view(-1))
        tokens = torch.cat([tokens.index_select(0, rows), next_tok[keep].view(-1, 1)], dim=1)
        history = torch.cat([history.index_select(0, rows), next_scores[keep].view(-1, 1)], dim=1)
        scores, active, ignore = next_scores[keep], active[keep], (rank >= 2 * beam)[keep]
    return [sorted(hyps, key=lambda h: -h.score) for hyps in finished]


def best_candidates(
    lprobs: torch.Tensor, scores: torch.Tensor, k: int, block: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best continuations of each sentence: lprobs (n, w, V) of its w hypotheses with scores (n, w) → the k
    highest scores[h] + lprobs[h, t], best first, (n, k), and their indices h·V + t, (n, k); as torch.topk over the
    (n, w·V) sums, but without writing those sums: each hypothesis's vocabulary is cut in blocks of `block` tokens,
    the k blocks with the highest maxima (+ score) hold the k best (a block outside them has at most its maximum,
    which k better ones beat), and only their k·block sums are made and ranked: faster than topk over the sums
    for a beam search's vocabulary-sized rows (docs/benchmarks.md)."""
    n, w, V = lprobs.shape
    whole, blocks = V // block, -(-V // block)  # blocks per hypothesis; the last may be short
    if w * blocks <= k:
        return (scores[:, :, None] + lprobs).view(n, -1).topk(k, dim=1)
    maxima = lprobs[..., : whole * block].view(n, w, whole, block).amax(-1)  # (n, w, whole)
    if whole < blocks:
        maxima = torch.cat([maxima, lprobs[..., whole * block :].amax(-1, keepdim=True)], dim=-1)
    best = (maxima + scores[:, :, None]).view(n, w * blocks).topk(k, dim=1).indices  # (n, k) blocks
    hyp = best // blocks
    token = (best % blocks)[:, :, None] * block + torch.arange(block, device=lprobs.device)  # (n, k, block)
    index = (hyp[:, :, None] * V + token.clamp(max=V - 1)).view(n, -1)  # a short block's tail: its last token, at -inf
    sums = lprobs.view(n, -1).gather(1, index).view(n, k, block) + scores.gather(1, hyp)[:, :, None]
    values, picked = sums.masked_fill(token >= V, float("-inf")).view(n, -1).topk(k, dim=1)
    return values, index.gather(1, picked)


def validation_search(model, src: torch.Tensor, beam: int) -> list[list[Hypothesis]]:
    """The beam search a training's validation BLEU decodes with (training.loop.train's `search`)."""
    return beam_search(model, src, BeamConfig(beam=beam), eos=model.config.eos, pad=model.config.pad)


def translate_file(
    model,
    src_path: str,
    src_vocab: Dictionary,
    tgt_vocab: Dictionary,
    cfg: BeamConfig,
    out_prefix: str | None,
    remove_bpe: str = "@@ ",
    detok_lang: str | None = None,
    nbest: int = 0,
    label: str | None = None,
) -> dict:
    """Decode a BPE'd source file (one sentence per line). With `out_prefix`, writes <out_prefix>.bpe (raw
    hypotheses), .txt (BPE removed, tokenized) and, with detok_lang, .detok (Moses-detokenized); without, prints
    the last of these to stdout. nbest > 0: also fairseq-generate's S-/H-/D-/P- lines of the `nbest` best
    hypotheses, in <out_prefix>.nbest or instead of the plain lines on stdout. Either way one output line per
    input line: an empty or overlong source (named in a warning as `label`:line) gets an empty translation."""
    from ..data.io import read_lines

    sources = list(read_lines(src_path))
    results, stats = decode_lines(model, sources, src_vocab, tgt_vocab, cfg, label or src_path)
    forms = {"bpe": [tgt_vocab.decode(r[0].tokens) if r else "" for r in results]}
    for warning in length_warnings(
        sources, forms["bpe"], label or src_path, getattr(model, "trained_lengths", None), model.config.max_positions
    ):
        log.warning("%s", warning)
    forms["txt"] = [strip_bpe(h, remove_bpe) for h in forms["bpe"]]
    if detok_lang:
        forms["detok"] = detokenizer(detok_lang)(forms["txt"])
    if nbest:
        forms["nbest"] = fairseq_lines(sources, results, tgt_vocab, nbest, remove_bpe, detok_lang)
    if out_prefix is None:
        for line in forms["nbest"] if nbest else forms["detok" if detok_lang else "txt"]:
            print(line)
        return stats
    for form, lines in forms.items():
        write_lines(f"{out_prefix}.{form}", lines)
    return stats


OUTPUT_FORMS = ("bpe", "txt", "detok", "nbest", "json")  # <out_prefix>.<form>: what translate may write


def check_out_prefix(out_prefix: str | None, *inputs: str | None) -> None:
    """`--out-prefix test` beside an input `test.bpe` would write the translations over it: refused first."""
    if not out_prefix:
        return
    for path in filter(None, inputs):
        if path == "-" or not os.path.exists(path):
            continue
        for form in OUTPUT_FORMS:
            out = f"{out_prefix}.{form}"
            if os.path.exists(out) and os.path.samefile(out, path):
                raise UserError(
                    f"--out-prefix {out_prefix}: would write {out}, which is the input {path}; expected another "
                    f"prefix (translate writes <prefix>.{{{','.join(OUTPUT_FORMS)}}})"
                )


# an output under this share of its source's tokens is far shorter than a translation (beam search ended early),
# said for sources of at least FAR_SHORTER_FROM tokens, whose lengths vary less between languages
FAR_SHORTER, FAR_SHORTER_FROM = 0.4, 10


def length_warnings(
    sources: list[str], outputs: list[str], label: str, trained: dict | None, max_positions: int
) -> list[str]:
    """One line per source (`label`:line) longer than every training source the model saw (`trained`, its
    longest sides in tokens with </s>), or whose output is far shorter than it: a model stops early on a length it
    never learnt, and a translation that lost most of its sentence reads as fluent. Sources beyond max_positions are
    untranslated and said so by `decode_lines`."""
    warnings = []
    for number, (source, output) in enumerate(zip(sources, outputs, strict=True), start=1):
        n, m = len(source.split()), len(output.split())
        if not n or n + 1 > max_positions:
            continue
        parts = []
        if trained and n + 1 > trained.get("src", max_positions):
            parts.append(
                f"{n + 1} source tokens (with </s>), longer than any the model was trained on (at most "
                f"{trained['src']})"
            )
        if n >= FAR_SHORTER_FROM and m < FAR_SHORTER * n:
            parts.append(
                f"its translation has {m} tokens for the source's {n} ({m / n:.0%}): far shorter, so part "
                f"of the line is likely untranslated"
            )
        if parts:
            hint = " (split it into sentences)" if trained and n + 1 > trained.get("src", max_positions) else ""
            warnings.append(f"{label}:{number}: " + "; ".join(parts) + hint)
    return warnings


def decode_lines(
    model, sources: list[str], src_vocab: Dictionary, tgt_vocab: Dictionary, cfg: BeamConfig, label: str
) -> tuple[list[list[Hypothesis]], dict]:
    """Each source's hypotheses, best first, and the decoding's speed. An empty source gets none (no translation,
    as fairseq-interactive); so does one longer than the model's max_positions, with a warning naming it (fairseq
    skips those with --skip-invalid-size-inputs-valid-test)."""
    encoded = [np.asarray(src_vocab.encode(line)) for line in sources]
    limit = model.config.max_positions
    for number, e in enumerate(encoded, start=1):
        if len(e) > limit:
            log.warning(
                "%s:%d: %d tokens (with </s>), longer than the model's max_positions %d; left untranslated "
                "(an empty output line)",
                label,
                number,
                len(e),
                limit,
            )
    todo = [i for i, e in enumerate(encoded) if 1 < len(e) <= limit]
    order = [todo[k] for k in np.argsort([len(encoded[i]) for i in todo], kind="stable")]
    results: list[list[Hypothesis]] = [[] for _ in sources]
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    model.to(device).eval()
    start, generated = time.time(), 0
    precision = resolve(cfg.amp, device, decoding_workload(model, cfg, device, tgt_vocab.eos, tgt_vocab.pad))
    log.info("precision: %s", precision)
    if precision.amp == "bf16-weights":  # no weight changes while decoding: a bf16 copy, no masters
        model = bf16_params(model)
    for b in range(0, len(order), cfg.batch_size):
        ids = order[b : b + cfg.batch_size]
        src = pad_batch([encoded[i] for i in ids], src_vocab.pad).to(device)
        with cuda_kernels(device), precision.autocast(device):
            for i, result in zip(ids, beam_search(model, src, cfg, eos=tgt_vocab.eos, pad=tgt_vocab.pad), strict=True):
                results[i] = result
                generated += len(result[0].tokens)
        done = min(b + cfg.batch_size, len(order))
        elapsed = time.time() - start
        log.info(
            "decoded %d/%d sentences, %.1f sentences/s, ETA %.0f s",
            done,
            len(order),
            done / elapsed,
            (len(order) - done) * elapsed / done,
        )
    seconds = time.time() - start
    return results, {
        "sentences": len(sources),
        "seconds": seconds,
        "sentences_per_second": len(sources) / max(seconds, 1e-9),
        "generated_tokens": generated,
        "untranslated": len(sources) - len(todo),
        "precision": precision.to_dict(),
    }


def decoding_workload(model, cfg: BeamConfig, device, eos: int, pad: int) -> Workload:
    """Eight beam-search steps of `model` on a batch of up to 32 random 20-token sources at the run's beam size, for
    `amp: auto`'s probe: the decoder's incremental steps, whose shapes differ from training's."""
    config, length = model.config, min(20, model.config.max_positions - 1)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, config.src_vocab, (min(cfg.batch_size, 32), length), generator=generator).to(device)
    src[:, -1] = eos
    steps = replace(cfg, max_len_a=0.0, max_len_b=8, min_len=8)  # eight steps whatever the random weights say

    def step(amp: str) -> None:
        with probe_step(device), probe_autocast(amp, device):
            beam_search(model, src, steps, eos=eos, pad=pad)

    return Workload(
        "decode",
        model_shape(model, rows=src.size(0), length=length, beam=cfg.beam),
        step,
        device,
        full_precision(device),
    )


def strip_bpe(line: str, remove_bpe: str | None) -> str:
    return (line + " ").replace(remove_bpe, "").rstrip() if remove_bpe else line


def detokenizer(lang: str):
    """Tokenized lines → Moses-detokenized ones."""
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang=lang)
    return lambda lines: [detok.detokenize(line.split()) for line in lines]


def fairseq_lines(
    sources: list[str],
    results: list[list[Hypothesis]],
    tgt_vocab: Dictionary,
    nbest: int,
    remove_bpe: str | None,
    detok_lang: str | None,
) -> list[str]:
    """fairseq-generate's output for each sentence (ids from 0): S- (source), then per hypothesis H- (score and
    BPE-free text), D- (score and detokenized text) and P- (each token's score), scores in base 2 as fairseq
    prints them. An untranslated sentence has its S- line only."""
    detok = detokenizer(detok_lang) if detok_lang else (lambda lines: lines)
    out = []
    for i, (source, hyps) in enumerate(zip(sources, results, strict=True)):
        out.append(f"S-{i}\t{source}")
        for hyp in hyps[:nbest]:
            text, score = strip_bpe(tgt_vocab.decode(hyp.tokens), remove_bpe), hyp.score / math.log(2)
            out += [
                f"H-{i}\t{score}\t{text}",
                f"D-{i}\t{score}\t{detok([text])[0]}",
                f"P-{i}\t" + " ".join(f"{p / math.log(2):.4f}" for p in hyp.positional),
            ]
    return out


def prepare_raw(lines: list[str], lang: str, tokenize: dict, codes: str | None) -> list[str]:
    """Raw source sentences → the model's input: the task's normalisation and tokenization, then its BPE."""
    from ..data import bpe
    from ..data.tokenize import TokenizeOptions

    process = TokenizeOptions(lang, **tokenize).build()
    tokenized = [process(line) for line in lines]
    return list(bpe.apply(codes, tokenized)) if codes else tokenized


def load_model(
    path: str | Path,
    src_vocab: Dictionary | None = None,
    tgt_vocab: Dictionary | None = None,
    src: str | None = None,
    tgt: str | None = None,
    experiment: dict | None = None,
    user_code: UserCode | None = None,
):
    """A model from a checkpoint (any of ours: final, averaged, exported, or a training checkpoint), checked against
    what it will be used with: the dictionaries (those it was trained with), the languages (those an exported or
    recently trained model records) and, with `experiment` ({name, model, arch}), the experiment's current
    settings, so that an edited config never decodes with a stale model in silence. A model from outside the
    package is imported only from code its user named: `user_code` (--user-dir, --user-module) or the experiment's
    `models:` entry."""
    from ..training.checkpoint import check_dictionaries, load_model, misfit
    from .export import check_against, check_languages
    from ..models import build

    state = load_model(path)
    if src_vocab is not None:
        assert tgt_vocab is not None  # the dictionaries come as a pair, and so do the languages
        check_dictionaries(state, path, src_vocab, tgt_vocab)
    if src is not None:
        assert tgt is not None
        check_languages(state, path, src, tgt)
    user: UserModel | None
    if experiment is not None and experiment.get("user_model"):
        user = UserModel.from_entry(experiment["model"], experiment["user_model"])  # named by the config
    else:
        user = (user_code or UserCode()).model_of(state, path)
    if experiment is not None:
        check_against(state, path, experiment["model"], experiment["arch"], experiment["name"], user)
    try:
        model = build(state["model_name"], state["model_config"], user)
    except UserError as err:  # settings this version does not know (a newer version's model), or refuses
        raise UserError(f"{path}: {err}" if user is None else str(err)) from None  # a user model's names its place
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, ValueError, KeyError) as err:  # same settings, other code: a plugin edited since
        raise UserError(
            f"{path}: its tensors do not fit model {state['model_name']} as its code builds it now "
            f"({misfit(err)}); was the model's code changed after it was trained?"
        ) from None
    # what translate compares an input with: {"src": n, "tgt": n}, the longest training pair's sides in tokens
    # with </s> (None: a model trained before it was recorded, or imported from fairseq)
    model.trained_lengths = state.get("trained_lengths") or None
    return model.eval()


class Recompute:
    """`model` decoded without any cache: every step re-runs the full forward pass over the prefix. The reference
    that cached beam search must equal (tests, benchmarks/gpu_check.py)."""

    def __init__(self, model):
        self.model, self.config = model, model.config

    def start(self, src):
        return _Prefixes(src)

    def step(self, last, state):
        state.prefix = torch.cat([state.prefix, last[:, None]], dim=1)
        return self.model(state.src, state.prefix)[:, -1]


class _Prefixes:
    def __init__(self, src):
        self.src, self.prefix = src, torch.zeros(src.size(0), 0, dtype=torch.long, device=src.device)

    def reorder(self, rows, sentences=None):  # the full forward pass needs each row's own copy of its source
        self.src, self.prefix = self.src.index_select(0, rows), self.prefix.index_select(0, rows)
