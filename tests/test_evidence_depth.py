"""The study's second depth (config/study_cpu6.yaml) through report/evidence.py: held-out translations asked for,
copied and counted; one seed's runs on one kind of machine; a half-written run named, not tabulated; and the table,
sentences and figure that set each method's Δ at two depths side by side."""

import gzip
import json
import shutil

import pytest

from conftest import ROOT
from layerwise_nmt import UserError
from layerwise_nmt.grid import heldout_sets, load
from layerwise_nmt.report import depth, evidence, evidence_page
from test_evidence import CONTINUE, CURVE, REFS, TASK, degrade, fake_run

TABLE = "study_cpu6/T1"
SETS = ("test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")


@pytest.fixture
def heldout(tmp_path, monkeypatch):
    folder = tmp_path / "heldout"
    folder.mkdir()
    for name in SETS:
        with gzip.open(folder / f"multi30k_{name}.de.gz", "wt") as f:
            f.write("ein hund .\n")
    monkeypatch.setenv("LWNMT_HELDOUT_DIR", str(folder))
    return folder


@pytest.fixture
def config():
    return load(ROOT / "config.yaml", ROOT / "config" / "study_cpu6.yaml")


RUNS = {
    "transformer": CURVE,
    "lwc": CURVE,
    "mlrf_dec_sa": CURVE,
    "transformer_longer": CONTINUE,
    "gca_full": CONTINUE,
    "dou_deep": CONTINUE,
}


def fake_seed(results, seed, device="cpu: Test CPU", heldout=True, bleu=None):
    names = list(RUNS) + (["transformer_dropout3", "transformer_2x"] if seed == 1 else [])
    for name in names:
        run = fake_run(
            results,
            f"study_cpu6.{name}",
            seed,
            degrade(REFS, 4),
            RUNS.get(name, CURVE),
            (bleu or {}).get(name, 40.0 + seed),
        )
        training = json.loads((run / "checkpoints/training.json").read_text())
        training["precision"]["device"] = device
        (run / "checkpoints/training.json").write_text(json.dumps(training))
        for s in SETS if heldout else ():
            (run / f"heldout.{s}.txt").write_text("a dog .\n")


def test_every_run_translates_the_held_out_sets_where_a_folder_holds_them(config, heldout, monkeypatch):
    assert set(heldout_sets(config, TASK)) == set(SETS)
    two = evidence.targets(config, TABLE, 2)
    assert len(two) == 6 * 4
    assert f"results/{TASK}/study_cpu6.gca_full/seed2/heldout.test_2017_mscoco.txt" in two
    assert evidence.heldout_note(config, TABLE) is None
    monkeypatch.delenv("LWNMT_HELDOUT_DIR")
    assert len(evidence.targets(config, TABLE, 2)) == 6
    assert "names held-out sets, but no folder holds them" in evidence.heldout_note(config, TABLE)
    monkeypatch.setenv("LWNMT_HELDOUT_DIR", str(heldout / "nowhere"))
    with pytest.raises(UserError, match="heldout_dir .*nowhere' is not a directory"):
        evidence.targets(config, TABLE, 2)
    monkeypatch.setenv("LWNMT_HELDOUT_DIR", str(heldout))
    (heldout / "multi30k_test_2018_flickr.de.gz").unlink()
    with pytest.raises(UserError, match="tasks/multi30k_deen/heldout_sets/test_2018_flickr: .* is not a file"):
        evidence.targets(config, TABLE, 2)


def test_held_out_hypotheses_are_copied_beside_test_txt_and_counted(config, heldout, tmp_path):
    results, out = tmp_path / "run", tmp_path / "docs"
    fake_seed(results, 2, heldout=False)
    with pytest.raises(UserError, match="heldout.test_2017_flickr.txt, heldout.test_2017_mscoco.txt"):
        evidence.copy(config, TABLE, 2, out, results)
    shutil.rmtree(results)
    fake_seed(results, 2)
    evidence.copy(config, TABLE, 2, out, results)
    files = {p.name for p in (out / "study_cpu6.lwc" / "seed2").iterdir()}
    assert {f"heldout.{s}.txt" for s in SETS} <= files and "test.txt" in files
    summary = evidence.summarise(config, TABLE, out, None)
    assert all(r["heldout"] == sorted(SETS) for r in summary["runs"])
    page = evidence_page.write(summary, out).read_text()
    assert "| held-out sets translated |" in page and all(
        line.endswith("| 3 | — |") for line in page.splitlines() if line.startswith("| `study_cpu6.")
    )


