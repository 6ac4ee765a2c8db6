"""The shared Transformer: the seam (all layer states, per-layer views), causality, cached decoding, counts."""

from functools import partial

import pytest
import torch
from torch import nn

from conftest import assert_autoregressive, assert_target_prefix_only, tiny_batch, tiny_model

from layerwise_nmt import UserError
from layerwise_nmt.models import build
from layerwise_nmt.models.transformer import PRESETS, count_parameters


tiny = partial(tiny_model, "transformer")
batch = partial(tiny_batch, "transformer")


def test_encoder_returns_every_layer_and_the_embedding():
    model = tiny()
    out = model.encoder(batch()[0])
    assert len(out.states) == 3 and all(s.shape == (3, 7, 32) for s in out.states)
    assert out.mask.shape == (3, 1, 1, 7) and not out.mask[1, 0, 0, 5:].any()


def test_baseline_hands_every_decoder_layer_the_top_encoder_layer():
    model = tiny()
    encoded = model.encoder(batch()[0])
    views = model.source_views(encoded)
    assert len(views) == 3 and all(v is encoded.states[-1] for v in views)


def test_decoder_is_causal_and_source_padding_is_ignored():
    model = tiny()
    src, prev = batch()
    assert_target_prefix_only(model, src, prev)
    logits = model(src, prev)
    padded = src.clone()
    padded[1, 5:] = 1
    src_other_pad = torch.cat([src, torch.full((3, 2), 1)], dim=1)  # more padding changes nothing
    assert torch.allclose(model(src_other_pad, prev), logits, atol=1e-5)


@pytest.mark.parametrize("amp", [False, True])
def test_cached_steps_equal_full_recomputation(amp):
    model = tiny()
    src, prev = batch()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        full = model(src, prev).float()
        state = model.start(src)
        steps = torch.stack([model.step(prev[:, t], state).float() for t in range(prev.size(1))], dim=1)
    assert torch.allclose(full, steps, atol=1e-4 if not amp else 5e-2)


def test_reorder_follows_the_beam():
    """Two sentences, two hypotheses each (rows s0h0 s0h1 s1h0 s1h1) reading one copy of their sentence's source:
    rows move within a sentence's hypotheses, then a finished sentence leaves."""
    model = tiny()
    src, prev = batch()
    src2 = src[:2].repeat_interleave(2, dim=0)  # what each row reads
    prev2 = torch.stack([prev[0], prev[1], prev[2], prev[0]])
    with torch.no_grad():
        state = model.start(src[:2])
        state.reorder(torch.tensor([0, 0, 1, 1]))  # each sentence's hypotheses, before the first step
        model.step(prev2[:, 0], state)
        model.step(prev2[:, 1], state)
        state.reorder(torch.tensor([1, 1, 3, 2]))  # within a sentence's hypotheses
        moved = model.step(prev2[[1, 1, 3, 2], 2], state)
        expected = model(src2, prev2[[1, 1, 3, 2], :3])[:, 2]
        assert torch.allclose(moved, expected, atol=1e-5)
        state.reorder(torch.tensor([2, 3]), sentences=torch.tensor([1]))  # sentence 0 finished
        kept = model.step(prev2[[3, 2], 3], state)
        expected = model(src2[[2, 3]], prev2[[3, 2], :4])[:, 3]
        assert torch.allclose(kept, expected, atol=1e-5)
        assert state.views[0].k.size(0) == 1


def test_tying_and_counts():
    d, ff = PRESETS["small"][:2]
    untied = tiny(tie="none", d_model=d, d_ff=ff, src_vocab=100, tgt_vocab=80)
    shared = tiny(tie="decoder", d_model=d, d_ff=ff, src_vocab=100, tgt_vocab=80)
    joint = tiny(tie="all", d_model=d, d_ff=ff, src_vocab=100, tgt_vocab=100)
    assert count_parameters(untied) - count_parameters(shared) == 80 * d
    assert joint.encoder.embed.tokens.weight is joint.decoder.embed.tokens.weight is joint.output.weight
    with pytest.raises(UserError, match="joint vocabulary"):
        tiny(tie="all", src_vocab=100, tgt_vocab=80)
    with pytest.raises(UserError, match="unknown model setting.*layerz"):
        tiny(layerz=3)


def test_mlrf_backbone_count_is_the_papers():
    """MLRF T2: 3+3 layers, d=256, untied embeddings and output layer with bias: 10.97M with 8,389/6,428 types."""
    model = build(
        "transformer",
        dict(
            src_vocab=8389,
            tgt_vocab=6428,
            preset="small",
            encoder_layers=3,
            decoder_layers=3,
            tie="none",
            output_bias=True,
        ),
    )
    assert round(count_parameters(model) / 1e6, 2) == 10.97


