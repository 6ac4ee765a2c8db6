"""Every job spec the workflow's rules pass (job_specs.py): built by the grid from the demo's config, written with
its kind and read back by the command into the same class; another kind's spec, or a key the class lacks, is one
line naming it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from layerwise_nmt import UserError, grid
from layerwise_nmt.job_specs import AssembleSpec, ExportSpec, FigureSpec, ScoreLabel, TableSpec, TrainSpec

ROOT = Path(__file__).resolve().parents[1]
RUN = SimpleNamespace(task="multi30k_deen", experiment="demo.gca_full", seed="1", split="test")


@pytest.fixture(scope="module")
def rules():
    return grid.RuleInputs(grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml"))


def specs(rules) -> dict[type, str]:
    """Each kind of spec as its rule's params hold it: JSON."""
    return {
        TrainSpec: rules.train_spec(RUN),
        ExportSpec: rules.export_spec(RUN),
        AssembleSpec: rules.assemble_spec(SimpleNamespace(task="multi30k_deen")).to_json(),
        TableSpec: rules.table_spec("demo", "T1").to_json(),
        FigureSpec: rules.figure_spec("demo", "buckets").to_json(),
        ScoreLabel: rules.score_label(RUN),
    }


def test_each_spec_crosses_with_its_kind_and_reads_back_into_its_class(rules):
    written = specs(rules)
    assert len({cls.job for cls in written}) == len(written)  # one kind each
    for cls, text in written.items():
        assert json.loads(text)["job"] == cls.job
        spec = cls.from_json(text)
        assert isinstance(spec, cls) and cls.from_json(spec.to_json()) == spec
    assert TrainSpec.from_json(written[TrainSpec]).init_from == "results/multi30k_deen/demo.transformer/seed1/model.pt"
    assert ScoreLabel.from_json(written[ScoreLabel]).seed == 1


def test_another_kinds_spec_or_an_unknown_key_is_one_line(rules):
    written = specs(rules)
    with pytest.raises(UserError, match=r"--spec: the spec of a 'table' job; expected a 'figure' job's"):
        FigureSpec.from_json(written[TableSpec])
    table = json.loads(written[TableSpec]) | {"colour": "red"}
    with pytest.raises(UserError, match=r"--spec \(table job\): unknown key\(s\) colour"):
        TableSpec.from_json(json.dumps(table))
    label = json.loads(written[ScoreLabel]) | {"seed": "one"}
    with pytest.raises(UserError, match=r"--meta \(score job\): seed='one'; expected an integer"):
        ScoreLabel.from_json(json.dumps(label), "--meta")
