"""The report as a reader sees it: a table page with its caption and one aligned header per column (rendered by a
headless Chromium where one is installed), figures titled in words, legends that hide no data point, layer names
set as math — all built from small synthetic score files, without training."""

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from layerwise_nmt.report.figures import draw, write as write_figure
from layerwise_nmt.report.tables import write as write_table

TRAINED = {"dataset": "multi30k", "src": "de", "tgt": "en", "max_update": 1000, "max_epoch": 0, "warm_start": None}


class Cells(HTMLParser):
    """The <caption> text and, per <tr>, the number of header and data cells."""

    def __init__(self):
        super().__init__()
        self.caption, self.rows, self.inside = "", [], None

    def handle_starttag(self, tag, attrs):
        if tag == "caption":
            self.inside = "caption"
        elif tag == "tr":
            self.rows.append({"th": 0, "td": 0})
        elif tag in ("th", "td"):
            self.rows[-1][tag] += 1

    def handle_endtag(self, tag):
        if tag == "caption":
            self.inside = None

    def handle_data(self, data):
        if self.inside == "caption":
            self.caption += data


def table_page(tmp_path) -> Path:
    scores = {}
    for name, bleu in (("base", 30.0), ("lwc", 31.5)):
        run = tmp_path / name
        (run / "checkpoints").mkdir(parents=True)
        (run / "checkpoints" / "training.json").write_text(
            json.dumps(
                {
                    "updates": 1000,
                    "sentences": 60000,
                    "target_tokens": 800000,
                    "precision": {"amp": "bf16", "requested": "auto", "device": "cpu"},
                }
            )
        )
        pd.DataFrame({"epoch": [1, 2], "update": [500, 1000], "minutes": [5, 10], "valid_loss": [4.1, 3.2]}).to_csv(
            run / "checkpoints" / "metrics.csv", index=False
        )
        scores[name] = run / "test.score.json"
        scores[name].write_text(json.dumps({"bleu": bleu}))
    spec = {
        "paper": "demo",
        "table": "T1",
        "caption": "Multi30k De→En test2016, lowercased tokenized BLEU.",
        "scale": "CPU demo: 1,000 updates per model.",
        "metric": "bleu",
        "budget": True,
        "precision": "fp32 in the papers; bf16 or fp32 here.",
        "rows": [
            {
                "label": "Transformer baseline",
                "state": "ok",
                "scores": {"test": [str(scores["base"])]},
                "runs": [str(tmp_path / "base")],
                "note": "the baseline",
            },
            {
                "label": "LWC",
                "paper": {"bleu": 35.07},
                "state": "ok",
                "scores": {"test": [str(scores["lwc"])]},
                "runs": [str(tmp_path / "lwc")],
            },
            {"label": "MIXER", "paper": {"bleu": 21.83}, "state": "quoted", "reason": "quoted from Ranzato"},
            {"label": "Ro-En", "state": "manual", "reason": "needs 2014-01-test.tgz by hand"},
        ],
    }
    write_table(spec, str(tmp_path / "T1"))
    return tmp_path / "T1.html"


def test_the_table_page_has_its_caption_and_one_header_per_column(tmp_path):
    page = table_page(tmp_path)
    cells = Cells()
    cells.feed(page.read_text(encoding="utf-8"))
    header, *body = cells.rows
    assert header["th"] > 5 and header["td"] == 0 and len(body) == 4
    assert all(row["td"] == header["th"] and row["th"] == 0 for row in body)  # no index column shifting it
    for words in (
        "demo T1: Multi30k De→En",
        "Scale: CPU demo",
        "Metric: bleu",
        "bf16 (amp: auto) on cpu",
        "The paper's precision and ours",
    ):
        assert words in cells.caption
    text = page.read_text(encoding="utf-8")
    assert '<meta charset="utf-8">' in text and "<li>Transformer baseline: the baseline</li>" in text
    assert '<th scope="col" class="num">paper</th>' in text  # aligned as its cells: right, numbers


