"""An update the host does not wait for: its learning rate a device tensor, a non-finite update skipped by the
optimizer's kernel instead of by a Python `if`, and its numbers (loss sums, gradient norm, whether it was skipped)
kept on the device until the loop reads them, one update late.

A read of a CUDA tensor waits for every kernel queued before it. Read right after the step, the GPU idles while the
host queues the next update's first kernels (a small model becomes host-bound), and a step taken or not on the
host's word cannot be captured in a CUDA graph. Read once the next update is queued, the host stays an update ahead.

Two paths, chosen by the optimizer. Fused AdamW (CUDA's, `optim.adam`) takes the lr as a tensor and the skip as its
`found_inf` flag, which its kernel reads on the device. The default (foreach) implementation takes neither without
`capturable`, which the CPU does not support; a CPU tensor holds its value as soon as the call returns, so that path
reads the numbers at once (it costs nothing there) and skips a step in Python, with the float lr it had before. The
loop reads either path's numbers one update late, so that its bookkeeping is the same code on both."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .loss import STATS

FIELDS = (*STATS, "grad_norm", "skipped")  # the order of Pending.stats


@dataclass
class Pending:
    """An update's numbers, FIELDS in order, as a float64 tensor on the device; `values` once read."""

    stats: torch.Tensor
    values: list[float] | None = None

    def read(self) -> dict[str, float]:
        if self.values is None:
            self.values = self.stats.tolist()  # on a GPU, the update's one wait, for an update queued before
        return dict(zip(FIELDS, self.values, strict=True))


def on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer's step takes the lr and the skip as device tensors (fused AdamW)."""
    return all(group.get("fused") for group in optimizer.param_groups)


def set_lr(optimizer: torch.optim.Optimizer, lr: float, lr_if_skipped: float, before: Pending | None) -> None:
    """The update's learning rate: `lr`, or `lr_if_skipped` where `before`, the update before it and not yet read,
    was skipped (the schedule counts the updates taken, so this one then retries the skipped one's number). The
    device path keeps a float32 tensor, the type the fused CUDA kernel reads, in the param groups and chooses on
    the device; a Python number fills it, a kernel argument rather than a copy from the host."""
    if before is not None and before.values is not None:
        lr, before = (lr_if_skipped if before.values[-1] else lr), None
    for group in optimizer.param_groups:
        if not group.get("fused"):
            assert before is None, "the foreach path reads its numbers at once"
            group["lr"] = lr
            continue
        held, device = group["lr"], group["params"][0].device
        if not isinstance(held, torch.Tensor) or held.device != device or held.dtype != torch.float32:
            # a new optimizer (float lr) or one resumed from a checkpoint (the saved tensor, on the CPU)
            group["lr"] = held = torch.full((), lr, dtype=torch.float32, device=device)
        if before is None:
            held.fill_(lr)
        else:
            held.copy_(torch.where(before.stats[-1] > 0, lr_if_skipped, lr))


def step(
    optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, sums: dict[str, torch.Tensor], norm: torch.Tensor
) -> Pending:
    """The update's step, unless its loss or its gradient norm is not finite; then the scaler's update (fp16: an
    overflow halves the loss scale, 2^14 / update_freq clean updates double it, as fairseq) and cleared gradients.
    Returns the update's numbers, not read on the device path."""
    device = norm.device
    stats = torch.stack([torch.as_tensor(sums[k], dtype=torch.float64, device=device) for k in STATS] + [norm.double()])
    skipped = ~(torch.isfinite(stats[0]) & torch.isfinite(stats[-1]))
    pending = Pending(torch.cat([stats, skipped.double().view(1)]))
    if on_device(optimizer):
        # the kernel leaves weights, moments and step count as they are where found_inf is 1. The flag holds the
        # scaler's (a non-finite unscaled gradient makes the norm non-finite) and more (a non-finite loss), so the
        # step goes to the optimizer itself: scaler.step would hand it the scaler's flag alone, which is all it adds
        # to an fp16 step after unscale_. scaler.update still reads the scaler's own flag for the loss scale.
        optimizer.found_inf = skipped.float()  # type: ignore[attr-defined]
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf  # type: ignore[attr-defined]
    elif not pending.read()["skipped"]:
        scaler.step(optimizer)  # fp16: skipped by the scaler itself if unscale_ found an inf; else optimizer.step()
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return pending
