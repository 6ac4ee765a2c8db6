"""A CPU job computes with no more threads than the cores other processes leave free to it."""

import os
import subprocess
import sys
import time

import pytest

from layerwise_nmt.training import threads


@pytest.mark.parametrize("cores, elsewhere, requested, expected", [
    (2, 0.98, 2, 1),   # one core busy with another process: one thread
    (2, 0.1, 2, 2),    # both free
    (2, 1.9, 2, 1),    # none free: still one
    (4, 1.2, 8, 3),    # more asked than free
    (4, 0.6, 2, 2),    # fewer asked than free
])
def test_threads_are_bounded_by_the_cores_other_processes_leave_free(monkeypatch, cores, elsewhere, requested,
                                                                     expected):
    monkeypatch.setattr(threads, "allowed_cores", lambda: set(range(cores)))
    monkeypatch.setattr(threads, "busy_elsewhere", lambda since, cores: elsewhere)
    assert threads.usable_threads(requested) == expected


def test_one_thread_samples_nothing_and_an_unreadable_proc_keeps_the_request(monkeypatch):
    monkeypatch.setattr(threads, "sample", lambda: pytest.fail("sampled for one thread"))
    assert threads.usable_threads(1) == 1
    monkeypatch.setattr(threads, "sample", lambda: None)
    assert threads.usable_threads(4) == 4


two_cores = pytest.mark.skipif(len(threads.allowed_cores()) < 2 or not os.path.exists("/proc/stat"),
                               reason="needs two cores and /proc/stat")


@two_cores
def test_a_core_kept_busy_by_another_process_is_not_counted_free():
    cores = sorted(threads.allowed_cores())
    spinner = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cores[0]}}})\n"
                                                      "while True: pass"])
    try:
        time.sleep(0.5)
        assert threads.busy_elsewhere(threads.sample(), set(cores)) > 0.6
        assert threads.usable_threads(len(cores)) < len(cores)
    finally:
        spinner.kill()
        spinner.wait()


@two_cores
def test_the_jobs_own_start_up_does_not_count_as_busy():
    """What the job itself computes while the load is sampled (PyTorch's import) is taken out: burning a core here
    reads as what the other processes keep busy anyway."""
    def elsewhere(burn: bool) -> float:
        since, end = threads.sample(), time.monotonic() + 0.5
        while time.monotonic() < end:
            if not burn:
                time.sleep(0.01)
        return threads.busy_elsewhere(since, threads.allowed_cores())

    quiet, burning, quiet_again = elsewhere(False), elsewhere(True), elsewhere(False)
    assert burning < max(quiet, quiet_again) + 0.4
