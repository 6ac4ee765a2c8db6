"""What a figure's spec resolves from the config: the row each length-bucket gain is drawn over (a warm start's
control, from the paper's tables), and the validation_curves kind checked by the schema like the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerwise_nmt import UserError, grid

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo() -> dict:
    return grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml")


def test_a_length_bucket_figure_compares_each_row_with_its_tables_control(demo):
    """The demo's bucket figure drew GCA's gain over the 1,000-update baseline while table T1 compares GCA with
    the baseline trained the same 300 more updates: a figure row takes its table's `compare_to`, and a figure
    without that row is an error naming it."""
    import copy

    rows = {row["experiment"]: row for row in grid.figure_spec(demo, "demo", "buckets").rows}
    assert rows["demo.gca_full"]["compare_to"] == "demo.transformer_longer"
    assert "demo.transformer_longer" in rows
    for paper, figure in grid.tables(demo, "figures", targeted=False):
        if demo["papers"][paper]["figures"][figure]["kind"] == "length_buckets":
            grid.figure_spec(demo, paper, figure)  # every config.yaml figure holds its rows' controls
    broken = copy.deepcopy(demo)
    figure = broken["papers"]["demo"]["figures"]["buckets"]
    figure["rows"] = [r for r in figure["rows"] if r["experiment"] != "demo.transformer_longer"]
    with pytest.raises(
        UserError,
        match=r"figure demo/buckets, row 'GCA full model': compared with "
        r"demo\.transformer_longer in table T1, which the figure lacks",
    ):
        grid.figure_spec(broken, "demo", "buckets")


def test_a_validation_curves_figure_is_checked_like_the_others(tmp_path):
    overlay = tmp_path / "curves.yaml"
    overlay.write_text(
        "papers:\n  demo:\n    figures:\n      curves:\n        kind: validation_curves\n"
        "        metric: bleu\n        rows:\n"
        "          - {label: baseline, experiment: demo.transformer}\n"
        "          - {label: MLRF Dec-SA, experiment: demo.mlrf_dec_sa}\n"
    )
    config = grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml", overlay)
    spec = grid.figure_spec(config, "demo", "curves")
    assert spec.kind == "validation_curves" and spec.metric == "bleu"
    assert spec.rows[1]["metrics"] == "results/multi30k_deen/demo.mlrf_dec_sa/seed1/checkpoints/metrics.csv"
    overlay.write_text(overlay.read_text().replace("metric: bleu", "metric: perplexity"))
    with pytest.raises(UserError, match="curves.*metric.*perplexity"):
        grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml", overlay)
    overlay.write_text(
        overlay.read_text()
        .replace("metric: perplexity", "metric: bleu")
        .replace("kind: validation_curves", "kind: loss_curves")
    )
    with pytest.raises(UserError, match="loss_curves"):
        grid.load(ROOT / "config.yaml", ROOT / "config" / "demo.yaml", overlay)
