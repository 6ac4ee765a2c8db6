"""How many threads a CPU job computes with: no more than the cores that are free to it when it starts.

PyTorch's CPU kernels split each operation over their threads and wait at its end for the slowest one. A thread
that shares its core with another busy process runs only when the scheduler gives it a turn, so every operation
waits for that turn, and OpenMP's waiting threads spin meanwhile on the cores the late thread could use. So a job
asks for its threads (`--threads`, or PyTorch's default) and gets no more than the cores of its CPU set that other
processes leave free, read from /proc/stat across its own start-up (PyTorch's import; at least 0.1 s) with its own
CPU time taken out; the log says when it got fewer.

benchmarks/busy_core.py measures it (docs/benchmarks.md). Making waiting threads sleep instead
(`OMP_WAIT_POLICY=PASSIVE`) also helps where the load arrives after a job started, but costs a quiet 2-thread
decode about 20% and a 2-thread training update about 8%, so it is left to the user's environment.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SAMPLE_S = 0.1  # the shortest sample: ten clock ticks per core, enough to see a busy process


def allowed_cores() -> set[int]:
    """The CPUs this process may run on (its affinity: a SLURM or cgroup CPU set, `taskset`)."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this OS
        return set(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class Sample:
    """The cores' time counters (/proc/stat, clock ticks) and this process's own CPU seconds at one moment."""

    at: float
    cores: dict[int, list[int]]
    own: float


def sample() -> Sample | None:
    """Now's counters; None where /proc/stat cannot be read."""
    cores = _cpu_times()
    if cores is None:
        return None
    own = os.times()
    return Sample(time.monotonic(), cores, own.user + own.system)


def busy_elsewhere(since: Sample, cores: set[int]) -> float | None:
    """How many of `cores` other processes kept busy since `since` (at least `SAMPLE_S` ago: waits for the rest),
    this process's own CPU time taken out, so that its own start-up in the meantime does not count."""
    time.sleep(max(0.0, SAMPLE_S - (time.monotonic() - since.at)))
    now = sample()
    common = [c for c in cores if now and c in since.cores and c in now.cores]
    if now is None or not common:
        return None
    busy = total = 0
    for core in common:
        delta = [b - a for a, b in zip(since.cores[core], now.cores[core])]
        total += sum(delta)
        busy += sum(delta) - delta[3] - delta[4]  # all but idle and iowait
    if total <= 0:
        return 0.0
    seconds = now.at - since.at
    return max(0.0, busy / total * len(common) - (now.own - since.own) / seconds)


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


def usable_threads(requested: int, since: Sample | None = None) -> int:
    """`requested` threads, but no more than the cores this process may use that other processes leave free
    (measured from `since`, or over the next `SAMPLE_S`); at least one."""
    if requested <= 1:
        return 1
    cores = allowed_cores()
    since = since or sample()
    elsewhere = busy_elsewhere(since, cores) if since else None
    if elsewhere is None:
        return requested
    free = len(cores) - math.floor(elsewhere + 0.5)  # a core busy more than half the time is taken
    if free >= requested:
        return requested
    chosen = max(1, free)
    log.info("threads: %d, not %d: other processes keep %.1f of the %d cores this job may use busy (a thread "
             "sharing a busy core would stall every operation)", chosen, requested, elsewhere, len(cores))
    return chosen


def set_threads(requested: int | None = None) -> int:
    """Sets PyTorch's CPU threads to `usable_threads` of `requested` (default: PyTorch's own default, one per
    physical core or OMP_NUM_THREADS); returns them. The load is sampled across PyTorch's import (a second or so,
    when it is not imported yet), which costs nothing extra."""
    start = sample()
    import torch

    threads = usable_threads(requested or torch.get_num_threads(), start)
    torch.set_num_threads(threads)
    return threads
