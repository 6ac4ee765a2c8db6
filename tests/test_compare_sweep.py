"""A sweep as config: a `compare:` entry that lists the values of one setting (the depth, or any arch or train key)
expands into every value's baseline and methods, one table, and one figure of each method's gain over its own
baseline against the value (the `delta_sweep` kind), drawn from score files like the others."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import ROOT, snakemake
from layerwise_nmt import UserError, grid


def overlay(tmp_path: Path, **top) -> Path:
    spec = {
        "compare": {"deep": {"task": "multi30k_deen", "preset": "demo", "seeds": [1, 2], "sweep": {"depth": [2, 6]}}}
    }
    for key, value in top.items():
        if key == "deep":
            spec["compare"]["deep"].update(value)
        else:
            spec[key] = value
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def load(*paths: Path) -> dict:
    return grid.load(ROOT / "config.yaml", *paths)


def test_a_depth_sweep_is_every_depths_comparison_in_one_table_and_one_figure(tmp_path):
    config = load(overlay(tmp_path))
    names = [n for n in config["experiments"] if n.startswith("deep.")]
    suffixes = ["transformer", "lwc", "mlrf_dec_sa", "gca_full", "dou_deep", "transformer_longer"]
    assert names == [f"deep.d{d}.{s}" for d in (2, 6) for s in suffixes]
    for depth, shared in ((2, 5), (6, 14)):  # LWC's shared layers keep the baseline's parameters: round(7d/3)
        e = config["experiments"]
        assert (
            e[f"deep.d{depth}.transformer"]["arch"] | {"encoder_layers": depth, "decoder_layers": depth}
            == e[f"deep.d{depth}.transformer"]["arch"]
        )
        assert e[f"deep.d{depth}.lwc"]["arch"]["layers"] == shared
        assert "encoder_layers" not in e[f"deep.d{depth}.lwc"]["arch"]
        assert e[f"deep.d{depth}.gca_full"]["warm_start"] == f"deep.d{depth}.transformer"
        assert e[f"deep.d{depth}.dou_deep"]["arch"]["encoder_layers"] == depth
        assert e[f"deep.d{depth}.lwc"]["seeds"] == [1, 2]
    paper = config["papers"]["deep"]
    assert list(paper["tables"]) == ["T1"] and list(paper["figures"]) == ["delta"]
    rows = paper["tables"]["T1"]["rows"]
    assert [r["experiment"] for r in rows] == names
    compared = {r["experiment"]: r.get("compare_to") for r in rows}
    assert compared["deep.d6.lwc"] == "deep.d6.transformer"
    assert compared["deep.d2.gca_full"] == "deep.d2.transformer_longer"
    assert compared["deep.d6.transformer"] is None and compared["deep.d6.transformer_longer"] is None
    assert rows[7]["label"] == "depth 6: LWC, He et al. 2018 (shared layers over [source; target])"
    assert "depth 2, 6" in paper["tables"]["T1"]["caption"]
    figure = paper["figures"]["delta"]
    assert figure["kind"] == "delta_sweep" and figure["xlabel"] == "depth (encoder layers = decoder layers)"
    drawn = {r["experiment"]: r for r in figure["rows"]}
    assert (
        drawn["deep.d6.lwc"]
        | {
            "x": 6,
            "series": "LWC, He et al. 2018 (shared layers over [source; target])",
            "compare_to": "deep.d6.transformer",
        }
        == drawn["deep.d6.lwc"]
    )
    assert "series" not in drawn["deep.d2.transformer"]  # the zero line each method is drawn against
    assert config["targets"] == {"tasks": ["multi30k_deen"], "tables": ["deep/T1"], "figures": ["deep/delta"]}
    assert load(tmp_path / "sweep.yaml") == config  # the same however often it runs


def test_an_arch_or_train_key_sweeps_every_run_the_papers_settings_included(tmp_path):
    config = load(overlay(tmp_path, deep={"sweep": {"arch": {"dropout": [0.1, 0.3]}}, "methods": ["lwc", "mlrf"]}))
    e = config["experiments"]
    assert [n for n in e if n.startswith("deep.")] == [
        f"deep.dropout{v}.{s}" for v in ("0.1", "0.3") for s in ("transformer", "lwc", "mlrf_dec_sa")
    ]
    assert e["deep.dropout0.3.lwc"]["arch"]["dropout"] == 0.3 and e["deep.dropout0.3.lwc"]["arch"]["layers"] == 7
    assert e["deep.dropout0.1.mlrf_dec_sa"]["arch"]["decoder_fusion"] == "sa"
    figure = config["papers"]["deep"]["figures"]["delta"]
    assert figure["xlabel"] == "dropout" and {r.get("x") for r in figure["rows"]} == {0.1, 0.3}

    e = load(overlay(tmp_path, deep={"sweep": {"train": {"lr": [0.0005, 0.001]}}}))["experiments"]
    assert e["deep.lr0.0005.mlrf_dec_sa"]["train"]["lr"] == 0.0005  # over the preset's own lr for MLRF
    assert e["deep.lr0.001.gca_full"]["train"]["lr"] == 0.001
    assert e["deep.lr0.001.gca_full"]["train"]["max_update"] == 300  # the warm starts keep their continued budget

    e = load(overlay(tmp_path, deep={"sweep": {"train": {"max_update": [500, 1000]}}}))["experiments"]
    assert e["deep.max_update500.transformer"]["train"]["max_update"] == 500
    assert e["deep.max_update500.gca_full"]["train"]["max_update"] == 300


def test_comparisons_without_a_sweep_expand_as_before(tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump({"compare": {"mine": {"task": "multi30k_deen", "preset": "demo"}}}))
    config = load(path)
    assert [n for n in config["experiments"] if n.startswith("mine.")] == [
        "mine.transformer",
        "mine.lwc",
        "mine.mlrf_dec_sa",
        "mine.gca_full",
        "mine.dou_deep",
        "mine.transformer_longer",
    ]
    assert list(config["papers"]["mine"]["figures"]) == ["buckets"]
    assert config["experiments"]["mine.lwc"]["arch"]["layers"] == 7


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sweep": {"depth": [2], "arch": {"dropout": [0.1]}}}, "config key compare/deep/sweep: "),
        ({"sweep": {"arch": {"dropout": [0.1], "heads": [2]}}}, "config key compare/deep/sweep/arch: "),
        ({"sweep": {"depth": []}}, "config key compare/deep/sweep/depth: "),
        ({"sweep": {"depth": [2, 2]}}, "config key compare/deep/sweep/depth: "),
        (
            {"sweep": {"depth": [2, 3]}, "lwc_layers": 7},
            "config key compare/deep/lwc_layers: a depth sweep sets LWC's shared layers per depth",
        ),
        (
            {"sweep": {"arch": {"encoder_layers": [2, 3]}}},
            "config key compare/deep/sweep/arch/encoder_layers: sweep: {depth: [...]} sets the layers",
        ),
        ({"sweep": {"arch": {"activation": ["re/lu"]}}}, "config key compare/deep/sweep/arch/activation/0: "),
        (  # the swept depth overwrote a comparison's own layer count in silence
            {"sweep": {"depth": [2, 3]}, "arch": {"encoder_layers": 4, "dropout": 0.2}},
            "config key compare/deep/arch/encoder_layers: a depth sweep sets both stacks' layers per depth",
        ),
    ],
)
def test_a_bad_sweep_is_one_line_naming_the_key(tmp_path, change, message):
    with pytest.raises(UserError) as err:
        load(overlay(tmp_path, deep=change))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_targets_listed_by_hand_keep_a_comparisons_figures_with_its_table(tmp_path):
    """An overlay that names the comparison's table among its targets gets its figure too; one whose targets leave
    the comparison out (e.g. merged over config/demo.yaml) is told so in one line by the dry run."""
    from layerwise_nmt.grid.compare import untargeted_comparisons

    config = load(overlay(tmp_path, targets={"tables": ["deep/T1"], "figures": []}))
    assert config["targets"]["figures"] == ["deep/delta"]
    assert untargeted_comparisons(config) == []
    config = load(ROOT / "config" / "demo.yaml", overlay(tmp_path))
    assert config["targets"]["tables"] == ["demo/T1"] and "deep/delta" not in config["targets"]["figures"]
    (line,) = untargeted_comparisons(config)
    assert line.startswith("compare/deep: table deep/T1 and figure deep/delta are not among the targets")
    assert "add deep/T1 to targets: tables" in line


def score(path: Path, bleu: float) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"bleu": bleu}))
    return str(path)


def test_the_delta_figure_draws_each_methods_gain_over_its_own_baseline(tmp_path):
    from layerwise_nmt.report.figures import write as draw

    def row(label, experiment, x, bleus, **extra):
        scores = [score(tmp_path / experiment / f"seed{k}.json", b) for k, b in enumerate(bleus, 1)]
        return {"label": f"depth {x}: {label}", "experiment": experiment, "x": x, "scores": scores} | extra

    lwc = {"series": "LWC"}
    spec = {
        "paper": "deep",
        "figure": "delta",
        "kind": "delta_sweep",
        "xlabel": "depth",
        "rows": [
            row("baseline", "b2", 2, [30, 32]),
            row("LWC", "l2", 2, [31, 35], compare_to="b2", **lwc),
            row("baseline", "b6", 6, [33, 33]),
            row("LWC", "l6", 6, [32, 34], compare_to="b6", **lwc),
            row("baseline", "b3", 3, []) | {"scores": None, "reason": "not run yet"},
            row("LWC", "l3", 3, [30, 30], compare_to="b3", **lwc),
        ],
    }
    missing = draw(spec, str(tmp_path / "delta"))
    assert "depth 3: baseline: not run yet" in missing
    assert any(m.startswith("depth 3: LWC: its baseline b3 has no scores") for m in missing)
    drawn = pd.read_csv(tmp_path / "delta.csv").set_index("x")
    assert list(drawn.index) == [2, 6] and set(drawn["series"]) == {"LWC"}
    assert drawn.loc[2, "delta_mean"] == 2 and drawn.loc[2, "delta_sd"] == pytest.approx(2**0.5)  # +1, +3
    assert drawn.loc[6, "delta_mean"] == 0 and drawn.loc[6, "seeds"] == 2 and drawn.loc[6, "compare_to"] == "b6"
    assert (tmp_path / "delta.png").stat().st_size > 0 and (tmp_path / "delta.pdf").is_file()


@pytest.mark.system
def test_the_dry_run_lists_every_depths_jobs_and_the_figure(tmp_path, mirror):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        yaml.safe_dump({"compare": {"deep": {"task": "multi30k_deen", "preset": "demo", "sweep": {"depth": [2, 3]}}}})
    )
    out = snakemake(tmp_path, "-n", "--configfile", str(path), mirror=mirror).stdout
    for depth in (2, 3):
        for suffix in ("transformer", "lwc", "mlrf_dec_sa", "gca_full", "dou_deep", "transformer_longer"):
            assert f"results/multi30k_deen/deep.d{depth}.{suffix}/seed1/model.pt" in out
            assert f"results/multi30k_deen/deep.d{depth}.{suffix}/seed1/test.score.json" in out
    assert "results/tables/deep/T1.md" in out and "results/figures/deep/delta.png" in out
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out.split("Job stats:")[1].split("total")[0], re.M))
    assert counts["train"] == "12" and counts["figure"] == "1" and counts["table"] == "1"
    over_demo = snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config" / "demo.yaml"), str(path), mirror=mirror)
    assert (
        "targets: compare/deep: table deep/T1 and figure deep/delta are not among the targets"
        in over_demo.stdout + over_demo.stderr
    )


def test_the_delta_figure_pairs_seed_k_with_seed_k_over_the_seeds_both_rows_ran(tmp_path):
    """A method run on three seeds beside a control run on one (config `seeds:` differ) is a gain over seed 1
    alone, not an error; rows without a seed in common are left out with the reason."""
    from layerwise_nmt.report.figures import write as draw

    def row(label, experiment, x, seeds, bleus, **extra):
        scores = [
            score(tmp_path / experiment / f"seed{k}" / "test.score.json", b) for k, b in zip(seeds, bleus, strict=True)
        ]
        return {"label": label, "experiment": experiment, "x": x, "scores": scores, "seeds": seeds} | extra

    spec = {
        "paper": "deep",
        "figure": "delta",
        "kind": "delta_sweep",
        "rows": [
            row("baseline 2", "b2", 2, [2], [30]),
            row("LWC 2", "l2", 2, [1, 2, 3], [10, 31, 50], compare_to="b2", series="LWC"),
            row("baseline 6", "b6", 6, [1], [33]),
            row("LWC 6", "l6", 6, [2, 3], [34, 35], compare_to="b6", series="LWC"),
        ],
    }
    missing = draw(spec, str(tmp_path / "delta"))
    assert any(m.startswith("LWC 6: no seed in common with its baseline b6") for m in missing), missing
    drawn = pd.read_csv(tmp_path / "delta.csv").set_index("x")
    assert list(drawn.index) == [2]
    assert drawn.loc[2, "delta_mean"] == 1 and drawn.loc[2, "seeds"] == 1 and drawn.loc[2, "ours_mean"] == 31
