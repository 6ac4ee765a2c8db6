"""The workflow as users run it: DAGs build, the CI-sized data run completes, config errors name the key."""

import collections
import fcntl
import os
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from sacremoses import MosesDetokenizer

from conftest import ROOT, snakemake
from layerwise_nmt import UserError
from layerwise_nmt import grid
from layerwise_nmt.grid.stage_checks import check_experiments
from layerwise_nmt.data.binarize import IndexedDataset
from layerwise_nmt.data.vocab import Dictionary

pytestmark = pytest.mark.system  # Snakemake runs of the workflow


@pytest.mark.parametrize("configfile", [None, "config/demo.yaml", "config/ci.yaml", "config/study.yaml"])
def test_dry_run_builds_the_dag(tmp_path, configfile):
    args = ["-n", "-p"] + (["--configfile", str(ROOT / configfile)] if configfile else [])
    result = snakemake(tmp_path, *args)
    out = result.stdout
    assert "binarize" in out and "tokenize" in out
    assert "budget check: " in out + result.stderr  # always, not only when something is flagged (docs/usage.md)
    config = grid.load(*[ROOT / "config.yaml"] + ([ROOT / configfile] if configfile else []))
    needs: dict[str, set] = {}  # experiment → the files its table/figure rows need built
    for kind in ("tables", "figures"):
        for p, t in grid.tables(config, kind):
            spec = config["papers"][p][kind][t]
            splits = (
                {grid.split_of(m) for m in grid.metrics_of(spec) if m not in spec.get("mean_of", {})}
                | {grid.split_of(m) for ms in spec.get("mean_of", {}).values() for m in ms}
                if kind == "tables"
                else {"test"}
                if spec["kind"] in ("sweep", "length_buckets")
                else set()
            )
            for row in spec["rows"]:
                if "experiment" in row and grid.experiment_status(config, row["experiment"]).runnable:
                    needs.setdefault(row["experiment"], {"model.pt"}).update(
                        {f"{split}.{ext}" for split in splits for ext in ("bpe", "score.json")}
                    )
    assert needs
    for name, outputs in needs.items():  # every runnable row: train → (average) → decode → score
        run = grid.experiment_dir(config, name, grid.experiment(config, name)["seeds"][0])
        alphas = grid.experiment(config, name)["decode"].get("tune_lenpen") or []
        decoded = sorted(o.split(".")[0] for o in outputs if o.endswith(".bpe"))
        if alphas and decoded:  # α tuned on valid first: a decoding and a score per α, the pick; decodings read it
            outputs = outputs | {"tuned_lenpen.json"} | {f"lenpen/valid.{a:g}.score.json" for a in alphas}
            job = next(block for block in out.split("\nrule ") if f"output: {run}/{decoded[0]}.bpe" in block)
            assert f"{run}/tuned_lenpen.json" in job.split("output:")[0] and '"lenpen_from": ' in job
        for output in outputs:
            assert f"{run}/{output}" in out, f"{name}: no job makes {output}"
        parent = grid.experiment(config, name)["warm_start"]
        if parent:  # continued learning: the run's train job reads its baseline's trained model
            job = next(block for block in out.split("\nrule ") if f"output: {run}/model.pt" in block)
            assert f"{grid.experiment_dir(config, parent, 1)}/model.pt" in job.split("output:")[0]
    # With fewer slots than ready jobs: trainings before decodes, the longest chain of trainings first.
    priority = {
        (rule, e): float(p)
        for rule, e, p in re.findall(
            r"\n(?:local)?rule (\w+):\n(?:    .*\n)*?    wildcards: task=\w+, experiment=([\w.]+),.*\n"
            r"    priority: ([\d.]+)",
            out,
        )
    }
    trained = {e for _, e in priority}
    assert trained and {rule for rule, _ in priority} == {"train"}  # decodes keep Snakemake's default, 0
    for e in trained:
        assert priority["train", e] >= 1
        parent = grid.experiment(config, e)["warm_start"]
        if parent in trained:
            assert priority["train", parent] > priority["train", e], (parent, e)
    if configfile == "config/demo.yaml":  # the baseline gates three; then MLRF, LWC (half the tokens), the rest
        order = sorted(trained, key=lambda e: -priority["train", e])
        assert order[:3] == ["demo.transformer", "demo.mlrf_dec_sa", "demo.lwc"], order


