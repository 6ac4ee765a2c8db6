"""report/evidence.py on synthetic runs of config/study_cpu.yaml's table: what one seed's targets are, what is copied
into the repository (text only), and the page written from those files alone: mean ± sd with n, each comparison's
bootstrap and verdict, the validation loss's fall over the last quarter, the runs not done yet."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from layerwise_nmt import UserError
from layerwise_nmt.grid import load
from layerwise_nmt.report import evidence, evidence_page

TABLE = "study_cpu/T1"
TASK = "multi30k_deen"


@pytest.fixture(scope="module")
def config():
    return load(ROOT / "config.yaml", ROOT / "config" / "study_cpu.yaml")


REFS = [f"a small dog number {i} runs across the green field ." for i in range(60)]


def degrade(lines, every):
    """Every `every`-th sentence loses its second half: a worse system by a margin the bootstrap can see."""
    return [" ".join(s.split()[:3]) if i % every == 0 else s for i, s in enumerate(lines)]


def fake_run(results, name, seed, hyps, curve, bleu, minutes=10.0):
    run = results / "results" / TASK / name / f"seed{seed}"
    (run / "checkpoints").mkdir(parents=True)
    (run / "test.txt").write_text("\n".join(hyps) + "\n")
    (run / "test.score.json").write_text(json.dumps({"bleu": bleu, "chrf": bleu + 20}))
    (run / "checkpoints" / "training.json").write_text(
        json.dumps(
            {
                "updates": curve[-1][0],
                "target_tokens": 600_000,
                "minutes": minutes,
                "precision": {"amp": "bf16", "device": "cpu: Test CPU"},
            }
        )
    )
    with open(run / "checkpoints" / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["epoch", "update", "valid_loss"])
        w.writeheader()
        w.writerows({"epoch": 1, "update": u, "valid_loss": loss} for u, loss in curve)
    (run / "train.benchmark.tsv").write_text("s\th:m:s\n720.5\t0:12:00\n")
    (run / "checkpoints" / "checkpoint_last.pt").write_bytes(b"not text")
    return run


CURVE = [(1000, 5.0), (2000, 4.5), (3000, 4.2), (3250, 4.1), (4000, 4.0)]
CONTINUE = [(500, 3.98), (1000, 3.96), (1500, 3.95), (2000, 3.94)]


def fake_seed(results, seed, lwc_every=2, gca_every=20, gca_hyps=None):
    fake_run(results, "study_cpu.transformer", seed, degrade(REFS, 4), CURVE, 40.0 + seed)
    fake_run(results, "study_cpu.lwc", seed, degrade(REFS, lwc_every), CURVE, 30.0 + seed)
    fake_run(results, "study_cpu.mlrf_dec_sa", seed, degrade(REFS, 4), CURVE, 40.0 + seed)
    fake_run(results, "study_cpu.transformer_longer", seed, degrade(REFS, 4), CONTINUE, 41.0 + seed)
    fake_run(results, "study_cpu.gca_full", seed, gca_hyps or degrade(REFS, gca_every), CONTINUE, 45.0 + seed)
    fake_run(results, "study_cpu.dou_deep", seed, degrade(REFS, 4), CONTINUE, 41.0 + seed)
    if seed == 1:
        fake_run(results, "study_cpu.transformer_2x", seed, degrade(REFS, 4), CURVE, 41.5)


def test_one_seed_is_six_runs_and_seed_one_also_the_budget_check(config):
    one = evidence.targets(config, TABLE, 1)
    assert len(one) == 7 and f"results/{TASK}/study_cpu.transformer_2x/seed1/test.score.json" in one
    two = evidence.targets(config, TABLE, 2)
    assert len(two) == 6 and all("/seed2/" in t for t in two)
    with pytest.raises(UserError, match="seed 4: no run of table study_cpu/T1 uses it"):
        evidence.targets(config, TABLE, 4)


def test_copy_takes_text_only_and_refuses_an_unfinished_run(config, tmp_path, caplog):
    results, out = tmp_path / "run", tmp_path / "docs"
    fake_seed(results, 1)
    copied = evidence.copy(config, TABLE, 1, out, results)
    assert len(copied) == 7
    files = {p.name for p in (out / "study_cpu.lwc" / "seed1").iterdir()}
    assert files == {
        "test.score.json",
        "test.txt",
        "training.json",
        "metrics.csv",
        "train.benchmark.tsv",
        "run.json",
        "experiment.json",
    }
    assert not list(out.rglob("*.pt"))
    about = json.loads((out / "study_cpu.lwc" / "seed1" / "run.json").read_text())
    assert about["seed"] == 1 and about["cpu"]
    trained = json.loads((out / "study_cpu.lwc" / "seed1" / "experiment.json").read_text())
    assert trained["model"] == "lwc" and trained["arch"]["layers"] == 7 and trained["train"]["seed"] == 1
    assert trained["arch"]["norm"] == "post" and trained["scaled_from"] == "lwc.t1.deen.lwc_small"

    (results / "results" / TASK / "study_cpu.gca_full" / "seed1" / "test.txt").unlink()
    with pytest.raises(UserError, match=r"study_cpu.gca_full/seed1: test.txt missing"):
        evidence.copy(config, TABLE, 1, tmp_path / "again", results)
    assert not (tmp_path / "again" / "study_cpu.gca_full").exists()
    partial = evidence.copy(config, TABLE, 1, tmp_path / "again", results, partial=True)
    assert len(partial) == 6 and not (tmp_path / "again" / "study_cpu.gca_full").exists()
    assert "study_cpu.gca_full/seed1: not finished (test.txt missing), left out" in caplog.text


def test_the_page_says_mean_sd_n_verdicts_and_what_is_missing(config, tmp_path, monkeypatch):
    results, out = tmp_path / "run", tmp_path / "docs"
    monkeypatch.setattr(
        evidence,
        "machine",
        lambda: {"cpu": "Test CPU", "features": ["avx2", "avx512f", "avx512_bf16", "amx_bf16"], "python": "3.11.7"},
    )
    for seed in (1, 2):
        fake_seed(results, seed)
        evidence.copy(config, TABLE, seed, out, results)
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(REFS) + "\n")
    summary = evidence.summarise(config, TABLE, out, ref)
    rows = {r["experiment"]: r for r in summary["rows"]}

    base = rows["study_cpu.transformer"]
    assert base["n"] == 2 and base["mean"] == pytest.approx(41.5) and base["sd"] == pytest.approx(0.7071, abs=1e-3)
    assert base["planned_seeds"] == [1, 2, 3]
    # (4.1 - 4.0) / 4.1: the validation at 3/4 of 4,000 updates is the one at 3,250 (none at exactly 3,000 + 1/4)
    assert base["last_quarter_fall_pct"] == pytest.approx(100 * (4.2 - 4.0) / 4.2)

    lwc = rows["study_cpu.lwc"]["compare"]
    assert lwc["control"] == "study_cpu.transformer" and lwc["delta"] == pytest.approx(-10.0)
    assert lwc["claim"] == "not held" and len(lwc["bootstrap_p"]) == 2
    gca = rows["study_cpu.gca_full"]["compare"]
    assert gca["control"] == "study_cpu.transformer_longer" and gca["delta"] == pytest.approx(4.0)
    assert all(p < 0.05 for p in gca["bootstrap_p"]) and gca["claim"] == "held"
    dou = rows["study_cpu.dou_deep"]["compare"]
    assert dou["delta"] == pytest.approx(0.0) and dou["claim"] == "not held"
    twice = rows["study_cpu.transformer_2x"]
    assert twice["n"] == 1 and twice["compare"]["seeds"] == [1] and twice["compare"]["same_model"]

    page = evidence_page.write(summary, out, "make study-cpu-collect", "make study-cpu SEED=<k>").read_text()
    assert "| Transformer baseline (3+3, d=256) | 41.50 ± 0.71 (n=2) |" in page
    assert "Not run yet: 6 run(s), seed(s) 3 (`make study-cpu SEED=<k>`" in page
    assert "— (the same model trained longer)" in page and "| held |" in page and "| not held |" in page
    assert (out / "curves.png").stat().st_size > 10_000
    # the CPU with what decides its bf16 speed (a bare model name says nothing: "Intel(R) Xeon(R) Processor")
    assert "| bf16 | Test CPU (AVX512_BF16, AMX) |" in page
    # a resumed run's benchmark times only its last job: the column says so, and the page explains it
    assert "| last job's wall, min |" in page and "resumed" in page
    # what one seed costs, for whoever runs the next: 10 minutes per fake run
    assert (
        "Training per seed, summed over its runs: seed 1, 7 of 7 runs, 1.2 h on CPU; seed 2, 6 of 6 runs, "
        "1.0 h on CPU; seed 3, 0 of 6 runs."
    ) in page
    assert json.loads((out / "summary.json").read_text())["table"] == TABLE

    block = evidence_page.readme_block(out)
    assert "-10.00 BLEU against `study_cpu.transformer` over 2 seed(s): worse on every seed, significantly" in block
    assert (
        "+4.00 BLEU against `study_cpu.transformer_longer` over 2 seed(s): better on every seed, significantly" in block
    )


def test_an_inconclusive_gain_and_a_missing_reference(config, tmp_path):
    results, out = tmp_path / "run", tmp_path / "docs"
    slightly_better = degrade(REFS, 4)
    slightly_better[4] = REFS[4]  # one sentence of 60 better than its control's: a gain the bootstrap cannot trust
    fake_seed(results, 1, gca_hyps=slightly_better)
    evidence.copy(config, TABLE, 1, out, results)
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(REFS) + "\n")
    gca = {r["experiment"]: r for r in evidence.summarise(config, TABLE, out, ref)["rows"]}["study_cpu.gca_full"]
    assert gca["compare"]["claim"] == "inconclusive" and gca["compare"]["t_test_p"] is None
    with pytest.raises(UserError, match="nowhere.txt: no such reference file"):
        evidence.summarise(config, TABLE, out, tmp_path / "nowhere.txt")


def test_the_cli_lists_one_seeds_targets_for_snakemake():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "evidence",
            "targets",
            "--config",
            str(ROOT / "config.yaml"),
            "--config",
            str(ROOT / "config" / "study_cpu.yaml"),
            "--table",
            TABLE,
            "--seed",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        f"results/{TASK}/study_cpu.{n}/seed2/test.score.json"
        for n in ("transformer", "lwc", "mlrf_dec_sa", "gca_full", "transformer_longer", "dou_deep")
    ]


@pytest.mark.system
def test_make_study_cpu_gives_snakemake_its_targets_as_targets(tmp_path):
    """`--set-threads` takes several values, so targets after it were read as thread settings and Snakemake stopped
    before training. Run with a snakemake that parses its arguments with Snakemake's own parser and reports them."""
    for name in ("config.yaml", "config", "Makefile"):
        (tmp_path / name).symlink_to(ROOT / name)
    bin_dir = tmp_path / ".venv" / "bin"  # the Makefile puts the checkout's .venv/bin first on PATH
    bin_dir.mkdir(parents=True)
    (tmp_path / ".venv" / ".installed").touch()
    seen = tmp_path / "snakemake-args.json"
    fake = bin_dir / "snakemake"
    fake.write_text(f"""#!{sys.executable}
import json, sys
from snakemake.cli import get_argument_parser
args = get_argument_parser().parse_args(sys.argv[1:])
json.dump({{"targets": args.targets, "threads": {{k: int(str(v).split(", ")[1].rstrip(")")) for k, v in
            args.set_threads.items()}}, "configfile": [str(f) for f in args.configfile],
            "prioritize": sorted(args.prioritize or [])}}, open("{seen}", "w"))
sys.exit(3)  # no training here: make stops before copying
""")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env = {k: v for k, v in env.items() if not k.startswith("MAKE")}

    def study_cpu():
        return subprocess.run(
            ["make", "-o", ".venv/.installed", "study-cpu", "SEED=2"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    result = study_cpu()
    assert result.returncode != 0 and seen.exists(), result.stdout + result.stderr
    args = json.loads(seen.read_text())
    assert args["targets"] == [
        f"results/{TASK}/study_cpu.{n}/seed2/test.score.json"
        for n in ("transformer", "lwc", "mlrf_dec_sa", "gca_full", "transformer_longer", "dou_deep")
    ]
    assert args["threads"] == {"train": 1, "translate": 1, "translate_heldout": 1}
    assert args["configfile"] == ["config/study_cpu.yaml"]
    assert not args["prioritize"]  # nothing trained yet
    # a restart after some trainings ended: their translations go first, to be committed before the seed ends
    for name in ("transformer", "mlrf_dec_sa"):
        (tmp_path / f"results/{TASK}/study_cpu.{name}/seed2").mkdir(parents=True)
        (tmp_path / f"results/{TASK}/study_cpu.{name}/seed2/model.pt").touch()
    study_cpu()
    args = json.loads(seen.read_text())
    assert sorted(args["prioritize"]) == [
        f"results/{TASK}/study_cpu.{n}/seed2/test.score.json" for n in ("mlrf_dec_sa", "transformer")
    ]
    assert len(args["targets"]) == 6
    # collecting in a checkout that has the committed runs but not the data: the references are prepared first
    result = subprocess.run(
        ["make", "-o", ".venv/.installed", "study-cpu-collect"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0, result.stdout + result.stderr
    args = json.loads(seen.read_text())
    assert args["targets"] == [f"results/{TASK}/data/text/test.de-en.en"], args


def test_the_budget_checks_words_follow_which_way_it_went():
    """The seed-1 check at twice the budget scored 1.10 below the budget's baseline, and the README said it was
    'what training longer still buys'."""
    from layerwise_nmt.report.evidence_page import plain_words

    lost = {"same_model": True, "delta": -1.10, "seeds": [1], "bootstrap_p": [0.013], "claim": None}
    gained = {**lost, "delta": 1.91, "bootstrap_p": [0.2]}
    assert plain_words(lost) == (
        "training longer loses BLEU here (significant by the paired bootstrap): the budget "
        "is past where more training helps"
    )
    assert plain_words(gained) == "what training longer still buys (not significant by the paired bootstrap)"


def test_a_claim_not_held_says_seed_by_seed_what_the_tests_found():
    """MLRF was significantly worse on seed 1 (p 0.001) and not on seed 2 (p 0.222); the README said 'not
    significantly different', which seed 1 contradicts."""
    from layerwise_nmt.report.evidence_page import plain_words

    mlrf = {
        "delta": -1.20,
        "deltas": [-2.16, -0.24],
        "seeds": [1, 2],
        "bootstrap_p": [0.001, 0.222],
        "t_test_p": 0.428,
        "claim": "not held",
    }
    assert plain_words(mlrf) == (
        "worse on average; worse on 2 of 2 seeds, significantly on 1 (paired bootstrap, "
        "p < 0.05); the t-test over seeds p 0.428: the claim does not hold at this size"
    )
    dou = {
        "delta": -0.09,
        "deltas": [-0.49, 0.32],
        "seeds": [1, 2],
        "bootstrap_p": [0.073, 0.160],
        "t_test_p": 0.865,
        "claim": "not held",
    }
    assert plain_words(dou) == (
        "worse on average; worse on 1 of 2 seeds, significantly on none (paired bootstrap, "
        "p < 0.05); the t-test over seeds p 0.865: the claim does not hold at this size"
    )
    worse = {**mlrf, "deltas": [-2.16, -1.5], "bootstrap_p": [0.001, 0.02], "delta": -1.83}
    assert plain_words(worse) == (
        "worse on every seed, significantly (paired bootstrap, p < 0.05): the claim does not hold at this size"
    )
    unscored = {**dou, "bootstrap_p": None, "t_test_p": None, "seeds": [1], "deltas": [0.0], "delta": 0.0}
    assert plain_words(unscored) == "no better on average; worse on 0 of 1 seed: the claim does not hold at this size"


def test_an_inconclusive_claim_says_seed_by_seed_what_the_tests_found():
    """Dou's deep model was better on average over three seeds (+0.17) but worse on seed 1 and significantly
    better on none; 'not significantly on every seed' hid that one seed went the other way."""
    from layerwise_nmt.report.evidence_page import plain_words

    dou = {
        "delta": 0.17,
        "deltas": [-0.49, 0.32, 0.68],
        "seeds": [1, 2, 3],
        "bootstrap_p": [0.073, 0.160, 0.062],
        "t_test_p": 0.674,
        "claim": "inconclusive",
    }
    assert plain_words(dou) == (
        "better on average; better on 2 of 3 seeds, significantly on none (paired bootstrap, "
        "p < 0.05); the t-test over seeds p 0.674: inconclusive at this size"
    )
    mostly = {**dou, "deltas": [0.9, 0.32, 0.68], "bootstrap_p": [0.01, 0.160, 0.02], "delta": 0.63}
    assert plain_words(mostly) == (
        "better on average; better on 3 of 3 seeds, significantly on 2 (paired bootstrap, "
        "p < 0.05); the t-test over seeds p 0.674: inconclusive at this size"
    )
