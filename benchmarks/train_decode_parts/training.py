"""`--parts train`: CPU training speed of fairseq-train, lwnmt's trainer and a hand-written torch.nn.Transformer.

Target tokens/s after warm-up updates, on the real BPE'd IWSLT14 test set (6,750 pairs from the data mirror, used only
as realistic sentence lengths; `prepare` lays it out for fairseq and for us, and the gemm and profile parts read it
too), for two models:
  iwslt  transformer_iwslt_de_en (512/1024/4, 6+6, decoder embeddings shared, dropout 0.3), max_tokens 4096
  demo   config/demo.yaml's baseline (256/1024/4, 3+3, all embeddings shared, dropout 0.1), max_tokens 1024
each by fairseq-train (fp32, --cpu), lwnmt's trainer (fp32 and bf16 autocast) and, for iwslt, a hand-written
torch.nn.Transformer (fp32 and bf16). Model FLOP utilisation = 6 * parameters * target tokens/s / peak.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from .common import FAIRSEQ_BIN, MIRROR, MODELS, THREADS, parameters, sh

BPE_DIR = MIRROR / "iwslt14-de-en/iwslt14.tokenized.de-en"


def prepare(work: Path, fairseq: bool = True) -> None:
    """The same BPE text binarized for fairseq (fairseq-preprocess) and for us (lwnmt vocab + binarize)."""
    for lang in ("de", "en"):
        for split in ("train", "valid"):
            (work / f"{split}.{lang}").write_bytes((BPE_DIR / f"test.{lang}").read_bytes())
    if fairseq:
        sh(
            [
                str(FAIRSEQ_BIN / "fairseq-preprocess"),
                "--source-lang",
                "de",
                "--target-lang",
                "en",
                "--trainpref",
                str(work / "train"),
                "--validpref",
                str(work / "valid"),
                "--destdir",
                str(work / "fairseq-bin"),
                "--joined-dictionary",
                "--workers",
                "2",
            ]
        )
    lwnmt = [sys.executable, "-m", "layerwise_nmt"]
    (work / "ours" / "vocab").mkdir(parents=True)
    sh(
        lwnmt
        + ["vocab", str(work / "train.de"), str(work / "train.en"), "--out", str(work / "ours/vocab/dict.joint.txt")]
    )
    for split in ("train", "valid"):
        for lang in ("de", "en"):
            sh(
                lwnmt
                + [
                    "binarize",
                    str(work / f"{split}.{lang}"),
                    str(work / f"ours/bin-joint/{split}.de-en.{lang}"),
                    "--vocab",
                    str(work / "ours/vocab/dict.joint.txt"),
                ]
            )


def rate_after_warmup(lines: list[tuple[float, int]], warmup: int) -> float:
    """(timestamp, target tokens) per update → tokens/s over the updates after `warmup`."""
    (t0, _), rest = lines[warmup - 1], lines[warmup:]
    return sum(n for _, n in rest) / (rest[-1][0] - t0)


def fairseq_train(work: Path, model: dict, updates: int, warmup: int) -> float:
    cmd = [
        str(FAIRSEQ_BIN / "fairseq-train"),
        str(work / "fairseq-bin"),
        *model["fairseq"],
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--clip-norm",
        "0.0",
        "--lr",
        "5e-4",
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        "4000",
        "--weight-decay",
        "0.0001",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--max-tokens",
        str(model["max_tokens"]),
        "--max-update",
        str(updates + warmup),
        "--cpu",
        "--no-save",
        "--disable-validation",
        "--log-format",
        "json",
        "--log-interval",
        "1",
        "--seed",
        "1",
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
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


def training_batches(work: Path, max_tokens: int):
    from layerwise_nmt.data.batching import ParallelData, collate, epoch_order, make_batches

    data = ParallelData(work / "ours/bin-joint", "train", "de", "en")
    for ids in epoch_order(make_batches(data.src.sizes, data.tgt.sizes, max_tokens, None, 1), 1, 1):
        yield collate(data, ids)


def vocab_size(work: Path) -> int:
    from layerwise_nmt.data.vocab import Dictionary

    return len(Dictionary.load(work / "ours/vocab/dict.joint.txt"))


def ours_model(work: Path, model: dict):
    import torch

    from layerwise_nmt.models import build

    torch.manual_seed(1)
    vocab = vocab_size(work)
    return build("transformer", {**model["ours"], "src_vocab": vocab, "tgt_vocab": vocab}).train()


def ours_updates(work: Path, model: dict, amp: str, count: int):
    """Runs `count` updates of lwnmt's trainer (train.accumulate: autocast forward, fp32 loss, backward; then
    Adam, as `lwnmt train`), yielding each one's target tokens when it is done."""
    import torch

    from layerwise_nmt.training.precision import resolve
    from layerwise_nmt.training.loop import TrainConfig, accumulate

    net = ours_model(work, model)
    cfg = TrainConfig.from_dict({"max_update": 1, "amp": amp})
    # AdamW: fairseq's --weight-decay is decoupled, as lwnmt train's _adam
    opt = torch.optim.AdamW(net.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=1e-4)
    cpu = torch.device("cpu")
    precision = resolve(amp, cpu)
    for _, batch in zip(range(count), training_batches(work, model["max_tokens"]), strict=False):
        stats = accumulate(net, [batch], cfg, cpu, lambda: precision.autocast(cpu))
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield float(stats["ntokens"])  # accumulate's sums are tensors: a rate of them would be one too


