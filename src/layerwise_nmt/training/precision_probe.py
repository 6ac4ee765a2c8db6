"""`amp: auto` on a CPU with native bf16 or a GPU with bf16, decided by timing the work itself rather than by flags.

Native bf16 instructions do not make bf16 faster: on some CPUs that expose AVX512_BF16, a small Transformer's update
takes longer in bf16 autocast than in fp32 (the casts around every matmul cost more than the matmuls save), while on
others bf16 is clearly faster; on a GPU, bf16 speeds up a large model but can slow a small one whose updates wait on
the host's kernel launches, to which autocast's casts add (docs/benchmarks.md has the measurements). So the first run of
a workload on a machine times a few of its own steps (a training update's forward and backward at the model's
shapes, or a few beam-search steps) in fp32 (TF32 on a GPU unless `tf32: false`) and in bf16, and picks bf16 only
when it is at least `SPEEDUP` times faster. A training update is also timed with bf16 weights (`amp: bf16-weights`,
master_weights.py: no casts, but the gradients and weights copied between bf16 and fp32 masters once per update),
and bf16 weights replace autocast only where they are at least `WEIGHTS_SPEEDUP` times faster than it: which one is
faster depends on the device and the model (how much autocast's casts cost against the copies), and where the two
are as fast, within the probe's noise, machines of one type must not split between them run by run.

On a CPU a step is timed in the CPU time of the thread that runs it, with PyTorch at one thread for the probe, not
in wall time: the same machine type must pick the same precision whether or not other jobs share its cores. In wall
time, another process on the probe's core stretched whichever steps it happened to overlap, and with several threads
every parallel region waits for its slowest thread, which hurts bf16's extra casts more than fp32's matmuls; a busy
AMX Xeon measured bf16 at 1.12x fp32 where the quiet one measured 1.95x, and its translations changed with the pick.
A GPU step is timed in wall time, as the device's own work is what it waits for.

The answer is cached, keyed by everything it depends on (CPU model and flags, PyTorch's kernel level and oneDNN's
ISA cap; or the GPU's name and compute capability and CUDA's version; PyTorch's version, the workload's
kind and shapes), in `$LWNMT_CACHE_DIR` or
`$XDG_CACHE_HOME/layerwise-nmt` (default ~/.cache/layerwise-nmt), under a file lock: every later run of the same
workload on the same machine reuses the choice, so its results do not depend on a second measurement's noise, and
runs started together measure once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch

from ..data.io import atomic_path
from .precision import cpu_capability, cpu_flags, cpu_model, cuda_kernels

if TYPE_CHECKING:
    from ..models.transformer import Model
    from .config import TrainConfig
    from .graphs import CudaGraph, EmulatedGraph

    CapturedStep = CudaGraph | EmulatedGraph

log = logging.getLogger(__name__)

TWO = ("none", "bf16")  # what a workload times unless it says otherwise
SPEEDUP = 1.15  # bf16 must be this much faster than fp32 to be picked: below it, the noise of a 2-second probe
# bf16 weights must be this much faster than bf16 autocast to replace it: on a Zen 4 EPYC, where paired runs measured
# them 1.02-1.03x autocast, single 2-round probes read 0.96-1.05x
WEIGHTS_SPEEDUP = 1.10
CACHE_FILE = "precision-probe.json"
ROUNDS, BUDGET_S = 5, 2.0  # timed rounds (each: one fp32 step and one bf16 step) at most; stop after the budget
# in the cache key: choices timed by an earlier wall clock, perhaps on a busy core, are measured again, not reused;
# the run's thread count is not in it, since the probe runs at one thread (and threads.py takes fewer on a busy CPU)
CPU_CLOCK = "thread CPU time, 1 thread"


@dataclass(frozen=True)
class Measured:
    """The probe's result: what to compute in and the two timings it was chosen from."""

    amp: str  # none | bf16 | bf16-weights
    fp32_s: float  # the fastest step in fp32
    bf16_s: float  # in bf16 autocast
    kind: str
    measured_at: str  # when the probe ran (ISO date); a cached choice keeps it
    full: str = "fp32"  # what "none" computes in there: fp32, or TF32 on a GPU's tensor cores
    weights_s: float | None = None  # with bf16 weights (training only); None where not timed

    @property
    def speedup(self) -> float:
        return self.fp32_s / self.bf16_s

    def summary(self) -> str:  # "bf16 1.42x fp32", the tables' precision line
        if math.isinf(self.fp32_s):
            return f"{self.full} out of memory"
        weights = f", bf16-weights {self.fp32_s / self.weights_s:.2f}x" if self.weights_s else ""
        return f"bf16 {self.speedup:.2f}x{weights} {self.full}"

    def reason(self) -> str:
        steps = f"{self.bf16_s:.3f} s" + (f" (bf16 weights {self.weights_s:.3f} s)" if self.weights_s else "")
        why = {
            "none": f"{self.full}, as bf16 is not ≥ {SPEEDUP}x faster",
            "bf16": f"bf16, as bf16 is ≥ {SPEEDUP}x faster",
            "bf16-weights": f"bf16-weights, as bf16 is ≥ {SPEEDUP}x faster with bf16 weights, which beat autocast "
            f"(≥ {WEIGHTS_SPEEDUP}x where it is as fast)",
        }[self.amp]
        return (
            f"measured: {self.summary()} ({self.kind} step {steps} vs {self.fp32_s:.3f} s, "
            f"probed {self.measured_at[:10]}); {why}"
        )


