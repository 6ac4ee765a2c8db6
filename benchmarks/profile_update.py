"""Where a training update's time goes, per precision: the trainer's `update_step` on gpu_check's speed batches, timed,
then profiled (torch.profiler), the ops that take the most device and host time printed per precision. The
batches are those the trainer takes on a GPU by default (fixed shapes, `--bucket-growth-factor 1.1`; 0: fairseq's),
each update taken eagerly: a CUDA graph's replay would show the profiler one launch instead of its kernels.
`--losses chunked reference` times and profiles each precision with the trainer's chunked label-smoothed
cross-entropy and with fairseq's formulation (training/loss.py), one after the other.

    python benchmarks/profile_update.py [--row transformer_iwslt_de_en] [--precisions bf16 tf32] [--updates 10]
        [--bucket-growth-factor 1.1] [--losses chunked reference] [--device cuda|cpu] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402  (the speed rows' batches and precisions)


def build(row: str, label: str, device: torch.device, max_tokens: int | None, growth: float):
    from layerwise_nmt import grid
    from layerwise_nmt.data.vocab import SPECIALS, Dictionary
    from layerwise_nmt.grid.pricing import task_vocab
    from layerwise_nmt.training.loop import TrainConfig, start_run

    config = gpu_check.read_config(ROOT / "config.yaml")
    experiment, lengths, row_tokens = gpu_check.SPEED_ROWS[row]
    max_tokens = max_tokens or row_tokens or 12288
    e = grid.experiment(config, experiment)
    vocab = task_vocab(config, e)
    precision, tf32 = gpu_check.precision_of(label, device)
    spec = {
        "model": e["model"],
        "arch": e["arch"],
        "train": {
            **e["train"],
            "amp": precision.amp,
            "tf32": tf32,
            "max_tokens": max_tokens,
            "bucket_growth_factor": growth,
            "cuda_graphs": "off",
        },
    }
    batches = gpu_check.real_batches(*gpu_check.stored_lengths(lengths), max_tokens, vocab, growth=growth)
    dictionaries = {
        lang: Dictionary([f"w{i}" for i in range(size - len(SPECIALS))], [1] * (size - len(SPECIALS)))
        for lang, size in ((e["src"], vocab[0]), (e["tgt"], vocab[1]))
    }
    with tempfile.TemporaryDirectory() as tmp:
        run = start_run(spec, TrainConfig.from_dict(spec["train"]), dictionaries, Path(tmp), device, precision)
    run.model.train()
    return run, precision, tf32, batches


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def one_precision(
    row: str,
    label: str,
    device: torch.device,
    updates: int,
    max_tokens: int | None,
    growth: float = 1.1,
    loss_name: str = "chunked",
) -> dict:
    from unittest import mock

    from torch.profiler import ProfilerActivity, profile

    from layerwise_nmt.training import loss
    from layerwise_nmt.training.loop import update_step
    from layerwise_nmt.training.master_weights import compute_model
    from layerwise_nmt.training.precision import cuda_kernels

    run, precision, tf32, batches = build(row, label, device, max_tokens, growth)
    net = compute_model(run.model, precision)  # bf16-weights: the bf16 copy, fp32 masters in run.model
    order = [batches[i % len(batches)] for i in np.random.RandomState(0).permutation(max(len(batches), updates * 3))]

    def step(batch):
        return update_step(run, net, [batch], device, lambda: precision.autocast(device))

    out = {"row": row, "precision": label, "amp": precision.amp, "tf32": tf32, "bucket_growth_factor": growth}
    out["loss"] = loss_name
    with cuda_kernels(device, tf32), mock.patch.object(loss, "smoothed_loss", loss.LOSSES[loss_name]):
        for b in order[:3]:
            step(b)
        sync(device)
        started, tokens = time.perf_counter(), 0
        for b in order[3 : 3 + updates]:
            step(b)
            tokens += b.ntokens
        sync(device)
        seconds = time.perf_counter() - started
        out.update(
            updates=updates,
            seconds_per_update=round(seconds / updates, 4),
            target_tokens_per_second=round(tokens / seconds),
        )
        print(json.dumps(out), flush=True)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            for b in order[3 + updates : 3 + updates + 3]:
                step(b)
            sync(device)
    averages = prof.key_averages()
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    for sort, n in ((key, 14), ("self_cpu_time_total", 8)):
        print(f"--- {row} {label}, {loss_name} loss: top ops by {sort}")
        print(averages.table(sort_by=sort, row_limit=n, max_name_column_width=60))
    out["top_device_ops"] = [
        {"name": a.key, "calls": a.count, "self_us": round(getattr(a, key, 0.0))}
        for a in sorted(averages, key=lambda a: -getattr(a, key, 0.0))[:20]
    ]
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", default="transformer_iwslt_de_en", choices=list(gpu_check.SPEED_ROWS))
    parser.add_argument("--precisions", nargs="+", default=["bf16", "tf32"], choices=list(gpu_check.PRECISIONS))
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--bucket-growth-factor", type=float, default=1.1, help="0: fairseq's batches")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--losses", nargs="+", default=["chunked"], choices=["chunked", "reference"])
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    results = []
    for label in args.precisions:
        for loss_name in args.losses:
            results.append(
                one_precision(
                    args.row, label, device, args.updates, args.max_tokens, args.bucket_growth_factor, loss_name
                )
            )
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
