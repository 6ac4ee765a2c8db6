"""Every job spec the workflow's rules pass (job_specs.py): built by the grid from the demo's config, written with
its kind and read back by the command into the same class; another kind's spec, or a key the class lacks, is one
line naming it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from layerwise_nmt import UserError, grid
from layerwise_nmt.job_specs import (
    AssembleSpec,
    ExportSpec,
    FigureSpec,
    InspectSpec,
    ReferenceCheckSpec,
    ScoreSpec,
    TableSpec,
    TrainSpec,
    TranslateSpec,
)

ROOT = Path(__file__).resolve().parents[1]
RUN = SimpleNamespace(task="multi30k_deen", experiment="demo.gca_full", seed="1", split="test")
SHARES = SimpleNamespace(
    task="multi30k_deen", experiment="demo.dou_deep", seed="1", paper="demo", figure="shares", row="0"
)


@pytest.fixture(scope="module")
def rules():
    return grid.RuleInputs(grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml"))


def specs(rules) -> dict[type, str]:
    """Each kind of spec as its rule's params hold it: JSON."""
    return {
        TrainSpec: rules.train_spec(RUN),
        ExportSpec: rules.export_spec(RUN),
        TranslateSpec: rules.translate_spec(RUN),
        AssembleSpec: rules.assemble_spec(SimpleNamespace(task="multi30k_deen")).to_json(),
        TableSpec: rules.table_spec("demo", "T1").to_json(),
        FigureSpec: rules.figure_spec("demo", "buckets").to_json(),
        ScoreSpec: rules.score_spec(RUN),
        InspectSpec: rules.inspect_spec(SHARES),
        ReferenceCheckSpec: rules.reference_check_spec(SimpleNamespace(task="iwslt14_deen")),
    }


def test_each_spec_crosses_with_its_kind_and_reads_back_into_its_class(rules):
    written = specs(rules)
    assert len({cls.job for cls in written}) == len(written)  # one kind each
    for cls, text in written.items():
        assert json.loads(text)["job"] == cls.job
        spec = cls.from_json(text)
        assert isinstance(spec, cls) and cls.from_json(spec.to_json()) == spec
    assert TrainSpec.from_json(written[TrainSpec]).init_from == "results/multi30k_deen/demo.transformer/seed1/model.pt"
    assert InspectSpec.from_json(written[InspectSpec]) == InspectSpec("aggregation_shares")
    checked = ReferenceCheckSpec.from_json(written[ReferenceCheckSpec]).expected
    assert checked == rules.config["tasks"]["iwslt14_deen"]["reference"] and "bpe/test.de-en.de" in checked
    score = ScoreSpec.from_json(written[ScoreSpec])
    assert score.seed == 1 and score.options == grid.experiment(rules.config, RUN.experiment)["score"]


def test_another_kinds_spec_or_an_unknown_key_is_one_line(rules):
    written = specs(rules)
    with pytest.raises(UserError, match=r"--spec: the spec of a 'table' job; expected a 'figure' job's"):
        FigureSpec.from_json(written[TableSpec])
    table = json.loads(written[TableSpec]) | {"colour": "red"}
    with pytest.raises(UserError, match=r"--spec \(table job\): unknown key\(s\) colour"):
        TableSpec.from_json(json.dumps(table))
    score = json.loads(written[ScoreSpec]) | {"seed": "one"}
    with pytest.raises(UserError, match=r"--spec \(score job\): seed='one'; expected an integer"):
        ScoreSpec.from_json(json.dumps(score))


def test_a_decodings_spec_is_what_decodes_it_and_nothing_a_score_edit_changes(tmp_path):
    """The translate rules' spec: the decoding settings, the data and languages of a model file (none for a model
    directory, which knows its own), the tuned α's file (not while tuning it), the code of a model of the config's
    own; the scoring settings are not in it, so that editing them rescores without decoding again."""
    tuned = SimpleNamespace(task="iwslt14_deen", experiment="mlrf.t2.baseline", seed="1", split="test")
    rules = grid.RuleInputs(grid.load(ROOT / "config.yaml"))
    run = "results/iwslt14_deen/mlrf.t2.baseline/seed1"
    spec = TranslateSpec.from_json(rules.translate_spec(tuned))
    assert spec.decode == grid.experiment(rules.config, "mlrf.t2.baseline")["decode"]
    assert (spec.data, spec.src, spec.tgt) == (rules.data_dir(tuned), "de", "en")
    assert spec.lenpen_from == f"{run}/tuned_lenpen.json" and spec.user_model is None
    tuning = TranslateSpec.from_json(rules.translate_spec(SimpleNamespace(**vars(tuned), lenpen="1.3")))
    assert tuning.decode["lenpen"] == 1.3 and tuning.lenpen_from is None
    heldout = TranslateSpec.from_json(rules.heldout_translate_spec(tuned))
    assert heldout == TranslateSpec(lenpen_from=f"{run}/tuned_lenpen.json")  # the model directory has the rest
    overlay = tmp_path / "rescore.yaml"
    overlay.write_text("experiments:\n  mlrf.t2.baseline: {score: {lowercase: false}}\n")
    edited = grid.RuleInputs(grid.load(ROOT / "config.yaml", overlay))
    assert grid.experiment(edited.config, "mlrf.t2.baseline")["score"]["lowercase"] is False
    assert edited.translate_spec(tuned) == rules.translate_spec(tuned)
