"""The optimiser and its schedule: fairseq's Adam, the learning rate of each update, fp16's loss scaler and the
gradient clipping of an update."""

from __future__ import annotations

import math
from typing import cast

import torch

from .precision import Precision
from .config import TrainConfig


def lr_at(update: int, cfg: TrainConfig, d_model: int, restarted: bool = False) -> float:
    """Learning rate for update number `update` (1-based)."""
    if restarted:
        return cfg.restart_lr  # RestartAdam's second stage: fixed lr
    if cfg.lr_scheduler == "fixed":
        return cfg.lr
    if cfg.lr_scheduler == "noam":  # lr = scale · d^-0.5 · min(t^-0.5, t · warmup^-1.5)  (Vaswani et al. Eq. 3)
        return cfg.lr * d_model**-0.5 * min(update**-0.5, update * cfg.warmup_updates**-1.5)
    if update < cfg.warmup_updates:  # linear warmup (fairseq's inverse_sqrt, polynomial_decay and cosine)
        return cfg.warmup_init_lr + (cfg.lr - cfg.warmup_init_lr) * update / cfg.warmup_updates
    if cfg.lr_scheduler == "cosine":  # fairseq's cosine (t_mult 1, no shrink): min_lr + ½Δ(1 + cos(π t / period))
        # t counts completed post-warm-up updates, so the budget's last update (warmup + period) is at min_lr
        t = max(0, update - 1 - cfg.warmup_updates) % cfg.lr_period_updates
        return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * t / cfg.lr_period_updates))
    if cfg.lr_scheduler == "polynomial_decay":  # then linearly down to end_learning_rate (fairseq, power 1)
        left = max(0.0, 1 - (update - cfg.warmup_updates) / max(1, cfg.total_num_update - cfg.warmup_updates))
        return cfg.end_learning_rate + (cfg.lr - cfg.end_learning_rate) * left
    return cfg.lr * math.sqrt(cfg.warmup_updates / update)  # inverse_sqrt: ∝ 1/sqrt(update)


def adam(model, cfg: TrainConfig, fused: bool | None = None) -> torch.optim.Adam:
    """fairseq 0.12.2's Adam (fairseq/optim/adam.py), whose weight decay is decoupled from the gradient ("based on
    Fixed Weight Decay Regularization in Adam"; its docstring: "corresponds to the AdamW variant"). Per update t,
    with g the gradient, lr the current learning rate and wd the weight decay:
        m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²          (the moments never see wd)
        p ← p − lr·wd·p                                       (`p.add_(p, alpha=-wd * lr)`)
        p ← p − lr·√(1−β2ᵗ)/(1−β1ᵗ) · m/(√v + ε)
    torch.optim.AdamW does the same: p ← p·(1 − lr·wd), with the same lr, on the same p (the moment updates do not
    read p), then the Adam step; torch.optim.Adam(weight_decay=wd) would instead add wd·p to g (coupled L2, scaled
    by Adam's normaliser). Only ε sits elsewhere: torch divides by √v/√(1−β2ᵗ) + ε, fairseq's form amounts to
    ε/√(1−β2ᵗ) (7ε at t = 1 with β2 = 0.98, within 1% of ε after ~200 updates), as it did before weight decay was
    decoupled. Every row that sets weight_decay follows a fairseq recipe (GCA's IWSLT rows, config/study.yaml);
    the t2t, THUMT and MLRF rows train without it. PyTorch's fused kernel on CUDA (one launch for all parameters
    instead of several per tensor), its default (foreach) implementation elsewhere; `fused=True` takes the fused
    path on the CPU too (the tests: CUDA's update path, whose skip is the kernel's found_inf flag: `deferred`)."""
    if fused is None:
        fused = next(model.parameters()).device.type == "cuda"
    # a pair, as TrainConfig types it; tuple() of a YAML list keeps the values but not, for mypy, the length
    betas = cast("tuple[float, float]", tuple(cfg.adam_betas))
    return torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=betas, eps=cfg.adam_eps, weight_decay=cfg.weight_decay, fused=fused or None
    )


def loss_scaler(precision: Precision, device: torch.device, batches_per_update: int) -> torch.amp.GradScaler:
    """fp16's dynamic loss scaler, for the model's device type (a CUDA scaler on a CPU model would disable itself),
    with fairseq's settings: --fp16-init-scale 128 (torch's default 2^16 overflows a few updates in a row at the
    start) and --fp16-scale-window 2^14 / (GPUs × update_freq) clean updates before the scale doubles. Disabled (every
    call a no-op) for bf16 and fp32, whose range needs no scaling."""
    return torch.amp.GradScaler(
        device.type,
        init_scale=2.0**7,
        enabled=precision.amp == "fp16",
        growth_interval=max(1, 2**14 // batches_per_update),
    )


def unscale_and_clip(model, optimizer, scaler, clip_norm: float) -> torch.Tensor:
    """Unscale fp16 gradients (divide by the loss scale), clip them to `clip_norm` if set; returns their total norm
    as a device tensor (inf or nan if the update overflowed or diverged: then the step is skipped and what the
    clipping did to the gradients does not matter). DDP ranks hold the same reduced gradients, so they all take the
    same decision."""
    if scaler.is_enabled():
        scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    if clip_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), clip_norm, norm)
    return norm
