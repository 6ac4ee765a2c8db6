"""Layer-wise coordination (He et al. 2018) and the §5.4 context gate: tests that would fail on a wrong model."""

from functools import partial

import pytest
import torch

from conftest import (
    assert_autoregressive,
    assert_cached_beam_equals_recompute,
    assert_target_prefix_only,
    tiny_batch,
    tiny_model,
)
from layerwise_nmt.models import build
from layerwise_nmt.models.transformer import count_parameters

PAD = 1
V = 31300  # "about 31K" joint BPE symbols (LWC §4.1)
VARIANTS = {  # Table 3's rows as config flags
    "lwc": {},
    "w/o weight sharing": {"share_layers": False},
    "w/o mixed attention": {"mixed_attention": False},
    "w/o source/target embedding": {"language_embeddings": False},
    "w/o position embedding": {"position_embeddings": False},
}


tiny = partial(tiny_model, "lwc")
batch = partial(tiny_batch, "lwc")


def eq3_reference(model, src, prev):
    """The paper's formulation, literally: one sequence [source; target] through the shared layers under the mask
    M(i, j) = 0 iff j < n ∨ j ≤ i + n (Eq. 3; padded source keys hidden), logits at the target positions."""
    S, T = src.size(1), prev.size(1)
    x = torch.cat([model.embed_half(src, 0), model.embed_half(prev, 1)], dim=1)
    keys_src = (src != PAD)[:, None, None, :].expand(-1, 1, S + T, S)
    keys_tgt = torch.zeros(S + T, T, dtype=torch.bool)
    keys_tgt[S:] = torch.ones(T, T, dtype=torch.bool).tril()  # source rows (first S) never see the target
    mask = torch.cat([keys_src, keys_tgt.expand(src.size(0), 1, S + T, T)], dim=-1)
    for layer in model.layers:
        x, _ = layer.attend(x, mask)
    top = x[:, S:]
    if model.config.norm == "pre":  # t2t: a pre-norm stack's output is layer-normalised once more
        top = torch.nn.functional.layer_norm(top, (top.size(-1),), model.final_norm.weight, model.final_norm.bias)
    return top @ model.tokens.weight.t()


