"""How many threads a CPU job computes with, and how its idle threads wait.

The thread count is part of a result: an operation split over more threads adds in another order, so one model
trained or decoded with 1 and with 2 threads differs in its last bits, and a beam search can then take another
path. So a job computes with the threads it asks for (`--threads`, the rule's `threads:`, or PyTorch's default: one
per physical core, or OMP_NUM_THREADS), whatever else runs on the machine: the same command on the same machine
type gives the same numbers, busy or quiet.

What the load may change is how idle threads wait, which changes no number. PyTorch's OpenMP threads spin while
they wait for the slowest one at the end of each operation; beside a busy process that spinning takes turns from
the very thread they wait for (a decode beside one busy core took 3.1x its quiet time; benchmarks/busy_core.py,
docs/benchmarks.md). Sleeping waits (OMP_WAIT_POLICY=PASSIVE) bring that to 1.7x but cost a quiet run 8-20%. So a
job that finds other processes keeping a core of its CPU set busy when it starts (/proc/stat over 0.1 s, read
before PyTorch is imported, as OpenMP reads the setting once, when it loads) sleeps its waits and says so in its
log; a job started on a quiet machine spins; a user's own OMP_WAIT_POLICY is kept.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SAMPLE_S = 0.1  # the shortest sample: ten clock ticks per core, enough to see a busy process
WAIT_POLICY = "OMP_WAIT_POLICY"


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
    this process's own CPU time taken out."""
    time.sleep(max(0.0, SAMPLE_S - (time.monotonic() - since.at)))
    now = sample()
    common = [c for c in cores if now and c in since.cores and c in now.cores]
    if now is None or not common:
        return None
    busy = total = 0
    for core in common:
        delta = [b - a for a, b in zip(since.cores[core], now.cores[core], strict=True)]
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


def _openmp_loaded() -> bool:
    return "torch" in sys.modules


def sleep_waits_if_busy(requested: int | None) -> bool:
    """Sets OMP_WAIT_POLICY=PASSIVE where other processes keep at least half a core of this job's CPU set busy, the
    job may compute with more than one thread, OpenMP is not loaded yet and the user set no policy; True if set."""
    cores = allowed_cores()
    if requested == 1 or len(cores) < 2 or WAIT_POLICY in os.environ or _openmp_loaded():
        return False
    since = sample()
    elsewhere = busy_elsewhere(since, cores) if since else None
    if elsewhere is None or elsewhere < 0.5:
        return False
    os.environ[WAIT_POLICY] = "PASSIVE"
    log.info(
        "threads: other processes keep %.1f of the %d cores this job may use busy: its idle threads sleep "
        "(%s=PASSIVE) rather than spin on them; the thread count, and so every number, is the one asked for",
        elsewhere,
        len(cores),
        WAIT_POLICY,
    )
    return True


def set_threads(requested: int | None = None) -> int:
    """Sets PyTorch's CPU threads to `requested` (default: PyTorch's own), whatever the load, after choosing how idle
    threads wait (`sleep_waits_if_busy`; call before anything imports torch); returns the thread count."""
    sleep_waits_if_busy(requested)
    import torch

    threads = requested or torch.get_num_threads()
    torch.set_num_threads(threads)
    return threads
