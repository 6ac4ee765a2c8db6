"""How many threads a CPU job computes with: no more than the cores that are free to it when it starts.

PyTorch's CPU kernels split each operation over their threads and wait at its end for the slowest one. A thread
that shares its core with another busy process runs only when the scheduler gives it a turn, so every operation
waits for that turn, and OpenMP's waiting threads spin meanwhile on the cores the late thread could use. So a job
asks for its threads (`--threads`, or PyTorch's default) and gets at most the cores of its CPU set that were mostly
idle over a short sample of /proc/stat when it started; the log says when it got fewer.

benchmarks/busy_core.py measures it (docs/benchmarks.md). Making waiting threads sleep instead
(`OMP_WAIT_POLICY=PASSIVE`) also helps where the load arrives after a job started, but costs a quiet 2-thread
decode about 20% and a 2-thread training update about 8%, so it is left to the user's environment.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

SAMPLE_S = 0.1  # ten clock ticks per core: enough to see a busy process, nothing beside a job's start-up
IDLE = 0.5  # a core idle at least this share of the sample counts as free


def allowed_cores() -> set[int]:
    """The CPUs this process may run on (its affinity: a SLURM or cgroup CPU set, `taskset`)."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this OS
        return set(range(os.cpu_count() or 1))


def idle_shares(cores: set[int], sample_s: float = SAMPLE_S) -> dict[int, float] | None:
    """Each core's idle share over `sample_s`, from /proc/stat; None where it cannot be read."""
    first = _cpu_times()
    if first is None:
        return None
    time.sleep(sample_s)
    second = _cpu_times() or {}
    shares = {}
    for core in cores:
        if core in first and core in second:
            total = sum(second[core]) - sum(first[core])
            idle = (second[core][3] + second[core][4]) - (first[core][3] + first[core][4])  # idle + iowait
            shares[core] = idle / total if total > 0 else 1.0
    return shares or None


def _cpu_times() -> dict[int, list[int]] | None:
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    times = {}
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            times[int(name[3:])] = [int(x) for x in fields[:8]] + [0] * (8 - len(fields[:8]))
    return times


def usable_threads(requested: int, sample_s: float = SAMPLE_S) -> int:
    """`requested` threads, but no more than the cores this process may use that are free now (at least one)."""
    if requested <= 1:
        return 1
    cores = allowed_cores()
    shares = idle_shares(cores, sample_s)
    if shares is None:
        return requested
    free = sum(share >= IDLE for share in shares.values())
    if free >= requested:
        return requested
    chosen = max(1, free)
    log.info("threads: %d, not %d: %d of the %d cores this job may use are busy with other work (a thread "
             "sharing a busy core would stall every operation)", chosen, requested, len(shares) - free, len(shares))
    return chosen


def set_threads(requested: int | None = None) -> int:
    """Sets PyTorch's CPU threads to `usable_threads` of `requested` (default: PyTorch's own default, one per
    physical core or OMP_NUM_THREADS); returns them."""
    import torch

    threads = usable_threads(requested or torch.get_num_threads())
    torch.set_num_threads(threads)
    return threads
