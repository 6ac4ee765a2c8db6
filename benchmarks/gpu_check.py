"""`make gpu-check`: the CUDA path proven, then measured (docs/benchmarks.md; a GPU node: docs/usage.md).

Correctness, for every model family × every precision `amp: auto` can pick on this device (CUDA: bf16, fp16 with
the loss scaler — V100/T4 users get it, so it is checked on bf16 GPUs too — TF32 (`amp: none`, the default
`tf32: true`) and strict fp32 (`tf32: false`)):
  overfit  a few updates of the trainer (`train.start_run` / `train.update_step`) on one repeated batch: loss finite and
           decreasing;
  resume   `train.train` for 6 updates straight vs 3, stop, resume to 6: the same weights (bit for bit, or within
           1e-4 where CUDA's non-deterministic kernels differ, which is reported);
  beam     cached beam search (`decode.beam_search`) = full recomputation (`decode.Recompute`) in that precision
           (strict fp32 to 1e-5; TF32 and mixed precision to their rounding);
  graphs   40 updates in fixed shapes replayed as CUDA graphs (`cuda_graphs: auto`) = the same updates taken
           eagerly (the resume check's tolerance), updates replayed and no capture failed (fp16: not applicable);
and once: data-parallel training (`lwnmt train --ranks N` under torchrun with NCCL over the visible GPUs; with one
GPU, a one-rank NCCL group around the trainer's `accumulate`), and the GPU lock (`gpu_lock.claim`) claiming a real
device in a child process that then computes on it, CUDA not initialised before the claim.

Speed: target tokens/s of training updates (forward, backward, fused Adam) and model FLOP utilisation
    MFU = 6 · parameters · non-padding target tokens/s ÷ the GPU's dense bf16 peak (plan.GPUS, the datasheets)
for transformer_iwslt_de_en (gca.deen.transformer, at the study's 4,096-token batches), Transformer base
(lwc.t2.ende.transformer_base) and big (gca.ende.transformer) at `--max-tokens`, with config.yaml's architectures
and vocabulary sizes, on length-bucketed batches (`data.batching.make_batches`) of real sentence lengths: the
IWSLT14 BPE valid+test sets for the IWSLT model, newstest2013 (Moses tokens; 32K BPE adds ~10-15% more units) for
base and big. The lengths travel with the repository (benchmarks/lengths.json, written from the data mirror by
`--write-lengths`): a GPU machine has no data mirror. Token ids are random: speed does not depend on them. After a
model's rows, its `auto` row: the trainer started with `amp: auto` (its probe run afresh) and what it picked, which
fails where the other precision measured faster by more than the probe's margin. With `--bucket-growth-factor 0 1.1`
each model × precision is timed in today's batches, in fixed shapes eagerly, and in fixed shapes replayed as CUDA
graphs (`--cuda-graphs auto`, the trainer's default; each timed shape captured before the clock starts): the row
says how its timed updates ran (`timed_updates_by_path`: replayed, or eager where a capture failed).

Probe (`--probe DATA_DIR`, the study's binarized data): the study baseline trained by `lwnmt train` alone, then
three at once on the one GPU, 60 s each: the target tokens/s the study's shards are sized from.

Every result is written to the JSON as soon as it exists, so a command killed at its time limit still returns
what it finished. Exit 1 if any check or speed row failed (a row that raised is a failure, not a skipped row).

    python benchmarks/gpu_check.py [--json benchmarks/results/gpu.json] [--max-tokens 12288] [--updates 30]
        [--bucket-growth-factor 0 1.1] [--cuda-graphs [auto]]
        [--families ...] [--precisions ...] [--speed-precisions ...] [--skip-speed] [--skip-checks] [--probe DIR]
        [--compile]

Without CUDA it says so in one line and exits 0. `--device cpu` runs the same checks on the CPU (the tests and
`make node-rehearsal` do; there fp16 runs on the CPU's fp16 autocast with a CPU GradScaler: the trainer's code
path, not its speed).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from layerwise_nmt.data.batching import Batch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # a GPU node may have nothing of ours installed
# the package is imported inside the functions: without CUDA the script answers before loading it

TINY = {"d_model": 32, "d_ff": 64, "heads": 4, "encoder_layers": 2, "decoder_layers": 2, "tie": "all", "dropout": 0.0}
FAMILIES = {  # name → (model, arch on top of TINY): each registered model and backbone once
    "transformer_post": ("transformer", {}),
    "transformer_pre": ("transformer", {"norm": "pre"}),
    "lwc": ("lwc", {"layers": 3}),
    "cross_view_gca": ("cross_view", {"strategy": "gca", "soft_integration": True}),
    "dynamic_conv": ("transformer", {"backbone": "dynamic_conv", "kernel_sizes": [3, 5]}),
    "lightweight_conv": ("transformer", {"backbone": "lightweight_conv", "kernel_sizes": [3, 5]}),
    "deep": ("deep", {"aggregation": "hierarchical", "diversity": 1.0}),
    "mlrf": ("mlrf", {"encoder_fusion": "fnn", "decoder_fusion": "sa", "n_hop": 2}),
}
SPEED_ROWS = {  # name → (config.yaml experiment, which real lengths, max_tokens: None = --max-tokens)
    "transformer_iwslt_de_en": ("gca.deen.transformer", "iwslt14", 4096),
    "transformer_base": ("lwc.t2.ende.transformer_base", "newstest2013", None),
    "transformer_big": ("gca.ende.transformer", "newstest2013", None),
}
LENGTH_FILES = {  # (source, target) files under the data mirror, for --write-lengths
    "iwslt14": [
        ("iwslt14-de-en/iwslt14.tokenized.de-en/valid.de", "iwslt14-de-en/iwslt14.tokenized.de-en/valid.en"),
        ("iwslt14-de-en/iwslt14.tokenized.de-en/test.de", "iwslt14-de-en/iwslt14.tokenized.de-en/test.en"),
    ],
    "newstest2013": [("wmt14-en-de/newstest2013.en.gz", "wmt14-en-de/newstest2013.de.gz")],
}
LENGTHS = ROOT / "benchmarks" / "lengths.json"
# label → (amp, tf32): the precisions a run can train in; "tf32" and "fp32" are both `amp: none`
PRECISIONS = {
    "bf16": ("bf16", True),
    "bf16-weights": ("bf16-weights", True),
    "fp16": ("fp16", True),
    "tf32": ("none", True),
    "fp32": ("none", False),
}
RESUME_TOLERANCE = 1e-4


def precisions(device: torch.device) -> list[str]:
    """The precisions to check on `device`: what `amp: auto` can pick there, and fp32 (plus TF32 on CUDA)."""
    from layerwise_nmt.training.precision import cpu_may_pick_bf16

    if device.type != "cuda":
        return ["bf16", "bf16-weights", "fp32"] if cpu_may_pick_bf16() else ["fp32"]
    if torch.cuda.is_bf16_supported():
        return ["bf16", "bf16-weights", "fp16", "tf32", "fp32"]
    return ["fp16", "tf32", "fp32"]


def precision_of(label: str, device: torch.device):
    """(Precision, tf32) for a label. fp16 on the CPU (the rehearsal): the trainer's fp16 branch as `resolve` returns
    it on a GPU without bf16, with the CPU's fp16 autocast underneath."""
    from layerwise_nmt.training.precision import Precision, device_name, resolve

    amp, tf32 = PRECISIONS[label]
    if amp == "fp16" and device.type != "cuda":
        return Precision("fp16", "fp16", "the CUDA fp16 branch rehearsed on the CPU", device_name(device)), tf32
    return resolve(amp, device, tf32=tf32), tf32


