"""Each default is spelt once: the settings classes (and the data steps' few constants) are the source; config.yaml's
`defaults:`, the schema's `default:` values and every `lwnmt` flag that stands for a setting either read them or,
checked here, equal them. A copy that drifts fails this file, naming the copy."""

import argparse
import inspect

import pytest
import yaml

from conftest import ROOT
from layerwise_nmt import settings
from layerwise_nmt.cli import build_parser
from layerwise_nmt.data import bpe, vocab
from layerwise_nmt.grid import pricing
from layerwise_nmt.inference.config import BeamConfig
from layerwise_nmt.scoring.config import ScoreConfig
from layerwise_nmt.training.config import AverageConfig, TrainConfig

STAGES = {"train": TrainConfig, "decode": BeamConfig, "score": ScoreConfig, "average": AverageConfig}
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
SCHEMA = yaml.safe_load((ROOT / "src/layerwise_nmt/grid/config.schema.yaml").read_text())


def class_default(cls, key):
    value = cls.__dataclass_fields__[key].default
    return list(value) if isinstance(value, tuple) else value


# What config.yaml's grid decides for its own runs, unlike the trainer alone: the papers' runs stop by early stopping
# within 100 epochs, while `lwnmt train`, like fairseq-train, trains until the budget it is given.
GRID_POLICY = {"train": {"max_epoch": 100, "patience": 10}}


@pytest.mark.parametrize("stage", ["train", "decode", "score", "average"])
def test_config_yaml_defaults_equal_the_settings_classes(stage):
    given = {k: v for k, v in CONFIG["defaults"][stage].items() if k not in GRID_POLICY.get(stage, {})}
    drift = {k: (v, class_default(STAGES[stage], k)) for k, v in given.items() if v != class_default(STAGES[stage], k)}
    assert drift == {}, f"config.yaml defaults/{stage} differs from {STAGES[stage].__name__}: {drift}"
    policy = {k: CONFIG["defaults"][stage][k] for k in GRID_POLICY.get(stage, {})}
    assert policy == GRID_POLICY.get(stage, {})


def test_the_schemas_defaults_equal_the_code_that_reads_them():
    defs = SCHEMA["$defs"]
    average = defs["average"]["oneOf"][1]["properties"]
    assert {k: average[k]["default"] for k in ("num", "by")} == {
        "num": class_default(AverageConfig, "num"),
        "by": class_default(AverageConfig, "by"),
    }
    task = defs["task"]["properties"]
    assert task["bpe"]["properties"]["min_frequency"]["default"] == bpe.MIN_FREQUENCY
    assert task["vocab"]["properties"]["padding_factor"]["default"] == vocab.PADDING_FACTOR
    assert task["vocab"]["properties"]["threshold"]["default"] == vocab.THRESHOLD


def flags(command: str) -> dict[str, argparse.Action]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices[command]._actions}


def test_every_flag_standing_for_a_setting_defaults_to_it():
    average = flags("average")
    assert average["num"].default == class_default(AverageConfig, "num")
    assert average["by"].default == class_default(AverageConfig, "by")
    assert tuple(average["by"].choices) == AverageConfig.BY
    learn = flags("learn-bpe")
    assert learn["min_frequency"].default == bpe.MIN_FREQUENCY
    built = flags("vocab")
    assert (built["padding_factor"].default, built["threshold"].default) == (vocab.PADDING_FACTOR, vocab.THRESHOLD)
    assert built["nwords"].default == vocab.ALL_WORDS
    plan = flags("plan")
    assert (plan["gpu"].default, plan["mfu"].default) == (pricing.DEFAULT_GPU, pricing.DEFAULT_MFU)
    assert tuple(flags("translate")["amp"].choices) == settings.AMP_CHOICES
    # the library's own keyword defaults: the same constants
    assert inspect.signature(bpe.learn).parameters["min_frequency"].default == bpe.MIN_FREQUENCY
    built_with = inspect.signature(vocab.Dictionary.build).parameters
    assert (built_with["padding_factor"].default, built_with["nwords"].default) == (
        vocab.PADDING_FACTOR,
        vocab.ALL_WORDS,
    )


def test_amp_choices_are_one_tuple():
    from layerwise_nmt.inference import config as decode_config
    from layerwise_nmt.training import config as train_config, precision

    assert precision.AMP_CHOICES is settings.AMP_CHOICES
    assert not hasattr(decode_config, "AMP_CHOICES") or decode_config.AMP_CHOICES is settings.AMP_CHOICES
    assert not hasattr(train_config, "AMP_CHOICES") or train_config.AMP_CHOICES is settings.AMP_CHOICES


def test_lwnmt_train_without_a_budget_says_what_it_needs(tmp_path):
    """`lwnmt train --data … --save-dir …` stopped at 'set at least one of max_update, max_epoch, max_minutes',
    naming config keys, not the flags, while its help promised 'the transformer with default settings'."""
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "train",
            "--data",
            str(tmp_path),
            "--src",
            "de",
            "--tgt",
            "en",
            "--save-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    line = result.stderr.strip().splitlines()[-1]
    assert "no training budget" in line and "--max-update N" in line and "max_epoch 100, patience 10" in line
    assert "budget is needed" in " ".join(flags("train")["spec"].help.split())


