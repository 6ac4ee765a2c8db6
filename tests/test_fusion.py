"""Multi-layer representation fusion (Wang et al. 2018): counts, the fusion functions, causality, sharing."""

from functools import partial

import pytest
import torch

from conftest import assert_autoregressive, tiny_batch, tiny_model, toy_batch
from layerwise_nmt.models import build
from layerwise_nmt.models.transformer import count_parameters

PAPER_VOCAB = dict(src_vocab=8389, tgt_vocab=6428, preset="small", encoder_layers=3, decoder_layers=3)
PRINTED = [  # (T2 row, settings, printed #Param.)
    ("Transformer-MLE", {}, 10.97),
    ("+RestartAdam-4Layers", {"encoder_layers": 4, "decoder_layers": 4}, 12.82),
    ("+RestartAdam-6Layers", {"encoder_layers": 6, "decoder_layers": 6}, 16.50),
    ("Enc-AVG", {"encoder_fusion": "avg", "word_embedding": False}, 10.97),
    ("Enc-FNN", {"encoder_fusion": "fnn"}, 11.63),
    ("Enc-SA (4)", {"encoder_fusion": "sa"}, 11.90),
    ("Enc-SA (6)", {"encoder_fusion": "sa", "n_hop": 6}, 12.16),
    ("Dec-AVG", {"decoder_fusion": "avg", "word_embedding": False}, 10.97),
    ("Dec-FNN", {"decoder_fusion": "fnn"}, 11.63),
    ("Dec-SA (4)", {"decoder_fusion": "sa"}, 11.90),
    ("Both-FNN", {"encoder_fusion": "fnn", "decoder_fusion": "fnn"}, 12.29),
    ("Both-SA (4)", {"encoder_fusion": "sa", "decoder_fusion": "sa"}, 12.82),
    ("Both-FNN-SA (4)", {"encoder_fusion": "fnn", "decoder_fusion": "sa"}, 12.55),
]


@pytest.mark.parametrize("row, settings, printed", PRINTED, ids=[r[0] for r in PRINTED])
def test_parameter_counts_equal_the_printed_ones(row, settings, printed):
    assert round(count_parameters(build("mlrf", {**PAPER_VOCAB, **settings})) / 1e6, 2) == printed


tiny = partial(tiny_model, "mlrf")
batch = partial(tiny_batch, "mlrf")


@torch.no_grad()
def test_avg_is_the_mean_of_the_layers_and_sa_weights_are_distributions():
    model = tiny(decoder_fusion="avg", word_embedding=False)
    src, prev = batch()
    encoded = model.encoder(src)
    states = model.decoder(prev, model.source_views(encoded), encoded.mask)
    expected = model.output(torch.stack(states[1:]).mean(dim=0))
    assert torch.allclose(model(src, prev), expected, atol=1e-6)

    for n_hop, independent in ((4, False), (3, True)):
        sa = tiny(decoder_fusion="sa", n_hop=n_hop, independent_w1=independent)
        sa(src, prev)
        weights = sa.decoder_fusion.last_weights  # (B, T, n_hop, L+1)
        assert weights.shape == (3, 6, n_hop, 4)
        assert torch.allclose(weights.sum(-1), torch.ones(3, 6, n_hop), atol=1e-6) and (weights > 0).all()
        assert not torch.allclose(weights[..., 0, :], weights[..., 1, :])  # hops differ (own column of W_2)


@torch.no_grad()
@pytest.mark.parametrize(
    "fusion",
    [
        dict(decoder_fusion="sa"),
        dict(decoder_fusion="fnn"),
        dict(encoder_fusion="fnn", decoder_fusion="sa"),
        dict(encoder_fusion="avg", decoder_fusion="avg", word_embedding=False),
    ],
)
def test_decoder_fusion_stays_causal_and_decodes_incrementally(fusion):
    model = tiny(**fusion)
    src, prev = batch()
    assert_autoregressive(model, src, prev)


@torch.no_grad()
def test_one_layer_embedding_serves_both_sides():
    model = tiny(encoder_fusion="fnn", decoder_fusion="sa")
    names = [n for n, _ in model.named_parameters() if "layer_embedding" in n]
    assert names == ["layer_embedding"] and model.layer_embedding.shape == (4, 16)
    src, prev = batch()
    encoded = model.encoder(src)
    memory = model.source_views(encoded)[0]
    states = model.decoder(prev, [memory] * 3, encoded.mask)
    fused = model.decoder_fusion(states, model.layer_embedding)
    model.layer_embedding[2] += 1.0  # moves the encoder's fused memory and the decoder's fused output
    assert not torch.allclose(model.source_views(encoded)[0], memory)
    assert not torch.allclose(model.decoder_fusion(states, model.layer_embedding), fused)
    no_embedding = tiny(encoder_fusion="fnn", decoder_fusion="sa", layer_embedding=False)
    assert no_embedding.layer_embedding is None


def test_fan_in_initialisation_and_untied_output():
    model = tiny(decoder_fusion="sa")
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            bound = module.in_features**-0.5
            assert module.weight.abs().max() <= bound and module.weight.abs().max() > 0.5 * bound, name
            if module.bias is not None:
                assert module.bias.abs().max() <= bound and module.bias.abs().max() > 0, name
    assert model.output.weight is not model.decoder.embed.tokens.weight and model.output.bias is not None
    tied = build(
        "transformer", dict(src_vocab=30, tgt_vocab=30, d_model=16, d_ff=32, heads=2, tie="all", init="fan_in")
    )
    assert tied.output.weight is tied.encoder.embed.tokens.weight
    assert tied.output.weight.std() > 16**-0.5 * 0.8  # the embedding's N(0, d^-0.5), not U(±1/sqrt(d))


def test_both_avg_sa_averages_layers_one_to_l_and_attends_over_zero_to_l():
    """MLRF T3's Both-AVG-SA: the encoder's AVG is (1/L)·Σ_{l=1..L} (as Enc-AVG), the decoder's SA reads z^0..z^L."""
    model = tiny(encoder_fusion="avg", decoder_fusion="sa", n_hop=2, independent_w1=True)
    states = [torch.randn(2, 3, model.config.d_model) for _ in range(model.config.encoder_layers + 1)]
    assert torch.allclose(model.encoder_fusion(states, model.layer_embedding), torch.stack(states[1:]).mean(0))
    assert model.decoder_fusion.w1.shape[0] == model.config.decoder_layers + 1  # one W_1 per input z^0..z^L


def test_one_w1_per_hop_gives_the_printed_dec_sa_6_hop_count():
    """T2 prints 13.47M for Dec-SA (n_hop=6), 1.31M above Enc-SA (6 hops); a W_1 per hop adds exactly 5 × d·d_a."""
    shared = count_parameters(build("mlrf", {**PAPER_VOCAB, "decoder_fusion": "sa", "n_hop": 6}))
    per_hop = count_parameters(build("mlrf", {**PAPER_VOCAB, "decoder_fusion": "sa", "n_hop": 6, "w1_per_hop": True}))
    assert round(shared / 1e6, 2) == 12.16 and per_hop == 13_472_796 and per_hop - shared == 5 * 256 * 1024
    model = tiny(decoder_fusion="sa", n_hop=3, w1_per_hop=True)
    src, prev = toy_batch(40, 30)
    model(src, prev)
    weights = model.decoder_fusion.last_weights  # (B, T, n_hop, L+1), each hop a distribution over layers
    assert weights.shape[2:] == (3, 4) and torch.allclose(weights.sum(-1), torch.ones(weights.shape[:3]))
