"""A model directory that travels: `lwnmt export` writes weights, dictionaries, BPE codes, tokenizer,
language pair, decoding defaults and a checksummed manifest; `lwnmt translate --model DIR` turns raw text into
translations from any directory with nothing else; languages and an experiment's settings are checked against the
model."""

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, TOY_ARCH, toy_spec
from layerwise_nmt.inference.decode import prepare_raw
from layerwise_nmt.training.loop import train


def lwnmt(*args, cwd, stdin: str | None = None):
    return subprocess.run(
        [sys.executable, "-m", "layerwise_nmt", *map(str, args)], capture_output=True, text=True, cwd=cwd, input=stdin
    )


def one_line(result) -> str:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def checkout(toy_data, tmp_path_factory) -> dict:
    """A toy model trained where the workflow would put experiment `toy.exp` (the toy architecture on the demo's
    task) of an overlay, with the task's dictionary and (merge-free) BPE codes beside it."""
    root = tmp_path_factory.mktemp("checkout")
    data = root / "results/multi30k_deen/data"
    shutil.copytree(toy_data, data / "bin-joint")
    shutil.copytree(toy_data.parent / "vocab", data / "vocab")
    (data / "bpe").mkdir()
    (data / "bpe/code").write_text("#version: 0.2\nq z\n")  # one merge no toy word has
    run = root / "results/multi30k_deen/toy.exp/seed1"
    train(toy_spec(max_update=3), str(data / "bin-joint"), "de", "en", str(run / "checkpoints"), str(run / "model.pt"))
    overlay = root / "toy.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "experiments": {
                    "toy.exp": {
                        "task": "multi30k_deen",
                        "model": "transformer",
                        "arch": TOY_ARCH,
                        "average": None,
                        "decode": {"beam": 2, "batch_size": 8},
                    }
                }
            }
        )
    )
    config = ["--config", ROOT / "config.yaml", "--config", ROOT / "config/demo.yaml", "--config", overlay]
    return {"root": root, "run": run, "config": config, "overlay": overlay}


@pytest.mark.system
def test_export_then_translate_raw_text_from_anywhere(checkout, tmp_path):
    out = tmp_path / "toy-de-en"
    result = lwnmt("export", "toy.exp", "--out", out, *checkout["config"], cwd=checkout["root"])
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["bpecodes", "dict.de.txt", "dict.en.txt", "lwnmt.json", "model.pt"]
    manifest = json.loads((out / "lwnmt.json").read_text())
    assert (manifest["src"], manifest["tgt"], manifest["experiment"], manifest["seed"]) == ("de", "en", "toy.exp", 1)
    assert manifest["tokenize"]["lowercase"] and manifest["lowercase"]  # multi30k_deen is lowercased
    assert manifest["decode"]["beam"] == 2 and manifest["detokenize"] == {"kind": "moses", "lang": "en"}
    assert manifest["precision"]["amp"] and manifest["updates"] == 3 and manifest["settings"]["arch"] == TOY_ARCH
    assert set(manifest["sha256"]) == {"model.pt", "dict.de.txt", "dict.en.txt", "bpecodes"}
    assert manifest["commit"] is None or len(manifest["commit"].split("-")[0]) == 40

    elsewhere = tmp_path / "elsewhere"  # no config.yaml, no results/: the directory alone
    elsewhere.mkdir()
    moved = shutil.move(out, elsewhere / "model")
    translated = lwnmt("translate", "--model", moved, cwd=elsewhere, stdin="W1 W2 W3\n\nW4 W5 .\n")
    assert translated.returncode == 0, translated.stderr
    lines = translated.stdout.split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == "" and lines[0]
    # the same as decoding the task's preprocessing of the text (lowercased, tokenized, BPE'd) with the model and
    # the data directory it was trained on
    root = checkout["root"] / "results/multi30k_deen/data"
    bpe = prepare_raw(["W1 W2 W3", "", "W4 W5 ."], "de", manifest["tokenize"], str(root / "bpe/code"))
    assert bpe[0] == "w@@ 1 w@@ 2 w@@ 3"  # lowercased, then segmented by the codes (which have no toy word)
    direct = lwnmt(
        "translate",
        "--model",
        checkout["run"] / "model.pt",
        "--data",
        root / "bin-joint",
        "--src",
        "de",
        "--tgt",
        "en",
        "--options",
        json.dumps(manifest["decode"]),
        "--detokenize",
        cwd=elsewhere,
        stdin="".join(f"{line}\n" for line in bpe),
    )
    assert direct.stdout == translated.stdout


@pytest.mark.system
def test_languages_are_checked_against_the_model(checkout, tmp_path):
    out = tmp_path / "dir"
    assert lwnmt("export", "toy.exp", "--out", out, *checkout["config"], cwd=checkout["root"]).returncode == 0
    assert "--src en: the model in" in one_line(
        lwnmt("translate", "--model", out, "--src", "en", cwd=tmp_path, stdin="w1\n")
    )
    assert "--tgt de: the model in" in one_line(
        lwnmt("translate", "--model", out, "--tgt", "de", cwd=tmp_path, stdin="w1\n")
    )
    assert lwnmt("translate", "--model", out, "--src", "de", "--tgt", "en", cwd=tmp_path, stdin="w1\n").returncode == 0
    # its model.pt with a joint dictionary (dict.en.txt = dict.de.txt): the direction is still checked
    swapped = lwnmt(
        "translate",
        "-",
        "--model",
        out / "model.pt",
        "--data",
        out,
        "--src",
        "en",
        "--tgt",
        "de",
        cwd=tmp_path,
        stdin="w1\n",
    )
    assert f"--src en --tgt de: {out / 'model.pt'} translates de→en" in one_line(swapped)
    # an experiment's languages
    line = one_line(
        lwnmt(
            "translate",
            "--experiment",
            "toy.exp",
            "--src",
            "fr",
            *checkout["config"],
            cwd=checkout["root"],
            stdin="w1\n",
        )
    )
    assert "--src fr: experiment toy.exp translates de→en" in line