@pytest.mark.parametrize(
    "device, kind",
    [("cpu: AMD EPYC (AVX512)", "cpu"), ("NVIDIA H200", "cuda"), ("cuda: NVIDIA H100 80GB HBM3", "cuda"), ("", None)],
)
def test_the_kind_of_machine_a_run_trained_on_is_read_from_its_device(device, kind):
    assert evidence.device_kind({"precision": {"device": device}}) == kind


def test_one_seed_on_one_kind_of_machine(config, heldout, tmp_path, monkeypatch):
    results, out = tmp_path / "run", tmp_path / "docs"
    fake_seed(results, 2, device="NVIDIA H100 80GB HBM3")  # a CUDA device, as precision.device_name writes it
    evidence.copy(config, TABLE, 2, out, results)
    page = evidence_page.write(evidence.summarise(config, TABLE, out, None), out).read_text()
    assert "| CPU or GPU |" in page and "| NVIDIA H100 80GB HBM3 |" in page
    assert "seed 2, 6 of 6 runs, 1.0 h on GPU" in page
    # the seed's baseline trained on a GPU: its warm starts may not continue on a CPU
    monkeypatch.setattr(evidence, "this_machine_kind", lambda: "cpu")
    with pytest.raises(
        UserError,
        match=r"seed 2: this machine trained on cpu, study_cpu6.transformer \(in .*\) on "
        r"cuda; every run of one seed trains on one kind of machine .* run seed 2 on "
        r"cuda",
    ):
        evidence.targets(config, TABLE, 2, out)
    assert evidence.targets(config, TABLE, 3, out)  # another seed is free to run here
    monkeypatch.setattr(evidence, "this_machine_kind", lambda: "cuda")
    assert evidence.targets(config, TABLE, 2, out)
    # a CPU run copied into a seed whose runs trained on a GPU is refused, and nothing of it copied
    other = tmp_path / "cpu-run"
    fake_seed(other, 2)
    shutil.rmtree(out / "study_cpu6.dou_deep")
    with pytest.raises(UserError, match="seed 2: .* trained on cpu, .* on cuda"):
        evidence.copy(config, TABLE, 2, out, other)
    assert not (out / "study_cpu6.dou_deep").exists()


def test_a_half_written_run_is_named_not_tabulated(config, heldout, tmp_path):
    results, out = tmp_path / "run", tmp_path / "docs"
    fake_seed(results, 2)
    evidence.copy(config, TABLE, 2, out, results)
    (out / "study_cpu6.mlrf_dec_sa" / "seed2" / "metrics.csv").unlink()
    summary = evidence.summarise(config, TABLE, out, None)
    assert summary["incomplete"] == [f"{out}/study_cpu6.mlrf_dec_sa/seed2: metrics.csv missing"]
    assert not [r for r in summary["runs"] if r["experiment"] == "study_cpu6.mlrf_dec_sa"]
    page = evidence_page.write(summary, out).read_text()
    assert "Half-written runs, not tabulated" in page and "study_cpu6.mlrf_dec_sa/seed2: metrics.csv missing" in page


def study(folder, depth, deltas, base, file="summary.json", prefix="", departures=()):
    """A summary.json as `collect` writes it: per method its per-seed Δs against its control."""
    rows = [
        {
            "label": f"Transformer baseline ({depth}, d=256)",
            "experiment": f"s{depth}.transformer",
            "n": len(base),
            "mean": sum(base) / len(base),
            "sd": 0.3,
            "warm_start": None,
        }
    ]
    for key, label, values in deltas:
        rows.append(
            {
                "label": f"{label} (some detail)",
                "experiment": f"s{depth}.{prefix}{key}",
                "n": len(values),
                "warm_start": None,
                "departures": list(departures),
                "compare": {
                    "control": f"s{depth}.transformer",
                    "seeds": list(range(1, len(values) + 1)),
                    "deltas": values,
                    "delta": sum(values) / len(values),
                    "bootstrap_p": [0.01] * len(values),
                    "t_test_p": 0.2 if len(values) > 1 else None,
                    "claim": "held" if min(values) > 0 else "not held",
                    "same_model": False,
                },
            }
        )
    rows.append(
        {
            "label": "Baseline at twice the budget",
            "experiment": f"s{depth}.transformer_2x",
            "n": 1,
            "warm_start": None,
            "compare": {
                "control": f"s{depth}.transformer",
                "seeds": [1],
                "deltas": [-1.0],
                "delta": -1.0,
                "same_model": True,
                "claim": "not held",
            },
        }
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / file).write_text(json.dumps({"rows": rows}))


