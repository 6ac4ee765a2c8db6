"""Our Transformer beside fairseq 0.12.2's: decoding parity (a committed fixture) and training parity (a benchmark).

    python benchmarks/fairseq_parity.py fixture   # → tests/fixtures/fairseq/: tiny fairseq models + fairseq-generate's
                                                  #   output, which tests/test_fairseq_parity.py decodes with ours
    python benchmarks/fairseq_parity.py train [--seeds 1 2 3] [--updates 1000] [--work DIR]
                                                  # → benchmarks/results/parity.json + docs/parity.png
    python benchmarks/fairseq_parity.py plot      # redraw docs/parity.png from the JSON

Data: Multi30k De→En from the data mirror (LWNMT_DATA_MIRROR, else data-mirror/ in the checkout), Moses-tokenized
and lowercased with `lwnmt tokenize`, joint BPE learnt with `lwnmt learn-bpe`, binarized by fairseq-preprocess for
fairseq and by `lwnmt binarize` with fairseq's own dictionary for us, so that both read the same token ids.
fairseq runs in its own venv (`.fairseq-venv`, created on first use as benchmarks/train_decode.py does); the
project never imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_decode_parts.common import (  # noqa: E402
    FAIRSEQ_BIN,
    MIRROR,
    ROOT,
    ensure_fairseq,
    fairseq_generate_command,
    sh,
)

FIXTURE = ROOT / "tests" / "fixtures" / "fairseq"
LWNMT = [sys.executable, "-m", "layerwise_nmt"]
SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}

# Two small models that between them cover the import's branches: one dictionary and one matrix for everything,
# post-norm; two dictionaries, decoder input = output matrix, pre-norm (final LayerNorm per stack).
FIXTURE_MODELS = {
    "shared_post": [
        "--arch",
        "transformer",
        "--share-all-embeddings",
        "--encoder-embed-dim",
        "64",
        "--decoder-embed-dim",
        "64",
        "--encoder-ffn-embed-dim",
        "128",
        "--decoder-ffn-embed-dim",
        "128",
        "--encoder-attention-heads",
        "4",
        "--decoder-attention-heads",
        "4",
        "--encoder-layers",
        "2",
        "--decoder-layers",
        "2",
    ],
    "separate_pre": [
        "--arch",
        "transformer_iwslt_de_en",
        "--share-decoder-input-output-embed",
        "--encoder-normalize-before",
        "--decoder-normalize-before",
        "--encoder-embed-dim",
        "32",
        "--decoder-embed-dim",
        "32",
        "--encoder-ffn-embed-dim",
        "64",
        "--decoder-ffn-embed-dim",
        "64",
        "--encoder-attention-heads",
        "2",
        "--decoder-attention-heads",
        "2",
        "--encoder-layers",
        "2",
        "--decoder-layers",
        "2",
    ],
}
# fairseq-generate settings decoded both ways; batch size 1 where a·|src| + b caps the output, since fairseq takes
# |src| from the batch's padded width and we from each sentence (decode.py says why).
GENERATE = {
    "beam5": {"beam": 5, "lenpen": 1.0, "max_len_a": 0, "max_len_b": 200, "batch_size": 64},
    "beam4_lenpen0.6_cap": {"beam": 4, "lenpen": 0.6, "max_len_a": 1.2, "max_len_b": 10, "batch_size": 1},
}
FIXTURE_SENTENCES = 300


def prepare(work: Path, merges: int, joined: bool) -> Path:
    """Multi30k → tokenized, lowercased, BPE'd text in work/bpe/{train,valid,test}.{de,en}; fairseq-preprocess'd
    into work/fairseq-bin (with its dict.de.txt / dict.en.txt). Returns the fairseq data directory."""
    tok, bpe = work / "tok", work / "bpe"
    dest = work / ("fairseq-bin-joined" if joined else "fairseq-bin")
    if (dest / "preprocess.log").exists():  # a rerun with --work keeps what is done (fairseq-train resumes too)
        return dest
    tok.mkdir(parents=True, exist_ok=True)
    bpe.mkdir(exist_ok=True)
    for split, name in SPLITS.items():
        for lang in ("de", "en"):
            raw = work / f"{split}.raw.{lang}"
            raw.write_bytes(gzip.decompress((MIRROR / "multi30k" / f"{name}.{lang}.gz").read_bytes()))
            sh(
                LWNMT
                + [
                    "tokenize",
                    str(raw),
                    str(tok / f"{split}.{lang}"),
                    "--lang",
                    lang,
                    "--options",
                    json.dumps({"lowercase": True, "aggressive_dash_splits": True}),
                ]
            )
    sh(
        LWNMT
        + [
            "learn-bpe",
            str(tok / "train.de"),
            str(tok / "train.en"),
            "--out",
            str(work / "codes"),
            "--merges",
            str(merges),
        ]
    )
    for split in SPLITS:
        for lang in ("de", "en"):
            sh(
                LWNMT
                + [
                    "apply-bpe",
                    str(tok / f"{split}.{lang}"),
                    str(bpe / f"{split}.{lang}"),
                    "--codes",
                    str(work / "codes"),
                ]
            )
    sh(
        [
            str(FAIRSEQ_BIN / "fairseq-preprocess"),
            "--source-lang",
            "de",
            "--target-lang",
            "en",
            "--trainpref",
            str(bpe / "train"),
            "--validpref",
            str(bpe / "valid"),
            "--testpref",
            str(bpe / "test"),
            "--destdir",
            str(dest),
            "--workers",
            "2",
        ]
        + (["--joined-dictionary"] if joined else [])
    )
    return dest


def fairseq_train(
    data: Path, save_dir: Path, arch: list[str], seed: int, updates: int, extra: list[str] = (), threads: int = 2
) -> str:
    result = sh(
        [
            str(FAIRSEQ_BIN / "fairseq-train"),
            str(data),
            *arch,
            "--cpu",
            "--seed",
            str(seed),
            "--optimizer",
            "adam",
            "--adam-betas",
            "(0.9, 0.98)",
            "--lr",
            "1e-3",
            "--lr-scheduler",
            "inverse_sqrt",
            "--warmup-updates",
            "400",
            "--warmup-init-lr",
            "1e-07",
            "--clip-norm",
            "0.0",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--dropout",
            "0.1",
            "--max-tokens",
            "4096",
            "--max-update",
            str(updates),
            "--save-dir",
            str(save_dir),
            "--no-epoch-checkpoints",
            "--num-workers",
            "0",
            "--log-format",
            "simple",
            "--log-interval",
            "100",
            *extra,
        ],
        env={**os.environ, "OMP_NUM_THREADS": str(threads)},
    )
    return result.stdout


def round_to_fp16(checkpoint: Path, out: Path) -> None:
    """The checkpoint without optimizer state, weights stored in fp16: small enough to commit, and fairseq then
    decodes exactly the weights our import reads (fp16 → fp32 is exact)."""
    code = (
        "import sys, torch\n"
        "s = torch.load(sys.argv[1], map_location='cpu')\n"
        "shared = {}  # tied matrices stay one tensor\n"
        "s['model'] = {k: shared.setdefault(v.data_ptr(), v.half()) if v.is_floating_point() else v\n"
        "              for k, v in s['model'].items()}\n"
        "s['last_optimizer_state'] = None\n"
        "torch.save(s, sys.argv[2])\n"
    )
    sh([str(FAIRSEQ_BIN / "python"), "-c", code, str(checkpoint), str(out)])


def fairseq_generate(data: Path, checkpoint: Path, options: dict, subset: str = "test") -> str:
    return sh(fairseq_generate_command(data, checkpoint, options, subset)).stdout


def make_fixture(work: Path, updates: int) -> None:
    data = {True: prepare(work, merges=1000, joined=True), False: work / "fairseq-bin"}
    if not (data[False] / "preprocess.log").exists():
        sh(
            [
                str(FAIRSEQ_BIN / "fairseq-preprocess"),
                "--source-lang",
                "de",
                "--target-lang",
                "en",
                "--trainpref",
                str(work / "bpe/train"),
                "--validpref",
                str(work / "bpe/valid"),
                "--testpref",
                str(work / "bpe/test"),
                "--destdir",
                str(data[False]),
                "--workers",
                "2",
            ]
        )
    # the first FIXTURE_SENTENCES test sentences, binarized with each model's dictionaries below
    head = work / "bpe" / "head"
    for lang in ("de", "en"):
        lines = (work / "bpe" / f"test.{lang}").read_text(encoding="utf-8").splitlines()[:FIXTURE_SENTENCES]
        Path(f"{head}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    FIXTURE.mkdir(parents=True, exist_ok=True)
    manifest = {"sentences": FIXTURE_SENTENCES, "updates": updates, "models": {}, "generate": GENERATE}
    for name, arch in FIXTURE_MODELS.items():
        joined = "--share-all-embeddings" in arch
        bin_dir = data[joined]
        head_bin = work / f"head-bin-{name}"
        sh(
            [
                str(FAIRSEQ_BIN / "fairseq-preprocess"),
                "--source-lang",
                "de",
                "--target-lang",
                "en",
                "--srcdict",
                str(bin_dir / "dict.de.txt"),
                "--tgtdict",
                str(bin_dir / "dict.en.txt"),
                "--testpref",
                str(head),
                "--destdir",
                str(head_bin),
                "--workers",
                "1",
            ]
        )
        print(f"training {name} ({updates} updates) ...", flush=True)
        fairseq_train(bin_dir, work / f"ckpt-{name}", arch, seed=1, updates=updates)
        out = FIXTURE / name
        out.mkdir(exist_ok=True)
        round_to_fp16(work / f"ckpt-{name}" / "checkpoint_last.pt", out / "checkpoint.pt")
        for lang in ("de", "en"):
            shutil.copy(bin_dir / f"dict.{lang}.txt", out / f"dict.{lang}.txt")
        for setting, options in GENERATE.items():
            text = fairseq_generate(head_bin, out / "checkpoint.pt", options)
            hyps = {int(m[1]): (float(m[2]), m[3]) for m in re.finditer(r"^H-(\d+)\t(\S+)\t(.*)$", text, re.M)}
            (out / f"{setting}.json").write_text(
                json.dumps(
                    {
                        "options": options,
                        "hypotheses": [{"score_log2": hyps[i][0], "text": hyps[i][1]} for i in range(len(hyps))],
                    },
                    indent=0,
                )
                + "\n"
            )
        manifest["models"][name] = {"fairseq_train_args": arch}
    shutil.copy(f"{head}.de", FIXTURE / "test.de")
    (FIXTURE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    size = sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file())
    print(f"wrote {FIXTURE} ({size / 1024:.0f} KB)")


# Training parity: one small Transformer (fairseq's `transformer` arch at d=128), one recipe, both trainers.
PARITY_ARCH = {
    "d_model": 128,
    "d_ff": 512,
    "heads": 4,
    "encoder_layers": 3,
    "decoder_layers": 3,
    "tie": "all",
    "dropout": 0.1,
}
PARITY_FAIRSEQ_ARCH = [
    "--arch",
    "transformer",
    "--share-all-embeddings",
    "--encoder-embed-dim",
    "128",
    "--decoder-embed-dim",
    "128",
    "--encoder-ffn-embed-dim",
    "512",
    "--decoder-ffn-embed-dim",
    "512",
    "--encoder-attention-heads",
    "4",
    "--decoder-attention-heads",
    "4",
    "--encoder-layers",
    "3",
    "--decoder-layers",
    "3",
]
# our systems: the default initialisation (Xavier everywhere, tensor2tensor's sinusoid), and fairseq's own
OURS = {"ours": {}, "ours-fairseq-init": {"init": "fairseq", "sinusoid": "fairseq"}}
# the recipe fairseq_train passes on its command line, in our names
PARITY_TRAIN = {
    "lr": 1e-3,
    "lr_scheduler": "inverse_sqrt",
    "warmup_updates": 400,
    "warmup_init_lr": 1e-7,
    "adam_betas": [0.9, 0.98],
    "adam_eps": 1e-8,
    "clip_norm": 0.0,
    "label_smoothing": 0.1,
    "max_tokens": 4096,
    "save_interval_minutes": 0,
    "keep_interval_updates": 1000,
    "log_interval": 100,
}


def ours_data(work: Path, fairseq_bin: Path) -> Path:
    """fairseq's BPE text binarized by us with fairseq's own (joint) dictionary: the same ids on both sides."""
    data = work / "ours" / "bin-joint"
    (work / "ours" / "vocab").mkdir(parents=True, exist_ok=True)
    shutil.copy(fairseq_bin / "dict.de.txt", work / "ours" / "vocab" / "dict.joint.txt")
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            if not (data / f"{split}.de-en.{lang}.tokens.npy").exists():
                sh(
                    LWNMT
                    + [
                        "binarize",
                        str(work / "bpe" / f"{split}.{lang}"),
                        str(data / f"{split}.de-en.{lang}"),
                        "--vocab",
                        str(work / "ours" / "vocab" / "dict.joint.txt"),
                    ]
                )
    return data


def valid_curve(checkpoints: list[Path], data: Path, importer=None) -> dict[int, float]:
    """Validation loss (label-smoothed, bits/token, our evaluate) of each update checkpoint, by update."""
    import torch

    from layerwise_nmt.data.batching import ParallelData
    from layerwise_nmt.inference.decode import load_model
    from layerwise_nmt.training.loop import TrainConfig, evaluate

    torch.set_num_threads(1)
    valid, cfg, curve = ParallelData(data, "valid", "de", "en"), TrainConfig.from_dict({"max_update": 1}), {}
    for path in checkpoints:
        update = int(re.search(r"_(\d+)\.pt$", path.name)[1])
        model = load_model(importer(path) if importer else path)
        curve[update] = evaluate(model, valid, cfg, torch.device("cpu"), contextlib.nullcontext)["loss"]
    return dict(sorted(curve.items()))


def test_bleu(model_path: Path, work: Path, out: Path) -> float:
    """Tokenized BLEU of beam 5 on the Multi30k test set (BPE removed), as fairseq-generate's BLEU4 line."""
    sh(
        LWNMT
        + [
            "translate",
            str(work / "bpe" / "test.de"),
            "--model",
            str(model_path),
            "--data",
            str(work / "ours" / "bin-joint"),
            "--src",
            "de",
            "--tgt",
            "en",
            "--out-prefix",
            str(out),
            "--beam",
            "5",
            "--threads",
            "1",
        ]
    )
    import sacrebleu

    refs = [line.replace("@@ ", "") for line in (work / "tok" / "test.en").read_text(encoding="utf-8").splitlines()]
    hyps = Path(f"{out}.txt").read_text(encoding="utf-8").splitlines()
    return sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", force=True).score  # tokenized on purpose


