"""Tables come from score.json files and the config's paper numbers; rows we did not run say why."""

import json

import pandas as pd

from layerwise_nmt.report.tables import NOT_RUN, write


def test_table_cells_from_fixture_scores(tmp_path):
    scores = []
    for seed, bleu in ((1, 34.0), (2, 35.0), (3, 36.0)):
        path = tmp_path / f"score{seed}.json"
        path.write_text(json.dumps({"bleu": bleu}))
        scores.append(str(path))
    spec = {"paper": "lwc", "table": "T1", "caption": "test", "scale": "fixture", "metric": "bleu", "rows": [
        {"label": "ours", "paper": {"bleu": 35.07}, "state": "ok", "scores": {"test": scores}},
        {"label": "MIXER", "paper": {"bleu": 21.83}, "state": "quoted", "reason": "quoted from Ranzato et al."},
        {"label": "Ro-En", "paper": {"bleu": 30.72}, "state": "blocked", "reason": "dataset pending (issue #10)"},
    ]}
    table = write(spec, str(tmp_path / "T1"))
    ours, quoted, blocked = table.to_dict("records")
    assert ours["ours"] == "35.00 ± 1.00 (n=3)" and ours["delta"] == "-0.07" and ours["paper"] == "35.07"
    assert quoted["ours"] == NOT_RUN and quoted["status"] == "quoted from Ranzato et al." and quoted["paper"] == "21.83"
    assert blocked["ours"] == NOT_RUN and "issue #10" in blocked["status"]
    md = (tmp_path / "T1.md").read_text()
    assert "| ours | 35.07 | 35.00 ± 1.00 (n=3) | -0.07 | ours |" in md and "Scale: fixture" in md
    assert pd.read_csv(tmp_path / "T1.csv")["ours_mean"].iloc[0] == 35.0


def test_parameter_columns_when_the_paper_prints_counts(tmp_path):
    score = tmp_path / "score.json"
    score.write_text(json.dumps({"bleu": 33.0, "decoding": {"params": 19_077_120}}))
    spec = {"paper": "lwc", "table": "T3", "metric": "bleu", "rows": [
        {"label": "w/o mixed attention", "paper": {"bleu": 33.77, "params_m": 19.07}, "state": "ok",
         "scores": {"test": [str(score)]}},
        {"label": "w/o sharing", "paper": {"bleu": 33.96, "params_m": 19.07}, "state": "blocked", "reason": "x"},
    ]}
    ran, blocked = write(spec, str(tmp_path / "T3")).to_dict("records")
    assert ran["params (paper)"] == "19.07M" and ran["params (ours)"] == "19.08M"
    assert blocked["params (ours)"] == NOT_RUN
    assert "| w/o mixed attention | 33.77 | 33.00 (n=1) | -0.77 | 19.07M | 19.08M | ours |" in (
        tmp_path / "T3.md").read_text()


def test_valid_and_test_columns_read_their_own_split(tmp_path):
    paths = {}
    for split, bleu in (("valid", 34.5), ("test", 33.0)):
        paths[split] = tmp_path / f"{split}.score.json"
        paths[split].write_text(json.dumps({"bleu": bleu}))
    spec = {"paper": "mlrf", "table": "T2", "metric": ["valid_bleu", "test_bleu"], "rows": [
        {"label": "Dec-SA", "paper": {"valid_bleu": 34.83, "test_bleu": 33.29}, "state": "ok",
         "scores": {split: [str(path)] for split, path in paths.items()}},
        {"label": "RNN-MIXER", "paper": {"test_bleu": 20.73}, "state": "quoted", "reason": "quoted"}]}
    ours, quoted = write(spec, str(tmp_path / "T2")).to_dict("records")
    assert ours["ours valid_bleu"] == "34.50 (n=1)" and ours["delta valid_bleu"] == "-0.33"
    assert ours["ours test_bleu"] == "33.00 (n=1)" and ours["delta test_bleu"] == "-0.29"
    assert quoted["paper valid_bleu"] == NOT_RUN and quoted["paper test_bleu"] == "20.73"
    header = (tmp_path / "T2.md").read_text().splitlines()[4]
    assert header.startswith("| row | paper valid_bleu | ours valid_bleu | delta valid_bleu | paper test_bleu")
