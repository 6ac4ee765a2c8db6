"""Does Dou et al.'s Eq. 4 (dense connection, an unnormalised sum) train at the paper's learning rate?

Eq. 4, H^l = LAYER(H^{l−1}) + Σ_{i<l} H^i, doubles the scale of the state with every layer (Σ_{i≤l} H^i =
2·Σ_{i<l} H^i + LAYER); the decoder then attends to an encoder output ~2^(L−1) times a layer's. This check trains,
on the demo's Multi30k De→En data, the paper's protocol at CPU size: a 6+6 post-norm Transformer baseline; then,
warm-started from it with a fresh warm-up, (a) Eq. 4 as printed, (b) Eq. 4 with a LayerNorm after each sum
(`dense_norm: true`), (c) the baseline trained as long (control). Peak lr 7e-4 = Vaswani's schedule at d=512 with
4,000 warm-up updates, the paper's; warm-up shortened to the CPU budget. It reports validation loss/accuracy at the
end of each stage, the largest gradient norm seen, and the RMS of the encoder's top state relative to layer 1.

    make demo   # or only its data: snakemake --configfile config/demo.yaml --cores 2 --until binarize
    python benchmarks/dou_dense.py [--updates 300] [--json benchmarks/results/dou_dense.json]

The three warm-started runs train side by side (one thread each).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "results/multi30k_deen/data/bin-joint"
ARCH = {"preset": "small", "encoder_layers": 6, "decoder_layers": 6, "tie": "all", "dropout": 0.1}
RUNS = {  # name: (run directory, arch overrides, warm start from)
    "baseline": ("baseline", {}, None),
    "dense (Eq. 4)": ("dense", {"aggregation": "dense"}, "baseline"),
    "dense_norm": ("dense_norm", {"aggregation": "dense", "dense_norm": True}, "baseline"),
    "baseline, trained as long": ("baseline_longer", {}, "baseline"),
}


def train(name: str, run: Path, overrides: dict, init_from: Path | None, updates: int) -> subprocess.Popen | None:
    """Starts the run unless its model exists; the caller waits."""
    spec = {
        "model": "deep",
        "arch": {**ARCH, **overrides},
        "train": {
            "max_tokens": 1024,
            "lr": 7e-4,
            "lr_scheduler": "inverse_sqrt",
            "warmup_updates": updates // 3,
            "max_update": updates,
            "max_epoch": 0,
            "patience": 0,
            "log_interval": 100,
            "seed": 1,
        },
    }
    if init_from:
        spec["init_from"] = str(init_from)
    if not (run / "model.pt").exists():
        print(f"training {name} ({updates} updates) ...", flush=True)
        run.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "layerwise_nmt",
                "train",
                "--spec",
                json.dumps(spec),
                "--data",
                str(DATA),
                "--src",
                "de",
                "--tgt",
                "en",
                "--save-dir",
                str(run / "checkpoints"),
                "--final",
                str(run / "model.pt"),
                "--threads",
                "1",
            ],
            stderr=open(run / "train.log", "w"),
            cwd=ROOT,
        )
    return None


def wait(jobs: list[subprocess.Popen | None]) -> None:
    for job in filter(None, jobs):
        if job.wait():
            save_dir = job.args[job.args.index("--save-dir") + 1]
            sys.exit(f"training failed ({job.returncode}): see {save_dir}/../train.log")


def inspect(run: Path) -> dict:
    """Last validation record, and the encoder's layer scales on 64 validation sentences."""
    import torch

    from layerwise_nmt.data.batching import pad
    from layerwise_nmt.data.binarize import IndexedDataset
    from layerwise_nmt.inference.decode import load_model

    with open(run / "checkpoints" / "metrics.csv", newline="") as f:
        last = list(csv.DictReader(f))[-1]
    model = load_model(run / "model.pt")
    valid = IndexedDataset(DATA / "valid.de-en.de")
    src = pad([valid[i] for i in range(64)], 1)
    with torch.no_grad():
        states, top, _ = model.encode(src)
    rms = [float(h.pow(2).mean().sqrt()) for h in states[1:]]
    return {
        "valid_loss": float(last["valid_loss"]),
        "valid_accuracy": float(last["valid_accuracy"]),
        "train_loss": float(last["train_loss"]),
        "top_over_layer1_rms": rms[-1] / rms[0],
        "layer_rms": [round(r, 2) for r in rms],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=300, help="per stage")
    parser.add_argument("--work", default=str(ROOT / "results/benchmarks/dou_dense"))
    parser.add_argument("--json", default=str(ROOT / "benchmarks/results/dou_dense.json"))
    a = parser.parse_args()
    if not list(DATA.glob("train.de-en.*")):
        sys.exit(f"{DATA}: no binarized Multi30k data; run `make demo` (or its data rules) first")
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "src"))
    runs = {name: work / directory for name, (directory, _, _) in RUNS.items()}
    for stage in (lambda parent: parent is None, lambda parent: parent is not None):  # the baseline, then the rest
        wait(
            [
                train(name, runs[name], overrides, runs[parent] / "model.pt" if parent else None, a.updates)
                for name, (_, overrides, parent) in RUNS.items()
                if stage(parent)
            ]
        )
    results = {name: inspect(run) for name, run in runs.items()}
    print(f"\n{'run':<28} {'valid loss':>10} {'valid acc':>9} {'train loss':>10} {'top/H1 RMS':>10}")
    for name, r in results.items():
        print(
            f"{name:<28} {r['valid_loss']:>10.3f} {r['valid_accuracy']:>9.3f} {r['train_loss']:>10.3f} "
            f"{r['top_over_layer1_rms']:>10.1f}"
        )
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(
        json.dumps({"updates_per_stage": a.updates, "arch": ARCH, "peak_lr": 7e-4, "results": results}, indent=1)
    )
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
