"""A study row is its paper's row scaled down (grid/protocol.py): every difference between the two has a reason,
the lr relation to the control and a continued run's budget are the paper's, and `lwnmt show` prints what a job
receives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from layerwise_nmt import UserError, grid
from layerwise_nmt.grid import protocol
from layerwise_nmt.grid.papers import rows

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ["study_cpu", "study_cpu6"]


def study(name: str, *overlays: Path) -> dict:
    return grid.load(ROOT / "config.yaml", ROOT / "config" / f"{name}.yaml", *overlays)


def overlay(tmp_path: Path, experiments: dict) -> Path:
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump({"experiments": experiments}))
    return path


@pytest.mark.parametrize("name", STUDIES)
def test_every_study_row_names_its_paper_row_and_each_difference_has_a_reason(name):
    config = study(name)  # load runs protocol.check
    tabled = {row.spec["experiment"] for row in rows(config) if row.paper == name}
    assert tabled and all(config["experiments"][e].get("scaled_from") for e in tabled)
    for experiment in tabled:
        assert all(d.reason for d in protocol.differences(config, experiment))


@pytest.mark.parametrize("name", STUDIES)
def test_the_paper_protocol_rows_keep_the_papers_relations(name):
    config = study(name)
    relations = {
        e: {d.key for d in protocol.differences(config, e) if d.key.startswith("relation/")}
        for e in (f"{name}.paper.lwc", f"{name}.paper.gca_full")
    }
    assert relations[f"{name}.paper.lwc"] == set()
    assert relations[f"{name}.paper.gca_full"] == set()
    # MLRF beside a baseline at its own lr, in T2
    pairs = [
        (r.spec["experiment"], r.spec.get("compare_to")) for r in rows(config) if r.paper == name and r.name == "T2"
    ]
    assert (f"{name}.mlrf_dec_sa", f"{name}.paper.transformer_lr1e3") in pairs
    lrs = [
        protocol.resolved(config, e)["train"]["lr"] for e in (f"{name}.mlrf_dec_sa", f"{name}.paper.transformer_lr1e3")
    ]
    assert lrs == [0.001, 0.001]
    lwc = {d.key: d for d in protocol.differences(config, f"{name}.paper.lwc")}
    assert "arch/norm" not in lwc and "arch/attention_dropout" not in lwc  # pre-norm and t2t's dropouts kept
    gca = protocol.resolved(config, f"{name}.paper.gca_full")
    parent = protocol.resolved(config, gca["warm_start"])
    assert gca["train"]["max_update"] == parent["train"]["max_update"]  # continued for the parent's whole budget
    assert gca["train"]["warmup_updates"] == parent["train"]["warmup_updates"]  # on the baseline's schedule


@pytest.mark.parametrize("name", STUDIES)
def test_the_earlier_recipe_rows_state_how_they_depart(name):
    config = study(name)
    lwc = {d.key: d for d in protocol.differences(config, f"{name}.lwc")}
    assert lwc["arch/norm"].ours == "post" and lwc["arch/norm"].paper == "pre" and not lwc["arch/norm"].scale_down
    assert "relation/continued_budget" in {d.key for d in protocol.differences(config, f"{name}.gca_full")}
    mlrf = {d.key: d for d in protocol.differences(config, f"{name}.mlrf_dec_sa")}
    assert mlrf["relation/lr"].ours == pytest.approx(0.5) and mlrf["relation/lr"].paper == pytest.approx(1.0)


def test_a_difference_without_a_reason_is_refused_naming_the_key():
    config = study("study_cpu")
    del config["experiments"]["study_cpu.lwc"]["departures"]["arch/norm"]
    with pytest.raises(UserError, match=r"experiments/study_cpu.lwc/departures: arch/norm is post where .* pre"):
        protocol.check(config)


def test_a_method_at_another_lr_than_its_control_is_refused(tmp_path):
    changed = {"study_cpu.paper.gca_full": {"train": {"lr": 0.001}}}
    with pytest.raises(UserError, match="relation/lr is 0.5 where its paper's row .* has 1.0"):
        study("study_cpu", overlay(tmp_path, changed))


def test_a_continued_run_shorter_than_its_parent_is_refused(tmp_path):
    changed = {"study_cpu.paper.gca_full": {"train": {"max_update": 2000, "total_num_update": 2000}}}
    with pytest.raises(UserError, match="relation/continued_budget is 0.25"):
        study("study_cpu", overlay(tmp_path, changed))


def test_a_departure_for_no_setting_is_refused(tmp_path):
    changed = {"study_cpu.paper.lwc": {"departures": {"arch/nrom": "typo"}}}
    with pytest.raises(UserError, match="departures/arch/nrom: no such setting"):
        study("study_cpu", overlay(tmp_path, changed))


def test_each_paper_trains_its_methods_at_its_baselines_lr():
    """What relation/lr assumes of a control standing for another paper's row."""
    config = grid.load(ROOT / "config.yaml")
    compared = [(r.spec["experiment"], r.spec["compare_to"]) for r in rows(config) if r.spec.get("compare_to")]
    assert compared
    for method, control in compared:
        lrs = [protocol.resolved(config, e)["train"]["lr"] for e in (method, control)]
        assert lrs[0] == lrs[1], (method, control)


