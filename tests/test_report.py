"""Tables come from score.json files and the config's paper numbers; rows we did not run say why."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from layerwise_nmt.report.tables import NOT_RUN, write

ROOT = Path(__file__).resolve().parents[1]


def test_table_cells_from_fixture_scores(tmp_path):
    scores = []
    for seed, bleu in ((1, 34.0), (2, 35.0), (3, 36.0)):
        path = tmp_path / f"score{seed}.json"
        path.write_text(json.dumps({"bleu": bleu}))
        scores.append(str(path))
    spec = {
        "paper": "lwc",
        "table": "T1",
        "caption": "test",
        "scale": "fixture",
        "metric": "bleu",
        "rows": [
            {
                "label": "ours",
                "paper": {"bleu": 35.07},
                "state": "ok",
                "scores": {"test": scores},
                "note": "pre-norm, as tensor2tensor",
            },
            {"label": "MIXER", "paper": {"bleu": 21.83}, "state": "quoted", "reason": "quoted from Ranzato et al."},
            {
                "label": "Ro-En",
                "paper": {"bleu": 30.72},
                "state": "blocked",
                "reason": "dataset pending (no public source)",
            },
        ],
    }
    table = write(spec, str(tmp_path / "T1"))
    ours, quoted, blocked = table.to_dict("records")
    assert ours["ours"] == "35.00 ± 1.00 (n=3)" and ours["delta"] == "-0.07" and ours["paper"] == "35.07"
    assert quoted["ours"] == NOT_RUN and quoted["status"] == "quoted from Ranzato et al." and quoted["paper"] == "21.83"
    assert blocked["ours"] == NOT_RUN and "no public source" in blocked["status"]
    md = (tmp_path / "T1.md").read_text()
    assert "| ours | 35.07 | 35.00 ± 1.00 (n=3) | -0.07 | ours |" in md and "Scale: fixture" in md
    assert md.rstrip().endswith("- ours: pre-norm, as tensor2tensor")  # the row's protocol in the table's notes
    assert pd.read_csv(tmp_path / "T1.csv")["ours_mean"].iloc[0] == 35.0


def test_parameter_columns_when_the_paper_prints_counts(tmp_path):
    score = tmp_path / "score.json"
    score.write_text(json.dumps({"bleu": 33.0, "decoding": {"params": 19_077_120}}))
    spec = {
        "paper": "lwc",
        "table": "T3",
        "metric": "bleu",
        "rows": [
            {
                "label": "w/o mixed attention",
                "paper": {"bleu": 33.77, "params_m": 19.07},
                "state": "ok",
                "scores": {"test": [str(score)]},
            },
            {"label": "w/o sharing", "paper": {"bleu": 33.96, "params_m": 19.07}, "state": "blocked", "reason": "x"},
        ],
    }
    ran, blocked = write(spec, str(tmp_path / "T3")).to_dict("records")
    assert ran["params (paper)"] == "19.07M" and ran["params (ours)"] == "19.08M"
    assert blocked["params (ours)"] == NOT_RUN
    assert (
        "| w/o mixed attention | 33.77 | 33.00 (n=1) | -0.77 | 19.07M | 19.08M | ours |"
        in (tmp_path / "T3.md").read_text()
    )


def test_valid_and_test_columns_read_their_own_split(tmp_path):
    paths = {}
    for split, bleu in (("valid", 34.5), ("test", 33.0)):
        paths[split] = tmp_path / f"{split}.score.json"
        paths[split].write_text(json.dumps({"bleu": bleu}))
    spec = {
        "paper": "mlrf",
        "table": "T2",
        "metric": ["valid_bleu", "test_bleu"],
        "rows": [
            {
                "label": "Dec-SA",
                "paper": {"valid_bleu": 34.83, "test_bleu": 33.29},
                "state": "ok",
                "scores": {split: [str(path)] for split, path in paths.items()},
            },
            {"label": "RNN-MIXER", "paper": {"test_bleu": 20.73}, "state": "quoted", "reason": "quoted"},
        ],
    }
    ours, quoted = write(spec, str(tmp_path / "T2")).to_dict("records")
    assert ours["ours valid_bleu"] == "34.50 (n=1)" and ours["delta valid_bleu"] == "-0.33"
    assert ours["ours test_bleu"] == "33.00 (n=1)" and ours["delta test_bleu"] == "-0.29"
    assert quoted["paper valid_bleu"] == NOT_RUN and quoted["paper test_bleu"] == "20.73"
    header = (tmp_path / "T2.md").read_text().splitlines()[4]
    assert header.startswith("| row | paper valid_bleu | ours valid_bleu | delta valid_bleu | paper test_bleu")


def test_figures_draw_what_ran_and_name_what_did_not(tmp_path):
    from layerwise_nmt.report.figures import write as draw

    metrics = tmp_path / "metrics.csv"
    pd.DataFrame(
        {
            "epoch": [1, 2, 2, 3],
            "partial": [False, True, True, True],
            "update": [10, 15, 15, 20],
            "train_accuracy": [0.3, 0.4, 0.41, 0.5],
            "valid_accuracy": [0.35, 0.4, 0.41, 0.45],
        }
    ).to_csv(metrics, index=False)
    spec = {
        "paper": "mlrf",
        "figure": "F4",
        "kind": "accuracy_curves",
        "rows": [
            {"label": "baseline", "metrics": str(metrics)},
            {"label": "Dec-SA", "state": "blocked", "reason": "dataset pending"},
        ],
    }
    missing = draw(spec, str(tmp_path / "F4"))
    assert missing == ["Dec-SA: dataset pending"]
    assert (tmp_path / "F4.png").stat().st_size > 1000 and (tmp_path / "F4.pdf").exists()
    drawn = pd.read_csv(tmp_path / "F4.csv")
    assert list(drawn["update"]) == [10, 15, 20] and drawn["train_accuracy"].iloc[1] == 0.41  # resumed: later wins

    scores = {}
    for name, bleu in (("base", 30.0), ("h1", 29.0), ("h4a", 31.0), ("h4b", 32.0)):
        scores[name] = tmp_path / f"{name}.json"
        scores[name].write_text(json.dumps({"bleu": bleu}))
    spec = {
        "paper": "mlrf",
        "figure": "F3",
        "kind": "sweep",
        "xlabel": "n_hop",
        "rows": [
            {"label": "baseline", "series": "baseline", "baseline": True, "scores": [str(scores["base"])]},
            {
                "label": "n_hop=4",
                "series": "Dec-SA",
                "x": 4,
                "paper": 33.29,
                "scores": [str(scores["h4a"]), str(scores["h4b"])],
            },
            {"label": "n_hop=1", "series": "Dec-SA", "x": 1, "scores": [str(scores["h1"])]},
        ],
    }
    assert draw(spec, str(tmp_path / "F3")) == []
    points = pd.read_csv(tmp_path / "F3.csv").set_index("row")
    assert points.loc["n_hop=4", "ours_mean"] == 31.5 and points.loc["n_hop=4", "seeds"] == 2
    assert points.loc["baseline", "ours_mean"] == 30.0


def test_length_bucket_figure_averages_seeds_per_bucket(tmp_path):
    from layerwise_nmt.report.figures import write as draw

    def score(name, bleus):
        path = tmp_path / f"{name}.json"
        path.write_text(
            json.dumps(
                {
                    "bleu": 0,
                    "buckets": [
                        {"bucket": b, "sentences": n, "bleu": v}
                        for b, n, v in zip(["[0, 10)", ">= 10"], [5, 3], bleus, strict=True)
                    ],
                }
            )
        )
        return str(path)

    spec = {
        "paper": "gca",
        "figure": "F3",
        "kind": "length_buckets",
        "rows": [
            {"label": "baseline", "scores": [score("b1", [30, 20]), score("b2", [32, 22])]},
            {"label": "full", "scores": [score("f1", [31, 25])]},
        ],
    }
    assert draw(spec, str(tmp_path / "F3")) == []
    drawn = pd.read_csv(tmp_path / "F3.csv").set_index(["row", "bucket"])
    assert drawn.loc[("baseline", "[0, 10)"), "ours_mean"] == 31 and drawn.loc[("baseline", ">= 10"), "seeds"] == 2
    assert drawn.loc[("full", ">= 10"), "ours_mean"] == 25
    # a bucket no test sentence falls into has no BLEU (the rehearsal found the figure crashing on it): a gap
    spec["rows"][1]["scores"] = [score("f2", [31, None])]
    assert draw(spec, str(tmp_path / "F3b")) == []
    assert pd.isna(pd.read_csv(tmp_path / "F3b.csv").set_index(["row", "bucket"]).loc[("full", ">= 10"), "ours_mean"])


def test_aggregation_share_heat_map_reads_the_trained_nodes(tmp_path):
    """`inspect` reads the shares out of the models into JSON; the figure draws from that JSON alone."""
    import torch

    from layerwise_nmt.inference.figure_readouts import write as inspect
    from layerwise_nmt.models import build
    from layerwise_nmt.report.figures import write as draw

    rows = []
    for layers in (6, 3):
        model = build(
            "deep",
            dict(
                src_vocab=40,
                tgt_vocab=40,
                d_model=16,
                d_ff=32,
                heads=2,
                aggregation="hierarchical",
                encoder_layers=layers,
                decoder_layers=layers,
            ),
        )
        path = tmp_path / f"deep{layers}.pt"
        torch.save({"model_name": "deep", "model_config": model.config.to_dict(), "model": model.state_dict()}, path)
        inspect("aggregation_shares", str(path), {}, str(tmp_path / f"deep{layers}.json"))
        path.unlink()  # drawing must not need the model
        rows.append({"label": f"{layers} layers", "inspection": str(tmp_path / f"deep{layers}.json")})
    spec = {"paper": "dou", "figure": "F5", "kind": "aggregation_shares", "rows": rows}
    assert draw(spec, str(tmp_path / "F5")) == []
    shares = pd.read_csv(tmp_path / "F5.csv")
    assert shares.groupby(["row", "node"])["share"].sum().round(6).eq(1).all()  # each node's shares sum to 1
    assert len(shares.query("row == '6 layers'")) == 2 + 3 + 3 and len(shares.query("row == '3 layers'")) == 2 + 2


def test_an_attention_map_is_labelled_by_what_its_module_reads(tmp_path):
    """LWC F2-4 draw a Transformer's decoder attentions beside LWC's mixed one: a cross-attention is output words ×
    source, a decoder's self-attention output words × its own inputs (causal: nothing above the diagonal), an
    encoder's self-attention source × source."""
    import torch

    from layerwise_nmt.inference.figure_readouts import attention
    from layerwise_nmt.models import build

    words = [f"w{i}" for i in range(30)]
    for lang in ("de", "en"):
        (tmp_path / f"dict.{lang}.txt").write_text("".join(f"{w} 1\n" for w in words))
    settings = dict(src_vocab=34, tgt_vocab=34, d_model=16, d_ff=32, heads=2, encoder_layers=2, decoder_layers=2)
    model = build("transformer", settings)
    path = tmp_path / "model.pt"
    torch.save({"model_name": "transformer", "model_config": model.config.to_dict(), "model": model.state_dict()}, path)
    (tmp_path / "src.de").write_text("w1 w2 w3 w4 w5\n")
    (tmp_path / "hyp.en").write_text("w6 w7\n")

    def read(module: str) -> dict:
        files = dict(source=str(tmp_path / "src.de"), hypothesis=str(tmp_path / "hyp.en"))
        return attention(str(path), str(tmp_path), "de", "en", **files, sentence=0, module=module)

    source, output = ["w1", "w2", "w3", "w4", "w5", "</s>"], ["w6", "w7", "</s>"]
    cross = read("decoder.layers.0.cross_attn")
    assert (cross["ys"], cross["xs"], cross["split"]) == (output, source, None)
    itself = read("decoder.layers.0.self_attn")
    assert (itself["ys"], itself["xs"], itself["split"]) == (output, ["</s>", "w6", "w7"], None)
    weights = torch.tensor(itself["grid"])
    assert torch.equal(weights.triu(1), torch.zeros(3, 3)) and torch.allclose(weights.sum(1), torch.ones(3))
    assert "target" in itself["x_label"]
    encoder = read("encoder.layers.0.attn")
    assert (encoder["ys"], encoder["xs"]) == (source, source) and len(encoder["grid"]) == 6
    (tmp_path / "hyp.en").write_text("w6 w7 w8 w9 w10\n")  # as long as the source: a square cross-attention
    cross = read("decoder.layers.0.cross_attn")
    assert (cross["ys"], cross["xs"]) == (["w6", "w7", "w8", "w9", "w10", "</s>"], source)


