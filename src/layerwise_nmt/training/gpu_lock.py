"""Which GPUs a training job uses, and how it is launched on them.

Snakemake counts GPUs (`--resources gpu=N` on one machine; `gpu=` per job on SLURM) but does not say *which* ones a
job gets. On one machine, `claim` takes the first free devices of CUDA_VISIBLE_DEVICES (or of all devices) by
holding an exclusive `fcntl` lock on `<lock_dir>/gpu<id>.lock` for as long as the job runs; the kernel releases the
lock when the process ends, however it ends, so a killed job never leaks a GPU. Under SLURM the allocation already
restricts the job's devices, so nothing is claimed there.

A job with more than one GPU re-executes itself under `torchrun --standalone --nproc-per-node N`; each rank then
trains data-parallel (DDP, NCCL) with update_freq divided by N, so the tokens per update stay
max_tokens × GPUs × update_freq-per-GPU = max_tokens × update_freq as configured for one GPU.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from .. import UserError

log = logging.getLogger(__name__)


def visible_devices() -> list[str]:
    """The device ids this process may use: CUDA_VISIBLE_DEVICES if set, else every GPU the driver lists.

    Never through torch.cuda: asking it initialises CUDA with every device visible, and a CUDA_VISIBLE_DEVICES set
    afterwards (by `claim`) is no longer read, so every job would compute on device 0 whatever lock it held.
    NVML (nvidia-ml-py) or `nvidia-smi -L` ask the driver without creating a CUDA context, as PyTorch's own
    PYTORCH_NVML_BASED_CUDA_CHECK does; neither present = no NVIDIA driver = no GPU."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() not in ("", "-1")]
    count = _nvml_device_count()
    if count is None:
        count = _nvidia_smi_device_count()
    return [str(i) for i in range(count or 0)]


def _nvml_device_count() -> int | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None  # the library without a driver (a CPU machine with the package installed)
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi_device_count() -> int | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    import subprocess

    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else None


def claim(count: int, lock_dir: str | os.PathLike, timeout: float = 24 * 3600, poll: float = 5.0) -> list:
    """Lock `count` free devices (waiting up to `timeout` s) and restrict CUDA_VISIBLE_DEVICES to them.

    Returns the open lock files: keep them referenced for the life of the job. Without devices (a CPU machine) or
    under SLURM (its allocation decides) nothing is claimed and the job runs where it is."""
    if count <= 0 or os.environ.get("SLURM_JOB_ID"):
        return []
    devices = visible_devices()
    if not devices:
        log.info("no GPU visible on this machine: training on the CPU")
        return []
    if count > len(devices):
        raise UserError(
            f"a job asks for {count} GPUs but only {len(devices)} are visible ({','.join(devices)}); "
            f"lower gpus_per_job in the config or --resources gpu"
        )
    Path(lock_dir).mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    while True:
        held = []
        for device in devices:
            handle = open(Path(lock_dir) / f"gpu{device}.lock", "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            held.append((device, handle))
            if len(held) == count:
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(d for d, _ in held)
                log.info("claimed GPU(s) %s", os.environ["CUDA_VISIBLE_DEVICES"])
                return [h for _, h in held]
        for _, handle in held:  # not enough free at once: give back what we took, wait, try again
            handle.close()
        if time.monotonic() > deadline:
            raise UserError(
                f"no {count} free GPU(s) among {','.join(devices)} after {timeout:.0f} s "
                f"(locks in {lock_dir}); is --resources gpu larger than the machine has?"
            )
        time.sleep(poll)


def torchrun_command(nproc: int, argv: list[str]) -> list[str]:
    """The command that runs `python -m layerwise_nmt <argv>` as `nproc` data-parallel ranks on this node."""
    runner = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    return [runner, "--standalone", f"--nproc-per-node={nproc}", "-m", "layerwise_nmt", *argv]


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ


def run_ranks(nproc: int, argv: list[str]) -> int:
    """Run the command as `nproc` torchrun ranks and wait; SIGTERM/SIGUSR1/SIGINT (preemption, Snakemake) are
    passed on, so every rank checkpoints before the job ends. Returns torchrun's exit code."""
    import signal
    import subprocess

    child = subprocess.Popen(torchrun_command(nproc, argv))
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: child.send_signal(signum))
    return child.wait()