@contextlib.contextmanager
def trainer_precision(label: str, device: torch.device):
    """`train.train` resolves `amp` itself, and refuses fp16 on a CPU: for the CPU rehearsal of fp16, hand it the
    fp16 Precision (the same object a V100 gets)."""
    from layerwise_nmt.training import loop as training

    if PRECISIONS[label][0] != "fp16" or device.type == "cuda":
        yield
        return
    real = training.resolve
    training.resolve = lambda amp, dev, workload=None, tf32=True: precision_of(label, dev)[0]
    try:
        yield
    finally:
        training.resolve = real


def family_spec(family: str, label: str, **train) -> dict:
    model, arch = FAMILIES[family]
    arch = {**TINY, **arch}
    if model == "lwc":  # one shared stack: `layers` instead of encoder/decoder layers
        arch = {k: v for k, v in arch.items() if k not in ("encoder_layers", "decoder_layers")}
    amp, tf32 = PRECISIONS[label] if label in PRECISIONS else (label, True)
    return {
        "model": model,
        "arch": arch,
        "train": {
            "max_tokens": 200,
            "lr": 0.003,
            "warmup_updates": 5,
            "log_interval": 1000,
            "amp": amp,
            "tf32": tf32,
            "save_interval_minutes": 0,
            "max_update": 100,
            **train,
        },
    }


