"""model_sizes.py's closed forms equal the built models' parameter counts: for every experiment of config.yaml and
of each overlay (and its other readings), and for a seeded random sweep over every option that changes a count."""

import json
import random
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from layerwise_nmt import UserError
from layerwise_nmt.models import sizes as model_sizes
from layerwise_nmt import grid
from layerwise_nmt.models import MODELS, build, model_class
from layerwise_nmt.models.transformer import count_parameters

PARENTS = {"study_small.yaml": ("study.yaml",)}  # an overlay merged over another overlay, not config.yaml alone
VOCABS = ((64, 64), (64, 80))  # joint, and unequal where the model allows it (tie: all refuses)


def built(model: str, settings: dict) -> int:
    """The count of the model `build` makes, on the meta device (counted, never allocated), without `build`'s
    initialisation, which draws the weights and cost this test 2-3× the construction."""
    with torch.device("meta"):
        return count_parameters(model_class(model)(MODELS[model].config_class.from_dict(dict(settings))))


def mismatches(model: str, settings: dict) -> list[str]:
    """The closed form against the built model, for settings and each of its other readings; a refused setting must
    be refused by both."""
    try:
        config = MODELS[model].config_class.from_dict(dict(settings))
    except UserError:
        with pytest.raises(UserError):
            model_sizes.parameter_count(model, settings)
        with pytest.raises(UserError):
            build(model, settings)
        return []
    out = []
    for variant in [settings] + [{**settings, **o} for o in config.other_readings().values()]:
        closed, real = model_sizes.parameter_count(model, variant), built(model, variant)
        if closed != real:
            out.append(
                f"{model} {json.dumps(variant, sort_keys=True)}: closed form {closed:,}, built {real:,} "
                f"({closed - real:+,})"
            )
    return out


def config_chains() -> list[tuple[str, ...]]:
    overlays = sorted(p.name for p in (ROOT / "config").glob("*.yaml"))
    assert overlays, "no overlay found under config/"
    return [("config.yaml",)] + [
        ("config.yaml", *(f"config/{p}" for p in PARENTS.get(o, ())), f"config/{o}") for o in overlays
    ]


def test_every_model_has_a_closed_form():
    assert set(model_sizes.FAMILIES) == set(MODELS)


@pytest.mark.system
def test_every_experiment_of_every_config():
    """config.yaml's experiments and each overlay's, each architecture counted once."""
    cases = {}
    for chain in config_chains():
        config = grid.load(*(ROOT / path for path in chain))
        for name in config["experiments"]:
            e = grid.experiment(config, name)
            for src, tgt in VOCABS:
                settings = {**e["arch"], "src_vocab": src, "tgt_vocab": tgt}
                cases[json.dumps([e["model"], settings], sort_keys=True)] = (e["model"], settings)
    assert {model for model, _ in cases.values()} == set(MODELS)
    wrong = [line for model, settings in cases.values() for line in mismatches(model, settings)]
    assert not wrong, "\n".join(wrong)


def backbone_options(rng: random.Random, family: str) -> dict:
    """Sizes, embeddings and layers every family shares; a convolutional backbone where the family builds one."""
    heads = rng.choice((1, 2, 4))
    settings = {
        "heads": heads,
        "d_model": heads * rng.choice((2, 4, 6)),
        "d_ff": rng.choice((3, 8, 12)),
        "encoder_layers": rng.randint(1, 5),
        "decoder_layers": rng.randint(1, 5),
        "tie": rng.choice(("none", "decoder", "all")),
        "output_bias": rng.random() < 0.5,
        "norm": rng.choice(("post", "pre")),
    }
    if rng.random() < 0.5:  # GCA and GPA pair the layers, MLRF's shared layer embedding too
        settings["decoder_layers"] = settings["encoder_layers"]
    if family not in ("lwc", "context_gate") and rng.random() < 0.5:
        settings.update(
            backbone=rng.choice(("dynamic_conv", "lightweight_conv")),
            norm="post",
            conv_glu=rng.random() < 0.5,
            kernel_sizes=[rng.choice((1, 2, 3, 5)) for _ in range(5)],
        )
    vocab = rng.randint(5, 30)
    other = vocab if settings["tie"] == "all" else rng.randint(5, 30)
    return {**settings, "src_vocab": vocab, "tgt_vocab": other}


# per family: each option that changes its count and the values drawn for it
FAMILY_OPTIONS = {
    "transformer": {},
    "context_gate": {},
    "lwc": {
        "layers": (1, 2, 3, 4),
        "language_embeddings": (True, False),
        "share_layers": (True, False),
        "mixed_attention": (True, False),
        "tie": ("all",),
    },
    "cross_view": {
        "strategy": ("top", "gca", "gpa", "fga", "fma", "ama"),
        "soft_integration": (True, False),
        "norm": ("post",),
    },
    "deep": {
        "aggregation": ("none", "dense", "linear", "iterative", "hierarchical"),
        "mla_k": (0, 1, 2, 3),
        "apply_to": ("encoder", "decoder", "both"),
        "agg_function": ("sigmoid", "relu", "attention"),
        "linear_form": ("square", "factorised"),
        "dense_norm": (True, False),
        "input_bias": (True, False),
        "norm": ("post",),
    },
    "mlrf": {
        "encoder_fusion": ("none", "avg", "fnn", "sa"),
        "decoder_fusion": ("none", "avg", "fnn", "sa"),
        "n_hop": (1, 2, 3),
        "d_a": (3, 5),
        "d_f": (4, 7),
        "independent_w1": (True, False),
        "w1_per_hop": (True, False),
        "word_embedding": (True, False),
        "layer_embedding": (True, False),
        "norm": ("post",),
    },
}
SAMPLES = 40  # valid settings per family


@pytest.mark.parametrize("family", sorted(FAMILY_OPTIONS))
def test_a_random_sweep_of_each_familys_options(family):
    rng, options = random.Random(f"model sizes {family}"), FAMILY_OPTIONS[family]
    drawn, wrong, tries = [], [], 0
    while len(drawn) < SAMPLES and tries < 20 * SAMPLES:
        tries += 1
        settings = {**backbone_options(rng, family), **{k: rng.choice(v) for k, v in options.items()}}
        if settings.get("tie") == "all":
            settings["tgt_vocab"] = settings["src_vocab"]
        try:
            MODELS[family].config_class.from_dict(dict(settings))
        except UserError:
            continue
        drawn.append(settings)
        wrong += mismatches(family, settings)
    assert len(drawn) == SAMPLES
    assert not wrong, "\n".join(wrong)
    for key, values in options.items():  # every value of every option was counted at least once
        assert {s[key] for s in drawn} == set(values), key
    assert {s.get("backbone", "transformer") for s in drawn} == (
        {"transformer"} if family in ("lwc", "context_gate") else {"transformer", "dynamic_conv", "lightweight_conv"}
    )


def test_counting_every_experiments_cost_imports_no_torch():
    """What `snakemake -n` does to price and check every training: plan's parameter counts come from the closed
    form, in a driver environment that may hold no torch or numpy."""
    code = (
        "import sys; from layerwise_nmt import grid; from layerwise_nmt.grid.budget_checks import "
        "budget_warnings; from layerwise_nmt.grid.pricing import experiment_cost; "
        "config = grid.load('config.yaml'); "
        "costs = [experiment_cost(config, n) for n in config['experiments']]; budget_warnings(config); "
        "assert any(c.params for c in costs); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"