def parity_run(system: str, seed: int, work: Path, fairseq_bin: Path, updates: int, interval: int) -> dict:
    from layerwise_nmt.inference.fairseq_import import import_fairseq

    run = work / "runs" / f"{system}-seed{seed}"
    if system == "fairseq":
        fairseq_train(
            fairseq_bin,
            run,
            PARITY_FAIRSEQ_ARCH,
            seed,
            updates,
            [
                "--save-interval-updates",
                str(interval),
                "--keep-interval-updates",
                "-1",
                "--adam-eps",
                "1e-8",
                "--validate-interval-updates",
                str(interval),
            ],
            threads=1,
        )

        def importer(path: Path) -> Path:
            return import_fairseq(str(path), str(fairseq_bin), "de", "en", str(run / "imported" / path.stem))

        final = importer(run / "checkpoint_last.pt")
    else:
        spec = {
            "model": "transformer",
            "arch": {**PARITY_ARCH, **OURS[system]},
            "train": {**PARITY_TRAIN, "seed": seed, "max_update": updates, "save_interval_updates": interval},
        }
        final = run / "model.pt"
        sh(
            LWNMT
            + [
                "train",
                "--spec",
                json.dumps(spec),
                "--data",
                str(work / "ours" / "bin-joint"),
                "--src",
                "de",
                "--tgt",
                "en",
                "--save-dir",
                str(run / "checkpoints"),
                "--final",
                str(final),
                "--threads",
                "1",
            ]
        )
        importer = None
    checkpoints = [p for p in (run if system == "fairseq" else run / "checkpoints").glob("checkpoint_*_*.pt")]
    return {
        "system": system,
        "seed": seed,
        "valid_loss": valid_curve(checkpoints, work / "ours" / "bin-joint", importer),
        "test_bleu": test_bleu(final, work, run / "test"),
    }


