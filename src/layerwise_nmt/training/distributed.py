"""Data-parallel training across processes (torchrun sets RANK / WORLD_SIZE / LOCAL_RANK): NCCL on GPUs, gloo on
CPUs (which is how the tests exercise it), and the preemption signals every rank must agree on, with the exit they
lead to."""

from __future__ import annotations

import logging
import math
import os
import signal
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """The element-wise sum over ranks of a tensor on this rank's device (NCCL reduces only CUDA tensors, gloo CPU
    ones: the trainer keeps its sums on its device, which matches the backend)."""
    if world()[1] > 1:
        dist.all_reduce(values)
    return values


def init_distributed() -> torch.device:
    """This process's device; under torchrun, the process group too. The rank's GPU is selected before the group
    exists and named to it (`device_id`), so NCCL's communicators are bound to the right device from the start
    instead of guessing one per rank (PyTorch warns about the guess, and a wrong guess hangs the first collective)."""
    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1 and not dist.is_initialized()
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        if distributed:
            dist.init_process_group("nccl", device_id=device)
        return device
    if distributed:
        dist.init_process_group("gloo")
    return torch.device("cpu")


def per_rank_update_freq(update_freq: int) -> int:
    """update_freq is configured for one GPU: N ranks each accumulate 1/N of it (rounded up)."""
    rank, world_size = world()
    if world_size == 1:
        return update_freq
    per_rank = max(1, math.ceil(update_freq / world_size))
    if rank == 0:
        if per_rank * world_size != update_freq:
            log.warning(
                "update_freq %d is not a multiple of %d ranks: %d per rank, %d batches per update",
                update_freq,
                world_size,
                per_rank,
                per_rank * world_size,
            )
        log.info(
            "data-parallel: %d ranks (%s), %d batches per rank per update", world_size, dist.get_backend(), per_rank
        )
    return per_rank


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


class Stop(Exception):
    """A SIGTERM/SIGUSR1 (preemption) or SIGINT (Ctrl-C) arrived: checkpoint, then exit non-zero."""


class Stopped(SystemExit):
    """The run saved checkpoint_last.pt on a signal and ends with exit status 75 (EX_TEMPFAIL), from which a retry,
    a requeue or the same command rerun resumes. `line` says so in one line; `interrupted`: by a Ctrl-C (SIGINT),
    which means "stop", where a scheduler's SIGTERM/SIGUSR1 means "resume elsewhere"."""

    def __init__(self, signum: int, update: int, save_dir: Path):
        super().__init__(75)
        self.interrupted = signum == signal.SIGINT
        if self.interrupted:
            self.line = (
                f"{save_dir}: stopped at update {update} (Ctrl-C; saved checkpoint_last.pt); rerun the same "
                f"command to resume"
            )
        else:
            self.line = (
                f"{save_dir}: signal {signal.Signals(signum).name}: saved checkpoint_last.pt at update "
                f"{update}; exiting so the job can be resumed (its retry, or the same command rerun)"
            )


class StopSignals:
    """SIGTERM / SIGUSR1 (SLURM's preemption and time-limit warnings) and SIGINT (Ctrl-C) while training: noted,
    not obeyed at once, so that the loop stops between updates and checkpoints first. A context manager restoring
    the old handlers."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

    def __init__(self, device: torch.device):
        self.device = device
        self.hit: int | None = None
        self.previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> StopSignals:
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


def broadcast_object(value):
    """Rank 0's `value` on every rank (itself outside a process group of several ranks)."""
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]
