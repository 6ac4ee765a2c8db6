"""Exploiting deep representations (Dou et al. 2018): printed increments, the tree's wiring, diversity, causality."""

from functools import partial

import pytest
import torch

from conftest import assert_autoregressive, tiny_batch, tiny_model, toy_batch
from layerwise_nmt import UserError
from layerwise_nmt.models import build
from layerwise_nmt.models.deep_repr import Aggregation, diversity
from layerwise_nmt.models.transformer import count_parameters

BASE = dict(src_vocab=30000, tgt_vocab=30000, preset="base")


@pytest.mark.parametrize(
    "settings, printed",
    [
        ({"aggregation": "dense"}, 0.0),
        ({"aggregation": "dense", "dense_norm": True}, 0.0),
        ({"aggregation": "iterative"}, 31.5),
        ({"aggregation": "hierarchical"}, 23.1),
        ({"mla_k": 2}, 33.6),
        ({"mla_k": 3}, 37.8),
    ],
)
@pytest.mark.system
def test_increments_over_transformer_base_equal_the_printed_ones(settings, printed):
    base = count_parameters(build("deep", BASE))
    assert round((count_parameters(build("deep", {**BASE, **settings})) - base) / 1e6, 1) == printed


@pytest.mark.system
def test_big_hierarchical_and_the_linear_combination_count():
    big = dict(BASE, preset="big")
    hierarchical = count_parameters(build("deep", {**big, "aggregation": "hierarchical"}))
    extra = hierarchical - count_parameters(build("deep", big))
    assert round(extra / 1e6) == 92  # what Table 2's Big rows imply
    linear = count_parameters(build("deep", {**BASE, "aggregation": "linear"})) - count_parameters(build("deep", BASE))
    assert linear == 2 * 6 * 512 * 512  # Eq. 5 literally; the paper prints +14.7M
    factorised = count_parameters(build("deep", {**BASE, "aggregation": "linear", "linear_form": "factorised"}))
    assert factorised - count_parameters(build("deep", BASE)) == 2 * 7 * 512 * 2048  # 14.68M: the printed +14.7M


def test_lwnmt_params_prints_the_other_readings_beside_the_paper():
    """`lwnmt params`: Dou's linear combination and MLRF's Dec-SA 6 hops with the count of each other reading."""
    import subprocess
    import sys

    from conftest import ROOT

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "params",
            "--config",
            str(ROOT / "config.yaml"),
            "--vocab",
            "30000",
            "dou.ende.linear",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "93,364,736" in out and "102.70M" in out and "[linear_form=factorised: 104,899,072]" in out
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "params",
            "--config",
            str(ROOT / "config.yaml"),
            "--src-vocab",
            "8389",
            "--tgt-vocab",
            "6428",
            "mlrf.t2.dec_sa6",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "12,162,076" in out and "13.47M" in out and "[w1_per_hop=true: 13,472,796]" in out


def test_dou_counts_are_the_printed_ones_with_thumts_two_vocabularies():
    """Dou's En-De rows train on separate source/target vocabularies (THUMT's); at 28,540 symbols per side every
    printed En-De count (88.0M, 111.1M, 264M, 356M, to the printed digits) is ours; one joint 32,768 table is not."""
    import csv
    import io
    import subprocess
    import sys

    from conftest import ROOT
    from layerwise_nmt import grid

    config = grid.load(ROOT / "config.yaml")
    names = ["dou.ende.base", "dou.ende.hierarchical_div", "dou.ende.big", "dou.ende.big_deep"]
    assert {grid.experiment(config, name)["vocab"] for name in names} == {"separate"}

    def counts(*vocab: str) -> list[tuple[int, str]]:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "layerwise_nmt",
                "params",
                "--config",
                str(ROOT / "config.yaml"),
                *vocab,
                "--format",
                "csv",
                *names,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return [
            (int(row["params"]), row["paper_params"])
            for row in csv.DictReader(io.StringIO(out))
            if row["paper_params"] and row["table"] in ("T1", "T2")
        ]

    def printed(params: int, paper: str) -> bool:  # equal to the digits the paper prints
        digits = len(paper.partition(".")[2])
        return round(params / 1e6, digits) == float(paper)

    separate = counts("--src-vocab", "28540", "--tgt-vocab", "28540")
    assert len(separate) == 6 and all(printed(*row) for row in separate)
    assert not any(printed(*row) for row in counts("--vocab", "32768"))


