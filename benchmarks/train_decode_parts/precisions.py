"""`--parts precisions`: the demo model's update through the trainer's own `update_step` in fp32, bf16 autocast and bf16
weights with fp32 masters (`amp: bf16-weights`), paired round by round, in one thread's CPU time.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from .common import parameters
from .paired import TRAIN_PRECISIONS


def precision_part(data: Path, model: dict, rounds: int, warmup: int) -> dict:
    """One trainer update (`loop.update_step`: forward, loss, backward, the master-weight copies of bf16-weights,
    clipping and AdamW, as `lwnmt train` runs it) of `model` in each of TRAIN_PRECISIONS, on `data` (a bin-joint
    folder whose vocab/ is beside it). Paired: each round takes the next batch and updates every precision's own
    model (the same initial weights) on it, the order of the precisions reversed every other round, so that a
    change in the machine's load hits all of them. Timed in the CPU time of the one thread that computes, as the
    precision probe (a background job on the other core changes it little; wall time is recorded beside it).
    Reports each precision's median and fastest update and, per round, fp32's time over each precision's (median
    and quartiles)."""
    import tempfile

    import torch

    from layerwise_nmt.data.batching import ParallelData, collate, epoch_order, make_batches
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.training import master_weights
    from layerwise_nmt.training.loop import TrainConfig, start_run, update_step
    from layerwise_nmt.training.precision import Precision

    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    train_data = ParallelData(str(data), "train", "de", "en")
    order = epoch_order(make_batches(train_data.src.sizes, train_data.tgt.sizes, model["max_tokens"], None, 1), 1, 1)
    batches = [collate(train_data, ids) for ids in order[: warmup + rounds]]
    vocabs = dict(zip(("de", "en"), load_pair(str(data), "de", "en"), strict=True))
    train = {"max_tokens": model["max_tokens"], "max_update": 1}
    spec = {"model": "transformer", "arch": model["ours"], "train": train}
    runs = {}
    for label, amp in TRAIN_PRECISIONS.items():
        precision = Precision(amp, amp, "benchmark", "cpu")
        torch.manual_seed(1)
        with tempfile.TemporaryDirectory() as tmp:
            run = start_run(spec, TrainConfig.from_dict(spec["train"]), vocabs, Path(tmp), cpu, precision)
        runs[label] = (run, master_weights.compute_model(run.model, precision), precision)
    cpu_s: dict[str, list[float]] = {label: [] for label in runs}
    wall_s: dict[str, list[float]] = {label: [] for label in runs}
    for i, batch in enumerate(batches):
        for label in list(runs) if i % 2 == 0 else list(runs)[::-1]:
            run, net, precision = runs[label]
            t0, w0 = time.thread_time(), time.perf_counter()
            update_step(run, net, [batch], cpu, lambda precision=precision: precision.autocast(cpu))
            if i >= warmup:
                cpu_s[label].append(time.thread_time() - t0)
                wall_s[label].append(time.perf_counter() - w0)
            run.progress.update += 1

    def quartiles(values: list[float]) -> dict:
        q1, median, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
        return {"q1": q1, "median": median, "q3": q3}

    tokens = [b.ntokens for b in batches[warmup:]]
    return {
        "model": model["title"],
        "parameters": parameters(runs["fp32"][0].model),
        "rounds": rounds,
        "warmup": warmup,
        "threads": 1,
        "target_tokens_per_update_mean": statistics.mean(tokens),
        "cpu_seconds_per_update": {k: {"median": statistics.median(v), "min": min(v)} for k, v in cpu_s.items()},
        "wall_seconds_per_update": {k: {"median": statistics.median(v), "min": min(v)} for k, v in wall_s.items()},
        "speedup_over_fp32_per_round": {
            k: quartiles([f / x for f, x in zip(cpu_s["fp32"], v, strict=True)])
            for k, v in cpu_s.items()
            if k != "fp32"
        },
        "bf16_weights_over_bf16_per_round": quartiles(
            [a / w for a, w in zip(cpu_s["bf16"], cpu_s["bf16-weights"], strict=True)]
        ),
        "load_average": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