@pytest.fixture(scope="session")
def ci_run(tmp_path_factory, mirror) -> Path:
    """The whole DAG on 400 real sentences (data, train with 2 seeds, average, decode, score, tables, figures), run
    once for every test below: under a lock in the folder pytest's workers share, so that the run happens once
    whichever worker asks first, and the others read its results."""
    shared = tmp_path_factory.getbasetemp().parent
    run = shared / "ci-sized-run"
    with open(shared / "ci-sized-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (run / "done").exists():
            shutil.rmtree(run, ignore_errors=True)
            run.mkdir()
            snakemake(run, "--configfile", str(ROOT / "config/ci.yaml"), mirror=mirror)
            (run / "done").touch()
    return run


def ci_runs(run: Path) -> list[Path]:
    return [run / f"results/multi30k_ci/ci.transformer/seed{s}" for s in (1, 2)]


def test_ci_run_prepares_the_data(ci_run):
    data = ci_run / "results/multi30k_ci/data"
    stats = yaml.safe_load((data / "text/stats.de-en.json").read_text())
    assert stats["train"]["read"] == 400 and stats["valid"]["kept"] == 100 and stats["test"]["kept"] == 100
    for lang in ("de", "en"):
        vocab = Dictionary.load(data / f"vocab/dict.{lang}.txt")
        assert len(vocab) % 8 == 0 and vocab.symbols[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
        dataset = IndexedDataset(data / f"bin-separate/test.de-en.{lang}")
        lines = (data / f"bpe/test.de-en.{lang}").read_text(encoding="utf-8").splitlines()
        assert len(dataset) == len(lines) == 100
        for i in (0, 57, 99):
            assert dataset[i][-1] == vocab.eos
            assert vocab.decode(dataset[i]) == lines[i]
        assert dataset.tokens.dtype == np.uint16
    assert (ci_run / "results/logs/multi30k_ci/assemble.de-en.log").exists()
    # tokenized parts are temporary: gone once assembled, the assembled text kept
    assert not list((data / "tok").glob("*")) and (data / "text").is_dir()


def test_ci_run_trains_averages_decodes_and_scores_each_seed(ci_run):
    for run in ci_runs(ci_run):
        score = json.loads((run / "test.score.json").read_text())
        assert 0.0 <= score["bleu"] <= 100.0 and score["signature"].startswith("nrefs:1|case:lc")
        assert [b["sentences"] for b in score["buckets"]] and sum(b["sentences"] for b in score["buckets"]) == 100
        assert len((run / "test.txt").read_text(encoding="utf-8").splitlines()) == 100
        assert "@@" not in (run / "test.txt").read_text(encoding="utf-8")
        assert len(list((run / "checkpoints").glob("checkpoint[0-9]*.pt"))) == 3
        metrics = (run / "checkpoints" / "metrics.csv").read_text().splitlines()
        assert len(metrics) == 4 and "valid_accuracy" in metrics[0]
        assert torch.load(run / "averaged.pt", weights_only=False)["averaged_from"] == [
            "checkpoint2.pt",
            "checkpoint3.pt",
        ]


def test_ci_run_tables_give_mean_sd_quoted_rows_and_why_a_row_did_not_run(ci_run):
    table = (ci_run / "results/tables/ci/T1.md").read_text()
    bleus = [json.loads((run / "test.score.json").read_text())["bleu"] for run in ci_runs(ci_run)]
    mean = sum(bleus) / 2
    assert f"{mean:.2f} ± " in table and "(n=2)" in table
    assert "| MIXER (quoted row) | — | — | — | 20.73 | — | — | quoted from Ranzato et al. 2016 |" in table
    assert "warm start from models/not-trained-yet.pt: no such file" in table
    csv = pd.read_csv(ci_run / "results/tables/ci/T1.csv").set_index("row")
    for label, experiment in (("LWC, 2 shared layers", "ci.lwc"), ("MLRF Both-FNN-SA", "ci.mlrf")):
        run = ci_run / f"results/multi30k_ci/{experiment}/seed1"
        for split in ("valid", "test"):  # each model trained, decoded both splits and was scored
            score = json.loads((run / f"{split}.score.json").read_text())
            assert score["split"] == split and score["decoding"]["params"] > 0
            assert csv.loc[label, f"ours_mean {split}_bleu"] == pytest.approx(score["bleu"])
    assert "Transformer 1+1" in (ci_run / "results/tables/ci/T2.md").read_text()


def test_ci_run_tunes_the_length_penalty_on_valid_and_decodes_with_the_best(ci_run):
    mlrf = ci_run / "results/multi30k_ci/ci.mlrf/seed1"
    tuned = json.loads((mlrf / "tuned_lenpen.json").read_text())
    valid = {a: json.loads((mlrf / f"lenpen/valid.{a}.score.json").read_text())["bleu"] for a in ("0.5", "1", "2")}
    assert tuned["bleu_by_lenpen"] == valid and tuned["bleu"] == max(valid.values())
    assert valid[f"{tuned['lenpen']:g}"] == max(valid.values())
    for split in ("valid", "test"):
        assert json.loads((mlrf / f"{split}.json").read_text())["options"]["lenpen"] == tuned["lenpen"]


def test_ci_run_figures_draw_curves_sweeps_and_attention_maps_that_sum_to_one(ci_run):
    for figure in ("curves", "sweep", "attention"):
        assert (ci_run / f"results/figures/ci/{figure}.png").stat().st_size > 1000
    maps = pd.read_csv(ci_run / "results/figures/ci/attention.csv")
    for label, group in maps.groupby("row"):  # every attention row sums to 1 (fusion: over layers, per hop)
        assert group.groupby("i")["weight"].sum().round(4).eq(1.0).all(), label
    lwc = maps[maps["row"] == "LWC: layer 1 mixed attention"]
    assert lwc["j"].nunique() > maps[maps["row"].str.startswith("Transformer")]["j"].nunique()  # [source | target]
    last = lwc[lwc["i"] == lwc["i"].max()]  # causal: the first target word sees no later target word
    first = lwc[lwc["i"] == 0]
    assert first[first["j"] > first["j"].max() - lwc["i"].max()]["weight"].sum() == 0 and len(last) == len(first)
    assert len(pd.read_csv(ci_run / "results/figures/ci/curves.csv").query("row == 'MLRF'")) == 3  # 3 epochs


def test_ci_run_scores_wmt_en_ro_detokenized_against_normalised_references(ci_run):
    """WMT16 En-Ro from the mirror's plain copies of the SGML sets: Romanian normalised before tokenizing, and
    detokenized BLEU compares the detokenized output with the normalised, untokenized references."""
    enro = ci_run / "results/wmt16_enro_ci"
    refs = (enro / "data/ref/test.en-ro.ro").read_text(encoding="utf-8").splitlines()
    tokenized = (enro / "data/text/test.en-ro.ro").read_text(encoding="utf-8").splitlines()
    assert len(refs) == len(tokenized) == 50 and not set("șțăâîȘȚĂÂÎ") & set("".join(refs + tokenized))
    assert any(" @-@ " in line for line in tokenized) and not any(" @-@ " in line for line in refs)
    assert not any("„" in line for line in refs)  # normalize-punctuation ran on the references too
    score = json.loads((enro / "ci.enro/seed1/test.score.json").read_text())
    assert score["hyp"].endswith("test.detok") and "tok:13a" in score["signature"]
    assert score["refs"] == ["results/wmt16_enro_ci/data/ref/test.en-ro.ro"]


def test_ci_run_model_translates_raw_text_as_the_workflow_decoded_it_there_and_elsewhere(ci_run, tmp_path):
    """Raw text, translated with an experiment's trained model and its task's own preprocessing, comes out as the
    workflow's decoding of the test set, detokenized; the same from the run's model directory, anywhere."""
    raw = (ci_run / "results/raw/multi30k/test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[:5]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "translate",
            "-",
            "--experiment",
            "ci.transformer",
            "--seed",
            "2",
            "--config",
            str(ROOT / "config.yaml"),
            "--config",
            str(ROOT / "config/ci.yaml"),
        ],
        input="\n".join(raw) + "\n",
        capture_output=True,
        text=True,
        cwd=ci_run,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        check=True,
    )
    detok = MosesDetokenizer(lang="en")
    workflow = (ci_runs(ci_run)[1] / "test.txt").read_text(encoding="utf-8").splitlines()[:5]
    assert result.stdout.splitlines() == [detok.detokenize(line.split()) for line in workflow]
    moved = shutil.copytree(ci_runs(ci_run)[1] / "model_dir", tmp_path / "ci-de-en")
    portable = subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", "translate", "--model", str(moved)],
        input="\n".join(raw) + "\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert portable.stdout == result.stdout


def test_ci_run_translates_a_held_out_set_from_its_folder_as_it_decoded_the_test_set(ci_run, tmp_path):
    """A source-only set named by the task (heldout_sets) in a folder outside the checkout (heldout_dir), gzipped:
    the run's model translates it into heldout.<set>.txt in test.txt's form. Here the set is the test set's first
    lines, so each line must come out as the workflow's own decoding of it."""
    import gzip

    raw = (ci_run / "results/raw/multi30k/test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[:6]
    folder = tmp_path / "held out"
    folder.mkdir()
    with gzip.open(folder / "sample.de.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(raw) + "\n")
    overlay = tmp_path / "heldout.yaml"
    overlay.write_text(yaml.safe_dump({"tasks": {"multi30k_ci": {"heldout_sets": {"sample": "sample.de.gz"}}}}))
    run = ci_runs(ci_run)[0]
    target = f"{run.relative_to(ci_run)}/heldout.sample.txt"
    snakemake(
        ci_run, target, "--configfile", str(ROOT / "config/ci.yaml"), str(overlay), "--config", f"heldout_dir={folder}"
    )
    workflow = (run / "test.txt").read_text(encoding="utf-8").splitlines()[:6]
    assert (run / "heldout.sample.txt").read_text(encoding="utf-8").splitlines() == workflow
    assert (run / "heldout.sample.detok").exists() and (run / "translate.heldout.sample.log").exists()
    for made in run.glob("heldout.sample.*"):  # the shared run stays as the other tests expect it
        made.unlink()
    # no folder, or a set the folder lacks: one line naming it, before any job runs
    missing = snakemake(ci_run, target, "-n", "--configfile", str(ROOT / "config/ci.yaml"), str(overlay), check=False)
    assert missing.returncode != 0 and "no held-out set 'sample'" in missing.stdout + missing.stderr
    (folder / "sample.de.gz").unlink()
    gone = snakemake(
        ci_run,
        target,
        "-n",
        "--configfile",
        str(ROOT / "config/ci.yaml"),
        str(overlay),
        "--config",
        f"heldout_dir={folder}",
        check=False,
    )
    assert gone.returncode != 0 and "tasks/multi30k_ci/heldout_sets/sample:" in gone.stdout + gone.stderr


def test_ci_run_rerun_has_nothing_to_do_with_or_without_the_mirror_and_a_new_checksum_redoes_its_file(
    ci_run, mirror, tmp_path
):
    """Where a checksummed file came from is not what Snakemake compares (nothing is downloaded or retrained); a new
    checksum redoes that file, from its download, and everything made from it."""
    for where in (mirror, None):
        assert (
            "Nothing to be done"
            in snakemake(ci_run, "--configfile", str(ROOT / "config/ci.yaml"), "-n", mirror=where).stdout
        )
    release = tmp_path / "new-release.yaml"
    release.write_text(yaml.safe_dump({"datasets": {"multi30k": {"archives": {"train.de.gz": {"sha256": "0" * 64}}}}}))
    redo = snakemake(ci_run, "--configfile", str(ROOT / "config/ci.yaml"), str(release), "-n", "-p").stdout
    assert jobs_planned(redo)["extract"] == 1 and jobs_planned(redo)["train"] == 4
    assert '"fetch", "results/downloads/' in redo and f'"--sha256", "{"0" * 64}"' in redo


def test_ci_run_decoding_and_scoring_settings_rerun_only_their_jobs(ci_run, mirror, tmp_path):
    """Never a training (a GPU-day each) for a decoding or scoring change; a training change retrains."""
    overlay = tmp_path / "decode-score.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "experiments": {
                    "ci.transformer": {"decode": {"lenpen": 0.7}, "score": {"buckets": [5, 10]}, "seeds": [1, 2, 3]}
                }
            }
        )
    )
    planned = jobs_planned(
        snakemake(ci_run, "--configfile", str(ROOT / "config/ci.yaml"), str(overlay), "-n", mirror=mirror).stdout
    )
    assert planned["train"] == 1  # seed 3's, and only it
    assert planned["translate"] == 2 * 3 + 2 + 2 + 1  # valid+test × 3 seeds; ci.lwc, ci.mlrf, ci.enro inherit it
    overlay.write_text(yaml.safe_dump({"experiments": {"ci.transformer": {"train": {"lr": 0.001}}}}))
    planned = jobs_planned(
        snakemake(ci_run, "--configfile", str(ROOT / "config/ci.yaml"), str(overlay), "-n", mirror=mirror).stdout
    )
    assert planned["train"] == 2 + 3  # a training change retrains both seeds and the 3 experiments extending it


