"""What the parts timing variants of one trainer update share: the precisions they train in (TRAIN_PRECISIONS, the
precisions part's too) and, for the shapes, loss and compile parts, the variants' updates paired round by round
through the trainer's `update_step`: each variant's run from the same initial weights, the variants' order reversed
every other round so that a change in the machine's load hits all of them, on one thread.
"""

from __future__ import annotations

import time
from pathlib import Path

from .common import MODELS

TRAIN_PRECISIONS = {"fp32": "none", "bf16": "bf16", "bf16-weights": "bf16-weights"}  # label → amp


def paired_updates(runs: dict, rounds: int, warmup: int, precision, around=None) -> tuple[dict, dict]:
    """Each variant's run (`runs`: name → (the trainer's Run, its batches)) updated once a round through the
    trainer's `update_step`, the variants' order reversed every other round, each update inside `around(name)`, one
    thread: real target tokens per CPU second over the timed rounds, and the padded share of each variant's token
    slots (source and target)."""
    from contextlib import nullcontext

    import torch

    from layerwise_nmt.training.loop import update_step

    cpu = torch.device("cpu")
    cpu_s = {name: 0.0 for name in runs}
    tokens = {name: 0 for name in runs}
    slots = {name: [0, 0] for name in runs}  # padded token slots (source + target), of them padding
    for i in range(warmup + rounds):
        for name in list(runs) if i % 2 == 0 else list(runs)[::-1]:
            run, batches = runs[name]
            batch = batches[i]
            with around(name) if around else nullcontext():
                t0 = time.thread_time()
                update_step(run, run.model, [batch], cpu, lambda: precision.autocast(cpu))
                spent = time.thread_time() - t0
            if i >= warmup:
                cpu_s[name] += spent
                tokens[name] += batch.ntokens
                real = int((batch.src != 1).sum() + (batch.tgt != 1).sum())
                size = batch.src.numel() + batch.tgt.numel()
                slots[name] = [slots[name][0] + size, slots[name][1] + size - real]
            run.progress.update += 1
    rate = {name: tokens[name] / cpu_s[name] for name in runs}
    return rate, {name: pad / size for name, (size, pad) in slots.items()}


def same_start(data: Path, name: str, rounds: int, warmup: int):
    """What the parts comparing variants of one update share: `model`'s first warmup + rounds batches (fairseq's, in
    the trainer's seeded order), the part's result with its header, and `start(variants, precision)`: one trainer
    Run per variant, each from the same initial weights, with those batches."""
    import tempfile

    import torch

    from layerwise_nmt.data.batching import ParallelData, collate, epoch_order, make_batches
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.training.loop import TrainConfig, start_run

    model = MODELS[name]
    torch.set_num_threads(1)
    train_data = ParallelData(str(data), "train", "de", "en")
    vocabs = dict(zip(("de", "en"), load_pair(str(data), "de", "en"), strict=True))
    batches = make_batches(train_data.src.sizes, train_data.tgt.sizes, model["max_tokens"], None, 1)
    order = [collate(train_data, ids) for ids in epoch_order(batches, 1, 1)[: warmup + rounds]]
    result: dict = {"model": model["title"], "rounds": rounds, "warmup": warmup, "threads": 1}
    train = {"max_tokens": model["max_tokens"], "max_update": 1, "bucket_growth_factor": 0}
    spec = {"model": "transformer", "arch": model["ours"], "train": train}

    def start(variants, precision) -> dict:
        runs = {}
        for variant in variants:
            torch.manual_seed(1)
            with tempfile.TemporaryDirectory() as tmp:
                run = start_run(spec, TrainConfig.from_dict(train), vocabs, Path(tmp), torch.device("cpu"), precision)
            runs[variant] = (run, order)
        return runs

    return order, result, start
