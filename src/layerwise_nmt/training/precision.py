"""Which precision a run computes in: `amp: auto` picks the fastest one the device runs.

    CUDA with bf16 (Ampere and newer)   → measured: bf16 autocast or, for training, bf16 weights where the work
                                          itself runs clearly faster in it, else TF32 (fp32 with `tf32: false`);
                                          Transformer base and big train faster in bf16, an IWSLT-sized model's
                                          small updates in TF32
    older CUDA (V100, P100, T4)         → fp16 autocast with the loss scaler (loop.py)
    CPU with AVX512_BF16 or AMX, whose
      PyTorch kernels run at AVX-512    → measured: as on CUDA, else fp32 (precision_probe.py; training and decoding
                                          separately)
    any other CPU                       → fp32 ("none"): without native bf16, PyTorch emulates it, over an order
                                          of magnitude slower than fp32 (docs/benchmarks.md)

bf16-weights trains a bf16 copy of the model without autocast, the optimizer stepping fp32 master weights
(master_weights.py); in decoding, which updates no weight, it decodes a bf16 copy of the model, without autocast
either. An explicit none | bf16 | bf16-weights | fp16 is kept as given. fp32 on CUDA uses TF32 tensor-core matmuls
unless `tf32: false` (PyTorch's default is full fp32, a fraction of the tensor cores' speed). Works on PyTorch 2.11
and 2.13.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .. import UserError
from ..settings import AMP_CHOICES

log = logging.getLogger(__name__)

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Precision:
    amp: str  # none | bf16 | bf16-weights | fp16: what the run computes in
    requested: str  # what the config asked for (auto or one of those)
    reason: str  # why, in words, for the log and training.json
    device: str  # the device's name: "cpu: <CPU model> (<PyTorch's kernel level>)", or the GPU's
    measured: str = ""  # what the probe found, when it decided ("bf16 1.42x fp32"); "" otherwise
    tf32: bool = False  # "none" on a GPU computes its matmuls in TF32

    @property
    def computes(self) -> str:
        """What the matmuls compute in: bf16, fp16, TF32 or fp32 (the tables' precision line)."""
        return ("TF32" if self.tf32 else "fp32") if self.amp == "none" else self.amp

    def autocast(self, device: torch.device):
        """A fresh autocast context for this precision on `device` (a no-op for fp32, and for bf16-weights, whose
        model is bf16 itself)."""
        if self.amp in ("none", "bf16-weights"):
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=_DTYPES[self.amp])

    def __str__(self) -> str:  # the log line of every run: "bf16 (amp: auto; CPU with native bf16, …) on cpu: …"
        return f"{self.amp} (amp: {self.requested}; {self.reason}) on {self.device}"

    def to_dict(self) -> dict:
        return {
            "amp": self.amp,
            "requested": self.requested,
            "reason": self.reason,
            "device": self.device,
            "computes": self.computes,
            **({"measured": self.measured} if self.measured else {}),
        }

    @classmethod
    def from_dict(cls, recorded: dict) -> Precision:
        """The precision `to_dict` recorded (in a checkpoint, training.json)."""
        return cls(
            recorded["amp"],
            recorded["requested"],
            recorded["reason"],
            recorded["device"],
            recorded.get("measured", ""),
            recorded.get("computes") == "TF32",
        )


def resolve(requested: str, device: torch.device, workload=None, tf32: bool = True) -> Precision:
    """The precision to compute in on `device` for the configured `amp` (see the module docstring). `workload`: a
    `precision_probe.Workload`, timed when the choice needs a measurement; without one, a bf16 GPU computes in
    bf16 and such a CPU in fp32. `tf32`: the run's setting, which makes "none" TF32 on a GPU."""
    chosen = _resolve(requested, device, workload)
    return replace(chosen, tf32=device.type == "cuda" and tf32)