def test_each_method_side_by_side_at_both_depths_with_a_sentence_and_a_figure(tmp_path):
    study(
        tmp_path / "cpu",
        "3+3",
        [
            ("lwc", "LWC, He et al. 2018", [-1.5, -1.4, -1.6]),
            ("gca_full", "GCA full model", [-0.2, 0.3, -0.4]),
            ("dou_deep", "Dou et al.", [0.1, 0.2, 0.3]),
        ],
        [41.5, 41.7, 41.8],
    )
    study(
        tmp_path / "cpu6",
        "6+6",
        [
            ("lwc", "LWC, He et al. 2018", [1.0, 1.2, 1.1]),
            ("gca_full", "GCA full model", [0.3, -0.5, 0.1]),
            ("dou_deep", "Dou et al.", [0.2]),
        ],
        [43.0, 43.5, 43.1],
    )
    summary = depth.depth_summary([("3+3", tmp_path / "cpu"), ("6+6", tmp_path / "cpu6")])
    assert list(summary["methods"]) == ["lwc/earlier", "gca_full/earlier", "dou_deep/earlier"]  # the budget's check
    # is no method
    block = depth.depth_block(summary)
    assert (
        "| LWC, He et al. 2018 | -1.50 ± 0.10 (n=3) | 0.010, 0.010, 0.010 | 0.200 | not held | +1.10 ± 0.10 (n=3) |"
    ) in block
    assert "**What depth buys the baseline**: 41.67 at 3+3 → 43.20 at 6+6 (+1.53 BLEU; 3 seeds and 3 seeds)." in block
    assert (
        "**LWC, He et al. 2018**: its gain grows with depth, as its paper says (-1.50 at 3+3 (3 seeds) → +1.10 at "
        "6+6 (3 seeds); Welch's t-test over the seeds' Δs p 0.000); at 6+6 the claim is held." in block
    )
    assert (
        "**GCA full model**: its Δ rises with depth (-0.10 at 3+3 (3 seeds) → -0.03 at 6+6 (3 seeds)) but not "
        "beyond what the seeds' spread allows" in block
    )
    assert (
        "**Dou et al.**: its Δ does not grow with depth (+0.20 at 3+3 (3 seeds) → +0.20 at 6+6 (1 seed); too few "
        "seeds to test the change)" in block
    )
    figure = depth.depth_figure(summary, tmp_path / "depth.png")
    assert figure.stat().st_size > 10_000


def test_a_depth_not_collected_yet_is_said_so(tmp_path):
    study(tmp_path / "cpu", "3+3", [("lwc", "LWC", [-1.5, -1.4])], [41.5, 41.7])
    summary = depth.depth_summary([("3+3", tmp_path / "cpu"), ("6+6", tmp_path / "cpu6")])
    block = depth.depth_block(summary)
    assert "| LWC | -1.45 ± 0.07 (n=2) |" in block and "— (not run yet)" in block
    assert f"Not collected yet: 6+6 (no summary.json in {tmp_path / 'cpu6'})" in block
    assert "**LWC**: run at 3+3 only (the claim there: not held); no trend with depth yet." in block


