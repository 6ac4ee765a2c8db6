"""Training and decoding speed vs fairseq 0.12.2 and plain torch.nn.Transformer, measured back to back here.

Training: target tokens/s of transformer_iwslt_de_en (512/1024/4, 6+6, shared decoder embeddings, dropout 0.3,
label smoothing 0.1, max_tokens 4096) on the real BPE'd IWSLT14 test set (6,750 pairs from the data mirror, used
only as realistic sentence lengths), after warm-up updates, for
  fairseq-train (fp32, --cpu), lwnmt train (fp32 and bf16 autocast), plain torch.nn.Transformer (fp32 and bf16).
Decoding: beam 5, batch 64, output capped at 1.2·src + 10, 500 sources, untrained models (so that every system
decodes to the cap and the comparison is per step): fairseq-generate vs lwnmt translate.

fairseq runs in its own venv (`.fairseq-venv`, Python 3.10 from pyenv; created on first use, ~2 minutes); the
project never imports it.

    python benchmarks/train_decode.py [--updates 12] [--warmup 3] [--json benchmarks/results/train_decode.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("LWNMT_DATA_MIRROR") or ROOT / ".." / "shared" / "data-mirror").resolve()
BPE_DIR = MIRROR / "iwslt14-de-en/iwslt14.tokenized.de-en"
FAIRSEQ_VENV = ROOT / ".fairseq-venv"
FAIRSEQ_BIN = FAIRSEQ_VENV / "bin"
ARCH = {"preset": "iwslt", "encoder_layers": 6, "decoder_layers": 6, "tie": "decoder", "dropout": 0.3}


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if result.returncode:
        raise RuntimeError(f"{cmd[0]} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def ensure_fairseq() -> None:
    if (FAIRSEQ_BIN / "fairseq-train").exists():
        return
    python310 = sh(["pyenv", "root"]).stdout.strip() + "/versions/3.10.13/bin/python"
    print("creating .fairseq-venv (fairseq 0.12.2, torch 1.13.1) ...", flush=True)
    sh([python310, "-m", "venv", str(FAIRSEQ_VENV)])
    pip = [str(FAIRSEQ_BIN / "pip"), "install", "--quiet"]
    sh(pip + ["pip<24.1"])
    sh(pip + ["torch==1.13.1", "numpy<1.24", "cython"])
    sh(pip + ["fairseq==0.12.2"])


def fairseq_cli(tool: str) -> list[str]:
    """The command running fairseq_cli.<tool> (generate, interactive) on a loaded checkpoint. fairseq 0.12.2 +
    torch 1.13 crash in the BetterTransformer encoder fast path of a loaded post-norm checkpoint ("Mask Type should
    be defined", fairseq issues #4858/#4899); the driver turns that path off, as in training mode, which computes the
    same layer."""
    driver = (
        "import sys, fairseq.modules.transformer_layer as tl\n"
        "load = tl.TransformerEncoderLayerBase._load_from_state_dict\n"
        "def no_bt(self, *a, **k):\n    load(self, *a, **k)\n    self.load_to_BT = False\n"
        "tl.TransformerEncoderLayerBase._load_from_state_dict = no_bt\n"
        f"from fairseq_cli.{tool} import cli_main\nsys.argv = ['fairseq-{tool}'] + sys.argv[1:]\ncli_main()\n"
    )
    return [str(FAIRSEQ_BIN / "python"), "-c", driver]


def prepare(work: Path) -> None:
    """The same BPE text binarized for fairseq (fairseq-preprocess) and for us (lwnmt vocab + binarize)."""
    for lang in ("de", "en"):
        for split in ("train", "valid"):
            (work / f"{split}.{lang}").write_bytes((BPE_DIR / f"test.{lang}").read_bytes())
    sh([str(FAIRSEQ_BIN / "fairseq-preprocess"), "--source-lang", "de", "--target-lang", "en",
        "--trainpref", str(work / "train"), "--validpref", str(work / "valid"), "--destdir", str(work / "fairseq-bin"),
        "--joined-dictionary", "--workers", "2"])
    lwnmt = [sys.executable, "-m", "layerwise_nmt"]
    (work / "ours" / "vocab").mkdir(parents=True)
    sh(lwnmt + ["vocab", str(work / "train.de"), str(work / "train.en"), "--out",
                str(work / "ours/vocab/dict.joint.txt")])
    for split in ("train", "valid"):
        for lang in ("de", "en"):
            sh(lwnmt + ["binarize", str(work / f"{split}.{lang}"), str(work / f"ours/bin-joint/{split}.de-en.{lang}"),
                        "--vocab", str(work / "ours/vocab/dict.joint.txt")])


def rate_after_warmup(lines: list[tuple[float, int]], warmup: int) -> float:
    """(timestamp, target tokens) per update → tokens/s over the updates after `warmup`."""
    (t0, _), rest = lines[warmup - 1], lines[warmup:]
    return sum(n for _, n in rest) / (rest[-1][0] - t0)


def fairseq_train(work: Path, updates: int, warmup: int) -> float:
    cmd = [str(FAIRSEQ_BIN / "fairseq-train"), str(work / "fairseq-bin"), "--arch", "transformer_iwslt_de_en",
           "--share-decoder-input-output-embed", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
           "--clip-norm", "0.0", "--lr", "5e-4", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4000",
           "--dropout", "0.3", "--weight-decay", "0.0001", "--criterion", "label_smoothed_cross_entropy",
           "--label-smoothing", "0.1", "--max-tokens", "4096", "--max-update", str(updates + warmup), "--cpu",
           "--no-save", "--disable-validation", "--log-format", "json", "--log-interval", "1", "--seed", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="2")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    stamps = []
    for line in proc.stdout:  # one JSON log line per update, stamped as it arrives
        match = re.search(r"train_inner \| (\{.*\})", line)
        if match:
            stamps.append((time.perf_counter(), float(json.loads(match.group(1))["wpb"])))
    proc.wait()
    if proc.returncode or len(stamps) <= warmup:
        raise RuntimeError(f"fairseq-train failed or logged too little ({len(stamps)} updates)")
    return rate_after_warmup(stamps, warmup)


def ours_train(work: Path, updates: int, warmup: int, amp: str) -> float:
    from layerwise_nmt.data.batching import ParallelData, collate, epoch_order, make_batches
    from layerwise_nmt.models import build
    from layerwise_nmt.train import TrainConfig, accumulate
    import torch

    data = ParallelData(work / "ours/bin-joint", "train", "de", "en")
    from layerwise_nmt.data.vocab import Dictionary

    vocab = len(Dictionary.load(work / "ours/vocab/dict.joint.txt"))
    torch.manual_seed(1)
    model = build("transformer", {**ARCH, "src_vocab": vocab, "tgt_vocab": vocab}).train()
    cfg = TrainConfig.from_dict({"max_update": 1, "amp": amp})
    opt = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=1e-4)
    batches = epoch_order(make_batches(data.src.sizes, data.tgt.sizes, 4096, None, 1), 1, 1)
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp == "bf16")  # noqa: E731
    stamps = []
    for ids in batches[: updates + warmup]:
        stats = accumulate(model, [collate(data, ids)], cfg, torch.device("cpu"), autocast)
        opt.step()
        opt.zero_grad(set_to_none=True)
        stamps.append((time.perf_counter(), stats["ntokens"]))
    return rate_after_warmup(stamps, warmup)


def plain_train(work: Path, updates: int, warmup: int, amp: str) -> float:
    """What a user writes by hand: torch.nn.Transformer + embeddings + cross-entropy, same batches."""
    import math

    import torch
    import torch.nn.functional as F

    from layerwise_nmt.data.batching import ParallelData, collate, epoch_order, make_batches
    from layerwise_nmt.data.vocab import Dictionary

    data = ParallelData(work / "ours/bin-joint", "train", "de", "en")
    V = len(Dictionary.load(work / "ours/vocab/dict.joint.txt"))
    torch.manual_seed(1)
    emb = torch.nn.Embedding(V, 512, padding_idx=1)
    net = torch.nn.Transformer(512, 4, 6, 6, 1024, dropout=0.3, batch_first=True)
    params = list(emb.parameters()) + list(net.parameters())
    opt = torch.optim.Adam(params, lr=5e-4, betas=(0.9, 0.98), eps=1e-9)
    pos = torch.zeros(1024, 512)
    position = torch.arange(1024)[:, None]
    div = torch.exp(torch.arange(0, 512, 2) * (-math.log(10000.0) / 512))
    pos[:, 0::2], pos[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
    batches = epoch_order(make_batches(data.src.sizes, data.tgt.sizes, 4096, None, 1), 1, 1)
    stamps = []
    for ids in batches[: updates + warmup]:
        b = collate(data, ids)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp == "bf16"):
            src = emb(b.src) * math.sqrt(512) + pos[: b.src.size(1)]
            tgt = emb(b.prev) * math.sqrt(512) + pos[: b.prev.size(1)]
            mask = net.generate_square_subsequent_mask(b.prev.size(1))
            h = net(src, tgt, tgt_mask=mask, src_key_padding_mask=b.src == 1, memory_key_padding_mask=b.src == 1)
            logits = h @ emb.weight.t()
        loss = F.cross_entropy(logits.float().view(-1, V), b.tgt.view(-1), ignore_index=1, label_smoothing=0.1,
                               reduction="sum") / b.ntokens
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        stamps.append((time.perf_counter(), b.ntokens))
    return rate_after_warmup(stamps, warmup)


def fairseq_decode(work: Path, n: int) -> float:
    ckpt = work / "fairseq-ckpt"
    sh([str(FAIRSEQ_BIN / "fairseq-train"), str(work / "fairseq-bin"), "--arch", "transformer_iwslt_de_en",
        "--share-decoder-input-output-embed", "--optimizer", "adam", "--lr", "1e-9", "--max-tokens", "512",
        "--max-update", "1", "--cpu", "--save-dir", str(ckpt), "--disable-validation", "--no-epoch-checkpoints"])
    src = decode_sources(work, n)
    start = time.perf_counter()
    sh(fairseq_cli("interactive") + [str(work / "fairseq-bin"), "--path", str(ckpt / "checkpoint_last.pt"),
        "--input", str(src), "--beam", "5", "--batch-size", "64", "--buffer-size", "2000", "--max-len-a", "1.2",
        "--max-len-b", "10", "--cpu", "--source-lang", "de", "--target-lang", "en"],
       env=dict(os.environ, OMP_NUM_THREADS="2"))
    return n / (time.perf_counter() - start)


def decode_sources(work: Path, n: int) -> Path:
    src = work / "decode.de"
    src.write_text("".join((BPE_DIR / "test.de").read_text(encoding="utf-8").splitlines(keepends=True)[:n]))
    return src


def ours_decode(work: Path, n: int, amp: str) -> float:
    import torch

    from layerwise_nmt.data.vocab import Dictionary
    from layerwise_nmt.decode import BeamConfig, translate
    from layerwise_nmt.models import build

    vocab = Dictionary.load(work / "ours/vocab/dict.joint.txt")
    torch.manual_seed(1)
    model = build("transformer", {**ARCH, "src_vocab": len(vocab), "tgt_vocab": len(vocab)}).eval()
    src = decode_sources(work, n)
    cfg = BeamConfig(beam=5, batch_size=64, max_len_a=1.2, max_len_b=10, amp=amp)
    start = time.perf_counter()
    translate(model, str(src), vocab, vocab, cfg, str(work / f"ours-{amp}"))
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--json", default=str(ROOT / "benchmarks/results/train_decode.json"))
    parser.add_argument("--parts", default="train,decode", help="which parts to (re)measure; others are kept")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    out = Path(args.json)
    result = json.loads(out.read_text()) if out.exists() else {}
    ensure_fairseq()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prepare(work)
        if "train" in parts:
            result["train_target_tokens_per_s"] = {
                "fairseq 0.12.2 (fp32)": fairseq_train(work, args.updates, args.warmup),
                "lwnmt (fp32)": ours_train(work, args.updates, args.warmup, "none"),
                "lwnmt (bf16 autocast)": ours_train(work, args.updates, args.warmup, "bf16"),
                "torch.nn.Transformer (fp32)": plain_train(work, args.updates, args.warmup, "none"),
                "torch.nn.Transformer (bf16 autocast)": plain_train(work, args.updates, args.warmup, "bf16"),
            }
            result["train_settings"] = {"updates": args.updates, "warmup": args.warmup}
        if "decode" in parts:
            result["decode_sentences_per_s"] = {
                "fairseq-interactive (fp32)": fairseq_decode(work, args.sentences),
                "lwnmt translate (fp32)": ours_decode(work, args.sentences, "none"),
                "lwnmt translate (bf16 autocast)": ours_decode(work, args.sentences, "bf16"),
            }
            result["decode_settings"] = {"sentences": args.sentences, "beam": 5, "batch_size": 64,
                                         "max_len": "1.2*src+10"}
    result["cpu_count"] = os.cpu_count()
    for key, base in (("train_target_tokens_per_s", "fairseq 0.12.2 (fp32)"),
                      ("decode_sentences_per_s", "fairseq-interactive (fp32)")):
        if key in result:
            values = result[key]
            result[key.replace("_per_s", "_speedup_vs_fairseq")] = {k: v / values[base] for k, v in values.items()}
    report(result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out}")


def report(result: dict) -> None:
    for key, unit, title in (("train_target_tokens_per_s", "target tok/s",
                              "training, transformer_iwslt_de_en, max_tokens 4096"),
                             ("decode_sentences_per_s", "sentences/s",
                              "decoding, beam 5, batch 64, max length 1.2*src+10 (untrained models)")):
        if key not in result:
            continue
        values = result[key]
        base = next(iter(values.values()))
        print(f"\n{title}\n{'system':<40} {unit:>12} {'vs fairseq':>10}")
        for name, value in values.items():
            print(f"{name:<40} {value:12.2f} {value / base:9.2f}x")


if __name__ == "__main__":
    main()
