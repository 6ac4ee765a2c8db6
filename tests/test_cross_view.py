"""Layer-wise cross-view decoding (Liu et al. 2020): each decoder layer's memory, soft integration, counts."""

from functools import partial

import pytest
import torch

from conftest import TINY, assert_autoregressive, tiny_batch, tiny_model
from layerwise_nmt.models import build
from layerwise_nmt.models.transformer import count_parameters

SETTINGS = TINY["cross_view"]
tiny = partial(tiny_model, "cross_view")
batch = partial(tiny_batch, "cross_view")


def memories(model, src, prev):
    """Each decoder layer's cross-attention memory in a forward pass, captured with hooks; and S_0 … S_N."""
    seen = []
    hooks = [
        layer.register_forward_pre_hook(lambda module, args: seen.append(args[1])) for layer in model.decoder.layers
    ]
    model(src, prev)
    for hook in hooks:
        hook.remove()
    return seen, model.encoder(src).states


@torch.no_grad()
@pytest.mark.parametrize(
    "strategy, expected", [("gca", [3, 2, 1]), ("gpa", [1, 2, 3]), ("fga", [1, 1, 1]), ("top", [3, 3, 3])]
)
def test_each_decoder_layer_reads_its_view(strategy, expected):
    model = tiny(strategy=strategy)
    seen, states = memories(model, *batch())
    assert len(seen) == 3
    for memory, j in zip(seen, expected, strict=True):  # S_j = states[j]; states[0] is the embedding layer
        assert torch.equal(memory, states[j])


@torch.no_grad()
def test_fma_and_ama_mix_every_encoder_layer():
    src, prev = batch()
    fma = tiny(strategy="fma")
    seen, states = memories(fma, src, prev)
    w, b = fma.views.weight, fma.views.bias  # (M, N, d, d), (M, N, d)
    expected = sum(states[j + 1] @ w[1, j].T + b[1, j] for j in range(3))
    assert torch.allclose(seen[1], expected, atol=1e-5)
    ama = tiny(strategy="ama")
    seen, states = memories(ama, src, prev)
    scores = torch.stack([states[j + 1] @ ama.views.score[2, j] for j in range(3)])  # (N, B, S)
    alpha = scores.softmax(dim=0)
    assert torch.allclose(seen[2], sum(alpha[j, ..., None] * states[j + 1] for j in range(3)), atol=1e-5)


@torch.no_grad()
def test_soft_integration_starts_layer_one_exactly_at_the_baseline_under_gca():
    soft = tiny(strategy="gca", soft_integration=True)
    seen, states = memories(soft, *batch())
    assert torch.allclose(seen[0], states[3], atol=1e-4)  # LN_1(2·S_N) = S_N for a post-norm S_N
    assert torch.allclose(seen[2], soft.views.norms[2](states[1] + states[3]))  # Eq. 7 for the last layer
    assert not torch.allclose(seen[2], states[1], atol=1e-3)


@torch.no_grad()
@pytest.mark.parametrize(
    "kw",
    [
        dict(strategy="gca"),
        dict(strategy="gca", soft_integration=True),
        dict(strategy="fma"),
        dict(strategy="ama", soft_integration=True),
    ],
)
def test_causal_and_cached_decoding(kw):
    model = tiny(**kw)
    src, prev = batch()
    assert_autoregressive(model, src, prev)


def test_parameter_counts():
    base = dict(src_vocab=10000, tgt_vocab=10000, preset="iwslt", tie="decoder")
    plain = count_parameters(build("transformer", base))
    d, N = 512, 6
    assert count_parameters(build("cross_view", {**base, "strategy": "gca"})) == plain
    assert count_parameters(build("cross_view", {**base, "strategy": "gca", "soft_integration": True})) == (
        plain + N * 2 * d
    )
    assert count_parameters(build("cross_view", {**base, "strategy": "fma"})) == plain + N * N * (d * d + d)
    assert count_parameters(build("cross_view", {**base, "strategy": "ama"})) == plain + N * N * d
    with pytest.raises(Exception, match="needs as many encoder as decoder layers"):
        build("cross_view", {**base, "strategy": "gca", "encoder_layers": 7})