def test_both_recipes_side_by_side_and_the_earlier_ones_departures_named(tmp_path):
    norm = {"key": "arch/norm", "ours": "post", "paper": "pre"}
    schedule = {"key": "train/lr_scheduler", "ours": "polynomial_decay", "paper": "noam"}
    for folder, d, delta in ((tmp_path / "cpu", "3+3", -1.5), (tmp_path / "cpu6", "6+6", -3.4)):
        study(folder, d, [("lwc", "LWC", [delta, delta - 0.1, delta + 0.1])], [41.5, 41.7], departures=[norm, schedule])
    study(tmp_path / "cpu6", "6+6", [("lwc", "LWC", [0.4])], [41.5], "summary.T2.json", "paper.", [schedule])
    summary = depth.depth_summary([("3+3", tmp_path / "cpu"), ("6+6", tmp_path / "cpu6")])
    assert list(summary["methods"]) == ["lwc/earlier", "lwc/paper"]
    block = depth.depth_block(summary)
    rows = [line for line in block.splitlines() if line.startswith("| LWC")]
    assert rows[0].startswith("| LWC, earlier recipe | -1.50") and "| -3.40" in rows[0]
    assert rows[1].startswith("| LWC, paper's protocol | — (not run yet) |") and "| +0.40 (n=1) |" in rows[1]
    # the departure the paper-protocol row keeps (the schedule) is not the earlier recipe's own
    assert "**LWC, earlier recipe** (this recipe departs from its paper: norm post (paper: pre)): its Δ" in block
    assert "**LWC, paper's protocol**: run at 6+6 only (the claim there: held); no trend" in block


def test_held_out_translations_made_elsewhere_are_copied_without_the_folder_here(
    config, heldout, tmp_path, monkeypatch
):
    """A GPU node translated the held-out sets; the checkout that collects them has no held-out folder."""
    results, out = tmp_path / "run", tmp_path / "docs"
    fake_seed(results, 3)
    monkeypatch.delenv("LWNMT_HELDOUT_DIR")
    evidence.copy(config, TABLE, 3, out, results)
    assert {p.name for p in (out / "study_cpu6.transformer" / "seed3").glob("heldout.*.txt")} == {
        f"heldout.{s}.txt" for s in SETS
    }


