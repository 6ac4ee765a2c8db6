"""Data-parallel training across processes (torchrun sets RANK / WORLD_SIZE / LOCAL_RANK): NCCL on GPUs, gloo on
CPUs (which is how the tests exercise it), and the preemption signals every rank must agree on."""

from __future__ import annotations

import logging
import math
import os
import signal

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(values: list[float]) -> list[float]:
    if world()[1] == 1:
        return values
    # NCCL reduces only CUDA tensors (a CPU tensor fails with "No backend type associated with device type cpu")
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def init_distributed() -> torch.device:
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def per_rank_update_freq(update_freq: int) -> int:
    """update_freq is configured for one GPU: N ranks each accumulate 1/N of it (rounded up)."""
    rank, world_size = world()
    if world_size == 1:
        return update_freq
    per_rank = max(1, math.ceil(update_freq / world_size))
    if rank == 0:
        if per_rank * world_size != update_freq:
            log.warning("update_freq %d is not a multiple of %d ranks: %d per rank, %d batches per update",
                        update_freq, world_size, per_rank, per_rank * world_size)
        log.info("data-parallel: %d ranks (%s), %d batches per rank per update", world_size, dist.get_backend(),
                 per_rank)
    return per_rank


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


class StopSignals:
    """SIGTERM / SIGUSR1 (SLURM's preemption and time-limit warnings) and SIGINT (Ctrl-C) while training: noted,
    not obeyed at once, so that the loop stops between updates and checkpoints first. A context manager restoring
    the old handlers."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

    def __init__(self, device: torch.device):
        self.device, self.hit, self.previous = device, None, {}

    def __enter__(self) -> "StopSignals":
        self.previous = {s: signal.signal(s, self._note) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    def _note(self, signum, frame) -> None:
        self.hit = signum

    def received(self) -> bool:
        """Whether any rank got a signal: ranks must stop after the same update, or the others would wait in the
        next all-reduce forever."""
        if world()[1] == 1:
            return self.hit is not None
        flag = torch.tensor([0 if self.hit is None else int(self.hit)], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self.hit = int(flag.item()) or None
        return self.hit is not None