def test_the_table_page_renders_in_a_browser(tmp_path):
    from snakemake.report.common import data_uri_from_file

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        reason = "no chromium installed (Debian: apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"CI renders the report page: {reason}")
        pytest.skip(reason)

    # as `snakemake --report` shows it: the file as a data URI in an iframe
    page = tmp_path / "report.html"
    uri = data_uri_from_file(table_page(tmp_path))
    page.write_text(
        f'<!DOCTYPE html><html><body style="margin:0"><iframe src="{uri}" style="width:100%;height:100vh;'
        f'border:0"></iframe></body></html>',
        encoding="utf-8",
    )
    shot = tmp_path / "T1.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1400,700",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    dark = (pixels.mean(axis=2) < 0.5).mean(axis=1)  # per pixel row: the share of dark (text) pixels
    assert pixels.shape[0] == 700 and (dark > 0).sum() > 60  # caption lines, header, four rows, notes drawn


def bucket_scores(tmp_path, name, bleus):
    path = tmp_path / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "bleu": 0,
                "buckets": [
                    {"bucket": b, "sentences": n, "bleu": v}
                    for b, n, v in zip(
                        ["[0, 10)", "[10, 15)", "[15, 20)", ">= 20"], [300, 400, 200, 100], bleus, strict=True
                    )
                ],
            }
        )
    )
    return str(path)


def data_points(fig):
    """Display coordinates of every point drawn in every axes: line vertices and bar tops."""
    points = []
    for axis in fig.axes:
        for line in axis.get_lines():
            xy = np.column_stack(line.get_data()).astype(float)
            if len(xy) and line.get_marker() not in (None, "None", ""):
                points += list(axis.transData.transform(xy[~np.isnan(xy).any(axis=1)]))
        for bar in axis.patches:
            if bar.get_height() == bar.get_height():  # a gap (NaN) draws nothing
                points.append(axis.transData.transform((bar.get_x() + bar.get_width() / 2, bar.get_height())))
    return points


def assert_no_legend_hides_data(fig):
    renderer = fig.canvas.get_renderer()
    legends = [legend for axis in fig.axes for legend in [axis.get_legend()] if legend] + list(fig.legends)
    assert legends
    points = data_points(fig)
    assert points
    for legend in legends:
        box = legend.get_window_extent(renderer)
        hidden = [p for p in points if box.contains(*p)]
        assert not hidden, f"the legend covers {len(hidden)} data points"


def test_length_buckets_figure_is_titled_in_words_and_its_legend_hides_no_point(tmp_path):
    # the gain of the last bucket is the lowest point, where the gain legend used to sit (lower right)
    spec = {
        "paper": "demo",
        "figure": "buckets",
        "kind": "length_buckets",
        "rows": [
            {
                "label": "baseline",
                "experiment": "demo.transformer",
                "trained": TRAINED,
                "scores": [bucket_scores(tmp_path, "b", [38, 33, 30, 27])],
            },
            {
                "label": "GCA full model",
                "experiment": "demo.gca_full",
                "trained": {**TRAINED, "max_update": 300, "warm_start": "demo.transformer"},
                "scores": [bucket_scores(tmp_path, "g", [39, 34, 31, 25])],
            },
        ],
    }
    fig, _, missing = draw(spec)
    assert missing == []
    title = fig.axes[0].get_title()
    assert title != "demo buckets" and "baseline vs GCA full model" in title
    assert "Multi30k De→En" in title and "1,000 updates" in title and "+300 updates from baseline" in title
    assert_no_legend_hides_data(fig)
    write_figure(spec, str(tmp_path / "buckets"))
    assert (tmp_path / "buckets.png").stat().st_size > 10_000


def test_accuracy_curves_draw_every_validation(tmp_path):
    metrics = tmp_path / "metrics.csv"
    updates = list(range(100, 1001, 100))  # validated every 100 updates over two epochs of 500
    pd.DataFrame(
        {
            "epoch": [1 + (u > 500) for u in updates],
            "partial": [u % 500 != 0 for u in updates],
            "update": updates,
            "train_accuracy": np.linspace(0.2, 0.6, 10),
            "valid_accuracy": np.linspace(0.25, 0.55, 10),
        }
    ).to_csv(metrics, index=False)
    spec = {
        "paper": "demo",
        "figure": "accuracy",
        "kind": "accuracy_curves",
        "rows": [
            {"label": "baseline", "trained": TRAINED, "metrics": str(metrics)},
            {"label": "MLRF Dec-SA", "state": "blocked", "reason": "not run yet"},
        ],
    }
    fig, drawn, missing = draw(spec)
    assert len(drawn) == 10 and missing == ["MLRF Dec-SA: not run yet"]
    assert "Token accuracy" in fig.axes[0].get_title() and "demo accuracy" not in fig.axes[0].get_title()
    assert_no_legend_hides_data(fig)


