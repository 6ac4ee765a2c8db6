"""The trained models `--parts decode` decodes, each as fairseq-generate and as lwnmt translate load it (the same
weights), with the sources to translate and the beam settings:
  demo         config/demo.yaml's baseline trained here once with the demo's recipe (1,000 updates, 30.5 BLEU),
               with fairseq's init and position table, renamed into a fairseq-train checkpoint; Multi30k test2016
               (1,000 sentences), the demo's beam 5, batch 128
  shared_post, separate_pre
               the fairseq fixture's models (tests/fixtures/fairseq: d = 64 / 32, trained 1,500 updates on Multi30k
               by fairseq), its 300 test sources, beam 5, batch 64, imported with `lwnmt import-fairseq`
The demo model is also the one `--parts ctranslate2` converts (`demo_model`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from .common import FAIRSEQ_BIN, MODELS, ROOT, THREADS, ensure_demo_data, sh

FIXTURE = ROOT / "tests" / "fixtures" / "fairseq"
FIXTURE_DECODE = {"beam": 5, "lenpen": 1.0, "max_len_a": 0, "max_len_b": 200, "batch_size": 64}  # the fixture's beam5


@dataclass
class DecodeCase:
    """One trained model as each tool loads it, the sources to translate and the beam settings."""

    description: str
    fairseq_checkpoint: Path
    fairseq_data: Path  # its sources binarized (fairseq-generate's --gen-subset test)
    our_model: Path
    our_data: Path  # translate --data
    sources: Path
    settings: dict


def fixture_case(work: Path, name: str) -> DecodeCase:
    """A fixture model trained by fairseq (d = 64 / 32), imported with `lwnmt import-fairseq`."""
    imported = work / f"imported-{name}"
    sh(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "import-fairseq",
            str(FIXTURE / name / "checkpoint.pt"),
            "--data",
            str(FIXTURE / name),
            "--src",
            "de",
            "--tgt",
            "en",
            "--out",
            str(imported),
        ]
    )
    return DecodeCase(
        f"tests/fixtures/fairseq/{name}: {' '.join(fixture_train_args(name))}",
        FIXTURE / name / "checkpoint.pt",
        binarize_fixture_sources(work, name),
        imported / "model.pt",
        imported,
        FIXTURE / "test.de",
        FIXTURE_DECODE,
    )


def demo_case(cache: Path) -> DecodeCase:
    """config/demo.yaml's baseline architecture (256/1024/4, 3+3, 7.5M parameters) trained here by `lwnmt train` with
    the demo's recipe (1,000 updates, fp32) but fairseq's initialisation and position table, so that its weights,
    renamed into a checkpoint of fairseq-train's own, are the same model for fairseq-generate. Multi30k test2016 (1,000
    sentences), the demo's beam settings. Trained once (~8 min on 2 cores) and kept in `cache`."""
    data = ensure_demo_data()
    model, settings = demo_model(cache)
    fairseq_data = cache / "fairseq-bin"
    if not (fairseq_data / "valid.de-en.en.bin").exists():  # train, valid: for fairseq-train's checkpoint
        joint = str(data / "vocab/dict.joint.txt")
        sh(
            [
                str(FAIRSEQ_BIN / "fairseq-preprocess"),
                "--source-lang",
                "de",
                "--target-lang",
                "en",
                "--srcdict",
                joint,
                "--tgtdict",
                joint,
                *(f"--{split}pref={data / 'bpe/test.de-en'}" for split in ("train", "valid", "test")),
                "--destdir",
                str(fairseq_data),
                "--workers",
                "1",
            ]
        )
    exported = cache / "fairseq-checkpoint.pt"
    if not exported.exists() or exported.stat().st_mtime < model.stat().st_mtime:
        export_to_fairseq(model, fairseq_data, cache)
    return DecodeCase(
        "config/demo.yaml's baseline (256/1024/4, 3+3, all embeddings shared), 1,000 updates on "
        "Multi30k with fairseq's init and positions; test2016",
        exported,
        fairseq_data,
        model,
        data / "bin-joint",
        data / "bpe/test.de-en.de",
        settings,
    )


def demo_model(cache: Path) -> tuple[Path, dict]:
    """demo_case's model.pt, trained once into `cache`, and the demo's decoding settings."""
    data = ensure_demo_data()
    baseline = yaml.safe_load((ROOT / "config/demo.yaml").read_text())["experiments"]["demo.transformer"]
    settings = {**FIXTURE_DECODE, "max_len_a": 1.2, "max_len_b": 10, **baseline["decode"]}  # ours' defaults
    model = cache / "model.pt"
    if not model.exists():
        print(f"training the demo-sized model for decoding into {cache} (~8 min) ...", flush=True)
        spec = {
            "model": "transformer",
            "arch": {**MODELS["demo"]["ours"], "init": "fairseq", "sinusoid": "fairseq"},
            "train": {**baseline["train"], "amp": "none"},
        }
        sh(
            [
                sys.executable,
                "-m",
                "layerwise_nmt",
                "train",
                "--spec",
                json.dumps(spec),
                "--data",
                str(data / "bin-joint"),
                "--src",
                "de",
                "--tgt",
                "en",
                "--save-dir",
                str(cache / "checkpoints"),
                "--final",
                str(model),
                "--threads",
                str(THREADS),
            ]
        )
    return model, settings