def test_reports_never_load_models():
    """Tables and figures read files: importing the report package does not import torch."""
    code = "import sys, layerwise_nmt.report.figures, layerwise_nmt.report.tables; sys.exit('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


def test_speed_columns_are_ratios_to_the_first_row(tmp_path):
    rows = []
    for name, minutes, sents in (("base", 10.0, 8.0), ("mla", 12.5, 6.0)):
        run = tmp_path / name
        (run / "checkpoints").mkdir(parents=True)
        pd.DataFrame({"update": [500, 1000], "minutes": [5.0, minutes]}).to_csv(
            run / "checkpoints" / "metrics.csv", index=False
        )
        (run / "test.score.json").write_text(json.dumps({"bleu": 27.0, "decoding": {"sentences_per_second": sents}}))
        rows.append(
            {
                "label": name,
                "state": "ok",
                "runs": [str(run)],
                "scores": {"test": [str(run / "test.score.json")]},
                "paper": {
                    "bleu": 27.64,
                    "train_steps_per_s": 1.82 if name == "base" else 1.19,
                    "decode_sents_per_s": 1.33 if name == "base" else 1.05,
                },
            }
        )
    rows.append({"label": "blocked", "state": "blocked", "reason": "no data", "paper": {"train_steps_per_s": 1.12}})
    base, mla, blocked = write(
        {"paper": "dou", "table": "T1", "speeds": True, "rows": rows}, str(tmp_path / "T1")
    ).to_dict("records")
    assert base["train speed (ours)"] == "1.00×" and mla["train speed (ours)"] == "0.80×"
    assert mla["decode speed (ours)"] == "0.75×" and mla["decode speed (paper)"] == "0.79×"  # 1.05 / 1.33
    assert mla["train speed (paper)"] == "0.65×" and blocked["train speed (ours)"] == NOT_RUN
    assert blocked["train speed (paper)"] == "0.62×"