def toy_data(root: Path) -> Path:
    """A toy reversal task binarized like the workflow's bin-joint data (tests/conftest.py builds the same)."""
    from layerwise_nmt.data.binarize import binarize
    from layerwise_nmt.data.vocab import Dictionary

    rng = np.random.RandomState(0)
    words = [f"w{i}" for i in range(30)]
    (root / "vocab").mkdir(parents=True, exist_ok=True)
    (root / "bin-joint").mkdir(exist_ok=True)
    vocab = Dictionary.build(Counter({w: 1 for w in words}))
    vocab.save(root / "vocab" / "dict.joint.txt")
    for split, n in {"train": 240, "valid": 24}.items():
        src = [" ".join(rng.choice(words, rng.randint(2, 9))) for _ in range(n)]
        for lang, lines in (("de", src), ("en", [" ".join(reversed(s.split())) for s in src])):
            (root / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
            binarize(str(root / f"{split}.{lang}"), vocab, str(root / "bin-joint" / f"{split}.de-en.{lang}"))
    return root / "bin-joint"


# ---------------------------------------------------------------------------------------------------------------
# Correctness


def check_overfit(family: str, label: str, device: torch.device, data: Path, work: Path, updates: int = 12) -> dict:
    """The trainer's own updates on one repeated batch: every loss finite, the last ones below the first."""
    from layerwise_nmt.data.batching import ParallelData, collate
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.training.precision import cuda_kernels
    from layerwise_nmt.training.loop import TrainConfig, start_run, update_step
    from layerwise_nmt.training.master_weights import compute_model

    spec = family_spec(family, label)
    torch.manual_seed(1)
    precision, tf32 = precision_of(label, device)
    run = start_run(
        spec,
        TrainConfig.from_dict(spec["train"]),
        dict(zip(("de", "en"), load_pair(data, "de", "en"), strict=True)),
        work / f"overfit-{family}-{label}",
        device,
        precision,
    )
    train = ParallelData(data, "train", "de", "en")
    batch = collate(train, np.arange(16))
    run.model.train()
    net = compute_model(run.model, precision)  # bf16-weights: the bf16 copy, fp32 masters in run.model
    losses = []
    with cuda_kernels(device, tf32):
        for _ in range(updates):
            result = update_step(run, net, [batch], device, lambda: precision.autocast(device)).read()
            losses.append(math.nan if result["skipped"] else result["loss"] / result["ntokens"])
    finite = all(math.isfinite(x) for x in losses)
    ok = finite and np.mean(losses[-3:]) < losses[0]
    return {
        "ok": bool(ok),
        "first_loss": round(losses[0], 4),
        "last_loss": round(losses[-1], 4),
        "skipped": sum(not math.isfinite(x) for x in losses),
        **({"loss_scale": run.scaler.get_scale()} if run.scaler.is_enabled() else {}),
    }


def check_resume(family: str, label: str, device: torch.device, data: Path, work: Path) -> dict:
    """`train.train` 6 updates straight vs 3 updates, stop, resume to 6: the same weights."""
    from layerwise_nmt.training.loop import train

    straight, stopped = work / f"resume-{family}-{label}-a", work / f"resume-{family}-{label}-b"
    with trainer_precision(label, device):
        train(family_spec(family, label, max_update=6), str(data), "de", "en", str(straight))
        train(family_spec(family, label, max_update=3), str(data), "de", "en", str(stopped))
        train(family_spec(family, label, max_update=6), str(data), "de", "en", str(stopped))
    a, b = (torch.load(d / "checkpoint_last.pt", weights_only=False) for d in (straight, stopped))
    diff = max(float((a["model"][k].float() - b["model"][k].float()).abs().max()) for k in a["model"])
    updates = (a["progress"]["update"], b["progress"]["update"])
    return {
        "ok": updates == (6, 6) and diff <= RESUME_TOLERANCE and a["scaler"] == b["scaler"],
        "max_abs_diff": diff,
        "exact": diff == 0.0,
    }


def check_graphs(family: str, label: str, device: torch.device, data: Path, work: Path) -> dict:
    """`train.train` 40 updates in fixed shapes, with dropout, replayed as CUDA graphs (`cuda_graphs: auto`; on the
    CPU `emulated`) vs eagerly: the same weights (bit for bit, or within the resume check's tolerance where CUDA's
    non-deterministic kernels differ), and updates replayed."""
    from layerwise_nmt.training.graphs import why_not
    from layerwise_nmt.training.loop import train

    mode = "auto" if device.type == "cuda" else "emulated"
    amp = PRECISIONS[label][0] if label in PRECISIONS else label
    why = why_not(mode, device, amp, True, 1)
    if why:
        return {"ok": True, "skipped": why}
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    trainer_log = logging.getLogger("layerwise_nmt.training")
    trainer_log.addHandler(handler)
    level = trainer_log.level
    trainer_log.setLevel(logging.INFO)
    dirs = {graphs: work / f"graphs-{family}-{label}-{graphs}" for graphs in (mode, "off")}
    try:
        with trainer_precision(label, device), _fused_adam_everywhere():
            for graphs, save_dir in dirs.items():
                spec = family_spec(family, label, max_update=40, bucket_growth_factor=1.1, cuda_graphs=graphs)
                spec["arch"] = {**spec["arch"], "dropout": 0.1}
                train(spec, str(data), "de", "en", str(save_dir))
    finally:
        trainer_log.removeHandler(handler)
        trainer_log.setLevel(level)
    a, b = (torch.load(d / "checkpoint_last.pt", weights_only=False) for d in dirs.values())
    diff = max(float((a["model"][k].float() - b["model"][k].float()).abs().max()) for k in a["model"])
    said = [line for line in lines if line.startswith("cuda_graphs: ")]
    replayed = re.search(r"updates replayed ([\d,]+)", said[-1]) if said else None
    replays = int(replayed.group(1).replace(",", "")) if replayed else 0
    failed = [line for line in said if "capture failed" in line]
    return {
        "ok": diff <= RESUME_TOLERANCE and replays > 0 and not failed,
        "max_abs_diff": diff,
        "exact": diff == 0.0,
        "replayed_updates": replays,
        **({"capture_failed": failed[0]} if failed else {}),
    }


@contextlib.contextmanager
def _fused_adam_everywhere():
    """The eager run steps the fused Adam that CUDA and the emulated graphs step (the CPU's default is foreach):
    only the replay differs between the two runs of the graphs check."""
    from layerwise_nmt.training import loop
    from layerwise_nmt.training.optim import adam

    default = loop.new_optimizer
    loop.new_optimizer = lambda model, cfg: adam(model, cfg, fused=True)
    try:
        yield
    finally:
        loop.new_optimizer = default


# relative, of the largest |score|
BEAM_TOLERANCE = {"fp32": 1e-5, "tf32": 2e-3, "bf16": 2e-2, "bf16-weights": 2e-2, "fp16": 2e-2}


def check_beam(family: str, label: str, device: torch.device) -> dict:
    """Cached beam search returns the hypotheses of full recomputation, scores within the precision's rounding."""
    from layerwise_nmt.inference.decode import BeamConfig, Recompute, beam_search
    from layerwise_nmt.models import build
    from layerwise_nmt.training.master_weights import bf16_params
    from layerwise_nmt.training.precision import cuda_kernels

    spec = family_spec(family, label)
    torch.manual_seed(2)
    model = build(spec["model"], {**spec["arch"], "src_vocab": 40, "tgt_vocab": 40}).to(device).eval()
    src = torch.randint(4, 40, (4, 9), device=device)
    src[:, -1], src[2, 6:], src[2, 5] = 2, 1, 2  # </s> at the end; one padded sentence
    beam = BeamConfig(beam=4, max_len_a=1.0, max_len_b=4)
    precision, tf32 = precision_of(label, device)
    if precision.amp == "bf16-weights":
        model = bf16_params(model)
    with cuda_kernels(device, tf32), precision.autocast(device):
        cached, full = beam_search(model, src, beam), beam_search(Recompute(model), src, beam)
    return {**beams_agree(cached, full, label), "matmul_precision": torch.get_float32_matmul_precision()}


def beams_agree(cached, full, label: str) -> dict:
    """Whether cached beam search found full recomputation's hypotheses: every rank's score within the precision's
    rounding, and the same tokens. In bf16 and fp16 the two searches round differently (the cache and the full pass
    run different kernels on different shapes), so two hypotheses whose scores tie within that rounding may swap
    ranks or be replaced by one another: there, tokens may differ where the scores agree. A wrong cache still fails
    there (its scores drift), and in fp32 and TF32 any different token fails."""
    same_tokens = all([h.tokens for h in a] == [h.tokens for h in b] for a, b in zip(cached, full, strict=True))
    diff = max(abs(x.score - y.score) for a, b in zip(cached, full, strict=True) for x, y in zip(a, b, strict=True))
    scale = max(1.0, max(abs(h.score) for a in full for h in a))
    scores_agree = diff <= BEAM_TOLERANCE[label] * scale
    mixed = PRECISIONS[label][0] in ("bf16", "bf16-weights", "fp16")
    return {
        "ok": bool(scores_agree and (same_tokens or mixed)),
        "same_hypotheses": bool(same_tokens),
        "max_score_diff": diff,
    }


def check_ddp(device: torch.device, data: Path, work: Path) -> dict:
    """Data-parallel training: `lwnmt train --ranks N` (torchrun, NCCL) over N ≥ 2 visible GPUs; with one device, a
    one-rank process group (NCCL on CUDA, gloo on the CPU) around DDP and the trainer's `accumulate`, whose
    gradients must equal the plain model's."""
    ngpus = torch.cuda.device_count() if device.type == "cuda" else 0
    if ngpus >= 2:
        return _ddp_torchrun(ngpus, data, work)
    import torch.distributed as dist

    from layerwise_nmt.data.batching import ParallelData, collate
    from layerwise_nmt.models import build
    from layerwise_nmt.training.loop import TrainConfig, accumulate

    backend = "nccl" if device.type == "cuda" else "gloo"
    # a group that cannot form must fail this check, not hang the command until the node's limit kills it
    dist.init_process_group(
        backend, store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=60)
    )
    try:
        spec = family_spec("transformer_post", "fp32")
        torch.manual_seed(3)
        plain = build(spec["model"], {**spec["arch"], "src_vocab": 34, "tgt_vocab": 34}).to(device)
        wrapped = build(spec["model"], {**spec["arch"], "src_vocab": 34, "tgt_vocab": 34}).to(device)
        wrapped.load_state_dict(plain.state_dict())
        ddp = torch.nn.parallel.DistributedDataParallel(wrapped)
        batch = collate(ParallelData(data, "train", "de", "en"), np.arange(8))
        train_cfg = TrainConfig.from_dict(spec["train"])
        from contextlib import nullcontext

        accumulate(ddp, [batch, batch], train_cfg, device, nullcontext)
        dist.destroy_process_group()  # the plain model's accumulate must not all-reduce
        accumulate(plain, [batch, batch], train_cfg, device, nullcontext)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    diff = max(
        float((a.grad - b.grad).abs().max()) for a, b in zip(plain.parameters(), wrapped.parameters(), strict=True)
    )
    return {"ok": diff <= 1e-5, "how": f"one-rank {backend} group", "max_grad_diff": diff}


