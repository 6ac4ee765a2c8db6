"""`--parts compile`: each of --models trained through `update_step` eagerly and with `compile: true`
(`training/compiler.py`, Inductor), on the same batches, paired round by round; the first compiled update's wall
seconds (the compilation) reported apart.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .paired import TRAIN_PRECISIONS, paired_updates, same_start


def compile_part(data: Path, name: str, rounds: int, warmup: int, precisions: list[str]) -> dict:
    """`compile: true` (training/compiler.py) against the eager model: `model` trained by the trainer's `update_step`
    compiled and not, on the same batches (fairseq's) from the same initial weights, paired round by round, in each
    precision, one thread, in target tokens per CPU second; the compilation itself, in the warm-up rounds, is timed
    apart (wall seconds of the first compiled update)."""
    import torch

    from layerwise_nmt.training import compiler
    from layerwise_nmt.training.loop import update_step
    from layerwise_nmt.training.precision import Precision

    cpu = torch.device("cpu")
    order, result, start = same_start(data, name, rounds, warmup)
    for label in precisions:
        amp = TRAIN_PRECISIONS[label]
        precision = Precision(amp, amp, "benchmark", "cpu")
        runs = start(("eager", "compiled"), precision)
        torch._dynamo.reset()
        compiled = compiler.compile_model(runs["compiled"][0].model, cpu)
        started = time.perf_counter()
        update_step(runs["compiled"][0], compiled, [order[0]], cpu, lambda: precision.autocast(cpu))  # noqa: B023  (used within this iteration)
        compile_s = time.perf_counter() - started
        rate, _ = paired_updates(runs, rounds, warmup, precision)
        result[label] = {
            "target_tokens_per_cpu_s": rate,
            "compiled_over_eager": rate["compiled"] / rate["eager"],
            "first_compiled_update_s": round(compile_s, 1),
        }
    result["load_average"] = os.getloadavg()
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return result
