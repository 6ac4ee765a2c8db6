"""Opening a checkpoint runs nothing it pickled: every load is weights-only, with an allowlist, and a file that
needs anything else is refused in one line naming it."""

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from layerwise_nmt import UserError
from layerwise_nmt.training import checkpoint
from layerwise_nmt.inference.fairseq_import import import_fairseq

FAIRSEQ = ROOT / "tests" / "fixtures" / "fairseq"


class Planted:
    """What a malicious model.pt carries: unpickling it calls os.system."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def planted(tmp_path: Path, legacy: bool = False) -> tuple[Path, Path]:
    marker, path = tmp_path / "pwned", tmp_path / "model.pt"
    state = checkpoint.load(FAIRSEQ / "shared_post" / "checkpoint.pt")
    state["extra"] = Planted(marker)
    torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    return path, marker


@pytest.mark.parametrize("legacy", [False, True])
def test_a_planted_checkpoint_is_refused_and_runs_nothing(tmp_path, legacy):
    path, marker = planted(tmp_path, legacy)
    with pytest.raises(UserError, match=f"{path}: refused: it needs posix.system, which could run code"):
        checkpoint.load(path)
    with pytest.raises(UserError, match="refused"):
        import_fairseq(str(path), str(FAIRSEQ / "shared_post"), "de", "en", str(tmp_path / "out"))
    assert not marker.exists()


def test_translate_refuses_a_planted_model_in_one_line(tmp_path):
    path, marker = planted(tmp_path)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "translate",
            "--model",
            path,
            "--data",
            FAIRSEQ / "shared_post",
            "--src",
            "de",
            "--tgt",
            "en",
        ],
        input="hallo welt\n",
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"lwnmt translate: error: {path}: refused")
    assert not marker.exists()


def test_an_omegaconf_config_is_refused_naming_what_it_needs(tmp_path, monkeypatch):
    """fairseq 0.10/0.11 pickled cfg as an omegaconf DictConfig (omegaconf is not installed: a stand-in)."""
    module = types.ModuleType("omegaconf.dictconfig")
    DictConfig = type("DictConfig", (dict,), {"__module__": "omegaconf.dictconfig"})
    module.DictConfig = DictConfig
    monkeypatch.setitem(sys.modules, "omegaconf", types.ModuleType("omegaconf"))
    monkeypatch.setitem(sys.modules, "omegaconf.dictconfig", module)
    path = tmp_path / "checkpoint_best.pt"
    torch.save({"cfg": DictConfig(model={"arch": "transformer"})}, path)
    with pytest.raises(
        UserError, match=f"{path}: refused: it needs omegaconf.dictconfig.DictConfig, which needs omegaconf"
    ):
        checkpoint.load(path)


def test_the_fairseq_fixtures_and_our_checkpoints_still_load(toy_data, tmp_path):
    from conftest import toy_spec
    from layerwise_nmt.training.average import average
    from layerwise_nmt.inference.decode import load_model
    from layerwise_nmt.training.loop import train

    for name in ("shared_post", "separate_pre"):
        state = checkpoint.load(FAIRSEQ / name / "checkpoint.pt")
        assert "encoder.embed_tokens.weight" in state["model"]
        assert state["cfg"]["model"].arch.startswith("transformer")  # an argparse.Namespace
        imported = import_fairseq(
            str(FAIRSEQ / name / "checkpoint.pt"), str(FAIRSEQ / name), "de", "en", str(tmp_path / name)
        )
        load_model(imported)
    run = tmp_path / "run"
    train(toy_spec(max_update=4, save_interval_updates=2), str(toy_data), "de", "en", str(run), str(tmp_path / "m.pt"))
    resumable = checkpoint.load(run / checkpoint.LAST)  # numpy RNG state and all
    assert resumable["rng"]["numpy"][0] == "MT19937" and resumable["progress"]["update"] == 4
    average(checkpoint.last_checkpoints(run, 2, "update"), tmp_path / "avg.pt")
    assert checkpoint.load(tmp_path / "avg.pt")["dictionaries"] == resumable["dictionaries"]


def test_no_load_in_the_package_unpickles_freely():
    sources = "\n".join(p.read_text() for p in (ROOT / "src" / "layerwise_nmt").rglob("*.py"))
    assert sources.count("torch.load(") == 1 and "weights_only=False" not in sources