@torch.no_grad()
def test_eq4_dense_sum_doubles_the_scale_per_layer_and_dense_norm_keeps_it():
    """Σ_{i≤l} H^i = 2·Σ_{i<l} H^i + LAYER(H^{l−1}): with 6 post-norm layers (each output of RMS 1) the top state
    of Eq. 4 is ~2^5 times a layer's output; with dense_norm every H^l is layer-normalised."""
    src = toy_batch()[0]
    rms = {}
    for norm in (False, True):
        model = tiny(aggregation="dense", dense_norm=norm, encoder_layers=6, decoder_layers=6)
        states = model.encoder(src).states  # dense: H^0 … H^L, the output being H^L
        rms[norm] = [float(h.pow(2).mean().sqrt()) for h in states[1:]]
    assert rms[False][-1] / rms[False][0] > 20 and all(
        b > 1.7 * a for a, b in zip(rms[False][1:], rms[False][2:], strict=False)
    )
    assert all(0.9 < r < 1.1 for r in rms[True])


@torch.no_grad()
def test_factorised_linear_combination_starts_as_the_mean_of_the_layers():
    square, factorised = tiny(aggregation="linear"), tiny(aggregation="linear", linear_form="factorised")
    factorised.load_state_dict({k: v for k, v in square.state_dict().items() if "_agg." not in k}, strict=False)
    src, prev = batch()
    *states, mean = square.encoder(src).states  # H^0 … H^L, Ĥ
    assert torch.allclose(mean, torch.stack(states[1:]).mean(0), atol=1e-6)
    assert torch.allclose(factorised(src, prev), square(src, prev), atol=0.05)  # + small noise in the d_ff blocks


tiny = partial(tiny_model, "deep")
batch = partial(tiny_batch, "deep")


def test_diversity_is_zero_for_identical_and_one_for_orthogonal_layers_and_its_gradient_separates_them():
    keep = torch.ones(1, 2, dtype=torch.bool)
    a = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])
    assert diversity([None, a, a.clone(), 3 * a], keep).item() == pytest.approx(0.0, abs=1e-6)
    b = torch.tensor([[[0.0, 5.0], [-1.0, 0.0]]])
    assert diversity([None, a, b], keep).item() == pytest.approx(1.0)
    x = torch.tensor([[[1.0, 0.2]]], requires_grad=True)
    y = torch.tensor([[[1.0, 0.0]]])
    before = diversity([None, x, y], torch.ones(1, 1, dtype=torch.bool))
    (-before).backward()  # the loss gets −λ·L_div
    with torch.no_grad():
        after = diversity([None, x - 0.1 * x.grad, y], torch.ones(1, 1, dtype=torch.bool))
    assert after > before


def test_hierarchical_tree_wiring_matches_the_equations():
    model = tiny(aggregation="hierarchical")
    calls, layer_inputs = [], []
    for node in model.encoder_agg.nodes:
        node.register_forward_hook(lambda m, args, out: calls.append((args, out)))
    for layer in model.encoder.layers:
        layer.register_forward_pre_hook(lambda m, args: layer_inputs.append(args[0]))
    src, _ = batch()
    with torch.no_grad():
        *states, out = model.encoder(src).states  # H^0 … H^L, Ĥ
    H = states  # H^0 … H^4
    (node1_in, node1), (node2_in, node2) = calls
    assert len(node1_in) == 2 and torch.equal(node1_in[0], H[2]) and torch.equal(node1_in[1], H[1])  # AGG(H^1, H^2)
    assert len(node2_in) == 3 and torch.equal(node2_in[0], H[4]) and torch.equal(node2_in[1], H[3])
    assert torch.equal(node2_in[2], node1)  # Ĥ^2 = AGG(H^3, H^4, Ĥ^1)
    assert torch.equal(layer_inputs[2], node1)  # fed back: H^3 = LAYER(Ĥ^1), not LAYER(H^2)
    assert torch.equal(out, node2)


def test_diversity_on_a_one_layer_stack_is_a_config_error_naming_the_layers():
    with pytest.raises(UserError, match="diversity=1.0 needs at least 2 encoder and 2 decoder layers.*got 1 and 4"):
        tiny(diversity=1.0, encoder_layers=1)
    tiny(diversity=0.0, encoder_layers=1)  # without the term one layer is fine


