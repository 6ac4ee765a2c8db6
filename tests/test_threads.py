"""A CPU job computes with no more threads than the cores free to it."""

import os
import subprocess
import sys
import time

import pytest

from layerwise_nmt import threads


@pytest.mark.parametrize("shares, requested, expected", [
    ({0: 0.02, 1: 0.97}, 2, 1),               # one core busy with another process: one thread
    ({0: 0.9, 1: 0.97}, 2, 2),                # both free
    ({0: 0.0, 1: 0.1}, 2, 1),                 # none free: still one
    ({0: 0.9, 1: 0.6, 2: 0.1, 3: 0.99}, 8, 3),  # more asked than free
])
def test_threads_are_bounded_by_the_free_cores(monkeypatch, shares, requested, expected):
    monkeypatch.setattr(threads, "allowed_cores", lambda: set(shares))
    monkeypatch.setattr(threads, "idle_shares", lambda cores, sample_s=0: shares)
    assert threads.usable_threads(requested) == expected


def test_one_thread_asks_nothing_and_an_unreadable_proc_keeps_the_request(monkeypatch):
    monkeypatch.setattr(threads, "idle_shares", lambda *a, **k: pytest.fail("sampled for one thread"))
    assert threads.usable_threads(1) == 1
    monkeypatch.setattr(threads, "idle_shares", lambda *a, **k: None)
    assert threads.usable_threads(4) == 4


@pytest.mark.skipif(len(threads.allowed_cores()) < 2 or not os.path.exists("/proc/stat"),
                    reason="needs two cores and /proc/stat")
def test_a_core_kept_busy_by_another_process_is_not_counted_free():
    cores = sorted(threads.allowed_cores())
    spinner = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cores[0]}}})\n"
                                                      "while True: pass"])
    try:
        time.sleep(0.5)
        shares = threads.idle_shares(set(cores), 0.3)
        assert shares[cores[0]] < threads.IDLE
        assert threads.usable_threads(len(cores)) < len(cores)
    finally:
        spinner.kill()
        spinner.wait()