def _resolve(requested: str, device: torch.device, workload) -> Precision:
    if requested not in AMP_CHOICES:
        raise UserError(f"amp={requested!r}; expected one of {', '.join(AMP_CHOICES)}")
    name = device_name(device)
    if requested == "fp16" and device.type != "cuda":
        raise UserError(f"amp=fp16 needs a CUDA GPU (this run is on {name}); use amp: auto, bf16 or none")
    if requested != "auto":
        return Precision(requested, requested, "as configured", name)
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            if workload is None:
                return Precision("bf16", "auto", "CUDA device with bf16 tensor cores", name)
            try:
                measured = workload.choose()
            except Exception as err:  # noqa: BLE001  (a probe that fails costs its speed-up, never the run)
                log.warning("precision probe failed on %s (%s: %s); bf16", name, type(err).__name__, err)
                return Precision(
                    "bf16", "auto", f"CUDA device with bf16 tensor cores; the probe failed ({type(err).__name__})", name
                )
            return Precision(measured.amp, "auto", measured.reason(), name, measured.summary())
        return Precision("fp16", "auto", "CUDA device without bf16: fp16 with loss scaling", name)
    if device.type == "cpu":
        capability = cpu_capability()
        if cpu_may_pick_bf16():
            if workload is None:
                return Precision("none", "auto", "CPU with native bf16, not measured for this work: fp32", name)
            try:
                measured = workload.choose()
            except Exception as err:  # noqa: BLE001  (a probe that fails costs its speed-up, never the run)
                log.warning("precision probe failed on %s (%s: %s); fp32", name, type(err).__name__, err)
                return Precision("none", "auto", f"CPU with native bf16; the probe failed ({type(err).__name__})", name)
            return Precision(measured.amp, "auto", measured.reason(), name, measured.summary())
        why = "no AVX512_BF16/AMX" if not cpu_has_native_bf16() else f"PyTorch kernels at {capability}"
        return Precision("none", "auto", f"CPU without native bf16 ({why}): bf16 would be emulated", name)
    return Precision("none", "auto", f"{device.type} device: fp32", name)


@contextlib.contextmanager
def cuda_kernels(device: torch.device, tf32: bool = True):
    """While the block runs, the CUDA kernels a run computes with; the process's previous settings come back
    afterwards, so that a caller's own choice (gpu_check's strict fp32 rows, a test) is not changed behind its back.
    No-op off CUDA.

    - fp32 matmuls in TF32 tensor cores unless `tf32` is off, as fairseq and PyTorch recommend on Ampere and newer.
    - scaled_dot_product_attention without its cuDNN backend: cuDNN builds an execution plan for every new
      (batch, length) shape, tens of milliseconds of host time each, and NMT changes shape at every update (length
      bucketing) and every decoding step, which made bf16 training many times slower than TF32
      (docs/benchmarks.md). Flash and memory-efficient attention need no plan and run as fast on the GPU."""
    if device.type != "cuda":
        yield
        return
    before = torch.get_float32_matmul_precision()  # the API both PyTorch 2.11 and 2.13 accept without a warning
    cudnn_attention = torch.backends.cuda.cudnn_sdp_enabled()
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
        torch.backends.cuda.enable_cudnn_sdp(cudnn_attention)


def cpu_capability() -> str:
    """The instruction set PyTorch's CPU kernels run at (AVX2, AVX512, ...); honours ATEN_CPU_CAPABILITY."""
    getter = getattr(torch.backends.cpu, "get_cpu_capability", None)
    return getter() if getter else "DEFAULT"


def cpu_may_pick_bf16() -> bool:
    """Whether `amp: auto` measures bf16 on this CPU (and may pick it): native bf16, PyTorch kernels at AVX-512."""
    return cpu_capability() in ("AVX512", "AMX") and cpu_has_native_bf16()


def cpu_has_native_bf16() -> bool:
    """Whether the CPU executes bf16 dot products in hardware (AVX512_BF16 or AMX-BF16)."""
    probe = getattr(torch._C, "_cpu", None)  # cpuinfo's answers; /proc/cpuinfo where a build lacks them
    bf16, amx = (getattr(probe, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
    if bf16 is not None and amx is not None:
        return bool(bf16() or amx())
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def cpu_flags() -> set[str]:
    """/proc/cpuinfo's flags (empty where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return f"cpu: {cpu_model()} ({cpu_capability()})"
    return device.type