def fairseq_weights(state: dict) -> dict:
    """Our model.pt's weights under fairseq TransformerModel's names: fairseq_import.linear_names read backwards
    (a stacked q/k/v split into its parts), plus the copies fairseq 0.12's encoder layers keep for torch's
    BetterTransformer fast path (which fairseq_cli turns off)."""
    from layerwise_nmt.inference.fairseq_import import linear_names

    ours, config, out = state["model"], state["model_config"], {}
    for name, theirs in linear_names(config).items():
        for part in ("weight", "bias"):
            out |= {
                f"{t}.{part}": chunk.clone()
                for t, chunk in zip(theirs, ours[f"{name}.{part}"].chunk(len(theirs)), strict=True)
            }
    for i in range(config["encoder_layers"]):
        for name, theirs in (("attn.qkv", "in_proj"), ("attn.out", "out_proj"), ("ffn.fc1", "fc1"), ("ffn.fc2", "fc2")):
            for part in ("weight", "bias"):
                out[f"encoder.layers.{i}.{theirs}_{part}"] = ours[f"encoder.layers.{i}.{name}.{part}"].clone()
    for side in ("encoder", "decoder"):
        out[f"{side}.embed_tokens.weight"] = ours[f"{side}.embed.tokens.weight"].clone()
    out["decoder.output_projection.weight"] = ours["output.weight"].clone()
    return out


# Run by fairseq's Python: every floating-point tensor of fairseq-train's checkpoint replaced by ours, already renamed
# (shapes checked); its buffers (version numbers, the position table's placeholder) kept.
EXPORT_DRIVER = """
import sys, torch
template, weights, out = sys.argv[1:4]
state, ours = torch.load(template, map_location="cpu"), torch.load(weights)
for key, value in state["model"].items():
    if key.endswith(("_float_tensor", ".version")):
        continue
    assert ours[key].shape == value.shape, (key, ours[key].shape, value.shape)
    state["model"][key] = ours[key]
assert set(ours) <= set(state["model"]), set(ours) - set(state["model"])
state["last_optimizer_state"] = None
torch.save(state, out)
"""


def export_to_fairseq(model: Path, fairseq_data: Path, cache: Path) -> None:
    """Our model.pt → a fairseq checkpoint: fairseq-train makes one update of the same architecture (its checkpoint
    carries fairseq's own configuration), then its weights are replaced by ours."""
    import torch

    from layerwise_nmt.training.checkpoint import load

    template = cache / "fairseq-template"
    sh(
        [
            str(FAIRSEQ_BIN / "fairseq-train"),
            str(fairseq_data),
            *MODELS["demo"]["fairseq"],
            "--optimizer",
            "adam",
            "--lr",
            "1e-4",
            "--max-tokens",
            "1024",
            "--max-update",
            "1",
            "--cpu",
            "--disable-validation",
            "--no-epoch-checkpoints",
            "--save-dir",
            str(template),
            "--seed",
            "1",
        ]
    )
    state = load(model)
    torch.save(fairseq_weights(state), cache / "fairseq-weights.pt")
    sh(
        [
            str(FAIRSEQ_BIN / "python"),
            "-c",
            EXPORT_DRIVER,
            str(template / "checkpoint_last.pt"),
            str(cache / "fairseq-weights.pt"),
            str(cache / "fairseq-checkpoint.pt"),
        ]
    )


def fixture_train_args(name: str) -> list[str]:
    return json.loads((FIXTURE / "manifest.json").read_text())["models"][name]["fairseq_train_args"]


def binarize_fixture_sources(work: Path, name: str) -> Path:
    """The fixture's sources binarized with the model's dictionaries for fairseq-generate (which needs a target
    side: the sources again, only printed, never scored here)."""
    head = work / f"fixture-{name}"
    for lang in ("de", "en"):
        Path(f"{head}.{lang}").write_bytes((FIXTURE / "test.de").read_bytes())
    dest = work / f"fixture-bin-{name}"
    sh(
        [
            str(FAIRSEQ_BIN / "fairseq-preprocess"),
            "--source-lang",
            "de",
            "--target-lang",
            "en",
            "--srcdict",
            str(FIXTURE / name / "dict.de.txt"),
            "--tgtdict",
            str(FIXTURE / name / "dict.en.txt"),
            "--testpref",
            str(head),
            "--destdir",
            str(dest),
            "--workers",
            "1",
        ]
    )
    return dest