def test_resolved_fills_in_every_setting_the_jobs_read():
    config = study("study_cpu")
    spec = protocol.run_spec(config, "study_cpu.paper.lwc", seed=2)
    assert spec["arch"]["d_model"] == 256 and spec["arch"]["layers"] == 7 and spec["arch"]["norm"] == "pre"
    assert spec["train"]["seed"] == 2 and spec["train"]["adam_betas"] == [0.9, 0.98]
    assert spec["decode"]["beam"] == 5 and spec["average"] == {"num": 4, "by": "update"}
    assert spec["scaled_from"] == "lwc.t1.deen.lwc_small"


def test_lwnmt_show_prints_the_run_and_the_protocol():
    args = ["--config", str(ROOT / "config.yaml"), "--config", str(ROOT / "config/study_cpu.yaml")]
    shown = subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", "show", "study_cpu.gca_full", "--seed", "3", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    spec = json.loads(shown.stdout)
    assert spec["warm_start"] == "study_cpu.transformer" and spec["train"]["max_update"] == 2000
    listed = subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", "show", "study_cpu.gca_full", "--protocol", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "relation/continued_budget: 0.25 (paper's row: 1.0)" in listed
    wrong = subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", "show", "study_cpu.gca_ful", *args], capture_output=True, text=True
    )
    assert wrong.returncode != 0 and "did you mean 'study_cpu.gca_full'" in wrong.stderr


@pytest.mark.parametrize("name", ["study_cpu.paper.gca_full", "study_cpu.paper.lwc"])
def test_what_lwnmt_show_prints_is_what_the_training_job_receives(name):
    """`lwnmt show`'s model, arch and train (with the seed) are the train spec the workflow's rule passes, read
    through the settings classes that the training job reads it with (defaults filled in)."""
    from types import SimpleNamespace

    from layerwise_nmt.job_specs import TrainSpec
    from layerwise_nmt.models import MODELS
    from layerwise_nmt.training.config import TrainConfig

    config = study("study_cpu")
    shown = protocol.run_spec(config, name, 2)
    e = grid.experiment(config, name)
    job = TrainSpec.from_json(
        grid.RuleInputs(config).train_spec(SimpleNamespace(task=e["task"], experiment=name, seed="2"))
    )
    sizes = {"src_vocab": 0, "tgt_vocab": 0}
    arch = MODELS[job.model].config_class.from_dict(job.arch | sizes).to_dict()
    built = json.loads(json.dumps({"arch": arch, "train": vars(TrainConfig.from_dict(job.train))}))
    assert job.model == shown["model"] and {k: v for k, v in built["arch"].items() if k not in sizes} == shown["arch"]
    assert built["train"] == shown["train"]
    assert job.train["seed"] == 2 and (job.init_from is not None) == bool(shown["warm_start"])