def test_ci_run_report_holds_every_table_and_figure_with_its_caption(ci_run, mirror, tmp_path):
    snakemake(
        ci_run, "--configfile", str(ROOT / "config/ci.yaml"), "--report", str(tmp_path / "report.zip"), mirror=mirror
    )
    with zipfile.ZipFile(tmp_path / "report.zip") as report:
        names = report.namelist()
        assert {"T1.html", "T2.html", "curves.png", "sweep.png"} <= {n.rsplit("/", 1)[-1] for n in names}
        index = next(report.read(n).decode() for n in names if n.endswith("report.html"))
        assert "CI: the whole DAG on 400 sentences" in index and "WMT16 En" in index


def jobs_planned(dry_run: str) -> dict[str, int]:
    """Snakemake's "Job stats" table of a dry run: rule → count (0 for rules it does not list)."""
    counts = {}
    for line in dry_run.split("Job stats:", 1)[-1].splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit() or parts[0] == "total":
            if counts:
                break
            continue
        counts[parts[0]] = int(parts[1])
    return collections.defaultdict(int, counts)


def load_full():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def test_unknown_key_is_named():
    config = load_full()
    config["tasks"]["iwslt14_deen"]["bpe"]["mergez"] = 3
    with pytest.raises(UserError, match=r"tasks/iwslt14_deen/bpe.*'mergez'"):
        grid.validate(config)


