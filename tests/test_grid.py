"""The grid package: what the workflow's rules ask of the config, tested without Snakemake, and that it imports
neither torch nor numpy (tests/test_package_layout.py: data/ never imports it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from layerwise_nmt import UserError, grid
from layerwise_nmt.grid.pricing import experiment_cost
from layerwise_nmt.grid import RuleInputs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo() -> dict:
    return grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml")


def run(task="multi30k_deen", experiment="demo.transformer", seed="1", **more):
    return SimpleNamespace(task=task, experiment=experiment, seed=seed, **more)


def test_table_spec_resolves_rows_to_every_seeds_score_files(demo):
    spec = grid.table_spec(demo, "demo", "T1")
    assert [r["label"] for r in spec.rows][:2] == [
        "Transformer baseline (3+3 layers, d=256)",
        "LWC, He et al. 2018 (7 shared layers, same parameters)",
    ]
    baseline, lwc = spec.rows[:2]
    assert baseline["scores"] == {"test": ["results/multi30k_deen/demo.transformer/seed1/test.score.json"]}
    assert lwc["compare_to"] == "demo.transformer"
    assert lwc["baseline_scores"] == baseline["scores"]
    assert spec.significance["test"] == "bootstrap" and spec.budget is True


def test_each_row_of_a_table_spec_carries_its_experiments_description_as_its_note():
    """The table's notes (how each row was run) come from the experiments' descriptions; an experiment that
    extends another and says nothing has no note (a parent's description is its own)."""
    config = grid.load(ROOT / "config.yaml")
    rows = {row["label"]: row for row in grid.table_spec(config, "lwc", "T1").rows if "note" in row}
    described = {
        name: " ".join(config["experiments"][name]["description"].split())
        for name in config["experiments"]
        if config["experiments"][name].get("description")
    }
    notes = [row["note"] for row in rows.values() if row["note"]]
    assert "LWC-small, 14 shared layers (19.07M at ~31.3K joint symbols)." in notes
    assert set(notes) <= set(described.values())


def test_figure_spec_names_what_each_kind_of_figure_reads(demo):
    accuracy = grid.figure_spec(demo, "demo", "accuracy").rows[0]
    assert accuracy["metrics"] == "results/multi30k_deen/demo.transformer/seed1/checkpoints/metrics.csv"
    assert accuracy["needs"] == ["results/multi30k_deen/demo.transformer/seed1/model.pt"]
    attention = grid.figure_spec(demo, "demo", "attention").rows[1]
    assert attention["inspect"]["model"] == "results/multi30k_deen/demo.lwc/seed1/model.pt"
    assert attention["inspect"]["options"]["module"] == "layers.0.attn"
    buckets = grid.figure_spec(demo, "demo", "buckets").rows[1]
    assert buckets["scores"] == ["results/multi30k_deen/demo.gca_full/seed1/test.score.json"]


def test_an_unknown_paper_or_table_is_one_line_naming_what_exists(demo):
    with pytest.raises(UserError, match=r"no paper 'nope' in the config; expected one of .*demo"):
        grid.table_spec(demo, "nope", "T1")
    with pytest.raises(UserError, match=r"paper demo has no table 'T9'; expected one of T1"):
        grid.table_spec(demo, "demo", "T9")


def test_rule_inputs_for_training_decoding_and_warm_starts(demo):
    inputs = RuleInputs(demo, cost=experiment_cost)
    bin_dir = "results/multi30k_deen/data/bin-joint"
    assert inputs.train_inputs(run())[0] == "results/multi30k_deen/data/vocab/dict.joint.txt"
    assert f"{bin_dir}/valid.de-en.en.offsets.npy" in inputs.train_inputs(run())
    assert inputs.warm_start_model(run(experiment="demo.gca_full")) == [
        "results/multi30k_deen/demo.transformer/seed1/model.pt"
    ]
    assert inputs.warm_start_model(run()) == []
    decoding = inputs.decoding_inputs(run(split="test"))
    assert decoding["src"] == "results/multi30k_deen/data/bpe/test.de-en.de"
    assert decoding["model"].endswith("demo.transformer/seed1/model.pt")
    assert inputs.decoded_prefix(run(split="valid", lenpen="0.6")).endswith("seed1/lenpen/valid.0.6")
    # a baseline that others warm-start from goes before each of them (its chain includes theirs)
    assert inputs.train_priority(run()) > inputs.train_priority(run(experiment="demo.gca_full")) > 1


def test_rule_inputs_refuse_a_run_on_the_wrong_task(demo):
    with pytest.raises(UserError, match="runs on task multi30k_deen, not iwslt14_deen"):
        RuleInputs(demo).experiment_of(run(task="iwslt14_deen"))
    with pytest.raises(UserError, match="no experiment 'demo.nope' in the config; did you mean 'demo.transformer'"):
        RuleInputs(demo).experiment_of(run(experiment="demo.nope"))


def test_inspection_of_a_row_with_nothing_to_inspect_says_so(demo):
    inputs = RuleInputs(demo)
    job = inputs.inspection_of(SimpleNamespace(paper="demo", figure="shares", row="0"))
    assert job["kind"] == "aggregation_shares" and job["model"].endswith("demo.dou_deep/seed1/model.pt")
    with pytest.raises(UserError, match="row 0 has nothing to inspect"):
        inputs.inspection_of(SimpleNamespace(paper="demo", figure="buckets", row="0"))


def test_assemble_spec_resolves_every_part_of_each_split(demo):
    spec = RuleInputs(demo).assemble_spec(SimpleNamespace(task="multi30k_deen"))
    assert set(spec.splits) == {"train", "valid", "test"}
    raw_src, raw_tgt, tok_src, tok_tgt, fmt = spec.splits["test"]["parts"][0]
    assert (raw_src, raw_tgt) == (
        "results/raw/multi30k/test_2016_flickr.de",
        "results/raw/multi30k/test_2016_flickr.en",
    )
    assert tok_src == "results/multi30k_deen/data/tok/test_2016_flickr.de" and fmt == "plain"


def test_the_grid_imports_neither_torch_nor_numpy():
    code = (
        "import sys; from layerwise_nmt import grid; from layerwise_nmt.grid import stage_checks; "
        "c = grid.load('config.yaml', 'config/demo.yaml'); grid.all_statuses(c); "
        "print(sorted(m for m in ('torch', 'numpy', 'pandas', 'sacrebleu') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_overlay_changes_only_the_experiment_it_names_where_yaml_anchors_share_settings(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text(
        "experiments:\n"
        "  demo.a: {task: multi30k_deen, model: transformer, train: &t {lr: 0.002, max_update: 10}}\n"
        "  demo.b: {task: multi30k_deen, model: transformer, train: *t}\n"
    )
    more = tmp_path / "more.yaml"
    more.write_text("experiments:\n  demo.b: {train: {lr: 0.001}}\n")
    config = grid.load(ROOT / "config.yaml", base, more)
    assert config["experiments"]["demo.b"]["train"]["lr"] == 0.001
    assert config["experiments"]["demo.a"]["train"]["lr"] == 0.002  # the anchor's other user is left alone


def test_lwnmt_takes_snakemakes_configfile_as_an_overlay_of_config_yaml():
    from layerwise_nmt.cli import build_parser

    a = build_parser().parse_args(["status", "--configfile", "config/demo.yaml"])
    from layerwise_nmt.cli.common import config_files

    assert config_files(a) == ["config.yaml", "config/demo.yaml"]
    a = build_parser().parse_args(["status", "--config", "other.yaml", "--configfile", "a.yaml", "b.yaml"])
    assert config_files(a) == ["other.yaml", "a.yaml", "b.yaml"]


def test_expanding_a_config_leaves_it_as_it_is_and_checking_is_apart():
    """`expand` writes out what is written in short (a comparison by name, appended rows, extends) into a new
    config; `check` then finds the cross-references; `validate` is the two in place, after the schema."""
    import copy

    merged: dict = {}
    for path in (ROOT / "config.yaml", ROOT / "config" / "your-corpus.example.yaml"):
        grid.deep_update(merged, grid.read(path))
    grid.check_schema(merged)
    given = copy.deepcopy(merged)
    expanded = grid.expand(merged)
    assert merged == given  # the input is untouched
    assert grid.expand(expanded) == expanded  # and expanding again changes nothing
    assert set(expanded["experiments"]) > set(merged["experiments"])  # the comparisons' experiments
    grid.check(expanded)
    in_place = copy.deepcopy(given)
    grid.validate(in_place)
    assert in_place == expanded
    broken = copy.deepcopy(expanded)
    name = next(iter(broken["experiments"]))
    broken["experiments"][name]["task"] = "nope"
    with pytest.raises(UserError, match=rf"config key experiments/{re.escape(name)}/task: unknown task 'nope'"):
        grid.check(broken)