def training_parity(
    work: Path, seeds: list[int], updates: int, interval: int, systems: list[str], out_json: Path, plot: Path
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    fairseq_bin = prepare(work, merges=1000, joined=True)
    ours_data(work, fairseq_bin)
    systems = ["fairseq", *systems]
    jobs = [(system, seed) for seed in seeds for system in systems]
    with ThreadPoolExecutor(2) as pool:  # two single-threaded trainings side by side on a 2-core machine
        runs = list(pool.map(lambda job: parity_run(*job, work, fairseq_bin, updates, interval), jobs))
    summary = {}
    for system in systems:
        mine = [r for r in runs if r["system"] == system]
        bleu = [r["test_bleu"] for r in mine]
        summary[system] = {
            "test_bleu_mean": statistics.mean(bleu),
            "test_bleu_sd": statistics.stdev(bleu) if len(bleu) > 1 else 0.0,
        }
    steps = sorted(set.intersection(*(set(r["valid_loss"]) for r in runs)))
    curves = {system: [r["valid_loss"] for r in runs if r["system"] == system] for system in systems}
    band = {u: (min(c[u] for c in curves["fairseq"]), max(c[u] for c in curves["fairseq"])) for u in steps}
    mean = {system: {u: statistics.mean(c[u] for c in curves[system]) for u in steps} for system in systems}
    for system in systems[1:]:
        summary[system]["loss_gap_by_update"] = {u: mean[system][u] - mean["fairseq"][u] for u in steps}
        summary[system]["inside_fairseq_spread"] = {
            u: all(band[u][0] <= c[u] <= band[u][1] for c in curves[system]) for u in steps
        }
    result = {
        "data": "Multi30k de-en, joint BPE 1000 merges (fairseq's dictionary for both)",
        "arch": PARITY_ARCH,
        "ours": {s: OURS[s] for s in systems[1:]},
        "train": PARITY_TRAIN,
        "updates": updates,
        "seeds": seeds,
        "runs": runs,
        "summary": summary,
    }
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(result, indent=2) + "\n")
    draw_parity(runs, systems, plot)
    print("validation loss (bits/token), mean over seeds; fairseq's seed range; our gap to fairseq's mean")
    print(f"{'update':>7} {'fairseq':>8} {'range':>15} " + " ".join(f"{s:>18} {'gap':>6}" for s in systems[1:]))
    for u in steps:
        print(
            f"{u:>7} {mean['fairseq'][u]:>8.3f} {f'[{band[u][0]:.3f}, {band[u][1]:.3f}]':>15} "
            + " ".join(f"{mean[s][u]:>18.3f} {summary[s]['loss_gap_by_update'][u]:>+6.3f}" for s in systems[1:])
        )
    for system in systems:
        print(f"{system}: test BLEU {summary[system]['test_bleu_mean']:.2f} ± {summary[system]['test_bleu_sd']:.2f}")
    print(f"wrote {out_json} and {plot}")


