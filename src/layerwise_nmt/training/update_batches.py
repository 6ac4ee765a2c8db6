"""The batches each update trains on: the epoch's seeded order of fairseq-style token-bounded batches (of fixed shapes
when `bucket_growth_factor` asks), cut to whole updates, and each rank's share of one update, collated (and merged
into fewer passes when `micro_batch_tokens` asks)."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import torch

from .. import UserError
from ..data.batch_shapes import FixedShapes, batching_summary
from ..data.batching import Batch, ParallelData, collate, epoch_order, make_batches, merge_batches
from ..models.transformer import Model
from .config import AUTO_GROWTH, TrainConfig
from .distributed import world
from .progress import Progress

log = logging.getLogger(__name__)


def epoch_batches(
    data: ParallelData, cfg: TrainConfig, progress: Progress, per_update: int, data_dir: str
) -> tuple[list, FixedShapes | None]:
    """The epoch's batches in their seeded order, cut to a whole number of updates (every rank takes the same
    number of updates), and the fixed shapes they are collated to (None: each padded to its own longest)."""
    shapes = fixed_shapes(cfg, progress.restarted)
    batches = make_batches(
        data.src.sizes,
        data.tgt.sizes,
        *batch_limits(cfg, progress.restarted),
        cfg.seed,
        skip_longer_than=cfg.skip_longer_than,
        shapes=shapes,
    )
    order = epoch_order(batches, cfg.seed, progress.epoch)
    order = order[: len(order) // per_update * per_update]
    if not order:  # else an update-bounded run would loop over empty epochs forever
        raise UserError(
            f"{data_dir}: an epoch has {len(batches)} batches, fewer than the {per_update} one update "
            f"takes (update_freq {cfg.update_freq} × {world()[1]} ranks); lower max_tokens or "
            f"update_freq"
        )
    return order, shapes


def batch_limits(cfg: TrainConfig, restarted: bool) -> tuple[int | None, int | None]:
    """(max_tokens, max_sentences) of the current stage; RestartAdam's stage may change the batch size."""
    if restarted and (cfg.restart_max_tokens or cfg.restart_max_sentences):
        return cfg.restart_max_tokens, cfg.restart_max_sentences
    return cfg.max_tokens, cfg.max_sentences


def growth_for_run(
    cfg: TrainConfig, model: Model, device: torch.device, world_size: int, state: dict | None = None
) -> tuple[float, str]:
    """The run's bucket_growth_factor and why: a number as configured; `auto`, AUTO_GROWTH where the updates will
    replay as CUDA graphs (the only place fixed shapes pay: on a CPU, or with DDP, they add padding and save
    nothing) and the model's loss leaves fixed shapes alone, else 0 (fairseq's batches). A resumed run keeps the
    factor its checkpoints trained with (`state`'s train_config), so that a resume takes the same batches."""
    from .graphs import why_not

    if cfg.bucket_growth_factor != "auto":
        return float(cfg.bucket_growth_factor), "as configured"
    recorded = ((state or {}).get("train_config") or {}).get("bucket_growth_factor")
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool):
        return float(recorded), "auto, as the run's checkpoints trained"
    # what `amp: auto` computes in on a CUDA device: a bf16 GPU's three choices all replay; fp16 (older GPUs) not
    amp = (
        cfg.amp
        if cfg.amp != "auto"
        else ("bf16" if device.type != "cuda" or torch.cuda.is_bf16_supported() else "fp16")
    )
    why = (
        why_not(cfg.cuda_graphs, device, amp, True, world_size)
        or (cfg.micro_batch_tokens and f"micro_batch_tokens {cfg.micro_batch_tokens}")
        or model.merging_changes_loss()
    )
    if why:
        return 0.0, f"auto: fairseq's batches ({why})"
    return AUTO_GROWTH, "auto: fixed shapes, so that the updates replay as CUDA graphs"