def test_speed_ratios_are_to_the_first_row_of_ours_not_a_quoted_system(tmp_path):
    """MLRF T3 opens with systems quoted from other papers (no speed printed); its §4.2 speeds are the baseline's and
    Dec-SA's: the ratios are to the table's first row that is one of ours, the paper's and ours alike."""
    rows = [{"label": "Nematus", "state": "quoted", "reason": "quoted from Sennrich et al. 2017", "paper": {}}]
    for name, minutes, paper_speed in (("base", 10.0, 2.6), ("dec_sa", 12.5, 2.4)):
        run = tmp_path / name
        (run / "checkpoints").mkdir(parents=True)
        pd.DataFrame({"update": [1000], "minutes": [minutes]}).to_csv(run / "checkpoints" / "metrics.csv", index=False)
        (run / "test.score.json").write_text(json.dumps({"bleu": 40.0, "decoding": {"sentences_per_second": 5.0}}))
        rows.append(
            {
                "label": name,
                "state": "ok",
                "runs": [str(run)],
                "scores": {"test": [str(run / "test.score.json")]},
                "paper": {"bleu": 40.0, "train_steps_per_s": paper_speed},
            }
        )
    quoted, base, dec_sa = write(
        {"paper": "mlrf", "table": "T3", "speeds": True, "rows": rows}, str(tmp_path / "T3")
    ).to_dict("records")
    assert base["train speed (ours)"] == "1.00×" and dec_sa["train speed (ours)"] == "0.80×"
    assert base["train speed (paper)"] == "1.00×" and dec_sa["train speed (paper)"] == "0.92×"  # 2.4 / 2.6
    assert quoted["train speed (paper)"] == NOT_RUN and dec_sa["decode speed (paper)"] == NOT_RUN
    assert dec_sa["decode speed (ours)"] == "1.00×"