def test_attention_hop_labels_are_math(tmp_path):
    inspection = tmp_path / "fusion.json"
    inspection.write_text(
        json.dumps(
            {
                "grid": [[0.2, 0.3, 0.5], [0.1, 0.6, 0.3]],
                "ys": ["hop 1", "hop 2"],
                "xs": ["z^1", "z^2", "z^3"],
                "x_label": "layer",
                "split": None,
                "y_label": "hop (mean over target words)",
                "module": "decoder_fusion",
            }
        )
    )
    spec = {
        "paper": "demo",
        "figure": "attention",
        "kind": "attention",
        "rows": [
            {
                "label": "MLRF Dec-SA: layer attention per hop",
                "sentence": 2,
                "trained": TRAINED,
                "inspection": str(inspection),
            }
        ],
    }
    fig, _, _ = draw(spec)
    axis = next(a for a in fig.axes if a.get_xlabel() == "layer")
    assert [t.get_text() for t in axis.get_xticklabels()] == ["$z^{1}$", "$z^{2}$", "$z^{3}$"]
    assert fig._suptitle.get_text().startswith("Attention weights on test sentence 3")


def test_a_sweep_is_titled_by_what_it_sweeps_and_its_series(tmp_path):
    scores = []
    for name, bleu in (("base", 30.0), ("h1", 29.0), ("h4", 31.0)):
        scores.append(tmp_path / f"{name}.json")
        scores[-1].write_text(json.dumps({"bleu": bleu}))
    trained = {**TRAINED, "dataset": "iwslt14-de-en", "max_update": 0, "max_epoch": 100}
    spec = {
        "paper": "mlrf",
        "figure": "F3",
        "kind": "sweep",
        "xlabel": "n_hop",
        "rows": [
            {
                "label": "+RestartAdam",
                "series": "baseline",
                "baseline": True,
                "trained": trained,
                "scores": [str(scores[0])],
            },
            {"label": "n_hop=1", "series": "Dec-SA", "x": 1, "trained": trained, "scores": [str(scores[1])]},
            {
                "label": "n_hop=4",
                "series": "Dec-SA",
                "x": 4,
                "paper": 33.29,
                "trained": trained,
                "scores": [str(scores[2])],
            },
        ],
    }
    fig, _, _ = draw(spec)
    assert fig.axes[0].get_title() == "BLEU by n_hop: baseline vs Dec-SA\nIWSLT14 De→En · up to 100 epochs each"
    assert_no_legend_hides_data(fig)


def test_each_rows_gain_is_over_the_row_it_is_compared_with(tmp_path):
    """A warm-started row's gain is over its control (trained as long), not over the baseline that trained less:
    the demo's figure drew GCA's gain over the 1,000-update baseline, mostly the 300 extra updates."""
    spec = {
        "paper": "demo",
        "figure": "buckets",
        "kind": "length_buckets",
        "rows": [
            {
                "label": "baseline",
                "experiment": "base",
                "trained": TRAINED,
                "scores": [bucket_scores(tmp_path, "b", [30, 25, 20, 15])],
            },
            {
                "label": "GCA",
                "experiment": "gca",
                "compare_to": "longer",
                "trained": TRAINED,
                "scores": [bucket_scores(tmp_path, "g", [33, 29, 25, 21])],
            },
            {
                "label": "control",
                "experiment": "longer",
                "trained": TRAINED,
                "scores": [bucket_scores(tmp_path, "c", [32, 27, 23, 18])],
            },
        ],
    }
    fig, drawn, _ = draw(spec)
    gains = {
        line.get_label(): list(line.get_ydata())
        for axis in fig.axes
        for line in axis.get_lines()
        if line.get_label().startswith("gain")
    }
    assert gains == {"gain of GCA over control": [1, 2, 2, 3], "gain of control over baseline": [2, 2, 3, 3]}
    gca = drawn[drawn["row"] == "GCA"]
    assert list(gca["gain"]) == [1, 2, 2, 3] and set(gca["gain_over"]) == {"control"}
    assert drawn[drawn["row"] == "baseline"]["gain"].isna().all()