def torch_reference(model, norm_first: bool):
    """PyTorch's own nn.Transformer stacks with our weights copied in: an independent statement of post-/pre-norm
    (norm_first), including the final LayerNorm a pre-norm stack ends with."""
    c = model.config
    layer = dict(
        d_model=c.d_model, nhead=c.heads, dim_feedforward=c.d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    final = (lambda: nn.LayerNorm(c.d_model)) if norm_first else (lambda: None)
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**layer), c.encoder_layers, final(), enable_nested_tensor=False
    )
    decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), c.decoder_layers, final())
    with torch.no_grad():
        for ours, theirs in zip(model.encoder.layers, encoder.layers, strict=True):
            theirs.self_attn.in_proj_weight.copy_(ours.attn.qkv.weight)
            theirs.self_attn.in_proj_bias.copy_(ours.attn.qkv.bias)
            theirs.self_attn.out_proj.load_state_dict(ours.attn.out.state_dict())
            for a, b in (
                (theirs.linear1, ours.ffn.fc1),
                (theirs.linear2, ours.ffn.fc2),
                (theirs.norm1, ours.norm1),
                (theirs.norm2, ours.norm2),
            ):
                a.load_state_dict(b.state_dict())
        for ours, theirs in zip(model.decoder.layers, decoder.layers, strict=True):
            theirs.self_attn.in_proj_weight.copy_(ours.self_attn.qkv.weight)
            theirs.self_attn.in_proj_bias.copy_(ours.self_attn.qkv.bias)
            theirs.self_attn.out_proj.load_state_dict(ours.self_attn.out.state_dict())
            x = ours.cross_attn
            theirs.multihead_attn.in_proj_weight.copy_(torch.cat([x.q.weight, x.kv.weight]))
            theirs.multihead_attn.in_proj_bias.copy_(torch.cat([x.q.bias, x.kv.bias]))
            theirs.multihead_attn.out_proj.load_state_dict(x.out.state_dict())
            for a, b in (
                (theirs.linear1, ours.ffn.fc1),
                (theirs.linear2, ours.ffn.fc2),
                (theirs.norm1, ours.norm1),
                (theirs.norm2, ours.norm2),
                (theirs.norm3, ours.norm3),
            ):
                a.load_state_dict(b.state_dict())
        for stack, theirs in ((model.encoder, encoder), (model.decoder, decoder)):
            if norm_first:
                theirs.norm.load_state_dict(stack.final_norm.state_dict())
    return encoder.eval(), decoder.eval()


@torch.no_grad()
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_layers_equal_pytorchs_transformer_post_and_pre_norm(norm):
    model = tiny(norm=norm)
    encoder, decoder = torch_reference(model, norm_first=norm == "pre")
    src, prev = batch()
    pad = src == 1
    memory = encoder(model.encoder.embed(src), src_key_padding_mask=pad)
    assert torch.allclose(model.encoder(src).states[-1][~pad], memory[~pad], atol=1e-5)
    causal = nn.Transformer.generate_square_subsequent_mask(prev.size(1))
    hidden = decoder(
        model.decoder.embed(prev), memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=pad
    )
    assert torch.allclose(model(src, prev), model.output(hidden), atol=1e-5)


@torch.no_grad()
def test_pre_norm_is_causal_decodes_cached_and_adds_one_layernorm_per_stack():
    model = tiny(norm="pre")
    src, prev = batch()
    assert_autoregressive(model, src, prev)
    assert count_parameters(model) - count_parameters(tiny()) == 2 * 2 * 32
    for name in ("cross_view", "mlrf", "deep"):  # they read lower layers' outputs, normalised only post-norm
        with pytest.raises(UserError, match=f"model {name} needs norm=post"):
            build(name, dict(src_vocab=50, tgt_vocab=50, d_model=32, d_ff=64, heads=4, norm="pre"))
    with pytest.raises(UserError, match="norm='mid'"):
        tiny(norm="mid")


def test_fairseq_init_is_fairseq_0_12s_and_not_the_fused_xavier():
    d, d_ff = 64, 256
    bound_qkv = (3 / (2 * d)) ** 0.5  # Xavier with gain 1/sqrt(2) on each (D, D) block
    fairseq = tiny(d_model=d, d_ff=d_ff, init="fairseq")
    xavier = tiny(d_model=d, d_ff=d_ff)
    for model in (fairseq, xavier):
        assert model.encoder.layers[0].attn.qkv.weight.abs().max() <= bound_qkv  # fused (3D, D) Xavier: the same
    cross, ffn = fairseq.decoder.layers[0].cross_attn, fairseq.decoder.layers[0].ffn
    for linear in (cross.q, cross.kv):
        for block in linear.weight.split(d):
            assert 0.9 * bound_qkv < block.abs().max() <= bound_qkv
        assert 0.8 * d**-0.5 < linear.bias.abs().max() <= d**-0.5
    # the fused (2D, D) Xavier of `xavier` reaches past fairseq's per-block bound; its biases are zero
    assert xavier.decoder.layers[0].cross_attn.kv.weight.abs().max() > bound_qkv
    assert not xavier.decoder.layers[0].cross_attn.kv.bias.any()
    assert 0.9 * d**-0.5 < ffn.fc1.weight.abs().max() <= d**-0.5
    assert 0.9 * d_ff**-0.5 < ffn.fc2.weight.abs().max() <= d_ff**-0.5 and ffn.fc2.bias.abs().max() > 0
    assert not cross.out.bias.any()  # attention outputs: Xavier, zero bias, as fairseq