def test_wrong_type_is_named():
    config = load_full()
    config["tasks"]["multi30k_deen"]["bpe"]["merges"] = "many"
    with pytest.raises(UserError, match=r"tasks/multi30k_deen/bpe/merges.*integer"):
        grid.validate(config)


def test_dangling_reference_is_named():
    config = load_full()
    config["experiments"]["lwc.t1.deen.lwc_small"]["task"] = "iwslt99"
    with pytest.raises(UserError, match=r"experiments/lwc.t1.deen.lwc_small/task: unknown task 'iwslt99'"):
        grid.validate(config)


def test_extends_overrides_key_by_key_and_names_bad_parents():
    config = load_full()
    grid.validate(config)
    ablation = grid.experiment(config, "lwc.t3.no_sharing")
    base = grid.experiment(config, "lwc.t1.deen.lwc_small")
    assert ablation["arch"] == {**base["arch"], "layers": 7, "share_layers": False}
    assert ablation["train"] == base["train"] and ablation["decode"] == base["decode"]
    assert "description" not in config["experiments"]["lwc.t3.no_language_embedding"]  # never inherited
    grid.validate(config)  # resolving again changes nothing
    assert grid.experiment(config, "lwc.t3.no_sharing") == ablation

    unknown = load_full()
    unknown["experiments"]["lwc.t3.no_sharing"]["extends"] = "nope"
    with pytest.raises(UserError, match="experiments/lwc.t3.no_sharing/extends: unknown experiment 'nope'"):
        grid.validate(unknown)
    cycle = load_full()
    cycle["experiments"]["lwc.t1.deen.lwc_small"]["extends"] = "lwc.t4.lwc10"
    with pytest.raises(UserError, match=r"/extends: cycle .*lwc.t4.lwc10"):
        grid.validate(cycle)