def _scores(tmp_path, name, bleus, hyp_lines=None, ref=None):
    paths = []
    for seed, bleu in enumerate(bleus, start=1):
        record = {"bleu": bleu, "options": {"tokenize": "none", "lowercase": False, "buckets": []}}
        if hyp_lines is not None:
            hyp = tmp_path / f"{name}{seed}.txt"
            hyp.write_text("\n".join(hyp_lines) + "\n")
            record.update(hyp=str(hyp), refs=[str(ref)])
        path = tmp_path / f"{name}{seed}.score.json"
        path.write_text(json.dumps(record))
        paths.append(str(path))
    return {"test": paths}


def test_significance_marks_follow_the_declared_test(tmp_path):
    """t-test over seeds (GCA): † only where ours beats the compared row at p < 0.01; sign test (Dou) on the
    first seeds' sentences; the p-values land in the CSV, the legend says which test, the .tex is written."""
    base = _scores(tmp_path, "base", [34.0, 34.1, 33.9, 34.0, 34.1])
    strong = _scores(tmp_path, "strong", [35.9, 36.0, 35.8, 36.1, 35.9])
    noisy = _scores(tmp_path, "noisy", [33.0, 36.0, 34.5, 35.5, 34.0])
    spec = {
        "paper": "gca",
        "table": "T2",
        "metric": "bleu",
        "significance": {"test": "t_test", "p": 0.01, "mark": "†"},
        "rows": [
            {"label": "De-En Transformer", "paper": {"bleu": 34.7}, "state": "ok", "scores": base},
            {
                "label": "De-En + Cross-View Dec. †",
                "paper": {"bleu": 35.9},
                "state": "ok",
                "scores": strong,
                "baseline_scores": base,
            },
            {"label": "noisy", "paper": {"bleu": 35.0}, "state": "ok", "scores": noisy, "baseline_scores": base},
            {"label": "worse", "paper": {"bleu": 30.0}, "state": "ok", "scores": base, "baseline_scores": strong},
        ],
    }
    table = write(spec, str(tmp_path / "T2")).set_index("row")
    assert table.loc["De-En + Cross-View Dec. †", "ours"] == "35.94 ± 0.11 † (n=5)"
    assert table.loc["De-En + Cross-View Dec. †", "delta"] == "+0.04"
    assert table.loc["noisy", "ours"] == "34.60 ± 1.19 (n=5)" and table.loc["noisy", "p"] > 0.01
    assert "†" not in table.loc["worse", "ours"] and table.loc["worse", "p"] < 0.01  # significant, but worse
    assert "†" not in table.loc["De-En Transformer", "ours"]
    md = (tmp_path / "T2.md").read_text()
    assert "† = better than the row it is compared with at p < 0.01 (Welch's t-test over seeds)" in md
    tex = (tmp_path / "T2.tex").read_text()
    assert "\\begin{table}" in tex and "35.94 ± 0.11 † (n=5)" in tex and "\\caption{gca T2" in tex

    ref = tmp_path / "ref.en"
    ref.write_text("\n".join(f"the cat number {i} sat on the mat" for i in range(30)) + "\n")
    good = [f"the cat number {i} sat on the mat" for i in range(30)]
    bad = [f"a cat {i} sat" for i in range(30)]
    spec = {
        "paper": "dou",
        "table": "T2",
        "metric": "bleu",
        "significance": {"test": "sign_test"},
        "rows": [
            {"label": "base", "state": "ok", "scores": _scores(tmp_path, "b", [20.0], bad, ref)},
            {
                "label": "deep †",
                "paper": {"bleu": 28.78},
                "state": "ok",
                "scores": _scores(tmp_path, "d", [90.0], good, ref),
                "baseline_scores": _scores(tmp_path, "b", [20.0], bad, ref),
            },
            {
                "label": "deep, same output",
                "state": "ok",
                "scores": _scores(tmp_path, "s", [20.0], bad, ref),
                "baseline_scores": _scores(tmp_path, "b", [20.0], bad, ref),
            },
        ],
    }
    table = write(spec, str(tmp_path / "D2")).set_index("row")
    assert table.loc["deep †", "ours"] == "90.00 † (n=1)" and table.loc["deep †", "p"] < 1e-6
    assert table.loc["deep, same output", "p"] == 1.0 and "†" not in table.loc["deep, same output", "ours"]
    assert "sign test (Collins et al. 2005)" in (tmp_path / "D2.md").read_text()


