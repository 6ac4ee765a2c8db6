"""Beam search against a scripted toy decoder (hand-set probabilities, exact tokens and scores), and on a model."""

import math
from dataclasses import dataclass

import torch

from conftest import assert_cached_beam_equals_recompute
from layerwise_nmt.inference.decode import BeamConfig, beam_search
from layerwise_nmt.models import build

EOS, PAD = 2, 1


@dataclass
class ToyConfig:
    max_positions: int = 64


@dataclass
class ToyState:
    rows: torch.Tensor  # which source sentence each row belongs to
    prefix: list

    def reorder(self, rows, sentences=None):
        self.rows = self.rows.index_select(0, rows)
        self.prefix = [self.prefix[i] for i in rows.tolist()]


class ToyDecoder:
    """Next-token probabilities depend only on the prefix, from a table; everything else gets ~0."""

    config = ToyConfig()

    def __init__(self, table, vocab=6):
        self.table, self.vocab = table, vocab

    def start(self, src):
        return ToyState(torch.arange(src.size(0)), [() for _ in range(src.size(0))])

    def step(self, last, state):
        state.prefix = [p + (int(t),) for p, t in zip(state.prefix, last.tolist(), strict=True)]
        logits = torch.full((len(state.prefix), self.vocab), -1e9)
        for row, prefix in enumerate(state.prefix):
            for token, p in self.table.get(prefix, {EOS: 1.0}).items():
                logits[row, token] = math.log(p)
        return logits


def test_beam_finds_the_better_long_hypothesis_and_scores_exactly():
    # start (</s>) → 3 (0.6) | 4 (0.4); after 3: </s> 0.5, 5 0.5; after 4: 5 (1.0) then </s> (1.0)
    table = {
        (EOS,): {3: 0.6, 4: 0.4},
        (EOS, 3): {EOS: 0.6, 5: 0.4},
        (EOS, 4): {5: 1.0},
        (EOS, 4, 5): {EOS: 1.0},
        (EOS, 3, 5): {EOS: 1.0},
    }
    src = torch.tensor([[3, 3, EOS]])
    greedyish = beam_search(ToyDecoder(table), src, BeamConfig(beam=1, lenpen=0.0, max_len_a=0, max_len_b=5))[0]
    assert greedyish[0].tokens == [3, EOS] and math.isclose(greedyish[0].raw_score, math.log(0.6 * 0.6), rel_tol=1e-6)
    beam = beam_search(ToyDecoder(table), src, BeamConfig(beam=2, lenpen=0.0, max_len_a=0, max_len_b=5))[0]
    assert beam[0].tokens == [4, 5, EOS] and math.isclose(beam[0].score, math.log(0.4), rel_tol=1e-6)
    assert [h.tokens for h in beam] == [[4, 5, EOS], [3, EOS]]


def test_length_penalties():
    table = {
        (EOS,): {3: 0.6, 4: 0.4},
        (EOS, 3): {EOS: 0.6, 5: 0.4},
        (EOS, 4): {5: 1.0},
        (EOS, 4, 5): {EOS: 1.0},
        (EOS, 3, 5): {EOS: 1.0},
    }
    src = torch.tensor([[3, EOS]])
    for name, alpha, expected in [
        ("fairseq", 1.0, lambda s, n: s / n),
        ("gnmt", 0.6, lambda s, n: s / ((5 + n) / 6) ** 0.6),
    ]:
        hyps = beam_search(
            ToyDecoder(table), src, BeamConfig(beam=2, lenpen=alpha, length_penalty=name, max_len_a=0, max_len_b=5)
        )[0]
        for h in hyps:
            assert math.isclose(h.score, expected(h.raw_score, len(h.tokens)), rel_tol=1e-6)


def test_length_limit_forces_eos():
    table = {}
    always = {t: 0.5 for t in (3, 4)}

    class Endless(ToyDecoder):
        def step(self, last, state):
            logits = super().step(last, state)
            logits[:, 3:5] = math.log(0.5)
            logits[:, EOS] = -1e9
            return logits

    hyps = beam_search(Endless(table), torch.tensor([[3, 3, EOS]]), BeamConfig(beam=2, max_len_a=1.0, max_len_b=1))[0]
    assert all(len(h.tokens) == 5 and h.tokens[-1] == EOS for h in hyps)  # a·3 + b = 4 tokens, then </s>
    del always