def ours_train(work: Path, model: dict, updates: int, warmup: int, amp: str) -> float:
    import torch

    torch.set_num_threads(THREADS)
    return rate_after_warmup(
        [(time.perf_counter(), n) for n in ours_updates(work, model, amp, updates + warmup)], warmup
    )


def plain_model(vocab: int):
    import torch

    torch.manual_seed(1)
    emb = torch.nn.Embedding(vocab, 512, padding_idx=1)
    net = torch.nn.Transformer(512, 4, 6, 6, 1024, dropout=0.3, batch_first=True)
    return torch.nn.ModuleList([emb, net])


def plain_train(work: Path, model: dict, updates: int, warmup: int, amp: str) -> float:
    """What a user writes by hand: torch.nn.Transformer + embeddings + cross-entropy, same batches (iwslt sizes)."""
    import math

    import torch
    import torch.nn.functional as F

    from layerwise_nmt.models.transformer import sinusoidal_positions

    torch.set_num_threads(THREADS)
    V = vocab_size(work)
    emb, net = plain_model(V)
    opt = torch.optim.Adam(list(emb.parameters()) + list(net.parameters()), lr=5e-4, betas=(0.9, 0.98), eps=1e-9)
    pos = sinusoidal_positions(1024, 512)
    stamps = []
    for _, b in zip(range(updates + warmup), training_batches(work, model["max_tokens"]), strict=False):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp == "bf16"):
            src = emb(b.src) * math.sqrt(512) + pos[: b.src.size(1)]
            tgt = emb(b.prev) * math.sqrt(512) + pos[: b.prev.size(1)]
            mask = net.generate_square_subsequent_mask(b.prev.size(1))
            h = net(src, tgt, tgt_mask=mask, src_key_padding_mask=b.src == 1, memory_key_padding_mask=b.src == 1)
            logits = h @ emb.weight.t()
        loss = (
            F.cross_entropy(
                logits.float().view(-1, V), b.tgt.view(-1), ignore_index=1, label_smoothing=0.1, reduction="sum"
            )
            / b.ntokens
        )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        stamps.append((time.perf_counter(), b.ntokens))
    return rate_after_warmup(stamps, warmup)


def train_part(work: Path, name: str, updates: int, warmup: int, peak: dict, precisions: list[str]) -> dict:
    """One model's training rates, their ratios to fairseq and our fp32, and MFU against the measured peak."""
    model = MODELS[name]
    n_params = parameters(ours_model(work, model))  # fairseq's model of the same arch has the same count
    systems = {"fairseq 0.12.2 (fp32)": ("fp32", n_params, lambda: fairseq_train(work, model, updates, warmup))}
    for amp, label in (("none", "fp32"), ("bf16", "bf16")):
        if label in precisions:
            systems[f"lwnmt ({label})"] = (
                label,
                n_params,
                lambda amp=amp: ours_train(work, model, updates, warmup, amp),
            )
    if name == "iwslt":
        plain_params = parameters(plain_model(vocab_size(work)))
        for amp, label in (("none", "fp32"), ("bf16", "bf16")):
            if label in precisions:
                systems[f"torch.nn.Transformer ({label})"] = (
                    label,
                    plain_params,
                    lambda amp=amp: plain_train(work, model, updates, warmup, amp),
                )
    rates, mfu = {}, {}
    for system, (precision, count, measure) in systems.items():
        print(f"training {name}: {system} ...", flush=True)
        rates[system] = measure()
        mfu[system] = 6 * count * rates[system] / peak[precision]
    base = rates["fairseq 0.12.2 (fp32)"]
    part = {
        "model": model["title"],
        "parameters": n_params,
        "target_tokens_per_s": rates,
        "vs_fairseq_fp32": {k: v / base for k, v in rates.items()},
        "model_flop_utilisation": mfu,
    }
    if "lwnmt (bf16)" in rates:
        part["lwnmt_bf16_over_fp32"] = rates["lwnmt (bf16)"] / rates["lwnmt (fp32)"]
    return part
