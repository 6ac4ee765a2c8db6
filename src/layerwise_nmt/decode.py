"""Batched beam search over any model exposing `start(src) -> state` and `step(last_tokens, state) -> logits`,
where `state.reorder(rows)` selects/reorders batch rows. Cached states: each step feeds one token per hypothesis.

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
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import UserError
from .data.batching import pad as pad_batch
from .data.io import write_lines
from .data.vocab import Dictionary
from .precision import AMP_CHOICES, configure_device, resolve
from .settings import Settings

log = logging.getLogger(__name__)


@dataclass
class BeamConfig(Settings):
    kind = "decoding setting"

    beam: int = 5
    lenpen: float = 1.0
    length_penalty: str = "fairseq"  # fairseq | gnmt
    max_len_a: float = 1.2  # max output length = a·src_len + b (fairseq's --max-len-a/-b)
    max_len_b: int = 10
    min_len: int = 1  # fairseq --min-len: </s> is barred before this many tokens (1: no empty translation)
    batch_size: int = 64  # sentences per batch (fairseq --batch-size)
    amp: str = "auto"  # auto | none | bf16 | fp16, as in training (precision.py)
    # α values to try on the validation set; the best one (BLEU) replaces `lenpen` for every other decoding of the
    # run (the workflow's pick_lenpen step). Empty: decode with `lenpen` as given.
    tune_lenpen: tuple[float, ...] = ()

    @classmethod
    def prepare(cls, values: dict) -> dict:
        grid = values.get("tune_lenpen")
        if grid is not None:
            if not isinstance(grid, (list, tuple)) or not all(isinstance(a, (int, float)) for a in grid):
                raise UserError(f"tune_lenpen={grid!r}; expected a list of α values, e.g. [0.6, 1.0, 1.6]")
            values["tune_lenpen"] = tuple(float(a) for a in grid)
        return values

    def check(self) -> None:
        if self.length_penalty not in ("fairseq", "gnmt"):
            raise UserError(f"length_penalty={self.length_penalty!r}; expected fairseq or gnmt")
        if self.amp not in AMP_CHOICES:
            raise UserError(f"amp={self.amp!r}; expected {', '.join(AMP_CHOICES)}")
        if len(set(self.tune_lenpen)) != len(self.tune_lenpen) or any(a < 0 for a in self.tune_lenpen):
            raise UserError(f"tune_lenpen={list(self.tune_lenpen)}; expected distinct α values ≥ 0")

    def penalty(self, length: int) -> float:
        if self.length_penalty == "gnmt":
            return ((5.0 + length) / 6.0) ** self.lenpen
        return float(length) ** self.lenpen


def pick_lenpen(bleu_by_lenpen: dict[float, float]) -> float:
    """The α with the highest validation BLEU; a tie goes to the α listed first (the grid's order)."""
    if not bleu_by_lenpen:
        raise UserError("no validation scores to tune the length penalty on")
    return max(bleu_by_lenpen, key=lambda a: (bleu_by_lenpen[a], -list(bleu_by_lenpen).index(a)))


@dataclass
class Hypothesis:
    tokens: list[int]  # without the leading </s>, with the final </s>
    score: float  # length-normalised
    raw_score: float  # sum of log-probabilities


@torch.no_grad()
def beam_search(model, src: torch.Tensor, cfg: BeamConfig, eos: int = 2, pad: int = 1) -> list[list[Hypothesis]]:
    """src (B, S) right-padded → per sentence, its finished hypotheses, best first."""
    B, beam, device = src.size(0), cfg.beam, src.device
    max_lens = (cfg.max_len_a * (src != pad).sum(1).float() + cfg.max_len_b).long()
    max_lens = max_lens.clamp(max=model.config.max_positions - 1)
    state = model.start(src.repeat_interleave(beam, dim=0))
    active = torch.arange(B, device=device)  # original sentence ids still being decoded
    tokens = torch.full((B * beam, 1), eos, dtype=torch.long, device=device)
    scores = torch.full((B, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0  # step 0 expands the first beam only
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    # fairseq's cands_to_ignore: beam slots that had to be filled with an ended candidate (more than `beam` of the
    # 2·beam candidates ended); the candidates at those ranks of the next step neither finish nor continue.
    ignore = torch.zeros(B, beam, dtype=torch.bool, device=device)
    for step in range(int(max_lens.max()) + 1):
        lprobs = F.log_softmax(model.step(tokens[:, -1], state).float(), dim=-1)  # (n·beam, V)
        lprobs[lprobs != lprobs] = float("-inf")
        lprobs[:, pad] = float("-inf")
        if step < cfg.min_len:
            lprobs[:, eos] = float("-inf")
        n, V = len(active), lprobs.size(-1)
        lprobs = lprobs.view(n, beam, V)
        at_limit = step >= max_lens[active]
        if at_limit.any():  # only </s> may follow at the length limit
            eos_scores = lprobs[at_limit, :, eos].clone()
            lprobs[at_limit] = float("-inf")
            lprobs[at_limit, :, eos] = eos_scores
        cand_scores, cand = (scores[:, :, None] + lprobs).view(n, -1).topk(2 * beam, dim=1)  # (n, 2·beam)
        cand_beam, cand_tok = cand // V, cand % V
        ended = (cand_tok == eos) & (cand_scores > float("-inf"))
        ended[:, :beam] &= ~ignore
        for i, j in zip(*torch.nonzero(ended[:, :beam], as_tuple=True)):
            sentence, score = int(active[i]), float(cand_scores[i, j])
            if len(finished[sentence]) < beam:
                row = int(i) * beam + int(cand_beam[i, j])
                hyp = tokens[row, 1:].tolist() + [eos]
                finished[sentence].append(Hypothesis(hyp, score / cfg.penalty(step + 1), score))
        # the next beams: the first `beam` candidates that did not end (fairseq's active_mask trick)
        ended[:, :beam] |= ignore
        rank, pick = (ended.long() * (2 * beam) + torch.arange(2 * beam, device=device)).topk(beam, dim=1,
                                                                                               largest=False)
        next_scores, next_beam, next_tok = (t.gather(1, pick) for t in (cand_scores, cand_beam, cand_tok))
        keep = torch.tensor([len(finished[int(s)]) < beam for s in active], dtype=torch.bool, device=device)
        keep &= ~at_limit  # a sentence ends at its length limit, however many hypotheses it finished (fairseq)
        if not keep.any():
            break
        rows = (torch.arange(n, device=device)[:, None] * beam + next_beam)[keep].view(-1)
        state.reorder(rows)
        tokens = torch.cat([tokens.index_select(0, rows), next_tok[keep].view(-1, 1)], dim=1)
        scores, active, ignore = next_scores[keep], active[keep], (rank >= 2 * beam)[keep]
    return [sorted(hyps, key=lambda h: -h.score) for hyps in finished]


def translate(model, src_path: str, src_vocab: Dictionary, tgt_vocab: Dictionary, cfg: BeamConfig,
              out_prefix: str, remove_bpe: str = "@@ ", detok_lang: str | None = None) -> dict:
    """Decode a BPE'd source file (one sentence per line); writes <out_prefix>.bpe (raw hypotheses),
    <out_prefix>.txt (BPE removed, tokenized) and, with detok_lang, <out_prefix>.detok (Moses-detokenized)."""
    from .data.io import read_lines

    lines = list(read_lines(src_path))
    encoded = [np.asarray(src_vocab.encode(line)) for line in lines]
    order = np.argsort([len(e) for e in encoded], kind="stable")
    hyps: list[str] = [""] * len(lines)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    model.to(device).eval()
    start, generated = time.time(), 0
    precision = resolve(cfg.amp, device)
    configure_device(precision, device)
    log.info("precision: %s (amp: %s; %s) on %s", precision.amp, precision.requested, precision.reason,
             precision.device)
    for b in range(0, len(order), cfg.batch_size):
        ids = order[b:b + cfg.batch_size]
        src = pad_batch([encoded[i] for i in ids], src_vocab.pad).to(device)
        with precision.autocast(device):
            results = beam_search(model, src, cfg, eos=tgt_vocab.eos, pad=tgt_vocab.pad)
        for i, result in zip(ids, results):
            hyps[i] = tgt_vocab.decode(result[0].tokens)
            generated += len(result[0].tokens)
        done = min(b + cfg.batch_size, len(order))
        elapsed = time.time() - start
        log.info("decoded %d/%d sentences, %.1f sentences/s, ETA %.0f s", done, len(order), done / elapsed,
                 (len(order) - done) * elapsed / done)
    seconds = time.time() - start
    write_lines(f"{out_prefix}.bpe", hyps)
    plain = [(h + " ").replace(remove_bpe, "").rstrip() if remove_bpe else h for h in hyps]
    write_lines(f"{out_prefix}.txt", plain)
    if detok_lang:
        from sacremoses import MosesDetokenizer

        detok = MosesDetokenizer(lang=detok_lang)
        write_lines(f"{out_prefix}.detok", [detok.detokenize(h.split()) for h in plain])
    return {"sentences": len(lines), "seconds": seconds, "sentences_per_second": len(lines) / max(seconds, 1e-9),
            "generated_tokens": generated, "precision": precision.to_dict()}


def prepare_raw(lines: list[str], lang: str, tokenize: dict, codes: str | None) -> list[str]:
    """Raw source sentences → the model's input: the task's normalisation and tokenization, then its BPE."""
    from .data import bpe
    from .data.tokenize import TokenizeOptions

    process = TokenizeOptions(lang, **tokenize).build()
    tokenized = [process(line) for line in lines]
    return list(bpe.apply(codes, tokenized)) if codes else tokenized


def load_model(path: str | Path):
    """A model from a checkpoint (any of ours: final, averaged, or a training checkpoint)."""
    from .checkpoint import load
    from .models import build

    state = load(path)
    model = build(state["model_name"], state["model_config"])
    model.load_state_dict(state["model"])
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

    def reorder(self, order):
        self.src, self.prefix = self.src.index_select(0, order), self.prefix.index_select(0, order)
