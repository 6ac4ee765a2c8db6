"""`lwnmt plan`: GPU-hours per table from exact parameter counts and the configured training budgets."""

import subprocess
import sys

import pytest

from conftest import ROOT
from layerwise_nmt import grid
from layerwise_nmt.grid.parameter_table import parameter_rows
from layerwise_nmt.grid.pricing import experiment_cost, plan


def test_cost_is_six_n_d_over_the_assumed_throughput():
    config = grid.load(ROOT / "config.yaml")
    cost = experiment_cost(config, "gca.ende.transformer")  # 30K updates × 3,584 tokens × update_freq 128
    assert cost.tokens == 2 * 30_000 * 3584 * 128 and not cost.upper_bound
    exact = parameter_rows(config, ["gca.ende.transformer"], (32768, 32768))[0]["params"]
    assert cost.params == exact  # plan's count is `lwnmt params`' count
    assert cost.gpu_hours(100) == pytest.approx(6 * exact * cost.tokens / 1e14 / 3600)
    epochs = experiment_cost(config, "mlrf.t2.baseline")  # epoch-bounded, with early stopping or not
    e = grid.experiment(config, "mlrf.t2.baseline")
    assert epochs.tokens == 2 * (e["train"]["max_epoch"] + (e["train"].get("restart_epochs") or 0)) * 160239 * 27


def test_plan_prints_every_table_of_the_full_config():
    out = subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", "plan", "--tflops", "50"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    config = grid.load(ROOT / "config.yaml")
    for paper, table in grid.tables(config):
        assert f"\n{paper} {table} " in out
    assert "50 TFLOP/s" in out and "distinct experiments" in out
    records = {(r["paper"], r["table"]): r for r in plan(config)}
    assert records[("mlrf", "T3")]["blocked"]  # NIST: rows costed, and said to need the user's data
    assert "need data or code not here yet" in out


def test_parameter_counts_come_from_the_closed_form_without_building():
    """`snakemake -n` prices every training (its priority) from the parameter count: the closed form of
    model_sizes.py, equal to the built model's, with no model built (building ~100 models once took most of a
    dry run; tests/test_model_sizes.py checks every experiment and option)."""
    import torch

    from layerwise_nmt.grid import pricing
    from layerwise_nmt.models import build
    from layerwise_nmt.models.transformer import count_parameters

    settings = {"preset": "base", "src_vocab": 1000, "tgt_vocab": 1000, "tie": "all", "layers": 4}
    with torch.device("meta"):
        assert pricing.parameter_count("lwc", settings) == count_parameters(build("lwc", settings))
    assert pricing.parameter_count("no_such_model", settings) is None


def test_a_small_models_gpu_hours_are_marked_as_a_lower_bound_saying_why():
    from layerwise_nmt.grid.pricing import render, small_model_mfu

    config = grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml")
    assert experiment_cost(config, "demo.transformer").lower_bound  # ~9M parameters
    assert not experiment_cost(grid.load(ROOT / "config.yaml"), "gca.ende.transformer").lower_bound  # big
    out = render(plan(config))
    assert "\ndemo T1       6    6   ≥" in out and "lower bound: models under 30M parameters" in out
    assert 0.005 < small_model_mfu() < 0.01  # the measured H200 run: under 1% of the peak