def draw_parity(runs: list[dict], systems: list[str], path: Path) -> None:
    """Left: every run's validation curve. Right: each run minus fairseq's mean at that update, fairseq's own seed
    range shaded, so that a gap of a few hundredths of a bit is visible."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    updates = sorted({int(u) for r in runs for u in r["valid_loss"]})
    loss = [{int(u): v for u, v in r["valid_loss"].items()} for r in runs]
    fairseq = [curve for r, curve in zip(runs, loss, strict=True) if r["system"] == "fairseq"]
    mean = {u: statistics.mean(c[u] for c in fairseq) for u in updates}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for r, curve in zip(runs, loss, strict=True):
        style = dict(
            color=f"C{systems.index(r['system'])}",
            marker="ox+"[systems.index(r["system"]) % 3],
            label=r["system"] if r["seed"] == runs[0]["seed"] else None,
            linewidth=1,
        )
        left.plot(updates, [curve[u] for u in updates], **style)
        if r["system"] != "fairseq":
            right.plot(updates, [curve[u] - mean[u] for u in updates], **style)
    right.fill_between(
        updates,
        [min(c[u] for c in fairseq) - mean[u] for u in updates],
        [max(c[u] for c in fairseq) - mean[u] for u in updates],
        color="C0",
        alpha=0.25,
        label=f"fairseq's range over {len(fairseq)} seeds",
    )
    right.axhline(0, color="C0", linewidth=1)
    left.set_ylabel("validation loss (bits/token, label-smoothed)")
    right.set_ylabel("minus fairseq's mean (bits/token)")
    left.set_title("Multi30k de-en, same recipe: fairseq 0.12.2 and lwnmt train", fontsize=10)
    right.set_title("gap to fairseq, one line per seed", fontsize=10)
    for ax in (left, right):
        ax.set_xlabel("update")
        ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fixture", help="tiny fairseq models and fairseq-generate's output for the parity test")
    p.add_argument("--updates", type=int, default=1500)
    p.add_argument("--work", help="keep the intermediate files here (default: a temporary directory)")
    p = sub.add_parser("train", help="fairseq-train and lwnmt train, same recipe and seeds: curves and test BLEU")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--updates", type=int, default=1000)
    p.add_argument("--interval", type=int, default=100, help="validation loss every this many updates")
    p.add_argument("--systems", nargs="+", choices=list(OURS), default=list(OURS), help="our variants beside fairseq")
    p.add_argument("--work", help="keep the intermediate files here (default: a temporary directory)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "parity.json"))
    p.add_argument("--plot", default=str(ROOT / "docs" / "parity.png"))
    p = sub.add_parser("plot", help="redraw the plot from a parity JSON")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "parity.json"))
    p.add_argument("--plot", default=str(ROOT / "docs" / "parity.png"))
    args = parser.parse_args()
    if args.command == "plot":
        result = json.loads(Path(args.json).read_text())
        draw_parity(result["runs"], ["fairseq", *result["ours"]], Path(args.plot))
        return
    ensure_fairseq()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        if args.command == "fixture":
            make_fixture(work, args.updates)
        else:
            training_parity(
                work, args.seeds, args.updates, args.interval, args.systems, Path(args.json), Path(args.plot)
            )


if __name__ == "__main__":
    main()
