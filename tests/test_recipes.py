"""Rows that follow a toolkit's recipe keep what that recipe does beyond the paper's text (docs/papers.md)."""

from conftest import ROOT
from layerwise_nmt import grid

CONFIG = grid.load(ROOT / "config.yaml")


def test_gca_iwslt_rows_use_two_dictionaries_as_fairseqs_iwslt_recipe():
    """fairseq-preprocess without --joined-dictionary: dict.de.txt and dict.en.txt over the joint BPE."""
    rows = [
        name
        for name in CONFIG["experiments"]
        if name.startswith("gca.") and CONFIG["experiments"][name]["task"] == "iwslt14_deen"
    ]
    assert len(rows) >= 16
    assert {name: grid.experiment(CONFIG, name)["vocab"] for name in rows} == {name: "separate" for name in rows}


def test_weight_decay_only_on_fairseq_recipe_rows():
    """train._adam decouples weight decay as fairseq's Adam does; tensor2tensor's weight_decay would be an L2 term
    in the loss and THUMT's trainer has none, so a row of theirs with weight decay would need another optimizer."""
    decayed = [name for name in CONFIG["experiments"] if grid.experiment(CONFIG, name)["train"].get("weight_decay", 0)]
    assert decayed and all(name.startswith("gca.deen.") or name.startswith("gca.t") for name in decayed), decayed