@dataclass(frozen=True)
class Workload:
    """A few seconds of representative work: `step(amp)` runs one step of it at each amp of `amps`, leaving the
    model, the RNG streams and the gradients as they were, and returns once the device has finished it."""

    kind: str  # train | decode
    shape: dict  # what its speed depends on besides the machine: model class, its config, tokens per step
    step: Callable[[str], None]
    device: torch.device = torch.device("cpu")
    full: str = "fp32"  # what amp "none" computes in on the device: fp32, or TF32
    amps: tuple[str, ...] = TWO  # what is timed: "none" and "bf16", for training also "bf16-weights"

    def choose(self) -> Measured:
        key = cache_key(self.kind, self.shape, self.device)
        if self.amps != TWO:  # a choice made among fewer is measured again, not reused
            key["candidates"] = list(self.amps)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]
        directory = cache_dir()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            lock = open(directory / f"{CACHE_FILE}.lock", "a")
        except OSError as err:  # a read-only home: measure every time rather than fail
            log.warning("precision probe: cannot keep its result in %s (%s); measuring anew", directory, err)
            return self.measure()
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # runs started together: one measures, the others wait and read
            cached = read_cache(directory).get(digest)
            if cached is not None:
                return Measured(
                    **{k: cached[k] for k in ("amp", "fp32_s", "bf16_s", "kind", "measured_at")},
                    full=cached.get("full", "fp32"),
                    weights_s=cached.get("weights_s"),
                )
            measured = self.measure()
            entries = read_cache(directory)
            entries[digest] = {**measured.__dict__, "key": key}
            with atomic_path(directory / CACHE_FILE) as tmp:
                tmp.write_text(json.dumps(entries, indent=1, sort_keys=True, default=str) + "\n")
            return measured

    def measure(self) -> Measured:
        """The fastest of 2 to `ROUNDS` steps per precision, alternated so that a change in load hits both, after
        one untimed step each (first-call allocations, oneDNN's kernel selection); fewer where the choice is a
        clear cut. A GPU too small for the batch in fp32/TF32 gets bf16, which needs less memory."""
        attempted: list[str] = []
        try:
            return self._measure(attempted)
        except torch.cuda.OutOfMemoryError:
            if attempted[-1] != "none":  # bf16 needs the least: the batch fits neither
                raise
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            log.warning("precision probe (%s): out of GPU memory at this batch; bf16, which needs less", self.kind)
            return Measured(
                "bf16",
                math.inf,
                math.inf,
                self.kind,
                datetime.now(UTC).isoformat(timespec="seconds"),
                self.full,
            )

    def _measure(self, attempted: list[str]) -> Measured:
        with self._timing() as clock:
            return self._timed(attempted, clock)

    @contextlib.contextmanager
    def _timing(self):
        """The clock a step is timed with (see the module docstring): on a CPU the probing thread's CPU time, with
        PyTorch's intra-op threads at 1 while it runs (so that all of a step's work is on that thread) and the
        run's own number restored afterwards; elsewhere wall time."""
        if self.device.type != "cpu":
            yield time.perf_counter
            return
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield time.thread_time
        finally:
            torch.set_num_threads(threads)

    def _timed(self, attempted: list[str], clock: Callable[[], float]) -> Measured:
        for amp in self.amps:
            attempted.append(amp)
            self.step(amp)
        times: dict[str, list[float]] = {amp: [] for amp in self.amps}
        started = time.perf_counter()
        for round_ in range(ROUNDS):
            for amp in self.amps if round_ % 2 == 0 else self.amps[::-1]:
                attempted.append(amp)
                t0 = clock()
                self.step(amp)
                times[amp].append(clock() - t0)
            if round_ >= 1 and (clear_cut(times) or time.perf_counter() - started > BUDGET_S):
                break
        fastest = {amp: min(steps) for amp, steps in times.items()}
        amp = pick(fastest)
        measured = Measured(
            amp,
            fastest["none"],
            fastest["bf16"],
            self.kind,
            datetime.now(UTC).isoformat(timespec="seconds"),
            self.full,
            fastest.get("bf16-weights"),
        )
        log.info(
            "precision probe (%s, %d rounds): %s per step → %s",
            self.kind,
            len(times["none"]),
            ", ".join(f"{self.full if a == 'none' else a} {s:.3f} s" for a, s in fastest.items()),
            self.full if amp == "none" else amp,
        )
        return measured


