"""Layer-wise coordination (He et al. 2018): tests that would fail on a wrong model (issue #4's acceptance list)."""

import torch

from conftest import assert_target_prefix_only
from layerwise_nmt.decode import BeamConfig, beam_search
from layerwise_nmt.models import build
from layerwise_nmt.models.coordination import mixed_attention_mask
from layerwise_nmt.models.transformer import count_parameters

EOS, PAD = 2, 1


def tiny(**kw):
    torch.manual_seed(0)
    settings = dict(src_vocab=50, tgt_vocab=50, d_model=32, d_ff=64, heads=4, layers=3, dropout=0.0)
    return build("lwc", {**settings, **kw}).eval()


def batch():
    src = torch.randint(4, 50, (3, 7))
    src[:, -1] = EOS
    src[1, 5:] = PAD
    src[1, 4] = EOS
    prev = torch.randint(4, 50, (3, 6))
    prev[:, 0] = EOS
    return src, prev


def test_target_prefix_only_and_source_never_sees_target():
    model = tiny()
    src, prev = batch()
    assert_target_prefix_only(model, src, prev)
    with torch.no_grad():
        state_a, state_b = model.start(src), model.start(src)
    for a, b in zip(state_a.source, state_b.source):  # source states computed without any target
        assert torch.equal(a.k, b.k)
    mask = mixed_attention_mask(src != PAD, prev.size(1))
    S = src.size(1)
    assert not mask[:, :, :S, S:].any()  # source rows never attend to target keys
    assert mask[0, 0, S + 2, : S].all() and mask[0, 0, S + 2, S:S + 3].all() and not mask[0, 0, S + 2, S + 3:].any()
    assert not mask[1, 0, :, 5:S].any()  # padded source keys are hidden from every row


def test_cached_decoding_equals_full_recomputation():
    model = tiny()
    src, prev = batch()
    with torch.no_grad():
        full = model(src, prev)
        state = model.start(src)
        steps = torch.stack([model.step(prev[:, t], state) for t in range(prev.size(1))], dim=1)
    assert torch.allclose(full, steps, atol=1e-5)
    hyps = beam_search(model, src, BeamConfig(beam=3, lenpen=1.1, length_penalty="gnmt", max_len_a=1, max_len_b=3))
    assert all(h[0].tokens[-1] == EOS for h in hyps)


def test_positions_restart_for_the_target():
    model = tiny()
    src, prev = batch()
    with torch.no_grad():
        target_embedding = model.embed_half(prev, 1)
        expected = model.tokens(prev) * 32**0.5 + model.embed.positions[: prev.size(1)] + model.language[1]
    assert torch.allclose(target_embedding, expected)


def test_one_parameter_set_serves_both_halves_and_the_papers_count():
    model = tiny()
    assert len(model.layers) == 3 and model.language.shape == (2, 32)
    names = {name for name, _ in model.named_parameters()}
    assert not any("decoder" in n or "encoder" in n for n in names)
    lwc = build("lwc", dict(src_vocab=31300, tgt_vocab=31300, preset="small", layers=14))
    assert round(count_parameters(lwc) / 1e6, 2) == 19.07  # LWC T1: 19.07M with a ~31.3K joint vocabulary
    no_lang = build("lwc", dict(src_vocab=31300, tgt_vocab=31300, preset="small", layers=14,
                                language_embeddings=False))
    assert count_parameters(lwc) - count_parameters(no_lang) == 2 * 256  # the paper's "−512 params"