def test_snakemake_rejects_unknown_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks:\n  multi30k_deen:\n    lowercaze: true\n")
    result = snakemake(tmp_path, "-n", "--configfile", str(bad), check=False)
    assert result.returncode != 0
    assert "lowercaze" in result.stdout + result.stderr


@pytest.mark.parametrize("configfile", [[], ["--configfile", str(ROOT / "config/demo.yaml")]])
def test_snakemake_lint_is_clean(tmp_path, configfile):
    result = snakemake(tmp_path, "--lint", *configfile, check=False)
    assert result.returncode == 0 and "Congratulations" in result.stdout + result.stderr, result.stdout[-3000:]


def test_the_workflow_is_snakefmt_clean():
    """Formatted as the Snakemake workflow catalog expects (line length in pyproject.toml's [tool.snakefmt])."""
    result = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "path", ["config.yaml", "config/demo.yaml", "config/ci.yaml", "config/study.yaml", "config/study_small.yaml"]
)
def test_no_two_experiments_share_a_settings_dict(path):
    """A YAML alias (`train: *x`) loads as one dict shared by every experiment that names it, and Snakemake merges
    an overlay into it in place: `--configfile` editing one experiment would silently edit them all. Merge keys
    (`{<<: *x}`) make copies."""
    seen: dict[int, str] = {}

    def walk(node, where):  # dicts only: a list in an overlay replaces the old one, a dict is merged into it
        if isinstance(node, dict):
            assert id(node) not in seen, f"{path}: {where} is the same object as {seen[id(node)]}"
            seen[id(node)] = where
            for key, value in node.items():
                walk(value, f"{where}/{key}")

    walk(yaml.safe_load((ROOT / path).read_text()).get("experiments", {}), "experiments")


