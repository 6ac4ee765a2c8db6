"""`--parts shapes`: each of --models trained through `update_step` on fairseq's batches and on fixed shapes
(`bucket_growth_factor: 1.1`), paired round by round, per precision, in real target tokens per CPU second.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .common import MODELS
from .paired import TRAIN_PRECISIONS, paired_updates

SHAPES = {"fairseq": 0.0, "fixed 1.1": 1.1}  # label → bucket_growth_factor (seq_len_multiple 2, the default)


def shapes_part(data: Path, name: str, rounds: int, warmup: int, precisions: list[str]) -> dict:
    """`bucket_growth_factor` on the CPU: `model` trained by the trainer's `update_step` on fairseq's batches (each
    padded to its own longest) and on fixed shapes (1.1), in each precision, one thread. Paired: each round updates both
    batchings' models (the same initial weights; each its own epoch of batches, in the trainer's seeded order), the
    order reversed every other round. The batches differ, so the figure compared is real target tokens per CPU
    second over the timed rounds (padding and dummy rows cost time and count nothing), with the padded share of
    each batching's token slots beside it."""
    import tempfile

    import torch

    from layerwise_nmt.data.batch_shapes import FixedShapes
    from layerwise_nmt.data.batching import ParallelData, collate, epoch_order, make_batches
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.training.loop import TrainConfig, start_run
    from layerwise_nmt.training.precision import Precision

    model = MODELS[name]
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    train_data = ParallelData(str(data), "train", "de", "en")
    vocabs = dict(zip(("de", "en"), load_pair(str(data), "de", "en"), strict=True))
    result: dict = {"model": model["title"], "rounds": rounds, "warmup": warmup, "threads": 1}
    for label in precisions:
        amp = TRAIN_PRECISIONS[label]
        precision = Precision(amp, amp, "benchmark", "cpu")
        runs = {}
        for batching, growth in SHAPES.items():
            train = {"max_tokens": model["max_tokens"], "max_update": 1, "bucket_growth_factor": growth}
            spec = {"model": "transformer", "arch": model["ours"], "train": train}
            shapes = FixedShapes(growth, 2, model["max_tokens"], None) if growth else None
            batches = make_batches(
                train_data.src.sizes, train_data.tgt.sizes, model["max_tokens"], None, 1, shapes=shapes
            )
            order = epoch_order(batches, 1, 1)[: warmup + rounds]
            torch.manual_seed(1)
            with tempfile.TemporaryDirectory() as tmp:
                run = start_run(spec, TrainConfig.from_dict(train), vocabs, Path(tmp), cpu, precision)
            runs[batching] = (run, [collate(train_data, ids, shapes=shapes) for ids in order])
        rate, padding = paired_updates(runs, rounds, warmup, precision)
        result[label] = {
            "target_tokens_per_cpu_s": rate,
            "padding_share": padding,
            "fixed_over_fairseq": rate["fixed 1.1"] / rate["fairseq"],
        }
    result["load_average"] = os.getloadavg()
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return result