def fixed_shapes(cfg: TrainConfig, restarted: bool) -> FixedShapes | None:
    """The current stage's batch shapes when `bucket_growth_factor` is set; None (today's batches) when not."""
    growth = cfg.decided_growth()
    if not growth:
        return None
    return FixedShapes(growth, cfg.seq_len_multiple, *batch_limits(cfg, restarted))


def log_batch_shapes(data: ParallelData, cfg: TrainConfig, per_update: int) -> None:
    """Say once what fixed shapes cost against fairseq's batches: the shapes, the padding, the sentences per update
    (fewer when buckets pad sentences beyond their length or dummy rows fill a batch)."""
    shapes = fixed_shapes(cfg, restarted=False)
    if shapes is None or world()[0] != 0:
        return

    def summary(batch_shapes: FixedShapes | None) -> dict:
        src, tgt = data.src.sizes, data.tgt.sizes
        limits = batch_limits(cfg, False)
        batches = make_batches(src, tgt, *limits, cfg.seed, skip_longer_than=cfg.skip_longer_than, shapes=batch_shapes)
        return batching_summary(src, tgt, batches, batch_shapes)

    today, fixed = summary(None), summary(shapes)
    log.info(
        "fixed batch shapes (bucket_growth_factor %g, seq_len_multiple %d): %d shapes, padding %.1f%% of the token "
        "slots, %.1f sentences per update; fairseq's batches: %d shapes, %.1f%%, %.1f",
        cfg.bucket_growth_factor,
        cfg.seq_len_multiple,
        fixed["shapes"],
        100 * fixed["padding"],
        fixed["sentences_per_batch"] * per_update,
        today["shapes"],
        100 * today["padding"],
        today["sentences_per_batch"] * per_update,
    )


def rank_batches(
    data: ParallelData,
    order: list[np.ndarray],
    per_update: int,
    micro_batch_tokens: int,
    device: torch.device,
    position: int,
    shapes: FixedShapes | None = None,
) -> list[Batch]:
    """This rank's share of the update that starts at batch `position` of the epoch's `order`, collated: merged
    into passes of up to `micro_batch_tokens` padded tokens when set (`merge_batches`), else one per batch in
    their order, each padded to its fixed shape when `shapes` (`epoch_batches`) are given; pinned when the model is
    on a GPU, so that `Batch.to` copies them asynchronously. Runs on the `Prefetcher` thread."""
    rank, world_size = world()
    batches = order[position : position + per_update][rank::world_size]
    if micro_batch_tokens:
        merged = merge_batches(batches, data.sizes, micro_batch_tokens)
        collated = [replace(collate(data, ids), parts=parts) for ids, parts in merged]
    else:
        collated = [collate(data, ids, shapes=shapes) for ids in batches]
    return [batch.pin_memory() for batch in collated] if device.type == "cuda" else collated


def check_merging(model: Model, cfg: TrainConfig) -> None:
    """Refuse micro_batch_tokens, and fixed batch shapes, for a model whose loss has a term per pass rather than per
    token (`loss.accumulate`; the model says why: `Model.merging_changes_loss`): merged batches change what a pass
    holds, and so do a fixed shape's padding and dummy rows."""
    fixed = cfg.bucket_growth_factor != "auto" and cfg.bucket_growth_factor  # auto: none for such a model
    why = model.merging_changes_loss() if cfg.micro_batch_tokens or fixed else None
    if why and cfg.micro_batch_tokens:
        raise UserError(
            f"micro_batch_tokens={cfg.micro_batch_tokens}: model {type(model).__name__} {why}, which "
            f"merged batches would change; set micro_batch_tokens: 0"
        )
    if why:
        raise UserError(
            f"bucket_growth_factor={cfg.bucket_growth_factor:g}: model {type(model).__name__} {why}, which the "
            f"padding and dummy rows of fixed batch shapes would change; set bucket_growth_factor: 0"
        )