@pytest.mark.parametrize(
    "stage, key, hint",
    [
        ("train", "max_tokenz", "did you mean max_tokens?"),
        ("arch", "encoder_layer", "did you mean encoder_layers?"),
        ("decode", "lenpen_", "did you mean lenpen?"),
        ("score", "tokenise", "did you mean tokenize?"),
    ],
)
def test_a_typo_in_any_stage_is_named_with_a_did_you_mean(tmp_path, stage, key, hint):
    bad = tmp_path / "typo.yaml"
    bad.write_text(yaml.safe_dump({"experiments": {"demo.lwc": {stage: {key: 1}}}}))
    expected = f"config key experiments/demo.lwc/{stage} (or defaults/{stage}): unknown "
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "status",
            "--config",
            str(ROOT / "config.yaml"),
            "--config",
            str(ROOT / "config/demo.yaml"),
            "--config",
            str(bad),
        ],
        capture_output=True,
        text=True,
    )
    assert status.returncode == 1 and expected in status.stderr and hint in status.stderr


@pytest.mark.parametrize(
    "stage, key, value, expected",
    [
        ("train", "lr", "fast", "a number > 0"),
        ("arch", "dropout", "0.1", "a number ≥ 0 and < 1"),
        ("decode", "beam", -3, "an integer ≥ 1"),
        ("decode", "beam", 0, "an integer ≥ 1"),
        ("train", "max_tokens", "4k", "an integer ≥ 1 or null"),  # was a TypeError traceback from the budget check
    ],
)
def test_a_wrong_type_or_range_is_named_with_experiment_key_and_value(tmp_path, stage, key, value, expected):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"experiments": {"demo.lwc": {stage: {key: value}}}}))
    line = f"config key experiments/demo.lwc/{stage}/{key}: {value!r}; expected {expected}"
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "status",
            "--config",
            str(ROOT / "config.yaml"),
            "--config",
            str(ROOT / "config/demo.yaml"),
            "--config",
            str(bad),
        ],
        capture_output=True,
        text=True,
    )
    assert status.returncode == 1 and status.stderr.strip() == f"lwnmt status: error: {bad}: {line}"


# The Snakefile runs the same settings check as `lwnmt status` (the two tests above, one case per stage): one dry
# run for each kind of mistake shows that its message, not a traceback, is what a workflow run stops with.
@pytest.mark.parametrize(
    "settings, expected",
    [
        (
            {"train": {"max_tokenz": 1}},
            ["config key experiments/demo.lwc/train (or defaults/train): unknown ", "did you mean max_tokens?"],
        ),
        ({"decode": {"beam": -3}}, ["config key experiments/demo.lwc/decode/beam: -3; expected an integer ≥ 1"]),
    ],
)
def test_a_bad_setting_stops_the_dry_run_with_the_same_message(tmp_path, settings, expected):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"experiments": {"demo.lwc": settings}}))
    result = snakemake(tmp_path, "-n", "--configfile", str(ROOT / "config/demo.yaml"), str(bad), check=False)
    out = result.stdout + result.stderr
    assert result.returncode != 0 and all(part in out for part in expected), out[-2000:]


def test_a_bad_default_is_named_with_the_experiment_that_reads_it(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"defaults": {"train": {"label_smoothing": 1.5}}}))
    with pytest.raises(
        UserError,
        match=r"config key defaults/train \(experiment [^)]+\)/label_smoothing: 1\.5; "
        r"expected a number ≥ 0 and < 1",
    ):
        check_experiments(grid.load(ROOT / "config.yaml", ROOT / "config/demo.yaml", bad))


def test_status_says_why_rows_cannot_run():
    out = subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", "status", "--config", str(ROOT / "config.yaml")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "multi30k_deen" in out
    assert "blocked" in out and "nist_zhen" in out
    assert "needs licensed data the user must supply: set datasets/nist-zh-en/user_path" in out
    assert "quoted" in out and "lwc.t1.deen.lwc_small" in out


def test_only_the_licensed_task_waits_for_user_data():
    config = grid.load(ROOT / "config.yaml")
    runnable = set(grid.runnable_tasks(config))
    assert runnable == set(config["tasks"]) - {"nist_zhen"}
    assert not grid.task_status(config, "nist_zhen").runnable