def pick(fastest: dict[str, float]) -> str:
    """From each precision's fastest step: bf16 where it is at least `SPEEDUP` times faster than fp32, bf16 weights
    instead where they are too and, if autocast is, `WEIGHTS_SPEEDUP` times faster than it; else fp32 ("none")."""
    fast = {amp for amp, seconds in fastest.items() if amp != "none" and fastest["none"] >= SPEEDUP * seconds}
    if "bf16-weights" in fast and ("bf16" not in fast or fastest["bf16"] >= WEIGHTS_SPEEDUP * fastest["bf16-weights"]):
        return "bf16-weights"
    return "bf16" if "bf16" in fast else "none"


def clear_cut(times: dict[str, list[float]]) -> bool:
    """Whether the steps so far leave no doubt: every bf16 step (of either variant) slower than every fp32 step, or
    each comparison `pick` makes settled by every step (the slower one slower in all, or the faster one faster by
    the margin in all). Then more rounds would only confirm the choice (a tiny model's probe stops after 2 rounds
    rather than running into its budget); where the precisions' steps overlap, the probe goes on."""
    fp32, bf16, weights = times["none"], times["bf16"], times.get("bf16-weights")
    variants = [bf16] if weights is None else [bf16, weights]
    if all(max(fp32) < min(steps) for steps in variants):
        return True
    pairs = [(fp32, steps, SPEEDUP) for steps in variants] + ([(bf16, weights, WEIGHTS_SPEEDUP)] if weights else [])
    return all(max(slow) < min(fast) or min(slow) >= margin * max(fast) for slow, fast, margin in pairs)