def test_the_attention_figures_title_clears_its_panels_titles(tmp_path):
    rows = []
    for k, (label, module) in enumerate(
        (
            ("baseline: decoder layer 1 → source", "decoder.layers.0.cross_attn"),
            ("LWC: layer 1, mixed attention", "layers.0.attn"),
            ("MLRF Dec-SA: layer attention per hop", "decoder_fusion"),
        )
    ):
        inspection = tmp_path / f"{k}.json"
        inspection.write_text(
            json.dumps(
                {
                    "grid": [[0.2, 0.3, 0.5], [0.1, 0.6, 0.3]],
                    "ys": ["a", "b"],
                    "xs": ["x", "y", "z"],
                    "x_label": "source",
                    "split": None,
                    "y_label": "target",
                    "module": module,
                }
            )
        )
        rows.append({"label": label, "experiment": f"demo.{k}", "trained": TRAINED, "inspection": str(inspection)})
    spec = {"paper": "demo", "figure": "attention", "kind": "attention", "rows": rows}
    fig, _, _ = draw(spec)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    heading = fig._suptitle.get_window_extent(renderer)
    titles = [axis.title.get_window_extent(renderer) for axis in fig.axes if axis.get_title()]
    assert len(titles) == 3
    for box in titles:
        assert not heading.overlaps(box), f"the figure's title {heading} overlaps a panel's title {box}"
        assert box.y1 <= heading.y0  # below it, not beside it
    assert heading.y1 <= fig.bbox.y1  # and the heading itself stays on the figure


def test_validation_curves_draw_each_runs_metric_from_its_metrics_csv(tmp_path):
    paths = {}
    for name, loss, bleu in (("base", [5.0, 4.6, 4.2], [10.0, 14.0, 17.5]), ("fused", [5.2, 4.5, 4.0], [""] * 3)):
        paths[name] = tmp_path / name / "metrics.csv"
        paths[name].parent.mkdir()
        # the second run resumed at update 400: its row is there twice, the later one wins
        pd.DataFrame(
            {
                "epoch": [1, 1, 1, 2],
                "partial": [True, True, True, False],
                "update": [200, 400, 400, 600],
                "valid_loss": [loss[0], 9.9, loss[1], loss[2]],
                "valid_accuracy": [0.3, 0.35, 0.4, 0.5],
                "valid_bleu": [bleu[0], 1.0, bleu[1], bleu[2]] if bleu[0] != "" else [""] * 4,
            }
        ).to_csv(paths[name], index=False)
    rows = [
        {"label": "baseline", "experiment": "demo.transformer", "trained": TRAINED, "metrics": str(paths["base"])},
        {"label": "MLRF Dec-SA", "experiment": "demo.mlrf_dec_sa", "trained": TRAINED, "metrics": str(paths["fused"])},
        {"label": "LWC", "experiment": "demo.lwc", "state": "blocked", "reason": "not run yet"},
    ]
    spec = {"paper": "demo", "figure": "curves", "kind": "validation_curves", "metric": "loss", "rows": rows}
    fig, drawn, missing = draw(spec)
    assert missing == ["LWC: not run yet"]
    assert fig.axes[0].get_title().startswith("Validation loss while training: baseline vs MLRF Dec-SA vs LWC")
    assert fig.axes[0].get_ylabel() == "validation loss (bits per target token)"
    lines = {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].get_lines()}
    assert lines == {"baseline": [5.0, 4.6, 4.2], "MLRF Dec-SA": [5.2, 4.5, 4.0]}
    assert list(drawn.query("row == 'baseline'")["update"]) == [200, 400, 600]
    assert_no_legend_hides_data(fig)

    fig, drawn, missing = draw({**spec, "metric": "bleu", "rows": [dict(row) for row in rows]})
    assert {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].get_lines()} == {
        "baseline": [10.0, 14.0, 17.5]
    }
    assert missing == [
        "LWC: not run yet",
        "MLRF Dec-SA: its metrics.csv has no valid_bleu (train: {valid_bleu: true} computes it)",
    ]
    assert set(drawn["metric"]) == {"valid_bleu"} and "Validation BLEU" in fig.axes[0].get_title()
    fig, drawn, _ = draw({**spec, "metric": "accuracy", "rows": [dict(row) for row in rows]})
    assert list(drawn.query("row == 'baseline'")["value"]) == [30.0, 40.0, 50.0]
    write_figure({**spec, "rows": [dict(row) for row in rows]}, str(tmp_path / "curves"))
    assert (tmp_path / "curves.png").stat().st_size > 10_000 and (tmp_path / "curves.csv").exists()