def test_full_dry_run_prepares_every_task_and_nist_once_supplied(tmp_path):
    """fetch → extract → tokenize → assemble → BPE → binarize for every task of the full config; with a NIST
    user_path, its extra multi-reference test sets are decoded and scored against normalised references."""
    overlay = tmp_path / "nist.yaml"
    overlay.write_text(yaml.safe_dump({"datasets": {"nist-zh-en": {"user_path": str(tmp_path / "ldc")}}}))
    config = grid.load(ROOT / "config.yaml", overlay)
    assert "user_path " + str(tmp_path / "ldc") + ": no such directory" in grid.task_status(config, "nist_zhen").reason
    (tmp_path / "ldc").mkdir()
    assert "lacks train.zh" in grid.task_status(config, "nist_zhen").reason
    for entry_name, entry in config["datasets"]["nist-zh-en"]["files"].items():
        (tmp_path / "ldc" / entry.get("path", entry_name)).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "ldc" / entry.get("path", entry_name)).touch()
    out = snakemake(tmp_path, "-n", "-p", "--configfile", str(ROOT / "config.yaml"), str(overlay)).stdout
    for name, task in config["tasks"].items():
        kind = task.get("vocab", {}).get("kind", "joint")
        for split in task["splits"]:
            path = f"results/{name}/data/bin-{kind}/{split}.{task['src']}-{task['tgt']}.{task['tgt']}.tokens.npy"
            assert path in out, f"{name}: no job binarizes {split}"
    giga = config["datasets"]["wmt14-en-fr"]["archives"]["training-giga-fren.tar"]
    assert grid.download_path(giga, "training-giga-fren.tar") in out  # where its extract jobs download it
    assert "results/raw/wmt14-en-fr/giga-fren.release2.fixed.en.gz" in out  # an archive inside an archive
    for split in ("mt04", "mt05", "mt06", "mt08"):
        assert f"results/nist_zhen/mlrf.t3.dec_sa4/seed1/{split}.score.json" in out
    assert "results/nist_zhen/data/ref/mt04.zh-en.en" in out
    assert "results/wmt16_enro/data/ref/test.en-ro.ro" in out  # 13a BLEU: normalised, untokenized references


def _nist_sgm(kind: str, docs: list[list[str]], refs: int = 1) -> str:
    sets = [f'<{kind}set setid="x" srclang="zh" trglang="en">']
    for r in range(refs):
        for d, segments in enumerate(docs):
            sysid = f' sysid="ref{r + 1}"' if kind == "ref" else ""
            sets.append(f'<DOC docid="d{d}"{sysid}>')
            sets += [
                f"<seg id={i + 1}>{text if kind == 'src' else f'{text} r{r + 1}'}</seg>"
                for i, text in enumerate(segments)
            ]
            sets.append("</DOC>")
    return "\n".join(sets + [f"</{kind}set>"]) + "\n"