@torch.no_grad()
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_two_pass_implementation_is_eq3_mixed_attention_over_the_concatenation(norm):
    model = tiny(norm=norm)
    src, prev = batch()
    assert torch.allclose(model(src, prev), eq3_reference(model, src, prev), atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("flags", VARIANTS.values(), ids=VARIANTS.keys())
def test_target_prefix_only_source_independent_of_target_and_cached_decoding(flags, norm, monkeypatch):
    model = tiny(**flags, norm=norm)
    src, prev = batch()
    assert_target_prefix_only(model, src, prev)
    sources = []
    encode = model.encode
    monkeypatch.setattr(model, "encode", lambda s: sources.append(encode(s)) or sources[-1])
    model(src, prev)
    other = prev.clone()
    other[:, 1:] = torch.randint(4, 50, other[:, 1:].shape)
    model(src, other)
    (kv_a, states_a, _), (kv_b, states_b, _) = sources
    assert all(
        torch.equal(a, b) for a, b in zip(states_a, states_b, strict=True)
    )  # changing the target moves no source state
    assert all(torch.equal(a.k, b.k) and torch.equal(a.v, b.v) for a, b in zip(kv_a, kv_b, strict=True))
    state = model.start(src)
    steps = torch.stack([model.step(prev[:, t], state) for t in range(prev.size(1))], dim=1)
    assert torch.allclose(model(src, prev), steps, atol=1e-5)
    assert_cached_beam_equals_recompute(model, src)


@torch.no_grad()
def test_target_layer_l_reads_source_level_l_minus_1():
    """With 1 level the target reads the source *embeddings*: a model whose only layer is perturbed on the source
    pass but not on the target pass must give the same logits (the level-1 source output is never read)."""
    model = tiny(layers=1, share_layers=False)
    src, prev = batch()
    before = model(src, prev)
    with torch.no_grad():  # the source layer's FFN only shapes level-1 source states, which nobody reads
        model.layers[0].ffn.fc2.weight.add_(1.0)
    assert torch.allclose(model(src, prev), before, atol=1e-6)
    with torch.no_grad():  # ... while the target layer's K/V projection of level-0 source states matters
        model.target_layers[0].attn.qkv.weight[32:].mul_(-1.0)
    assert not torch.allclose(model(src, prev), before, atol=1e-4)


@torch.no_grad()
def test_positions_restart_for_the_target_and_can_be_removed():
    model = tiny()
    src, prev = batch()
    expected = model.tokens(prev) * 32**0.5 + model.embed.positions[: prev.size(1)] + model.language[1]
    assert torch.allclose(model.embed_half(prev, 1), expected)
    no_positions = tiny(position_embeddings=False, language_embeddings=False)
    assert torch.allclose(no_positions.embed_half(prev, 1), no_positions.tokens(prev) * 32**0.5)


def test_sharing_uses_the_same_tensors_for_both_halves():
    shared, separate = tiny(), tiny(share_layers=False)
    assert shared.target_stack() is shared.layers and separate.target_stack() is not separate.layers
    assert not any("decoder" in n or "encoder" in n for n, _ in shared.named_parameters())
    assert {id(p) for p in shared.target_stack().parameters()} == {id(p) for p in shared.layers.parameters()}
    assert not ({id(p) for p in separate.target_stack().parameters()} & {id(p) for p in separate.layers.parameters()})


def test_parameter_counts_beside_the_papers():
    def count(name, **kw):
        return count_parameters(build(name, dict(src_vocab=V, tgt_vocab=V, preset="small", **kw)))

    lwc = count("lwc", layers=14)
    assert round(lwc / 1e6, 2) == 19.07  # T1/T3 "19.07M"
    assert count("lwc", layers=7, share_layers=False) == lwc  # T3 w/o weight sharing: half the layers, 19.07M
    assert lwc - count("lwc", layers=14, language_embeddings=False) == 2 * 256  # the paper's "−512 params"
    assert count("lwc", layers=14, position_embeddings=False) == lwc  # sinusoids have no parameters
    assert count("lwc", layers=14, mixed_attention=False) - lwc == 14 * 2 * 256  # our reading: one extra LN each
    assert round(count("context_gate", tie="all") / 1e6, 2) == 19.08  # §5.4 "19.08M"
    assert round(count("transformer", tie="all") / 1e6, 2) == 19.07  # T1 Transformer-small at the same vocabulary
    # pre-norm (t2t, the rows' setting) adds one final LN: to the shared stack, to each of encoder and decoder
    assert count("lwc", layers=14, norm="pre") - lwc == 2 * 256
    assert round(count("lwc", layers=14, norm="pre") / 1e6, 2) == 19.07
    assert round(count("context_gate", tie="all", norm="pre") / 1e6, 2) == 19.08


@torch.no_grad()
def test_context_gate_starts_as_the_baseline_and_stays_causal():
    settings = dict(
        src_vocab=50,
        tgt_vocab=50,
        d_model=32,
        d_ff=64,
        heads=4,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.0,
        tie="all",
    )
    torch.manual_seed(0)
    gated = build("context_gate", settings).eval()
    plain = build("transformer", settings).eval()
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if not k.endswith(".gate")})
    src, prev = batch()
    assert torch.allclose(gated(src, prev), plain(src, prev), atol=1e-5)  # z = 0.5: LN((x + c)/2) = LN(x + c)
    for layer in gated.decoder.layers:
        layer.gate.normal_()
    assert not torch.allclose(gated(src, prev), plain(src, prev), atol=1e-3)
    assert_autoregressive(gated, src, prev)
    assert_autoregressive(build("context_gate", {**settings, "norm": "pre"}).eval(), src, prev)
