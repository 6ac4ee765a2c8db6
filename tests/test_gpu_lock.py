"""Which GPU a job computes on is decided before CUDA starts: the lock-based allocator never asks torch.cuda (which
would initialise CUDA with every device visible, after which CUDA_VISIBLE_DEVICES is no longer read), and a
data-parallel rank selects its device before its process group exists."""

import os
import stat
import subprocess
import sys
import types

import pytest
import torch

from layerwise_nmt.training import distributed, gpu_lock


def fake_nvidia_smi(folder, gpus_listed: int):
    """An `nvidia-smi` that lists `gpus_listed` devices for -L, as the real one prints them."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    lines = "\n".join(
        f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)" for i in range(gpus_listed)
    )
    script.write_text(f"#!/bin/sh\n[ \"$1\" = -L ] || exit 9\ncat <<'EOF'\n{lines}\nEOF\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


@pytest.fixture
def no_torch_cuda(monkeypatch):
    """Any question to torch.cuda fails the test: claiming must not initialise CUDA."""

    def refuse(*args, **kwargs):
        raise AssertionError("gpu_lock.claim asked torch.cuda, which initialises CUDA with every device visible")

    for name in ("is_available", "device_count", "init", "_lazy_init", "current_device", "get_device_name"):
        monkeypatch.setattr(torch.cuda, name, refuse)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the nvidia-smi path (NVML's has its own test)


def test_claiming_reads_the_driver_list_not_torch_cuda(tmp_path, monkeypatch, no_torch_cuda):
    bin_dir = fake_nvidia_smi(tmp_path / "bin", 2)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert gpu_lock.visible_devices() == ["0", "1"]
    held = gpu_lock.claim(1, tmp_path / "locks", timeout=0, poll=0.01)
    assert len(held) == 1 and os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    # a second job on the same machine (another process, as Snakemake runs them) gets the other device
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    code = (
        "import os; from layerwise_nmt.training.gpu_lock import claim;"
        " h = claim(1, os.environ['LOCKS'], timeout=0);"
        " import torch; print(os.environ['CUDA_VISIBLE_DEVICES'], torch.cuda.is_initialized())"
    )
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    other = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "LOCKS": str(tmp_path / "locks")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert other.returncode == 0, other.stderr
    assert other.stdout.split() == ["1", "False"]


def test_without_a_driver_nothing_is_claimed(tmp_path, monkeypatch, no_torch_cuda):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi
    assert gpu_lock.visible_devices() == []
    assert gpu_lock.claim(1, tmp_path / "locks") == [] and "CUDA_VISIBLE_DEVICES" not in os.environ


def test_nvml_is_asked_first_when_installed(tmp_path, monkeypatch, no_torch_cuda):
    calls = []
    nvml = types.SimpleNamespace(
        NVMLError=RuntimeError,
        nvmlInit=lambda: calls.append("init"),
        nvmlDeviceGetCount=lambda: 3,
        nvmlShutdown=lambda: calls.append("shutdown"),
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpu_lock.visible_devices() == ["0", "1", "2"] and calls == ["init", "shutdown"]

    def no_driver():
        raise RuntimeError("NVML Shared Library Not Found")

    nvml.nvmlInit = no_driver  # the package without a driver: fall back to nvidia-smi, here absent
    assert gpu_lock.visible_devices() == []


def test_a_data_parallel_rank_selects_its_gpu_before_the_process_group(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", str(device))))
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(
        distributed.dist,
        "init_process_group",
        lambda backend, **kw: calls.append(("init_process_group", backend, str(kw.get("device_id")))),
    )
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert distributed.init_distributed() == torch.device("cuda", 1)
    assert calls == [("set_device", "cuda:1"), ("init_process_group", "nccl", "cuda:1")]