def test_nist_from_a_user_directory_is_scored_on_all_four_references(tmp_path, mirror):
    """The licensed NIST task end to end on a tiny stand-in LDC directory: SGML sets read, Chinese segmented with
    jieba, word-level vocabularies (no BPE), every MT0x set decoded and scored against its 4 references."""
    import gzip

    english = gzip.open(mirror / "multi30k/train.en.gz", "rt", encoding="utf-8").read().splitlines()[:300]
    chinese = [
        "".join("我们在" if i % 2 else "中国" for i in range(len(line.split()) // 2)) + " " + line.lower()
        for line in english
    ]
    ldc = tmp_path / "ldc"
    ldc.mkdir()
    (ldc / "train.zh").write_text("\n".join(chinese) + "\n", encoding="utf-8")
    (ldc / "train.en").write_text("\n".join(english) + "\n", encoding="utf-8")
    for k, name in enumerate(("mt04", "mt05", "mt06", "mt08")):
        docs = [chinese[k * 10 + d * 5 : k * 10 + d * 5 + 5] for d in range(2)]
        refs = [english[k * 10 + d * 5 : k * 10 + d * 5 + 5] for d in range(2)]
        (ldc / name).mkdir()
        (ldc / name / "src.sgm").write_text(_nist_sgm("src", docs), encoding="utf-8")
        (ldc / name / "ref.sgm").write_text(_nist_sgm("ref", refs, refs=4), encoding="utf-8")
    overlay = tmp_path / "nist.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "datasets": {"nist-zh-en": {"user_path": str(ldc)}},
                "experiments": {
                    "ci.nist": {
                        "task": "nist_zhen",
                        "model": "transformer",
                        "vocab": "separate",
                        "arch": {"d_model": 32, "d_ff": 64, "heads": 4, "encoder_layers": 1, "decoder_layers": 1},
                        "train": {"max_tokens": 1000, "lr": 0.003, "warmup_updates": 10, "max_epoch": 1, "patience": 0},
                        "decode": {"beam": 2, "max_len_a": 1.0, "max_len_b": 5},
                        "score": {"tokenize": "13a", "lowercase": True},
                        "average": None,
                    }
                },
            }
        )
    )
    run = tmp_path / "results/nist_zhen/ci.nist/seed1"
    snakemake(
        tmp_path,
        f"{run.relative_to(tmp_path)}/mt04.score.json",
        "--configfile",
        str(ROOT / "config.yaml"),
        str(overlay),
        mirror=mirror,
    )
    score = json.loads((run / "mt04.score.json").read_text())
    assert score["references"] == 4 and "nrefs:4" in score["signature"] and "case:lc" in score["signature"]
    refs = (tmp_path / "results/nist_zhen/data/ref/mt04.zh-en.en").read_text().splitlines()
    assert len(refs) == 40 and refs[0].endswith("r1") and refs[10].endswith("r2")  # 4 refs × 10 segments
    tokenized = (tmp_path / "results/nist_zhen/data/text/mt04.zh-en.zh").read_text(encoding="utf-8").splitlines()
    assert len(tokenized) == 10 and "我们 在" in "\n".join(tokenized)  # jieba split the Chinese words
    assert not (tmp_path / "results/nist_zhen/data/bpe/code").exists()  # word-level: no BPE


def test_a_state_like_cancelled_by_uid_reaches_the_slurm_plugin_as_cancelled():
    """The status-query wrapper against the installed plugin (the cluster test scancels a real job)."""
    import asyncio
    import logging

    plugin = pytest.importorskip("snakemake_executor_plugin_slurm")
    from layerwise_nmt.snakemake_glue.slurm import patch_status_query

    assert patch_status_query() and patch_status_query()  # a second call does not wrap twice
    assert plugin.query_job_status.lwnmt_normalised
    fake_sacct = "printf '7|CANCELLED by 0\\n8|RUNNING\\n9|COMPLETED\\n'"
    states, _ = asyncio.run(plugin.query_job_status(fake_sacct, logging.getLogger("test")))
    assert states == {"7": "CANCELLED", "8": "RUNNING", "9": "COMPLETED"}


def test_a_slurm_plugin_without_the_patched_query_is_said(monkeypatch):
    """A newer plugin than the one tested, without `query_job_status`: the start message says the workaround is off
    instead of leaving it off in silence."""
    plugin = pytest.importorskip("snakemake_executor_plugin_slurm")
    from layerwise_nmt.snakemake_glue import snakefile
    from layerwise_nmt.snakemake_glue.slurm import patch_status_query

    monkeypatch.delattr(plugin, "query_job_status")
    assert patch_status_query() is False
    warnings = []
    logger = type("Logger", (), {"warning": lambda self, line: warnings.append(line), "info": lambda *a: None})()
    config = grid.load(ROOT / "config.yaml", ROOT / "config/ci.yaml")
    snakefile.announce(config, logger)
    assert any("no query_job_status to patch" in line for line in warnings)


def test_a_repeated_dry_run_imports_no_torch(tmp_path):
    """`snakemake -n` again on an unchanged config (parameter counts and the settings check cached in .snakemake/)
    never imports torch, which was most of its time: a torch that cannot be imported is never noticed."""
    snakemake(tmp_path, "-n", "--quiet")
    poison = tmp_path / "poison" / "torch"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text("raise ImportError('torch imported by a repeated dry run')\n")
    env_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(poison.parent), env_path]))
    try:
        result = snakemake(tmp_path, "-n", "--quiet", check=False)
    finally:
        if env_path is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = env_path
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_settings_check_is_cached_only_for_a_config_that_passed(tmp_path):
    config = grid.load(ROOT / "config.yaml", ROOT / "config/demo.yaml")
    cache = tmp_path / "checked.json"
    check_experiments(config, cache=cache)
    assert len(json.loads(cache.read_text())) == 1
    config["experiments"]["demo.lwc"]["train"]["max_tokenz"] = 512  # edited after the run that passed
    with pytest.raises(UserError, match="max_tokenz"):
        check_experiments(config, cache=cache)
    assert len(json.loads(cache.read_text())) == 1