def test_auxiliary_loss_only_when_training_with_diversity():
    model = tiny(aggregation="hierarchical", diversity=1.0).train()
    model(*batch())
    assert model.auxiliary_loss is not None and -1.0 <= model.auxiliary_loss.item() < 0
    model.eval()
    model(*batch())
    assert model.auxiliary_loss is None


@torch.no_grad()
@pytest.mark.parametrize(
    "settings",
    [
        dict(aggregation="dense"),
        dict(aggregation="dense", dense_norm=True),
        dict(aggregation="linear"),
        dict(aggregation="linear", linear_form="factorised"),
        dict(aggregation="iterative"),
        dict(aggregation="hierarchical"),
        dict(mla_k=2),
        dict(mla_k=3),
        dict(aggregation="hierarchical", apply_to="decoder"),
        dict(aggregation="hierarchical", agg_function="attention"),
        dict(aggregation="hierarchical", agg_residual="top"),
    ],
)
def test_causal_and_cached_decoding_for_every_variant(settings):
    model = tiny(**settings)
    src, prev = batch()
    assert_autoregressive(model, src, prev)


@torch.no_grad()
@pytest.mark.parametrize("backbone", ["dynamic_conv", "lightweight_conv"])
@pytest.mark.parametrize(
    "settings", [dict(aggregation="hierarchical"), dict(aggregation="iterative", apply_to="both"), dict(mla_k=2)]
)
def test_cached_decoding_keeps_the_convolution_history_on_conv_backbones(backbone, settings):
    model = tiny(backbone=backbone, kernel_sizes=[3, 5, 7, 7, 7, 7], weight_dropout=0.0, **settings)
    src, prev = batch()
    assert_autoregressive(model, src, prev)


def test_aggregation_shares_sum_to_one():
    node = Aggregation(3, build("deep", dict(src_vocab=40, tgt_vocab=40, d_model=16, d_ff=32, heads=2)).config)
    shares = node.shares()
    assert shares.shape == (3,) and torch.isclose(shares.sum(), torch.tensor(1.0))


@torch.no_grad()
def test_odd_depth_tree_ends_with_a_two_input_node():
    model = tiny(aggregation="hierarchical", encoder_layers=3, decoder_layers=3)
    assert [node.n_inputs for node in model.encoder_agg.nodes] == [2, 2]
    src, prev = batch()
    assert_autoregressive(model, src, prev)


def test_multi_layer_attention_warm_starts_from_the_baseline(tmp_path):
    """Dou et al. start every model from the trained baseline: an MLA layer's ATT_1 (queries and keys from H^{l-1},
    Eq. 8) takes the baseline layer's self-attention, everything else is copied; ATT_2 keeps its own init."""
    from layerwise_nmt.training.checkpoint import warm_start

    small = dict(src_vocab=40, tgt_vocab=40, d_model=16, d_ff=32, heads=2, encoder_layers=3, decoder_layers=3)
    base = build("deep", small)
    torch.save({"model": base.state_dict()}, tmp_path / "base.pt")
    mla = build("deep", {**small, "mla_k": 2})
    new = warm_start(mla, str(tmp_path / "base.pt"))
    for side, name in (("encoder", "attn"), ("decoder", "self_attn")):
        copied = getattr(mla, side).layers[2].mla.attns[0].qkv.weight
        assert torch.equal(copied, getattr(getattr(base, side).layers[2], name).qkv.weight)
        assert torch.equal(getattr(mla, side).layers[0].ffn.fc1.weight, getattr(base, side).layers[0].ffn.fc1.weight)
    assert any(".mla.attns.1." in n for n in new) and not any(".mla.attns.0." in n for n in new)


def test_multi_layer_attention_reads_the_stack_states_through_the_shared_encoder():
    """The shared stack hands each layer the states so far: under dense aggregation, layer 4's ATT_2 attends to
    H^2 as Eq. 4 defines it (the layer output plus H^1), not to the bare layer output."""
    model = tiny(aggregation="dense", mla_k=2)
    seen = []
    model.encoder.layers[3].mla.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    with torch.no_grad():
        states = model.encoder(batch()[0]).states
    (lower,) = seen
    assert torch.equal(lower[0], states[3]) and torch.equal(lower[1], states[2])
