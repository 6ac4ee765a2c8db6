"""A CPU job computes with the threads it asks for whatever the load (the count changes the numbers); beside a busy
core its idle threads sleep instead of spinning."""

import os
import subprocess
import sys
import time

import pytest

from layerwise_nmt.training import threads


@pytest.fixture
def before_torch(monkeypatch):
    """As a job sees it before torch is imported, with no wait policy of the user's."""
    monkeypatch.setattr(threads, "_openmp_loaded", lambda: False)
    monkeypatch.setattr(threads, "allowed_cores", lambda: {0, 1})
    monkeypatch.delenv(threads.WAIT_POLICY, raising=False)


@pytest.mark.parametrize(
    "elsewhere, requested, sleeps",
    [
        (0.98, 2, True),  # one core busy with another process
        (1.9, None, True),  # both busy, PyTorch's default count
        (0.1, 2, False),  # quiet: spinning waits are faster
        (0.98, 1, False),  # one thread never waits for another
    ],
)
def test_idle_threads_sleep_only_beside_a_busy_core(monkeypatch, before_torch, elsewhere, requested, sleeps):
    monkeypatch.setattr(threads, "busy_elsewhere", lambda since, cores: elsewhere)
    assert threads.sleep_waits_if_busy(requested) is sleeps
    assert os.environ.get(threads.WAIT_POLICY) == ("PASSIVE" if sleeps else None)


def test_the_users_wait_policy_and_an_unreadable_proc_are_kept(monkeypatch, before_torch):
    monkeypatch.setattr(threads, "busy_elsewhere", lambda since, cores: 2.0)
    monkeypatch.setenv(threads.WAIT_POLICY, "ACTIVE")
    assert not threads.sleep_waits_if_busy(2)
    assert os.environ[threads.WAIT_POLICY] == "ACTIVE"
    monkeypatch.delenv(threads.WAIT_POLICY)
    monkeypatch.setattr(threads, "sample", lambda: None)
    assert not threads.sleep_waits_if_busy(2)


two_cores = pytest.mark.skipif(
    len(threads.allowed_cores()) < 2 or not os.path.exists("/proc/stat"), reason="needs two cores and /proc/stat"
)


@two_cores
def test_a_busy_core_changes_how_threads_wait_not_how_many_compute():
    """Before: a job beside a busy core computed with fewer threads than a quiet one, and so gave other numbers."""
    cores = sorted(threads.allowed_cores())
    spinner = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cores[0]}}})\nwhile True: pass"]
    )
    env = {k: v for k, v in os.environ.items() if k != threads.WAIT_POLICY}
    try:
        time.sleep(0.5)
        assert threads.busy_elsewhere(threads.sample(), set(cores)) > 0.6
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import os, torch\n"
                "from layerwise_nmt.training import threads\n"
                f"print(threads.set_threads({len(cores)}), torch.get_num_threads(), "
                "os.environ.get('OMP_WAIT_POLICY'))",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    finally:
        spinner.kill()
        spinner.wait()
    # torch imported first: too late to choose the waits, the count is still the one asked for
    assert out == [str(len(cores)), str(len(cores)), "None"]
    try:
        spinner = subprocess.Popen(
            [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cores[0]}}})\nwhile True: pass"]
        )
        time.sleep(0.5)
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import os\n"
                "from layerwise_nmt.training import threads\n"
                f"n = threads.set_threads({len(cores)})\n"
                "import torch\n"
                "print(n, torch.get_num_threads(), os.environ.get('OMP_WAIT_POLICY'))",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    finally:
        spinner.kill()
        spinner.wait()
    assert out == [str(len(cores)), str(len(cores)), "PASSIVE"]


@two_cores
def test_the_jobs_own_start_up_does_not_count_as_busy():
    """What the job itself computes while the load is sampled is taken out: burning a core here reads as what the
    other processes keep busy anyway."""

    def elsewhere(burn: bool) -> float:
        since, end = threads.sample(), time.monotonic() + 0.5
        while time.monotonic() < end:
            if not burn:
                time.sleep(0.01)
        return threads.busy_elsewhere(since, threads.allowed_cores())

    quiet, burning, quiet_again = elsewhere(False), elsewhere(True), elsewhere(False)
    assert burning < max(quiet, quiet_again) + 0.4