def test_the_gpu_shards_of_the_second_depth_keep_each_seed_whole_with_its_held_out_sets(heldout):
    """Models cannot travel back from a GPU node: a seed's warm starts go with their baseline, in one shard."""
    import subprocess

    listed = subprocess.run(["bash", str(ROOT / "scripts/study_gpu.sh"), "shards"], capture_output=True, text=True)
    assert listed.stdout.split()[-7:] == [f"depth6-seed{k}" for k in (1, 2, 3, 4)] + [
        f"paper6-seed{k}" for k in (1, 2, 3)
    ]
    import os
    import sys

    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}  # its python3

    def shard(function: str, name: str) -> list[str]:
        code = (
            f"source <(sed -n '/^shard_targets()/,/^}}/p;/^depth6_seeds()/,/^}}/p;/^depth6_table()/,/^}}/p;"
            f"/^shard_jobs()/,/^}}/p' "
            f"{ROOT}/scripts/study_gpu.sh); ROOT={ROOT}; TASK=multi30k_deen; {function} {name}"
        )
        return subprocess.run(
            ["bash", "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env
        ).stdout.split()

    paper = {t.split("/")[2] for t in shard("shard_targets", "paper6-seed1") if t.endswith("test.score.json")}
    assert paper == {
        "study_cpu6.transformer",  # GCA's parent and MLRF's control, trained again in the shard
        "study_cpu6.mlrf_dec_sa",  # MLRF at its own lr, beside the baseline at that lr
        *(
            f"study_cpu6.paper.{e}"
            for e in (
                "transformer_prenorm",
                "lwc",
                "mlrf_dec_sa",
                "transformer_lr1e3",
                "gca_full",
                "transformer_longer",
            )
        ),
    }
    assert shard("shard_jobs", "paper6-seed1-2") == ["6"]
    out = shard("shard_targets", "depth6-seed2")
    runs = {t.split("/")[2] for t in out if t.endswith("test.score.json")}
    assert runs == {f"study_cpu6.{e}" for e in RUNS} and all("/seed2/" in t for t in out)
    assert len([t for t in out if "/heldout." in t]) == 6 * 3
    # seed 4 holds the rows seed 1's CPU did not finish (LWC, the warm starts) with their parent, and no MLRF
    runs = {t.split("/")[2] for t in shard("shard_targets", "depth6-seed4") if t.endswith("test.score.json")}
    assert runs == {f"study_cpu6.{e}" for e in RUNS} - {"study_cpu6.mlrf_dec_sa"}
    # several seeds in one command: each whole, three trainings at once per seed
    both = shard("shard_targets", "depth6-seed2-3")
    assert set(both) == set(out) | set(shard("shard_targets", "depth6-seed3"))
    assert shard("shard_jobs", "depth6-seed2-3") == ["6"] and shard("shard_jobs", "depth6-seed2-3-4") == ["9"]


def test_a_recipe_check_is_named_by_what_it_changes_not_as_training_longer(config):
    """The dropout check is the same model as the baseline, and the page called it 'the same model trained longer'."""
    from layerwise_nmt.report.evidence_page import comparison_cells, plain_words

    assert evidence.changed_settings(config, "study_cpu6.transformer_dropout3", "study_cpu6.transformer") == [
        "dropout 0.3"
    ]
    assert evidence.changed_settings(config, "study_cpu6.transformer_2x", "study_cpu6.transformer") == []
    check = {"same_model": True, "changed": ["dropout 0.3"], "delta": -23.52, "seeds": [1], "bootstrap_p": [0.001]}
    check |= {"control": "study_cpu6.transformer", "t_test_p": None, "claim": "not held"}
    assert comparison_cells({"compare": check})[3] == "— (a recipe check: dropout 0.3)"
    assert plain_words(check) == "the recipe's own settings do better here (significant by the paired bootstrap)"
    assert plain_words({**check, "delta": 0.4, "bootstrap_p": [0.3]}) == (
        "dropout 0.3 does better here (not significant by the paired bootstrap); the recipe chose by validation loss"
    )
    assert comparison_cells({"compare": {**check, "changed": []}})[3] == "— (the same model trained longer)"


def test_copy_without_a_seed_copies_every_seeds_finished_runs_from_a_gpu_nodes_folder(tmp_path, heldout):
    """What comes back from a GPU node holds several seeds (`depth6-seed2-3`): one copy takes each seed's finished
    runs, and a seed the folder does not hold is left as it is."""
    from layerwise_nmt.cli import main

    results, out = tmp_path / "run", tmp_path / "docs"
    for seed in (2, 3):
        fake_seed(results, seed, device="NVIDIA H200")
    shutil.rmtree(results / "results" / TASK / "study_cpu6.dou_deep" / "seed3")  # cut short by the command's end
    args = ["evidence", "copy", "--config", str(ROOT / "config.yaml"), "--config", str(ROOT / "config/study_cpu6.yaml")]
    main([*args, "--table", TABLE, "--results", str(results), "--out", str(out), "--partial"])
    copied = {(p.parent.name, p.name) for p in out.glob("*/seed*")}
    assert copied == {(f"study_cpu6.{e}", f"seed{s}") for e in RUNS for s in (2, 3)} - {
        ("study_cpu6.dou_deep", "seed3")
    }


def test_the_readme_brief_gives_each_method_both_recipes_at_each_depth(tmp_path):
    norm = {"key": "arch/norm", "ours": "post", "paper": "pre"}
    for folder, d, delta in ((tmp_path / "cpu", "3+3", -1.5), (tmp_path / "cpu6", "6+6", -3.4)):
        study(
            folder,
            d,
            [("lwc", "LWC", [delta, delta - 0.1, delta + 0.1]), ("dou_deep", "Dou", [0.2, 0.1, 0.3])],
            [41.5, 41.7],
            departures=[norm],
        )
    study(tmp_path / "cpu6", "6+6", [("lwc", "LWC", [0.4])], [41.5], "summary.T2.json", "paper.")
    brief = depth.brief_block(depth.depth_summary([("3+3", tmp_path / "cpu"), ("6+6", tmp_path / "cpu6")]))
    lines = brief.splitlines()
    assert lines[0] == (
        "| method | 3+3, earlier recipe | 3+3, paper's protocol | 6+6, earlier recipe | 6+6, paper's protocol |"
    )
    assert "| LWC | -1.50 (n=3) | — (not run yet) | -3.40 (n=3) | +0.40 (n=1) |" in lines
    # a method whose earlier row keeps its paper's protocol has one row for both
    assert "| Dou | +0.20 (n=3) | (the same row) | +0.20 (n=3) | (the same row) |" in lines
    assert "| Transformer baseline's BLEU | 41.60 (n=2) |  | 41.60 (n=2) |  |" in lines
    assert "- LWC, earlier recipe: departs from its paper in norm post (paper: pre)." in brief