def test_readme_results_section_is_replaced_between_its_markers(tmp_path):
    import pytest

    from layerwise_nmt import UserError
    from layerwise_nmt.report.readme import END, START, update

    readme, table, figure = tmp_path / "README.md", tmp_path / "T1.md", tmp_path / "buckets.png"
    readme.write_text(f"# x\n\nbefore\n{START}\nold table\n{END}\nafter\n")
    table.write_text(
        "# demo T1: caption\n\nScale: demo\n\n| row | ours |\n|---|---|\n| baseline | 29.74 (n=1) |\n"
        "\nOur runs' precision: fp32 (amp: auto) on cpu: AMD EPYC (AVX2).\n"
    )
    figure.write_bytes(b"\x89PNG fake")
    update(str(readme), str(table), [str(figure)], commit="abc1234", docs="docs", machine="2-core AMD EPYC (AVX2)")
    text = readme.read_text()
    assert "old table" not in text and text.startswith("# x\n\nbefore\n") and text.endswith(f"{END}\nafter\n")
    assert "| baseline | 29.74 (n=1) |" in text and (tmp_path / "docs/buckets.png").read_bytes() == b"\x89PNG fake"
    assert f"`{table}` (commit abc1234, on 2-core AMD EPYC (AVX2)):" in text and "](docs/buckets.png)" in text
    assert "Our runs' precision: fp32 (amp: auto) on cpu: AMD EPYC (AVX2)." in text  # the CPU and precision
    update(str(readme), str(table), [], docs="docs")  # idempotent apart from what changed
    assert readme.read_text().count(START) == 1
    (tmp_path / "plain.md").write_text("no markers\n")
    with pytest.raises(UserError, match="no results markers"):
        update(str(tmp_path / "plain.md"), str(table), [])