def test_an_altered_copy_is_refused_by_its_checksum(checkout, tmp_path):
    out = tmp_path / "dir"
    assert lwnmt("export", "toy.exp", "--out", out, *checkout["config"], cwd=checkout["root"]).returncode == 0
    with open(out / "dict.en.txt", "a") as f:
        f.write("extra 1\n")
    line = one_line(lwnmt("translate", "--model", out, cwd=tmp_path, stdin="w1\n"))
    assert f"{out / 'dict.en.txt'}: sha256 differs from lwnmt.json's" in line


def test_an_edited_experiment_is_checked_against_the_model_it_loads(checkout, tmp_path):
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump({"experiments": {"toy.exp": {"arch": {"encoder_layers": 3}}}}))
    config = [*checkout["config"], "--config", edited]
    line = one_line(lwnmt("translate", "--experiment", "toy.exp", *config, cwd=checkout["root"], stdin="w1\n"))
    assert "trained with encoder_layers=2 (config: 3), not experiment toy.exp's arch" in line
    line = one_line(lwnmt("export", "toy.exp", "--out", tmp_path / "x", *config, cwd=checkout["root"]))
    assert "trained with encoder_layers=2 (config: 3)" in line and not (tmp_path / "x").exists()


def test_the_not_trained_hint_names_the_overlay_it_needs(checkout, tmp_path):
    line = one_line(
        lwnmt(
            "translate",
            "--experiment",
            "toy.exp",
            "--seed",
            "7",
            *checkout["config"],
            cwd=checkout["root"],
            stdin="w1\n",
        )
    )
    overlays = f"{ROOT / 'config/demo.yaml'} {checkout['overlay']}"
    assert (
        f"not trained yet; run `snakemake results/multi30k_deen/toy.exp/seed7/model.pt --configfile {overlays}`" in line
    )


def test_export_replaces_only_a_model_directory(checkout, tmp_path):
    """`--out` naming a folder of the user's own (or `..`) was deleted whole and replaced; now only a folder an
    earlier export wrote is replaced, and anything else is refused in one line with nothing touched."""
    out = tmp_path / "precious"
    (out / "sub").mkdir(parents=True)
    (out / "notes.txt").write_text("mine\n")
    refused = one_line(lwnmt("export", "toy.exp", "--out", out, *checkout["config"], cwd=checkout["root"]))
    assert f"--out {out}" in refused and "not a model directory" in refused
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "sub").is_dir()
    assert not (tmp_path / ".tmp-precious").exists()
    model = tmp_path / "model"
    for _ in range(2):  # an earlier export's folder is replaced
        result = lwnmt("export", "toy.exp", "--out", model, *checkout["config"], cwd=checkout["root"])
        assert result.returncode == 0, result.stderr
    assert (model / "lwnmt.json").is_file()


def test_an_export_that_fails_midway_leaves_nothing_behind(checkout, tmp_path):
    """A missing BPE codes file (or a full disk, Ctrl-C) failed after the temporary folder was made, and left it."""
    from layerwise_nmt.inference import export

    vocab = checkout["root"] / "results/multi30k_deen/data/vocab"
    dictionary = next(vocab.glob("dict.*.txt"))
    with pytest.raises(FileNotFoundError):
        export.write(
            checkout["run"] / "model.pt", tmp_path / "model", "de", "en", dictionary, dictionary,
            tmp_path / "no-codes", {}, {}, {},
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("x\n")
    line = one_line(
        lwnmt("export", "toy.exp", "--out", tmp_path / "file/model", *checkout["config"], cwd=checkout["root"])
    )
    assert "file is a file, not a folder" in line


def test_a_checkpoint_that_is_not_ours_is_refused_in_one_line(checkout, tmp_path):
    """A fairseq checkpoint (or any other torch file) given where our model.pt is expected: export wrote a model
    directory with no weights and exited 0, translate failed with a KeyError traceback."""
    import torch

    data = checkout["root"] / "results/multi30k_deen/data/bin-joint"
    foreign = tmp_path / "fairseq.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "args": None}, foreign)
    export = one_line(
        lwnmt("export", "--out", tmp_path / "x", "--data", data, "--src", "de", "--tgt", "en", foreign, cwd=tmp_path)
    )
    assert str(foreign) in export and "lwnmt import-fairseq" in export and not (tmp_path / "x").exists()
    translate = lwnmt(
        "translate", "--model", foreign, "--data", data, "--src", "de", "--tgt", "en", cwd=tmp_path, stdin="w1\n"
    )
    assert str(foreign) in one_line(translate) and "not a model" in one_line(translate)


def test_translate_never_writes_over_its_input(checkout, tmp_path):
    """`lwnmt translate test.txt --out-prefix test` would have replaced the source with its translation."""
    model = tmp_path / "model"
    assert lwnmt("export", "toy.exp", "--out", model, *checkout["config"], cwd=checkout["root"]).returncode == 0
    source = tmp_path / "test.txt"
    source.write_text("W1 W2\n")
    line = one_line(lwnmt("translate", "--model", model, source, "--out-prefix", tmp_path / "test", cwd=tmp_path))
    assert "which is the input" in line and source.read_text() == "W1 W2\n"
    result = lwnmt("translate", "--model", model, source, "--out-prefix", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0 and (tmp_path / "out.txt").is_file(), result.stderr