def cache_dir() -> Path:
    if os.environ.get("LWNMT_CACHE_DIR"):
        return Path(os.environ["LWNMT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "layerwise-nmt"


def cache_key(kind: str, shape: dict, device: torch.device = torch.device("cpu")) -> dict:  # noqa: B008  (a torch.device is immutable)
    """Everything the choice depends on: the same key on another day gets the same precision."""
    if device.type == "cuda":
        return {
            "kind": kind,
            "shape": shape,
            "gpu": torch.cuda.get_device_name(device),
            "compute_capability": list(torch.cuda.get_device_capability(device)),
            "cuda": torch.version.cuda,
            "torch": torch.__version__,
        }
    return {
        "kind": kind,
        "shape": shape,
        "cpu": cpu_model(),
        "capability": cpu_capability(),
        "flags": sorted(
            cpu_flags()
            & {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "avx_vnni", "amx_fp16"}
        ),
        "onednn_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
        "torch": torch.__version__,
        "clock": CPU_CLOCK,
    }


def read_cache(directory: Path) -> dict:
    path = directory / CACHE_FILE
    try:
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        log.warning("precision probe: %s unreadable (%s); measuring anew", path, err)
        return {}
    return entries if isinstance(entries, dict) else {}


@contextlib.contextmanager
def probe_step(device: torch.device, tf32: bool = True):
    """One probe step's context on `device`: the CUDA kernels training and decoding use (TF32 unless `tf32` is off)
    and, on a GPU, a wait for the step's kernels at its end, so that the step's wall time is the device's."""
    with cuda_kernels(device, tf32):
        yield
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def autocast(amp: str, device: torch.device = torch.device("cpu")):  # noqa: B008  (a torch.device is immutable)
    """Autocast for a probe step's forward: bf16, or off for fp32/TF32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp == "bf16")


def full_precision(device: torch.device, tf32: bool = True) -> str:
    """What amp "none" computes in on `device`: the name the probe's numbers use."""
    return "TF32" if device.type == "cuda" and tf32 else "fp32"


def model_shape(model: torch.nn.Module, **sizes) -> dict:
    """A model's part of the cache key: its class and its whole config (dimensions, layers, options)."""
    return {"model": type(model).__name__, "config": repr(getattr(model, "config", None)), **sizes}


def training_workload(model: Model, cfg: TrainConfig, device) -> Workload:
    """One forward and backward of `model` on a batch of the run's size, for `amp: auto`'s probe; random tokens,
    fixed. On a CPU at most 1,024 target tokens (the matmuls' inner dimensions are the model's); on a GPU the run's
    whole max_tokens, since there the batch's size decides whether the update waits on the host or on the GPU. The
    RNG streams are forked (dropout draws from a copy) and the gradients dropped, so a probed run trains exactly
    as an unprobed one. bf16-weights runs on a bf16 copy of the model, made at its first step, and its step includes
    the two copies between bf16 and the fp32 masters that each of its updates adds (the masters are not changed).

    Where the run's updates will be replayed as CUDA graphs (`cuda_graphs`, graphs.py), so is the probe's step: its
    first call per precision runs it eagerly and captures it, untimed, and the timed calls replay it. A host-bound
    model then costs what its GPU work costs, and the pick is the one for the run's own updates (eagerly, bf16's
    casts add launches that a graph does not pay for)."""
    from .graphs import UpdateGraphs, why_not
    from .update_batches import growth_for_run
    from .distributed import world
    from .master_weights import bf16_copy, link

    config, length = model.config, min(24, model.config.max_positions - 1)
    rows = probe_rows(cfg.max_tokens, length, device)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, config.src_vocab, (rows, length), generator=generator).to(device)
    prev = torch.randint(4, config.tgt_vocab, (rows, length), generator=generator).to(device)
    target = prev.roll(-1, dims=1)
    copies: list[torch.nn.Module] = []
    # bf16 stands for the three: the graphs apply to fp32 and both bf16 forms alike, not to fp16 (never probed)
    growth = growth_for_run(cfg, model, device, world()[1])[0]  # `start_run` hands it its decision: kept as it is
    graphed = not why_not(cfg.cuda_graphs, device, "bf16", growth > 0, world()[1])
    graphs = UpdateGraphs(device, emulated=device.type != "cuda") if graphed else None
    captured: dict[str, CapturedStep] = {}

    def forward_backward(amp: str) -> torch.Tensor:
        if amp == "bf16-weights" and not copies:
            copies.append(bf16_copy(model))
        net = copies[0] if amp == "bf16-weights" else model
        with autocast(amp, device):
            output = net(src, prev, full=True)
            loss = torch.nn.functional.cross_entropy(output.logits.float().flatten(0, 1), target.flatten())
        loss.backward()
        linked = link(net)
        if linked is not None:
            linked.grads_to_masters()
            linked.masters_to_model()
        model.zero_grad(set_to_none=True)
        return loss.detach()

    def step(amp: str) -> None:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), probe_step(device, cfg.tf32):
            if graphs is None:
                forward_backward(amp)
                return
            with graphs.on_stream():
                if amp in captured:
                    captured[amp].replay()
                    return
                forward_backward(amp)  # the warm-up, then the capture (which runs nothing)
                captured[amp] = graphs.new_graph()
                captured[amp].capture(lambda: forward_backward(amp))

    shape = model_shape(model, rows=rows, length=length, **({"cuda_graphs": True} if graphed else {}))
    amps = (*TWO, "bf16-weights")
    return Workload("train", shape, step, device, full_precision(device, cfg.tf32), amps)


def probe_rows(max_tokens: int | None, length: int, device: torch.device) -> int:
    """Sentences of `length` in the training probe's batch: the run's max_tokens on a GPU, at most 1,024 tokens on a
    CPU (1,024 without max_tokens)."""
    tokens = max_tokens or 1024
    return max(1, (tokens if device.type == "cuda" else min(tokens, 1024)) // length)
