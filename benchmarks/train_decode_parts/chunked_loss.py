"""`--parts loss`: each of --models trained through `update_step` with the chunked label-smoothed cross-entropy
(`training/loss.py`) and with fairseq's formulation, on the same batches, paired round by round.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .paired import TRAIN_PRECISIONS, paired_updates, same_start


def loss_part(data: Path, name: str, rounds: int, warmup: int, precisions: list[str]) -> dict:
    """The chunked label-smoothed cross-entropy (training/loss.py, `SmoothedCrossEntropy`) against fairseq's
    formulation, which keeps the (tokens × vocabulary) fp32 log-probabilities: `model` trained by the trainer's
    `update_step` with each, on the same batches (fairseq's) from the same initial weights, paired round by round, in
    each precision, one thread, in target tokens per CPU second."""
    from unittest import mock

    from layerwise_nmt.training import loss
    from layerwise_nmt.training.precision import Precision

    _, result, start = same_start(data, name, rounds, warmup)
    for label in precisions:
        amp = TRAIN_PRECISIONS[label]
        precision = Precision(amp, amp, "benchmark", "cpu")
        rate, _ = paired_updates(
            start(loss.LOSSES, precision),
            rounds,
            warmup,
            precision,
            lambda v: mock.patch.object(loss, "smoothed_loss", loss.LOSSES[v]),
        )
        result[label] = {"target_tokens_per_cpu_s": rate, "chunked_over_reference": rate["chunked"] / rate["reference"]}
    result["load_average"] = os.getloadavg()
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return result