def test_continued_learning_copies_the_baseline(tmp_path):
    from layerwise_nmt.training.checkpoint import warm_start

    torch.manual_seed(3)
    baseline = build("transformer", SETTINGS)
    torch.save({"model": baseline.state_dict()}, tmp_path / "base.pt")
    torch.manual_seed(4)
    full = build("cross_view", {**SETTINGS, "strategy": "gca", "soft_integration": True})
    defaults = {k: v.clone() for k, v in full.state_dict().items()}
    new = warm_start(full, str(tmp_path / "base.pt"))
    assert sorted(new) == sorted(k for k in defaults if k.startswith("views.norms."))
    state = full.state_dict()
    assert all(torch.equal(state[k], v) for k, v in baseline.state_dict().items())
    assert all(torch.equal(state[k], defaults[k]) for k in new)


CONV = dict(SETTINGS, kernel_sizes=[3, 5, 7], weight_dropout=0.0)


@torch.no_grad()
@pytest.mark.parametrize("backbone", ["dynamic_conv", "lightweight_conv"])
def test_conv_backbones_are_causal_cached_and_padding_blind(backbone):
    torch.manual_seed(0)
    model = build("transformer", {**CONV, "backbone": backbone}).eval()
    src, prev = batch()
    assert_autoregressive(model, src, prev, position=2)  # a kernel of 7 reaches back past the whole prefix
    encoded = model.encoder(src).states[-1]
    shorter = model.encoder(src[1:2, :5]).states[-1]  # sentence 1 without its padding
    assert torch.allclose(encoded[1, :5], shorter[0], atol=1e-5)  # padded positions never leak into real ones


@torch.no_grad()
def test_cross_view_strategies_apply_to_dynamic_conv():
    model = tiny(strategy="gca", backbone="dynamic_conv", kernel_sizes=[3, 5, 7], weight_dropout=0.0)
    seen, states = memories(model, *batch())
    assert all(torch.equal(memory, states[j]) for memory, j in zip(seen, [3, 2, 1], strict=True))


def test_dynamic_conv_parameter_count():
    d, H, ffn = 512, 4, 1024
    base = dict(
        src_vocab=10000,
        tgt_vocab=10000,
        preset="iwslt",
        tie="decoder",
        backbone="dynamic_conv",
        kernel_sizes=[3, 7, 15, 31, 31, 31],
    )

    def conv(K: int) -> int:
        return (d * 2 * d + 2 * d) + d * H * K + d + (d * d + d)  # GLU input, kernel predictor, bias, output

    ffn_ln = (d * ffn + ffn + ffn * d + d) + 2 * 2 * d
    cross = 4 * (d * d + d) + 2 * d
    expected = (
        2 * 10000 * d  # source table; target table = output projection
        + sum(conv(K) + ffn_ln for K in base["kernel_sizes"])
        + sum(conv(K) + ffn_ln + cross for K in base["kernel_sizes"])
    )
    assert count_parameters(build("transformer", base)) == expected


@pytest.mark.parametrize("backbone", ["dynamic_conv", "lightweight_conv"])
def test_conv_input_dropout_acts_in_training_only(backbone):
    """Wu et al.'s input_dropout: each conv block's input is dropped before its projection, in training only."""
    torch.manual_seed(0)
    src, prev = batch()
    dropped = build("transformer", {**CONV, "backbone": backbone, "input_dropout": 0.5})
    plain = build("transformer", {**CONV, "backbone": backbone, "input_dropout": 0.0})
    plain.load_state_dict(dropped.state_dict())
    for model in (dropped, plain):
        model.eval()
    with torch.no_grad():
        assert torch.equal(dropped(src, prev), plain(src, prev))  # eval: no effect
    dropped.train(), plain.train()
    torch.manual_seed(1)
    first, second = dropped(src, prev), dropped(src, prev)
    assert not torch.allclose(first, second)  # train: a fresh mask each pass, though every other dropout is 0
    torch.manual_seed(1)
    assert torch.equal(plain(src, prev), plain(src, prev))  # and with input_dropout 0 nothing else is random
    seen = []
    hook = dropped.encoder.layers[0].conv.inp.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    dropped(src, prev)
    hook.remove()
    zeros = (seen[0] == 0).float().mean().item()
    assert 0.3 < zeros < 0.7  # about half the projection's inputs zeroed