def _ddp_torchrun(ngpus: int, data: Path, work: Path) -> dict:
    spec = family_spec("transformer_post", "bf16", max_update=4, update_freq=ngpus)
    spec["train"]["amp"] = "auto"
    cmd = [
        sys.executable,
        "-m",
        "layerwise_nmt",
        "train",
        "--spec",
        json.dumps(spec),
        "--data",
        str(data),
        "--src",
        "de",
        "--tgt",
        "en",
        "--save-dir",
        str(work / "ddp"),
        "--final",
        str(work / "ddp.pt"),
        "--ranks",
        str(ngpus),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env())
    said = f"data-parallel: {ngpus} ranks (nccl)" in result.stderr
    return {
        "ok": result.returncode == 0 and said,
        "how": f"torchrun, {ngpus} ranks",
        "log_tail": result.stderr[-600:] if result.returncode else "",
    }


def check_gpu_lock(work: Path) -> dict:
    """A child process claims one GPU through the lock files (CUDA still uninitialised afterwards: the claim asked
    the driver, not torch.cuda), then allocates and computes on it."""
    code = (
        "import os, torch; from layerwise_nmt.training.gpu_lock import claim;"
        " held = claim(1, os.environ['LOCKS'], timeout=60);"
        " fresh = not torch.cuda.is_initialized(); x = torch.ones(256, 256, device='cuda');"
        " torch.cuda.synchronize();"
        " print(os.environ['CUDA_VISIBLE_DEVICES'], torch.cuda.get_device_name(), fresh, float((x @ x)[0, 0]))"
    )
    env = {
        k: v for k, v in _env(LOCKS=str(work / "locks")).items() if k not in ("SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES")
    }
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    words = result.stdout.split()
    ok = result.returncode == 0 and (work / "locks").is_dir() and words[-2:] == ["True", "256.0"]
    return {"ok": ok, "claimed": " ".join(words[:-2]), "error": result.stderr[-400:] if not ok else ""}


def _env(**extra) -> dict:
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


class Results:
    """gpu.json, rewritten (atomically) after every check and speed row: what a killed command leaves is valid."""

    def __init__(self, path: Path, device: torch.device):
        self.path, self.device = path, device
        self.checks: dict = {"families": {}}
        self.speed: list[dict] = []
        self.probe: dict = {}

    def save(self) -> dict:
        result = report(self.device, self.checks, self.speed, self.probe)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        tmp.replace(self.path)
        return result


def correctness(
    device: torch.device,
    work: Path,
    results: Results,
    families=tuple(FAMILIES),
    labels: list[str] | None = None,
    once: bool = True,
) -> dict:
    """Every family × precision; `once`: also data-parallel training and the GPU lock."""
    data = toy_data(work / "toy")
    for family in families:
        for label in precisions(device) if labels is None else labels:
            key = f"{family}/{label}"
            results.checks["families"][key] = {
                name: _guarded(fn)
                for name, fn in (
                    ("overfit", partial(check_overfit, family, label, device, data, work)),
                    ("resume", partial(check_resume, family, label, device, data, work)),
                    ("beam", partial(check_beam, family, label, device)),
                    ("graphs", partial(check_graphs, family, label, device, data, work)),
                )
            }
            results.save()
            print(
                f"{key}: "
                + ", ".join(
                    f"{k} {'ok' if v['ok'] else 'FAILED ' + v.get('error', '')}"
                    for k, v in results.checks["families"][key].items()
                ),
                flush=True,
            )
    if not once:
        return results.checks
    results.checks["ddp"] = _guarded(lambda: check_ddp(device, data, work))
    results.checks["gpu_lock"] = (
        _guarded(lambda: check_gpu_lock(work)) if device.type == "cuda" else {"ok": True, "skipped": "no CUDA device"}
    )
    results.save()
    return results.checks