def test_the_docs_state_each_settings_default_as_the_code_has_it():
    """A default the prose states ("`save_interval_minutes` (default 30)") drifts silently when the code changes:
    every "`key` (default value)" in README.md and docs/ that names a setting must give the class's value."""
    import re

    defaults = {key: class_default(cls, key) for cls in STAGES.values() for key in cls.__dataclass_fields__}
    stated = [
        (f"{path.relative_to(ROOT)}:{number}", key, value)
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for key, value in re.findall(r"`(\w+)` \(default ([\w.+-]+)", line)
        if key in defaults
    ]
    wrong = [
        (where, key, value, defaults[key])
        for where, key, value in stated
        if str(value) != str(defaults[key]) and not (isinstance(defaults[key], float) and float(value) == defaults[key])
    ]
    assert stated, "no stated default found: the pattern no longer matches the docs"
    assert wrong == [], f"(where, key, stated, code): {wrong}"


def test_the_vocab_jobs_flags_for_a_task_that_sets_nothing_are_the_librarys_defaults(monkeypatch):
    """The workflow passes `lwnmt vocab` every flag (its params are part of what Snakemake compares for a rerun); for
    a task without a `vocab:` block they must come from the constants `lwnmt vocab` itself defaults to, not from
    copies of them."""
    from types import SimpleNamespace

    from layerwise_nmt.grid.data_rule_inputs import DataRuleInputs

    monkeypatch.setattr(vocab, "PADDING_FACTOR", 16)
    monkeypatch.setattr(vocab, "THRESHOLD", 2)
    monkeypatch.setattr(vocab, "ALL_WORDS", -2)
    inputs = DataRuleInputs({"tasks": {"t": {}}})
    assert inputs.vocab_params(SimpleNamespace(task="t")) == "--padding-factor 16 --threshold 2 --nwords -2"
    own = {"tasks": {"t": {"vocab": {"padding_factor": 1, "threshold": 3, "words": 50}}}}
    assert DataRuleInputs(own).vocab_params(SimpleNamespace(task="t")) == "--padding-factor 1 --threshold 3 --nwords 50"


def test_a_tasks_left_out_vocab_kind_and_split_format_are_the_schemas_defaults():
    """The workflow reads a task's dictionary kind and a split's file format through one function each, whose
    default is the schema's."""
    from layerwise_nmt.grid import tasks

    task = SCHEMA["$defs"]["task"]["properties"]
    assert task["vocab"]["properties"]["kind"]["default"] == tasks.VOCAB_KIND == tasks.vocab_kind({})
    split = SCHEMA["$defs"]["split"]["properties"]
    assert split["format"]["default"] == tasks.SPLIT_FORMAT == tasks.split_format({})
    assert tasks.vocab_kind({"vocab": {"kind": "separate"}}) == "separate"


def test_a_figures_and_a_splits_cleaning_defaults_are_the_schemas():
    from layerwise_nmt.data.clean import CleanOptions
    from layerwise_nmt.grid import reports
    from layerwise_nmt.job_specs import FIGURE_METRIC

    figure = SCHEMA["$defs"]["paper"]["properties"]["figures"]["additionalProperties"]["properties"]
    assert (figure["metric"]["default"], figure["sentence"]["default"]) == (
        FIGURE_METRIC,
        reports.ATTENTION_SENTENCE,
    )
    clean = SCHEMA["$defs"]["split"]["properties"]["clean"]["oneOf"][1]["properties"]
    assert {k: clean[k]["default"] for k in clean} == {k: class_default(CleanOptions, k) for k in clean}


def test_a_tables_significance_defaults_are_the_schemas():
    from layerwise_nmt.job_specs import TableSpec
    from layerwise_nmt.report import tables

    table = SCHEMA["$defs"]["paper"]["properties"]["tables"]["additionalProperties"]
    test = table["properties"]["significance"]["properties"]
    assert {k: test[k]["default"] for k in ("p", "mark")} == tables.SIGNIFICANCE_DEFAULTS
    assert tables.significance(TableSpec("p", "T1", [], significance={"test": "bootstrap", "p": 0.05})) == {
        "test": "bootstrap",
        "p": 0.05,
        "mark": tables.SIGNIFICANCE_DEFAULTS["mark"],
    }
    assert tables.significance(TableSpec("p", "T1", [])) == {}


def test_the_schema_says_every_target_as_the_grid_reads_it():
    from layerwise_nmt.grid.papers import EVERY

    for kind, spec in SCHEMA["properties"]["targets"]["properties"].items():
        assert {"const": EVERY} in spec["oneOf"], f"config.schema.yaml targets/{kind}"


def test_the_configs_default_seeds_survive_snakemakes_schema_defaults(tmp_path):
    """`defaults: seeds` reaches every experiment that names none, a comparison's included, after Snakemake's
    `validate` has filled in the schema's defaults (which would otherwise give each such experiment its own)."""
    from snakemake.utils import validate

    from layerwise_nmt import grid

    overlay = tmp_path / "seeds.yaml"
    overlay.write_text("defaults: {seeds: [1, 2]}\ncompare: {mine: {task: multi30k_deen, preset: demo}}\n")
    config = grid.load(ROOT / "config.yaml", ROOT / "config/demo.yaml", overlay)
    unnamed = [n for n, spec in config["experiments"].items() if "seeds" not in spec]
    assert "mine.transformer" in unnamed and "demo.transformer" in unnamed
    validate(config, str(grid.SCHEMA))
    assert {n: grid.experiment(config, n)["seeds"] for n in unnamed} == {n: [1, 2] for n in unnamed}