def small_model_and_sources(seed: int, n: int, length: int, padded: int):
    """A random 2+2-layer model and n sources ending in </s>; sentence `padded` is shorter (right-padded)."""
    torch.manual_seed(seed)
    model = build(
        "transformer",
        dict(src_vocab=40, tgt_vocab=40, d_model=32, d_ff=64, heads=4, encoder_layers=2, decoder_layers=2, tie="all"),
    ).eval()
    src = torch.randint(4, 40, (n, length))
    src[:, -1] = EOS
    src[padded, length // 2 :] = PAD
    src[padded, length // 2 - 1] = EOS
    return model, src


def test_batched_beam_equals_one_sentence_at_a_time():
    model, src = small_model_and_sources(seed=0, n=4, length=6, padded=2)
    cfg = BeamConfig(beam=3, max_len_a=1.0, max_len_b=3)
    together = beam_search(model, src, cfg)
    for i in range(4):
        alone = beam_search(model, src[i : i + 1, : int((src[i] != PAD).sum())], cfg)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in together[i]]
        assert all(
            math.isclose(a.score, b.score, rel_tol=1e-4, abs_tol=1e-5) for a, b in zip(alone, together[i], strict=True)
        )


def test_cached_beam_search_equals_full_recomputation():
    model, src = small_model_and_sources(seed=1, n=5, length=8, padded=3)
    assert_cached_beam_equals_recompute(model, src)


def test_the_encoder_runs_once_per_sentence_not_once_per_beam():
    """The source is encoded once per sentence, not once per beam:
    encoding `beam` copies of it cost ~30% of a decode at d = 256."""
    model, src = small_model_and_sources(seed=2, n=4, length=6, padded=1)
    rows = []
    model.encoder.register_forward_hook(lambda module, args, out: rows.append(args[0].size(0)))
    beam_search(model, src, BeamConfig(beam=5, max_len_a=1.0, max_len_b=3))
    assert rows == [4]


def test_the_source_stays_one_row_per_sentence_and_step_0_decodes_one_hypothesis_each():
    """A sentence's hypotheses read one copy of its source K/V (not one per beam: by_sentence), and step 0, whose
    beams would all be the same, decodes one hypothesis per sentence."""
    model, src = small_model_and_sources(seed=2, n=4, length=6, padded=1)
    seen = []  # per step: (hypothesis rows, source rows)
    step = model.step
    model.step = lambda last, state: seen.append((last.size(0), state.views[0].k.size(0))) or step(last, state)
    beam_search(model, src, BeamConfig(beam=5, max_len_a=1.0, max_len_b=3, min_len=2))
    assert seen[:3] == [(4, 4), (20, 4), (20, 4)]  # min_len 2: no sentence can finish before step 2
    assert all(rows == 5 * sentences for rows, sentences in seen[1:])
    assert seen[-1] == (15, 3)  # the padded sentence's limit came first: its source rows left with it


def test_lenpen_tuning_picks_the_argmax_and_the_first_alpha_of_a_tie(tmp_path):
    import json
    import subprocess
    import sys

    import pytest

    from layerwise_nmt import UserError
    from layerwise_nmt.inference.decode import pick_lenpen

    assert pick_lenpen({0.6: 30.1, 1.0: 31.4, 1.6: 31.2}) == 1.0
    assert pick_lenpen({2.0: 31.4, 0.6: 30.0, 1.0: 31.4}) == 2.0  # tie: the grid's first
    with pytest.raises(UserError, match="no validation scores"):
        pick_lenpen({})
    with pytest.raises(UserError, match="tune_lenpen=\\[1.0, 1.0\\]; expected distinct"):
        BeamConfig.from_dict({"tune_lenpen": [1, 1]})
    with pytest.raises(UserError, match="tune_lenpen=1.6; expected a list of numbers ≥ 0"):
        BeamConfig.from_dict({"tune_lenpen": 1.6})
    paths = []
    for alpha, bleu in (("0.6", 30.0), ("1.3", 32.5), ("2", 32.0)):
        paths.append(tmp_path / f"valid.{alpha}.score.json")
        paths[-1].write_text(json.dumps({"bleu": bleu}))
    out = tmp_path / "tuned_lenpen.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "pick-lenpen",
            *map(str, paths),
            "--lenpen",
            "0.6",
            "1.3",
            "2",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    tuned = json.loads(out.read_text())
    assert (
        tuned["lenpen"] == 1.3
        and tuned["bleu"] == 32.5
        and tuned["bleu_by_lenpen"] == {"0.6": 30.0, "1.3": 32.5, "2": 32.0}
    )


def test_best_candidates_equal_topk_over_all_sums():
    """The block-maxima shortcut finds the same k best (score + log-probability) as topk over every sum, including
    a short last block, a single hypothesis (step 0) and rows where almost everything is -inf (the length limit)."""
    from layerwise_nmt.inference.decode import best_candidates

    torch.manual_seed(0)
    for hyps, vocab in [(1, 7883), (5, 7880), (5, 200), (3, 70)]:
        lprobs = torch.randn(16, hyps, vocab).mul(3).log_softmax(-1)
        lprobs[:7, :, 5:] = float("-inf")  # fewer finite candidates than k in some sentences
        lprobs[0, :, 2] = lprobs[0, 0, 3]  # ties
        scores = torch.randn(16, hyps)
        sums = (scores[:, :, None] + lprobs).view(16, -1)
        values, index = best_candidates(lprobs, scores, k=10, block=32)
        assert torch.equal(values, sums.topk(10, dim=1).values)
        assert torch.equal(sums.gather(1, index), values) and bool((index < hyps * vocab).all())