def _guarded(check) -> dict:
    """A check that raises is a failed check with its error, not the end of the run."""
    try:
        return check()
    except Exception as err:  # noqa: BLE001  (every failure is reported in the JSON)
        return {"ok": False, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"}


def all_ok(checks: dict, speed_rows: list[dict] = (), probe: dict | None = None) -> bool:
    """Every check passed and every speed and probe row measured something (a row that raised is a failure)."""
    found = [c for f in checks.get("families", {}).values() for c in f.values()]
    found += [checks[k] for k in ("ddp", "gpu_lock") if k in checks]
    found += [{"ok": "error" not in row} for row in speed_rows]
    found += [{"ok": "error" not in row} for row in (probe or {}).get("runs", [])]
    found += [{"ok": False}] if (probe or {}).get("error") else []  # a probe that raised, or measured nothing
    return bool(found) and all(c["ok"] for c in found)


# ---------------------------------------------------------------------------------------------------------------
# Speed


def read_lengths(mirror: Path, lengths: str) -> tuple[np.ndarray, np.ndarray]:
    """Subword units (+ </s>) per sentence of the real (source, target) files named by LENGTH_FILES[lengths]."""
    src, tgt = [], []
    for src_file, tgt_file in LENGTH_FILES[lengths]:
        for path, out in ((mirror / src_file, src), (mirror / tgt_file, tgt)):
            if not path.exists():
                raise FileNotFoundError(
                    f"{path}: missing; pass --data (or LWNMT_DATA_MIRROR) pointing at the data "
                    f"mirror (docs/benchmarks.md)"
                )
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as f:
                out += [len(line.split()) + 1 for line in f]
    if len(src) != len(tgt):
        raise ValueError(f"{LENGTH_FILES[lengths]}: {len(src)} source vs {len(tgt)} target lines")
    return np.asarray(src, dtype=np.int64), np.asarray(tgt, dtype=np.int64)


def write_lengths(mirror: Path, path: Path = LENGTHS) -> None:
    """benchmarks/lengths.json from the mirror: per-sentence unit counts only (no text), so they can travel."""
    out = {
        name: dict(zip(("src", "tgt"), (a.tolist() for a in read_lengths(mirror, name)), strict=True))
        for name in LENGTH_FILES
    }
    out["about"] = (
        "subword units + </s> per sentence pair, in file order, of "
        + "; ".join(f"{k}: {', '.join(s for pair in v for s in pair)}" for k, v in LENGTH_FILES.items())
        + " (benchmarks/gpu_check.py --write-lengths --data MIRROR)"
    )
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")


def stored_lengths(lengths: str, path: Path = LENGTHS) -> tuple[np.ndarray, np.ndarray]:
    stored = json.loads(path.read_text())[lengths]
    return np.asarray(stored["src"], dtype=np.int64), np.asarray(stored["tgt"], dtype=np.int64)


def real_batches(
    src_sizes: np.ndarray,
    tgt_sizes: np.ndarray,
    max_tokens: int,
    vocab: tuple[int, int],
    seed: int = 1,
    growth: float = 0.0,
) -> list[Batch]:
    """The trainer's length-bucketed batches over these lengths, filled with random token ids (4 ..); with a
    `growth` factor, in the fixed shapes the trainer's `bucket_growth_factor` gives them (its `seq_len_multiple`
    default), dummy rows included."""
    from layerwise_nmt.data.batch_shapes import FixedShapes
    from layerwise_nmt.data.batching import batch_of, make_batches
    from layerwise_nmt.training.config import TrainConfig

    rng = np.random.RandomState(seed)
    keep = np.maximum(src_sizes, tgt_sizes) <= 1024
    src_sizes, tgt_sizes = src_sizes[keep], tgt_sizes[keep]
    multiple = TrainConfig.__dataclass_fields__["seq_len_multiple"].default
    shapes = FixedShapes(growth, multiple, max_tokens, None) if growth else None
    out = []
    for ids in make_batches(src_sizes, tgt_sizes, max_tokens, None, seed, shapes=shapes):
        srcs = [np.append(rng.randint(4, vocab[0], src_sizes[i] - 1), 2) for i in ids]
        tgts = [np.append(rng.randint(4, vocab[1], tgt_sizes[i] - 1), 2) for i in ids]
        out.append(batch_of(srcs, tgts, ids, shapes=shapes))
    return out


def gpu_peak(device_name: str) -> tuple[str | None, float | None]:
    """(plan.GPUS key, dense bf16 TFLOP/s) of the GPU whose name this is; (None, None) for one not in the table."""
    from layerwise_nmt.grid.pricing import GPUS

    upper = device_name.upper()
    for key, gpu in GPUS.items():
        if key.upper() in upper.replace(" ", ""):
            return key, gpu.bf16 or gpu.fp16
    return None, None


def mfu(params: int, tokens_per_second: float, peak_tflops: float | None) -> float | None:
    """Model FLOP utilisation: 6 · N · target tokens/s over the dense bf16 peak."""
    if not peak_tflops:
        return None
    return 6 * params * tokens_per_second / (peak_tflops * 1e12)


def measure(
    name: str,
    config: dict,
    device: torch.device,
    label: str,
    max_tokens: int,
    updates: int,
    warmup: int,
    compile_model: bool,
    growth: float = 0.0,
    cuda_graphs: str = "off",
) -> dict:
    """Target tokens/s of the trainer's updates (`update_step`: forward, backward, clipping, fused Adam) over
    length-bucketed batches of real lengths (in fixed shapes with a `growth` factor), after `warmup` updates; with
    `cuda_graphs` (auto, emulated), each shape the timed updates take is first warmed up and captured, untimed, so
    that the rate is the long run's, where every shape has been seen before."""
    from layerwise_nmt import grid as cfg
    from layerwise_nmt.models.transformer import count_parameters
    from layerwise_nmt.grid.pricing import task_vocab
    from layerwise_nmt.training.precision import cuda_kernels
    from layerwise_nmt.training.loop import TrainConfig, start_run, update_step
    from layerwise_nmt.training.master_weights import compute_model
    from layerwise_nmt.training import compiler

    began = time.perf_counter()
    experiment, lengths, row_tokens = SPEED_ROWS[name]
    max_tokens = row_tokens or max_tokens
    e = cfg.experiment(config, experiment)
    vocab = task_vocab(config, e)
    precision, tf32 = precision_of(label, device)
    spec = {
        "model": e["model"],
        "arch": e["arch"],
        "train": {
            **e["train"],
            "amp": precision.amp,
            "tf32": tf32,
            "max_tokens": max_tokens,
            "bucket_growth_factor": growth,
            "cuda_graphs": cuda_graphs,
            "compile": compile_model,
        },
    }
    batches = real_batches(*stored_lengths(lengths), max_tokens, vocab, growth=growth)
    picks = np.random.RandomState(0).permutation(len(batches))  # a shuffled pass, again where it is too short
    order = [batches[picks[i % len(batches)]] for i in range(warmup + updates)]
    if cuda_graphs != "off":  # each timed shape's eager updates and its capture, before the warm-up
        from layerwise_nmt.training.graphs import EAGER_UPDATES, update_shape

        firsts = {update_shape([b]): b for b in order[warmup:]}
        order = [b for b in firsts.values() for _ in range(EAGER_UPDATES + 1)] + order
        warmup += len(order) - warmup - updates
    with tempfile.TemporaryDirectory() as tmp:
        run = start_run(
            spec, TrainConfig.from_dict(spec["train"]), fake_dictionaries(config, e), Path(tmp), device, precision
        )
    net = compute_model(run.model, precision)  # bf16-weights: the bf16 copy, fp32 masters in run.model
    net = compiler.compile_model(net, device) if compile_model else net  # as the trainer does with `compile: true`
    run.model.train()
    tokens, started, skipped, before = 0, None, 0, None

    def count(update: tuple | None) -> None:  # as the loop counts an update: once the next one is queued
        nonlocal tokens, skipped
        if update is not None:
            pending, ntokens = update
            skipped += bool(pending.read()["skipped"])
            tokens += 0 if pending.read()["skipped"] else ntokens

    with cuda_kernels(device, tf32):
        for i, batch in enumerate(order):
            if i == warmup:  # the warm-up's last update counted, untimed
                count(before)
                before = None
                torch.cuda.synchronize(device) if device.type == "cuda" else None
                started, tokens = time.perf_counter(), 0
                untimed = dict(run.graphs.counts) if run.graphs is not None else {}
            queued = update_step(run, net, [batch], device, lambda: precision.autocast(device)), batch.ntokens
            count(before)
            before = queued
        count(before)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - started
    params = count_parameters(run.model)
    _, peak = gpu_peak(precision.device)
    rate = tokens / seconds
    row = {
        "model": name,
        "experiment": experiment,
        "precision": label,
        "compiled": compile_model,
        "bucket_growth_factor": growth,
        "cuda_graphs": cuda_graphs,
        "batch_shapes": len({(b.src.shape, b.tgt.shape) for b in batches}),
        "parameters": params,
        "vocab": list(vocab),
        "max_tokens": max_tokens,
        "lengths": lengths,
        "updates_timed": len(order) - warmup,
        "skipped_updates": skipped,
        "target_tokens_per_update": round(tokens / max(1, len(order) - warmup)),
        "target_tokens_per_second": round(rate),
        "mfu": mfu(params, rate, peak),
        "row_seconds": round(time.perf_counter() - began, 1),  # building, warming up and timing: what a call costs
    }
    if run.graphs is not None:  # how the timed updates ran: replayed, or eagerly (a shape whose capture failed)
        row["timed_updates_by_path"] = {k: v - untimed.get(k, 0) for k, v in run.graphs.counts.items()}
        row["graphs_captured"] = len(run.graphs.graphs)
    if device.type == "cuda":
        row["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        torch.cuda.reset_peak_memory_stats(device)
    del run, net
    return row


def speed(config: dict, device: torch.device, args, results: Results) -> list[dict]:
    """One row per model × precision: those asked for (--speed-precisions, else --precisions), else each mixed
    precision the device trains in (bf16; fp16 only where there is no bf16) and TF32; then one for what `amp: auto`
    picks for that model."""
    labels = (
        args.speed_precisions
        or args.precisions
        or [p for p in precisions(device) if p != "fp32" and (p != "fp16" or "bf16" not in precisions(device))]
    )
    for name in args.speed_rows:
        for label in labels:
            for growth in args.bucket_growth_factor:  # today's batches and fixed shapes, side by side
                # fixed shapes eagerly and as CUDA graphs: what each of the two changes buys
                for graphs in ("off", *args.cuda_graphs) if growth else ("off",):
                    for compiled in (False, True) if args.compile else (False,):
                        keep(
                            results,
                            device,
                            _guarded(
                                partial(
                                    measure,
                                    name,
                                    config,
                                    device,
                                    label,
                                    args.max_tokens,
                                    args.updates,
                                    args.warmup,
                                    compiled,
                                    growth,
                                    graphs,
                                )
                            ),
                            name,
                            label,
                        )
        measured = [
            row
            for row in results.speed
            if row.get("model") == name and "target_tokens_per_second" in row and not row.get("compiled")
        ]
        if measured:  # nothing to compare a pick with where every row failed
            keep(
                results,
                device,
                _guarded(partial(auto_choice, name, config, device, args.max_tokens, measured)),
                name,
                "auto",
            )
    return results.speed


def keep(results: Results, device: torch.device, row: dict, name: str, label: str) -> None:
    row.setdefault("model", name)
    row.setdefault("precision", label)
    results.speed.append(row)
    results.save()
    print(json.dumps(row), flush=True)
    if device.type == "cuda":
        torch.cuda.empty_cache()


JUDGED_UPDATES = 10  # the auto row judges its pick against rows timed over at least this many updates each


def auto_choice(name: str, config: dict, device: torch.device, max_tokens: int, measured: list[dict]) -> dict:
    """What `amp: auto` picks for this model at its batch, probed afresh by the trainer's own start (`start_run`, an
    empty probe cache), beside the rates the rows before measured on the path that start chose (its
    `bucket_growth_factor`, and CUDA graphs where it replays them): a pick slower than the other precision by more
    than the probe's margin (`SPEEDUP`) fails the row, where the rows timed `JUDGED_UPDATES` updates or more (a
    toy-sized run's one or two updates per row are noise, not a verdict)."""
    from layerwise_nmt import grid as cfg
    from layerwise_nmt.training.loop import TrainConfig, start_run
    from layerwise_nmt.training.precision_probe import SPEEDUP

    experiment, _, row_tokens = SPEED_ROWS[name]
    e = cfg.experiment(config, experiment)
    spec = {
        "model": e["model"],
        "arch": e["arch"],
        "train": {**e["train"], "amp": "auto", "max_tokens": row_tokens or max_tokens},
    }
    with tempfile.TemporaryDirectory() as tmp, _environ(LWNMT_CACHE_DIR=tmp):
        started = time.perf_counter()
        run = start_run(spec, TrainConfig.from_dict(spec["train"]), fake_dictionaries(config, e), Path(tmp), device)
        seconds = time.perf_counter() - started
    picked = run.precision.amp
    growth, graphs = run.cfg.bucket_growth_factor, "off" if run.graphs is None else "auto"
    row = {
        "model": name,
        "experiment": experiment,
        "precision": "auto",
        "picked": picked,
        "reason": run.precision.reason,
        "bucket_growth_factor": growth,
        "cuda_graphs": graphs,
        "start_seconds": round(seconds, 2),
    }
    measured = [
        r for r in measured if (r.get("bucket_growth_factor") or 0) == growth and r.get("cuda_graphs", "off") == graphs
    ]
    if not measured:
        row["not_judged"] = f"no row timed the trainer's path (bucket_growth_factor {growth:g}, cuda_graphs {graphs})"
        return row
    rates = {row_["precision"]: row_["target_tokens_per_second"] for row_ in measured}
    label = _label_of_none(device) if picked == "none" else picked
    timed = min((row_["updates_timed"] for row_ in measured), default=0)
    if label in rates and timed < JUDGED_UPDATES:
        row["not_judged"] = f"the rows timed {timed} update(s), too few to tell a {SPEEDUP}x difference"
    elif label in rates:
        fastest = max(rates, key=rates.get)
        row["measured_fastest"] = fastest
        if rates[fastest] > SPEEDUP * rates[label]:
            row["error"] = (
                f"auto picked {label} ({rates[label]:,} target tokens/s), {fastest} measured {rates[fastest]:,}"
            )
    return row


def _label_of_none(device: torch.device) -> str:
    """The speed rows' name for what `amp: none` trains in on `device` (config's default `tf32: true`)."""
    return "tf32" if device.type == "cuda" else "fp32"


@contextlib.contextmanager
def _environ(**values: str):
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fake_dictionaries(config: dict, e: dict) -> dict:
    """Dictionaries of the task's vocabulary sizes (token ids are random: speed does not depend on them)."""
    from layerwise_nmt.data.vocab import SPECIALS, Dictionary
    from layerwise_nmt.grid.pricing import task_vocab

    vocab = task_vocab(config, e)
    return {
        lang: Dictionary([f"w{i}" for i in range(size - len(SPECIALS))], [1] * (size - len(SPECIALS)))
        for lang, size in ((e["src"], vocab[0]), (e["tgt"], vocab[1]))
    }


# ---------------------------------------------------------------------------------------------------------------
# Study throughput probe


STUDY = ROOT / "config" / "study.yaml"


def read_config(*paths: Path) -> dict:
    """The merged config with `extends` resolved, not schema-validated: the GPU image has no jsonschema, and CI
    validates these files on every run (tests/test_workflow.py)."""
    from layerwise_nmt import grid as cfg

    config: dict = {}
    for path in paths:
        cfg.deep_update(config, cfg.read(path))
    cfg.resolve_extends(config["experiments"])
    return config


def probe(
    data_dir: Path,
    device: torch.device,
    work: Path,
    results: Results,
    seconds: float,
    together: tuple[int, ...] = (1, 3),
    overlays: tuple[Path, ...] = (),
) -> dict:
    """The study baseline (config/study.yaml's study.transformer, its own batches and precision; `overlays` after it,
    as the shards get them) trained by `lwnmt train` for `seconds`, alone and then N at once: the target tokens/s
    each gets, from its log lines."""
    from layerwise_nmt import grid as cfg

    e = cfg.experiment(read_config(ROOT / "config.yaml", STUDY, *overlays), "study.transformer")
    spec = {
        "model": e["model"],
        "arch": e["arch"],
        "train": {
            **e["train"],
            "max_minutes": seconds / 60,
            "save_interval_minutes": 0,
            "patience": 0,
            "log_interval": 1,
        },
    }  # a few seconds of training: every update's line, the last ones kept
    results.probe = {"experiment": "study.transformer", "seconds_each": seconds, "data": str(data_dir), "runs": []}
    for n in together:
        procs = []
        for k in range(n):
            cmd = [
                sys.executable,
                "-m",
                "layerwise_nmt",
                "train",
                "--spec",
                json.dumps(spec),
                "--data",
                str(data_dir),
                "--src",
                e["src"],
                "--tgt",
                e["tgt"],
                "--save-dir",
                str(work / f"probe{n}-{k}"),
            ]
            procs.append(
                subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env())
            )
        rates, errors = [], []
        for proc in procs:
            _, err = proc.communicate(timeout=seconds + 600)
            said = [
                float(line.split(" target tokens/s")[0].rsplit(", ", 1)[-1])
                for line in err.splitlines()
                if " target tokens/s" in line
            ]
            if proc.returncode or not said:
                errors.append(
                    f"exit {proc.returncode}, {len(said)} progress lines: "
                    f"{(err.strip().splitlines() or ['no output'])[-1][-300:]}"
                )
            else:  # the last few progress lines: the first ones include start-up
                rates.append(sum(said[-3:]) / len(said[-3:]))
        row = {"together": n, "target_tokens_per_second_each": [round(r) for r in rates], "total": round(sum(rates))}
        if errors:
            row["error"] = "; ".join(errors)
        results.probe["runs"].append(row)
        results.save()
        print(json.dumps(row), flush=True)
    return results.probe


def run_probe(args, device: torch.device, work: Path, results: Results) -> dict:
    """The probe, its failure kept in gpu.json: a probe that raised or measured nothing fails the run."""
    found = _guarded(
        lambda: probe(
            Path(args.probe), device, work, results, args.probe_seconds, overlays=tuple(map(Path, args.probe_config))
        )
    )
    if found.get("ok") is False:
        results.probe = {**results.probe, "error": found["error"]}
    elif not results.probe.get("runs"):
        results.probe = {**results.probe, "error": "the probe measured nothing"}
    results.save()
    return results.probe


def report(device: torch.device, checks: dict, rows: list[dict], probe_result: dict | None = None) -> dict:
    """benchmarks/results/gpu.json: the device, each check, each speed row, and how MFU was computed."""
    from layerwise_nmt.training.precision import device_name

    name = device_name(device)
    key, peak = gpu_peak(name)
    return {
        "device": name,
        "gpus_visible": torch.cuda.device_count() if device.type == "cuda" else 0,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "peak_bf16_tflops": peak,
        "peak_source": f"plan.GPUS[{key!r}] (vendor datasheet, dense)"
        if key
        else "this GPU is not in plan.GPUS: MFU not computed",
        "mfu_formula": "6 * parameters * non-padding target tokens/s / dense bf16 peak",
        "all_checks_ok": all_ok(checks, rows, probe_result),
        "checks": checks,
        "speed": rows,
        "probe": probe_result or {},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "gpu.json"))
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--max-tokens", type=int, default=12288)
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also measure each row with the trainer's `compile: true` (torch.compile, Inductor)",
    )
    parser.add_argument(
        "--cuda-graphs",
        nargs="*",
        default=["auto"],
        choices=["auto", "emulated"],
        help="fixed-shape rows: also timed with these cuda_graphs modes (beside off); none: eagerly only",
    )
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument(
        "--skip-checks",
        action="store_true",
        help="speed rows only (`make gpu-check` runs the checks as tests first: tests/test_gpu.py)",
    )
    parser.add_argument(
        "--bucket-growth-factor",
        nargs="*",
        type=float,
        default=[0.0],
        help="speed rows over the trainer's fixed batch shapes too (e.g. 0 1.1: today's batches, then 1.1's)",
    )
    parser.add_argument("--speed-rows", nargs="*", default=list(SPEED_ROWS), choices=list(SPEED_ROWS))
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument(
        "--precisions",
        nargs="*",
        choices=list(PRECISIONS),
        help="the checks' and the speed rows' (default: what amp: auto can pick on the device, TF32 and fp32; the "
        "speed rows leave fp32 out)",
    )
    parser.add_argument(
        "--speed-precisions",
        nargs="*",
        choices=list(PRECISIONS),
        help="the speed rows' precisions where they differ from the checks' (default: --precisions')",
    )
    parser.add_argument("--probe", metavar="DATA_DIR", help="the study's binarized data: run the throughput probe")
    parser.add_argument("--probe-seconds", type=float, default=60)
    parser.add_argument(
        "--probe-config", nargs="*", default=[], help="overlays after config/study.yaml (the rehearsal's toy size)"
    )
    parser.add_argument("--data", help="with --write-lengths: the data mirror")
    parser.add_argument("--write-lengths", action="store_true", help=f"write {LENGTHS.name} from --data and exit")
    args = parser.parse_args(argv)
    if args.write_lengths:
        write_lengths(Path(args.data or os.environ.get("LWNMT_DATA_MIRROR") or ROOT / "data-mirror"))
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu-check: no CUDA device visible to PyTorch; nothing checked (run it on a GPU machine)")
        return 0
    device = torch.device(args.device)
    results = Results(Path(args.json), device)
    results.save()
    labels = args.precisions or precisions(device)
    with tempfile.TemporaryDirectory() as work:
        # what auto picks first, then speed and the probe, then the other precisions: a command cut short by its
        # time limit loses the least used precisions' checks, not the numbers the study is sized from
        checks = not args.skip_checks
        if checks:
            correctness(device, Path(work), results, args.families, labels[:1], once=False)
        if not args.skip_speed:
            speed(read_config(ROOT / "config.yaml"), device, args, results)
        if args.probe:
            run_probe(args, device, Path(work), results)
        # data-parallel and the GPU lock after the numbers: a process group that hangs costs only these
        if checks:
            correctness(device, Path(work), results, (), [], once=True)
            correctness(device, Path(work), results, args.families, labels[1:], once=False)
    result = results.save()
    print(f"gpu-check: {'all checks passed' if result['all_checks_ok'] else 'SOME CHECKS FAILED'}; {args.json}")
    return 0 if result["all_checks_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