def test_a_mean_column_averages_its_test_sets_per_seed(tmp_path):
    """MLRF T3's Ave.: per seed the mean of MT04/05/08, then mean ± sd over seeds."""
    paths = {}
    for split, bleus in (("mt04", (48.0, 47.0)), ("mt05", (41.0, 40.0)), ("mt08", (35.0, 34.0))):
        paths[split] = []
        for seed, bleu in enumerate(bleus, start=1):
            path = tmp_path / f"{split}.{seed}.json"
            path.write_text(json.dumps({"bleu": bleu}))
            paths[split].append(str(path))
    spec = {
        "paper": "mlrf",
        "table": "T3",
        "metric": ["mt04_bleu", "ave_bleu"],
        "mean_of": {"ave_bleu": ["mt04_bleu", "mt05_bleu", "mt08_bleu"]},
        "rows": [{"label": "Dec-SA", "paper": {"mt04_bleu": 48.48, "ave_bleu": 41.59}, "state": "ok", "scores": paths}],
    }
    row = write(spec, str(tmp_path / "T3")).to_dict("records")[0]
    assert row["ours ave_bleu"] == "40.83 ± 0.71 (n=2)" and row["delta ave_bleu"] == "-0.76"
    assert row["ours mt04_bleu"] == "47.50 ± 0.71 (n=2)"


def test_chrf_columns_beside_bleu_and_a_clear_error_for_old_scores(tmp_path):
    import pytest

    from layerwise_nmt import UserError

    score = tmp_path / "test.score.json"
    score.write_text(json.dumps({"bleu": 33.0, "chrf": 55.5}))
    spec = {
        "paper": "gca",
        "table": "T2",
        "metric": ["bleu", "chrf"],
        "rows": [{"label": "Transformer", "paper": {"bleu": 34.7}, "state": "ok", "scores": {"test": [str(score)]}}],
    }
    (row,) = write(spec, str(tmp_path / "T2")).to_dict("records")
    assert row["ours bleu"] == "33.00 (n=1)" and row["ours chrf"] == "55.50 (n=1)"
    assert row["paper chrf"] == NOT_RUN and row["delta chrf"] == NOT_RUN  # the paper printed no chrF
    score.write_text(json.dumps({"bleu": 33.0, "hyp": "run/test.txt"}))
    with pytest.raises(UserError, match=r"the score.json of run/test.txt has no chrf \(scored by an older version\)"):
        write(spec, str(tmp_path / "T2"))


def test_summary_lists_every_row_of_every_table_per_metric(tmp_path):
    from layerwise_nmt.report.tables import summary

    score = tmp_path / "score.json"
    score.write_text(json.dumps({"bleu": 33.0, "chrf": 55.0}))
    one = {
        "paper": "lwc",
        "table": "T1",
        "metric": "bleu",
        "rows": [
            {"label": "LWC", "paper": {"bleu": 35.07}, "state": "ok", "scores": {"test": [str(score)]}},
            {"label": "MIXER", "paper": {"bleu": 21.83}, "state": "quoted", "reason": "quoted from Ranzato et al."},
        ],
    }
    two = {
        "paper": "mlrf",
        "table": "T2",
        "metric": ["valid_bleu", "chrf"],
        "rows": [{"label": "Dec-SA", "paper": {"valid_bleu": 34.83}, "state": "blocked", "reason": "no data"}],
    }
    for spec in (one, two):
        (tmp_path / spec["paper"]).mkdir()
        write(spec, str(tmp_path / spec["paper"] / spec["table"]))
    frame = summary([str(tmp_path / "lwc/T1.csv"), str(tmp_path / "mlrf/T2.csv")], str(tmp_path / "summary"))
    assert frame[["paper", "table", "row", "metric"]].values.tolist() == [
        ["lwc", "T1", "LWC", "bleu"],
        ["lwc", "T1", "MIXER", "bleu"],
        ["mlrf", "T2", "Dec-SA", "valid_bleu"],
        ["mlrf", "T2", "Dec-SA", "chrf"],
    ]
    assert frame.iloc[0][["paper_value", "ours", "delta"]].tolist() == ["35.07", "33.00 (n=1)", "-2.07"]
    md = (tmp_path / "summary.md").read_text()
    assert "1 of 4 row × metric cells have our number" in md
    assert "| mlrf | T2 | Dec-SA | valid_bleu | 34.83 | — | — | no data |" in md


