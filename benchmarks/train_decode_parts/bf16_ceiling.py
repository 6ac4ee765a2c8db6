"""`--parts gemm` and `--parts profile`: how much bf16 can gain over fp32 on a trainer update on this CPU.

gemm: one layer's GEMM shapes and the output projection at the model's batch size, fp32 vs bf16 on one thread, the
most bf16 can gain on a whole update. profile (needs gemm): our trainer's update in fp32 and bf16, the share of it in
matrix products, and the bf16/fp32 ratio if bf16 sped up only the GEMMs. Both read `training.prepare`'s data.
"""

from __future__ import annotations

import time
from pathlib import Path

from .common import MODELS
from .training import ours_model, ours_updates, vocab_size


def gemm_bound(work: Path, name: str, repeats: int = 3) -> dict:
    """Single-thread CPU seconds (process time: a shared machine does not inflate it) of one layer's GEMM shapes
    and the output projection at the model's batch size, fp32 vs bf16: the most bf16 can gain on a whole update."""
    import torch

    torch.set_num_threads(1)
    model = MODELS[name]
    config = ours_model(work, model).config
    d, d_ff = config.d_model, config.d_ff
    tokens, vocab = model["max_tokens"], vocab_size(work)
    shapes = [(tokens, d, 3 * d), (tokens, d, d), (tokens, d, d_ff), (tokens, d_ff, d), (tokens, d, vocab)]
    seconds = {}
    for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        total = 0.0
        for m, k, n in shapes:
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
            a @ b
            start = time.process_time()
            for _ in range(repeats):
                a @ b
            total += (time.process_time() - start) / repeats
        seconds[label] = total
    return {"shapes_mkn": shapes, "cpu_seconds_1_thread": seconds, "bf16_over_fp32": seconds["fp32"] / seconds["bf16"]}


GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm"}


def where_time_goes(work: Path, name: str, gemm_ratio: float, updates: int = 3, warmup: int = 2) -> dict:
    """Single-thread CPU seconds per update of our trainer in fp32 and bf16 (process time), the share of it in
    matrix products (torch.profiler's self time of mm/addmm/bmm over a further `updates` updates), and what that
    bounds: the bf16/fp32 ratio if bf16 sped up only the GEMMs (by gemm_ratio) and left the rest as in fp32."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    out = {}
    for amp, label in (("none", "fp32"), ("bf16", "bf16")):
        steps = ours_updates(work, MODELS[name], amp, warmup + 2 * updates)
        for _ in range(warmup):
            next(steps)
        start = time.process_time()
        for _ in range(updates):
            next(steps)
        seconds = (time.process_time() - start) / updates
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in steps:
                pass
        ops = prof.key_averages()
        share = sum(e.self_cpu_time_total for e in ops if e.key in GEMM_OPS) / sum(e.self_cpu_time_total for e in ops)
        top = sorted(ops, key=lambda e: -e.self_cpu_time_total)[:12]
        total = sum(e.self_cpu_time_total for e in ops)
        out[label] = {
            "cpu_seconds_per_update": seconds,
            "gemm_share": share,
            "top_ops_share": {e.key: e.self_cpu_time_total / total for e in top},
        }
    fp32 = out["fp32"]
    gemm, rest = (
        fp32["cpu_seconds_per_update"] * fp32["gemm_share"],
        fp32["cpu_seconds_per_update"] * (1 - fp32["gemm_share"]),
    )
    out["bf16_over_fp32"] = fp32["cpu_seconds_per_update"] / out["bf16"]["cpu_seconds_per_update"]
    out["ceiling_if_only_gemms_gain"] = fp32["cpu_seconds_per_update"] / (gemm / gemm_ratio + rest)
    out["non_gemm_seconds_fp32"] = rest
    out["non_gemm_seconds_allowed_for_2_5x"] = fp32["cpu_seconds_per_update"] / 2.5 - gemm / gemm_ratio
    return out
