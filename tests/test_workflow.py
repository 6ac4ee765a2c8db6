"""The workflow as users run it: DAGs build, the CI-sized data run completes, config errors name the key."""

import subprocess
import sys

import numpy as np
import pytest
import yaml

from conftest import ROOT, snakemake
from layerwise_nmt import UserError
from layerwise_nmt import config as cfg
from layerwise_nmt.data.binarize import IndexedDataset
from layerwise_nmt.data.vocab import Dictionary


@pytest.mark.parametrize("configfile", [None, "config/demo.yaml", "config/ci.yaml"])
def test_dry_run_builds_the_dag(tmp_path, configfile):
    args = ["-n"] + (["--configfile", str(ROOT / configfile)] if configfile else [])
    out = snakemake(tmp_path, *args).stdout
    assert "binarize" in out and "tokenize" in out


def test_ci_sized_data_run(tmp_path, mirror):
    snakemake(tmp_path, "--configfile", str(ROOT / "config/ci.yaml"), mirror=mirror)
    data = tmp_path / "results/multi30k_ci/data"
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
    assert (tmp_path / "results/logs/multi30k_ci/assemble.de-en.log").exists()
    # a second run has nothing to do
    assert "Nothing to be done" in snakemake(tmp_path, "--configfile", str(ROOT / "config/ci.yaml"), "-n",
                                             mirror=mirror).stdout


def load_full():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def test_unknown_key_is_named():
    config = load_full()
    config["tasks"]["iwslt14_deen"]["bpe"]["mergez"] = 3
    with pytest.raises(UserError, match=r"tasks/iwslt14_deen/bpe.*'mergez'"):
        cfg.validate(config)


def test_wrong_type_is_named():
    config = load_full()
    config["tasks"]["multi30k_deen"]["bpe"]["merges"] = "many"
    with pytest.raises(UserError, match=r"tasks/multi30k_deen/bpe/merges.*integer"):
        cfg.validate(config)


def test_dangling_reference_is_named():
    config = load_full()
    config["experiments"]["lwc.t1.deen.lwc_small"]["task"] = "iwslt99"
    with pytest.raises(UserError, match=r"experiments/lwc.t1.deen.lwc_small/task: unknown task 'iwslt99'"):
        cfg.validate(config)


def test_snakemake_rejects_unknown_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks:\n  multi30k_deen:\n    lowercaze: true\n")
    result = snakemake(tmp_path, "-n", "--configfile", str(bad), check=False)
    assert result.returncode != 0
    assert "lowercaze" in result.stdout + result.stderr


def test_status_says_why_rows_cannot_run():
    out = subprocess.run([sys.executable, "-m", "layerwise_nmt", "status", "--config", str(ROOT / "config.yaml")],
                         capture_output=True, text=True, check=True).stdout
    assert "multi30k_deen" in out
    assert "blocked" in out and "issue #10" in out
    assert "needs data the user must supply" in out
    assert "quoted" in out and "is not implemented yet" in out


def test_every_pending_task_is_reported_not_built():
    config = cfg.load(ROOT / "config.yaml")
    runnable = set(cfg.runnable_tasks(config))
    assert runnable == {"iwslt14_deen", "iwslt14_deen_bpe32k", "multi30k_deen"}
    assert all(not cfg.task_status(config, t).runnable for t in set(config["tasks"]) - runnable)
