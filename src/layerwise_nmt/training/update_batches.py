"""The batches each update trains on: the epoch's seeded order of fairseq-style token-bounded batches, cut to whole
updates, and each rank's share of one update, collated (and merged into fewer passes when `micro_batch_tokens`
asks)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from .. import UserError
from ..data.batching import Batch, ParallelData, collate, epoch_order, make_batches, merge_batches
from ..models.transformer import Model
from .config import TrainConfig
from .distributed import world
from .progress import Progress


def epoch_batches(data: ParallelData, cfg: TrainConfig, progress: Progress, per_update: int, data_dir: str) -> list:
    """The epoch's batches in their seeded order, cut to a whole number of updates: every rank takes the same
    number of updates."""
    batches = make_batches(
        data.src.sizes,
        data.tgt.sizes,
        *batch_limits(cfg, progress.restarted),
        cfg.seed,
        skip_longer_than=cfg.skip_longer_than,
    )
    order = epoch_order(batches, cfg.seed, progress.epoch)
    order = order[: len(order) // per_update * per_update]
    if not order:  # else an update-bounded run would loop over empty epochs forever
        raise UserError(
            f"{data_dir}: an epoch has {len(batches)} batches, fewer than the {per_update} one update "
            f"takes (update_freq {cfg.update_freq} × {world()[1]} ranks); lower max_tokens or "
            f"update_freq"
        )
    return order


def batch_limits(cfg: TrainConfig, restarted: bool) -> tuple[int | None, int | None]:
    """(max_tokens, max_sentences) of the current stage; RestartAdam's stage may change the batch size."""
    if restarted and (cfg.restart_max_tokens or cfg.restart_max_sentences):
        return cfg.restart_max_tokens, cfg.restart_max_sentences
    return cfg.max_tokens, cfg.max_sentences


def rank_batches(
    data: ParallelData,
    order: list[np.ndarray],
    per_update: int,
    micro_batch_tokens: int,
    device: torch.device,
    position: int,
) -> list[Batch]:
    """This rank's share of the update that starts at batch `position` of the epoch's `order`, collated: merged
    into passes of up to `micro_batch_tokens` padded tokens when set (`merge_batches`), else one per batch in
    their order; pinned when the model is on a GPU, so that `Batch.to` copies them asynchronously. Runs on the
    `Prefetcher` thread."""
    rank, world_size = world()
    batches = order[position : position + per_update][rank::world_size]
    if micro_batch_tokens:
        merged = merge_batches(batches, data.sizes, micro_batch_tokens)
        collated = [replace(collate(data, ids), parts=parts) for ids, parts in merged]
    else:
        collated = [collate(data, ids) for ids in batches]
    return [batch.pin_memory() for batch in collated] if device.type == "cuda" else collated


def check_merging(model: Model, cfg: TrainConfig) -> None:
    """Refuse micro_batch_tokens for a model whose loss has a term per pass rather than per token
    (`loss.accumulate`; the model says why: `Model.merging_changes_loss`)."""
    why = model.merging_changes_loss() if cfg.micro_batch_tokens else None
    if why:
        raise UserError(
            f"micro_batch_tokens={cfg.micro_batch_tokens}: model {type(model).__name__} {why}, which "
            f"merged batches would change; set micro_batch_tokens: 0"
        )