def test_budget_columns_and_the_p_values_direction_explain_the_table(tmp_path):
    """Beside each row, what it was trained on (updates, sentence pairs, target tokens, the last valid
    loss) and the p-value with the way the difference goes, so that a table of unequal budgets explains itself."""
    rows = []
    for name, bleu, updates, loss in (("base", 30.0, 1000, 3.21), ("lwc", 28.0, 1300, 3.50)):
        run = tmp_path / name
        (run / "checkpoints").mkdir(parents=True)
        (run / "checkpoints" / "training.json").write_text(
            json.dumps({"updates": updates, "sentences": 29 * updates, "target_tokens": 512 * updates})
        )
        pd.DataFrame({"update": [updates // 2, updates], "valid_loss": [4.0, loss]}).to_csv(
            run / "checkpoints" / "metrics.csv", index=False
        )
        rows.append(
            {
                "label": name,
                "state": "ok",
                "runs": [str(run)],
                "scores": _scores(tmp_path, name, [bleu, bleu + 0.1, bleu - 0.1]),
            }
        )
    rows[1].update(baseline_scores=rows[0]["scores"], compare_to="demo.transformer")
    rows.append({"label": "blocked", "state": "blocked", "reason": "no data"})
    spec = {
        "paper": "demo",
        "table": "T1",
        "metric": "bleu",
        "budget": True,
        "significance": {"test": "t_test", "p": 0.05, "mark": "*"},
        "rows": rows,
    }
    base, lwc, blocked = write(spec, str(tmp_path / "T1")).to_dict("records")
    assert (lwc["updates"], lwc["sentences seen"], lwc["target tokens"]) == ("1,300", "37,700", "665,600")
    assert base["valid loss (end)"] == "3.210" and lwc["valid loss (end)"] == "3.500"
    assert blocked["updates"] == NOT_RUN and base["p vs"] == NOT_RUN
    p = lwc["p vs"].split(" (")[0]
    assert lwc["p vs"].endswith("(worse than demo.transformer)") and (p == "< 0.001" or float(p) < 0.05)
    md = (tmp_path / "T1.md").read_text()
    assert "| updates | sentences seen | target tokens | valid loss (end) |" in md and "worse than demo" in md
    assert "p vs = that test's p-value and which way the difference goes" in md


def test_a_table_of_ones_own_data_says_who_won(tmp_path):
    """A comparison on the user's data (`verdict: true`, no printed numbers): per row against its control, on BLEU
    and on chrF each with its own p-value, better / worse / no significant difference; no empty paper columns."""
    ref = tmp_path / "ref.en"
    ref.write_text("\n".join(f"the cat number {i} sat on the mat today" for i in range(40)) + "\n")
    good = [f"the cat number {i} sat on the mat today" for i in range(40)]
    bad = [f"a dog {i} ran" for i in range(40)]

    def scores(name, bleu, chrf, lines):
        record = _scores(tmp_path, name, [bleu], lines, ref)
        path = record["test"][0]
        Path(path).write_text(json.dumps({**json.loads(Path(path).read_text()), "chrf": chrf}))
        return record

    base, strong = scores("base", 5.0, 20.0, bad), scores("strong", 95.0, 97.0, good)
    same = scores("same", 5.0, 20.0, bad)
    spec = {
        "paper": "mine",
        "table": "T1",
        "metric": ["bleu", "chrf"],
        "verdict": True,
        "significance": {"test": "bootstrap", "p": 0.05, "mark": "*"},
        "rows": [
            {"label": "baseline", "state": "ok", "scores": base},
            {"label": "mine", "state": "ok", "scores": strong, "baseline_scores": base, "compare_to": "x.transformer"},
            {
                "label": "unchanged",
                "state": "ok",
                "scores": same,
                "baseline_scores": base,
                "compare_to": "x.transformer",
            },
            {"label": "worse", "state": "ok", "scores": base, "baseline_scores": strong, "compare_to": "x.mine"},
            {"label": "blocked", "state": "blocked", "reason": "no data"},
        ],
    }
    table = write(spec, str(tmp_path / "T1")).set_index("row")
    test = "paired bootstrap resampling (Koehn 2004), first seeds at p < 0.05"
    from layerwise_nmt.report.tables import p_text

    assert table.loc["mine", "verdict"] == (
        f"vs x.transformer, {test}: BLEU better "
        f"(p {p_text(table.loc['mine', 'p bleu'], '= ')}); chrF better "
        f"(p {p_text(table.loc['mine', 'p chrf'], '= ')})"
    )
    assert table.loc["mine", "p chrf"] < 0.05 and table.loc["mine", "ours chrf"] == "97.00 * (n=1)"
    assert table.loc["unchanged", "verdict"].endswith(
        "BLEU no difference (the same score); chrF no difference (the same score)"
    )
    assert table.loc["unchanged", "p vs bleu"].endswith("(equal to x.transformer)")
    assert "BLEU worse" in table.loc["worse", "verdict"] and "chrF worse" in table.loc["worse", "verdict"]
    assert table.loc["baseline", "verdict"] == NOT_RUN and table.loc["blocked", "verdict"] == NOT_RUN
    assert table.loc["worse", "p vs chrf"].endswith("(worse than x.mine)")
    header = next(line for line in (tmp_path / "T1.md").read_text().splitlines() if line.startswith("| row"))
    assert header == ("| row | ours bleu | p vs bleu | ours chrf | p vs chrf | verdict | status |")
    assert "paper = printed" not in (tmp_path / "T1.md").read_text()


def test_a_first_seed_test_speaks_of_the_first_seeds_direction_not_the_means(tmp_path):
    """On an H100, GCA's mean over 3 seeds was 0.04 above its control's while its first seed was 0.48 below, and
    the bootstrap on those first seeds gave p = 0.029: the table marked GCA significantly better. A test on the first
    seeds says which way those seeds differ; the mark needs that way to be 'better'."""
    ref = tmp_path / "ref.en"
    ref.write_text("\n".join(f"the cat number {i} sat on the mat today" for i in range(40)) + "\n")
    good = [f"the cat number {i} sat on the mat today" for i in range(40)]
    bad = [f"a dog {i} ran" for i in range(40)]

    def seeds(name, runs):  # [(bleu, lines)] per seed
        paths = []
        for seed, (bleu, lines) in enumerate(runs, start=1):
            hyp = tmp_path / f"{name}{seed}.txt"
            hyp.write_text("\n".join(lines) + "\n")
            path = tmp_path / f"{name}{seed}.score.json"
            path.write_text(
                json.dumps(
                    {
                        "bleu": bleu,
                        "hyp": str(hyp),
                        "refs": [str(ref)],
                        "options": {"tokenize": "none", "lowercase": False, "buckets": []},
                    }
                )
            )
            paths.append(str(path))
        return {"test": paths}

    control = seeds("control", [(95.0, good), (5.0, bad)])  # mean 50.0
    method = seeds("method", [(5.0, bad), (96.0, good)])  # mean 50.5, its first seed far worse
    spec = {
        "paper": "mine",
        "table": "T1",
        "metric": "bleu",
        "significance": {"test": "bootstrap", "p": 0.05, "mark": "*"},
        "rows": [
            {"label": "control", "state": "ok", "scores": control},
            {"label": "method", "state": "ok", "scores": method, "baseline_scores": control, "compare_to": "x.control"},
        ],
    }
    table = write(spec, str(tmp_path / "T1")).set_index("row")
    assert table.loc["method", "p"] < 0.05
    assert table.loc["method", "p vs"].endswith("(worse than x.control)")
    assert "*" not in table.loc["method", "ours"]


def test_a_p_value_at_the_bootstraps_floor_prints_as_below_a_thousandth():
    from layerwise_nmt.report.tables import p_text

    assert p_text(1 / 1001) == "< 0.001" and p_text(0.0123) == "0.0123" and p_text(0.5, "= ") == "= 0.5"


def test_the_readmes_demo_table_names_the_commit_and_the_cpu_it_came_from():
    """The stamp `make readme` writes: a demo table is one CPU type's numbers (another CPU or precision gives
    somewhat different ones), from one commit's code."""
    import re

    from conftest import ROOT
    from layerwise_nmt.report.readme import END, START

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index(START) : text.index(END)]
    assert re.search(r"`results/tables/demo/T1\.md` \(commit [0-9a-f]{7,}, on \d+-core [^)]+(\([^)]*\))?\):", block)
