"""`make gpu-check`: the CUDA path proven, then measured. Nothing here has run on a GPU yet (docs/benchmarks.md).

Correctness, for every model family × every precision `amp: auto` can pick on this device (CUDA: bf16 or fp16 with
the loss scaler, and fp32/TF32 as `amp: none`; fp16 is checked on bf16 GPUs too, since V100/T4 users get it):
  overfit  a few updates of the trainer (`train._start` / `train._update`) on one repeated batch: loss finite and
           decreasing;
  resume   `train.train` for 6 updates straight vs 3, stop, resume to 6: the same weights (bit for bit, or within
           1e-4 where CUDA's non-deterministic kernels differ, which is reported);
  beam     cached beam search (`decode.beam_search`) = full recomputation (`decode.Recompute`) in that precision;
and once: data-parallel training (`lwnmt train --ranks N` under torchrun with NCCL over the visible GPUs; with one
GPU, a one-rank NCCL group around the trainer's `accumulate`), and the GPU lock (`gpus.claim`) claiming a real
device in a child process that then computes on it.

Speed: target tokens/s of training updates (forward, backward, fused Adam) and model FLOP utilisation
    MFU = 6 · parameters · non-padding target tokens/s ÷ the GPU's dense bf16 peak (plan.GPUS, the datasheets)
for transformer_iwslt_de_en (gca.deen.transformer), Transformer base (lwc.t2.ende.transformer_base) and big
(gca.ende.transformer), with config.yaml's architectures and vocabulary sizes, on length-bucketed `max_tokens`
batches (`data.batching.make_batches`) of real sentence lengths: the IWSLT14 BPE valid+test sets for the IWSLT
model, newstest2013 (Moses tokens; 32K BPE adds ~10-15% more units) for base and big. Token ids are random: speed
does not depend on them. Optional `--compile` adds torch.compile'd rows.

    python benchmarks/gpu_check.py [--data DIR (default $LWNMT_DATA_MIRROR or ../shared/data-mirror)]
        [--json benchmarks/results/gpu.json] [--max-tokens 12288] [--updates 30] [--compile] [--skip-speed]

Without CUDA it says so in one line and exits 0 (`--device cpu` runs the correctness checks on the CPU, as the
tests do). Exit 1 if any check failed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # the device machines have nothing of ours installed
# the package is imported inside the functions: without CUDA the script answers before loading it

TINY = {"d_model": 32, "d_ff": 64, "heads": 4, "encoder_layers": 2, "decoder_layers": 2, "tie": "all",
        "dropout": 0.0}
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
SPEED_ROWS = {  # name → (config.yaml experiment, which real lengths)
    "transformer_iwslt_de_en": ("gca.deen.transformer", "iwslt14"),
    "transformer_base": ("lwc.t2.ende.transformer_base", "newstest2013"),
    "transformer_big": ("gca.ende.transformer", "newstest2013"),
}
LENGTH_FILES = {  # (source, target) files under the data mirror
    "iwslt14": [("iwslt14-de-en/iwslt14.tokenized.de-en/valid.de", "iwslt14-de-en/iwslt14.tokenized.de-en/valid.en"),
                ("iwslt14-de-en/iwslt14.tokenized.de-en/test.de", "iwslt14-de-en/iwslt14.tokenized.de-en/test.en")],
    "newstest2013": [("wmt14-en-de/newstest2013.en.gz", "wmt14-en-de/newstest2013.de.gz")],
}
RESUME_TOLERANCE = 1e-4


def precisions(device: torch.device) -> list[str]:
    """The precisions to check on `device`: what `amp: auto` can pick there, and fp32 (TF32 on CUDA)."""
    from layerwise_nmt.precision import resolve

    if device.type != "cuda":
        return sorted({resolve("auto", device).amp, "none"}, key=["bf16", "fp16", "none"].index)
    return ["bf16", "fp16", "none"] if torch.cuda.is_bf16_supported() else ["fp16", "none"]


def family_spec(family: str, amp: str, **train) -> dict:
    model, arch = FAMILIES[family]
    arch = {**TINY, **arch}
    if model == "lwc":  # one shared stack: `layers` instead of encoder/decoder layers
        arch = {k: v for k, v in arch.items() if k not in ("encoder_layers", "decoder_layers")}
    return {"model": model, "arch": arch,
            "train": {"max_tokens": 200, "lr": 0.003, "warmup_updates": 5, "log_interval": 1000, "amp": amp,
                      "save_interval_minutes": 0, "max_update": 100, **train}}


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


def check_overfit(family: str, amp: str, device: torch.device, data: Path, work: Path, updates: int = 12) -> dict:
    """The trainer's own updates on one repeated batch: every loss finite, the last ones below the first."""
    from layerwise_nmt.data.batching import ParallelData, collate
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.precision import resolve
    from layerwise_nmt.train import TrainConfig, _start, _update

    spec = family_spec(family, amp)
    torch.manual_seed(1)
    precision = resolve(amp, device)
    run = _start(spec, TrainConfig.from_dict(spec["train"]), dict(zip(("de", "en"), load_pair(data, "de", "en"))),
                 work / f"overfit-{family}-{amp}", device, precision)
    train = ParallelData(data, "train", "de", "en")
    batch = collate(train, np.arange(16))
    run.model.train()
    losses = []
    for _ in range(updates):
        result = _update(run, run.model, [batch], device, lambda: precision.autocast(device))
        losses.append(math.nan if result is None else result["loss"] / result["ntokens"])
    finite = all(math.isfinite(x) for x in losses)
    ok = finite and np.mean(losses[-3:]) < losses[0]
    return {"ok": bool(ok), "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4),
            "skipped": sum(not math.isfinite(x) for x in losses)}


def check_resume(family: str, amp: str, data: Path, work: Path) -> dict:
    """`train.train` 6 updates straight vs 3 updates, stop, resume to 6: the same weights."""
    from layerwise_nmt.train import train

    straight, stopped = work / f"resume-{family}-{amp}-a", work / f"resume-{family}-{amp}-b"
    train(family_spec(family, amp, max_update=6), str(data), "de", "en", str(straight))
    train(family_spec(family, amp, max_update=3), str(data), "de", "en", str(stopped))
    train(family_spec(family, amp, max_update=6), str(data), "de", "en", str(stopped))
    a, b = (torch.load(d / "checkpoint_last.pt", weights_only=False) for d in (straight, stopped))
    diff = max(float((a["model"][k].float() - b["model"][k].float()).abs().max()) for k in a["model"])
    updates = (a["progress"]["update"], b["progress"]["update"])
    return {"ok": updates == (6, 6) and diff <= RESUME_TOLERANCE, "max_abs_diff": diff, "exact": diff == 0.0}


def check_beam(family: str, amp: str, device: torch.device) -> dict:
    """Cached beam search returns the hypotheses of full recomputation, scores within the precision's rounding."""
    from layerwise_nmt.decode import BeamConfig, Recompute, beam_search
    from layerwise_nmt.models import build
    from layerwise_nmt.precision import resolve

    spec = family_spec(family, amp)
    torch.manual_seed(2)
    model = build(spec["model"], {**spec["arch"], "src_vocab": 40, "tgt_vocab": 40}).to(device).eval()
    src = torch.randint(4, 40, (4, 9), device=device)
    src[:, -1], src[2, 6:], src[2, 5] = 2, 1, 2  # </s> at the end; one padded sentence
    tolerance = 1e-5 if amp == "none" else 2e-2
    beam = BeamConfig(beam=4, max_len_a=1.0, max_len_b=4)
    with resolve(amp, device).autocast(device):
        cached, full = beam_search(model, src, beam), beam_search(Recompute(model), src, beam)
    same_tokens = all([h.tokens for h in a] == [h.tokens for h in b] for a, b in zip(cached, full))
    diff = max(abs(x.score - y.score) for a, b in zip(cached, full) for x, y in zip(a, b))
    return {"ok": bool(same_tokens and diff <= tolerance * max(1.0, max(abs(h.score) for a in full for h in a))),
            "same_hypotheses": bool(same_tokens), "max_score_diff": diff}


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
    from layerwise_nmt.train import TrainConfig, accumulate

    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        spec = family_spec("transformer_post", "none")
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
    diff = max(float((a.grad - b.grad).abs().max()) for a, b in zip(plain.parameters(), wrapped.parameters()))
    return {"ok": diff <= 1e-5, "how": f"one-rank {backend} group", "max_grad_diff": diff}


def _ddp_torchrun(ngpus: int, data: Path, work: Path) -> dict:
    spec = family_spec("transformer_post", "auto", max_update=4, update_freq=ngpus)
    cmd = [sys.executable, "-m", "layerwise_nmt", "train", "--spec", json.dumps(spec), "--data", str(data),
           "--src", "de", "--tgt", "en", "--save-dir", str(work / "ddp"), "--final", str(work / "ddp.pt"),
           "--ranks", str(ngpus)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env())
    said = f"data-parallel: {ngpus} ranks (nccl)" in result.stderr
    return {"ok": result.returncode == 0 and said, "how": f"torchrun, {ngpus} ranks",
            "log_tail": result.stderr[-600:] if result.returncode else ""}


def check_gpu_lock(work: Path) -> dict:
    """A child process claims one GPU through the lock files, then allocates and computes on it."""
    code = ("import os, torch; from layerwise_nmt.gpus import claim; held = claim(1, os.environ['LOCKS'], timeout=60);"
            " x = torch.ones(256, 256, device='cuda'); torch.cuda.synchronize();"
            " print(os.environ['CUDA_VISIBLE_DEVICES'], torch.cuda.get_device_name(), float((x @ x)[0, 0]))")
    env = {k: v for k, v in _env(LOCKS=str(work / "locks")).items() if k != "SLURM_JOB_ID"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    words = result.stdout.split()
    ok = result.returncode == 0 and (work / "locks").is_dir() and words[-1:] == ["256.0"]
    return {"ok": ok, "claimed": " ".join(words[:-1]), "error": result.stderr[-400:] if not ok else ""}


def _env(**extra) -> dict:
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def correctness(device: torch.device, work: Path, families=tuple(FAMILIES)) -> dict:
    data = toy_data(work / "toy")
    results: dict = {"families": {}}
    for family in families:
        for amp in precisions(device):
            key = f"{family}/{amp}"
            results["families"][key] = {name: _guarded(fn) for name, fn in (
                ("overfit", lambda: check_overfit(family, amp, device, data, work)),
                ("resume", lambda: check_resume(family, amp, data, work)),
                ("beam", lambda: check_beam(family, amp, device)))}
            print(f"{key}: " + ", ".join(f"{k} {'ok' if v['ok'] else 'FAILED'}"
                                         for k, v in results["families"][key].items()), flush=True)
    results["ddp"] = _guarded(lambda: check_ddp(device, data, work))
    results["gpu_lock"] = (_guarded(lambda: check_gpu_lock(work)) if device.type == "cuda"
                           else {"ok": True, "skipped": "no CUDA device"})
    return results


def _guarded(check) -> dict:
    """A check that raises is a failed check with its error, not the end of the run."""
    try:
        return check()
    except Exception as err:  # noqa: BLE001  (every failure is reported in the JSON)
        return {"ok": False, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"}


def all_ok(results: dict) -> bool:
    checks = [c for f in results["families"].values() for c in f.values()] + [results["ddp"], results["gpu_lock"]]
    return all(c["ok"] for c in checks)


# ---------------------------------------------------------------------------------------------------------------
# Speed


def read_lengths(mirror: Path, lengths: str) -> tuple[np.ndarray, np.ndarray]:
    """Subword units (+ </s>) per sentence of the real (source, target) files named by LENGTH_FILES[lengths]."""
    src, tgt = [], []
    for src_file, tgt_file in LENGTH_FILES[lengths]:
        for path, out in ((mirror / src_file, src), (mirror / tgt_file, tgt)):
            if not path.exists():
                raise SystemExit(f"{path}: missing; pass --data (or LWNMT_DATA_MIRROR) pointing at the data mirror "
                                 f"(docs/benchmarks.md)")
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as f:
                out += [len(line.split()) + 1 for line in f]
    if len(src) != len(tgt):
        raise SystemExit(f"{LENGTH_FILES[lengths]}: {len(src)} source vs {len(tgt)} target lines")
    return np.asarray(src, dtype=np.int64), np.asarray(tgt, dtype=np.int64)


def real_batches(src_sizes: np.ndarray, tgt_sizes: np.ndarray, max_tokens: int, vocab: tuple[int, int],
                 seed: int = 1) -> list[Batch]:
    """The trainer's length-bucketed batches over these lengths, filled with random token ids (4 ..)."""
    from layerwise_nmt.data.batching import Batch, make_batches, pad

    rng = np.random.RandomState(seed)
    keep = np.maximum(src_sizes, tgt_sizes) <= 1024
    src_sizes, tgt_sizes = src_sizes[keep], tgt_sizes[keep]
    out = []
    for ids in make_batches(src_sizes, tgt_sizes, max_tokens, None, seed):
        srcs = [np.append(rng.randint(4, vocab[0], src_sizes[i] - 1), 2) for i in ids]
        tgts = [np.append(rng.randint(4, vocab[1], tgt_sizes[i] - 1), 2) for i in ids]
        prev = [np.concatenate([[2], t[:-1]]) for t in tgts]
        out.append(Batch(pad(srcs, 1), pad(prev, 1), pad(tgts, 1), ids, int(sum(len(t) for t in tgts))))
    return out


def gpu_peak(device_name: str) -> tuple[str | None, float | None]:
    """(plan.GPUS key, dense bf16 TFLOP/s) of the GPU whose name this is; (None, None) for one not in the table."""
    from layerwise_nmt.plan import GPUS

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


def measure(name: str, config: dict, mirror: Path, device: torch.device, amp: str, max_tokens: int, updates: int,
            warmup: int, compile_model: bool) -> dict:
    """Target tokens/s of the trainer's updates (`_update`: forward, backward, clipping, fused Adam) over
    length-bucketed batches of real lengths, after `warmup` updates."""
    from layerwise_nmt import config as cfg
    from layerwise_nmt.models.transformer import count_parameters
    from layerwise_nmt.plan import task_vocab
    from layerwise_nmt.precision import resolve
    from layerwise_nmt.train import TrainConfig, _start, _update

    experiment, lengths = SPEED_ROWS[name]
    e = cfg.experiment(config, experiment)
    vocab = task_vocab(config, e)
    spec = {"model": e["model"], "arch": e["arch"], "train": {**e["train"], "amp": amp, "max_tokens": max_tokens}}
    batches = real_batches(*read_lengths(mirror, lengths), max_tokens, vocab)
    rng = np.random.RandomState(0)
    order = [batches[i] for i in rng.permutation(len(batches))][: warmup + updates]
    precision = resolve(amp, device)
    with tempfile.TemporaryDirectory() as tmp:
        run = _start(spec, TrainConfig.from_dict(spec["train"]), {e["src"]: range(vocab[0]), e["tgt"]: range(vocab[1])},
                     Path(tmp), device, precision)
    net = torch.compile(run.model, dynamic=True) if compile_model else run.model
    run.model.train()
    tokens, started = 0, None
    for i, batch in enumerate(order):
        if i == warmup:
            torch.cuda.synchronize(device) if device.type == "cuda" else None
            started, tokens = time.perf_counter(), 0
        if _update(run, net, [batch], device, lambda: precision.autocast(device)) is not None:
            tokens += batch.ntokens
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - started
    params = count_parameters(run.model)
    _, peak = gpu_peak(precision.device)
    rate = tokens / seconds
    row = {"model": name, "experiment": experiment, "precision": precision.amp, "compiled": compile_model,
           "parameters": params, "vocab": list(vocab), "max_tokens": max_tokens, "lengths": lengths,
           "updates_timed": len(order) - warmup, "target_tokens_per_update": round(tokens / max(1, len(order) - warmup)),
           "target_tokens_per_second": round(rate), "mfu": mfu(params, rate, peak)}
    if device.type == "cuda":
        row["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        torch.cuda.reset_peak_memory_stats(device)
    del run, net
    return row


def speed(config: dict, mirror: Path, device: torch.device, args) -> list[dict]:
    rows = []
    for name in SPEED_ROWS:
        for amp in [p for p in precisions(device) if p != "fp16" or not torch.cuda.is_bf16_supported()]:
            for compiled in (False, True) if args.compile else (False,):
                row = _guarded(lambda: measure(name, config, mirror, device, amp, args.max_tokens, args.updates,
                                               args.warmup, compiled))
                row.setdefault("model", name)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    return rows


def report(device: torch.device, checks: dict, rows: list[dict]) -> dict:
    """benchmarks/results/gpu.json: the device, each check, each speed row, and how MFU was computed."""
    from layerwise_nmt.precision import device_name

    name = device_name(device)
    key, peak = gpu_peak(name)
    return {"device": name, "gpus_visible": torch.cuda.device_count() if device.type == "cuda" else 0,
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "peak_bf16_tflops": peak, "peak_source": f"plan.GPUS[{key!r}] (vendor datasheet, dense)" if key else
            "this GPU is not in plan.GPUS: MFU not computed",
            "mfu_formula": "6 * parameters * non-padding target tokens/s / dense bf16 peak",
            "all_checks_ok": all_ok(checks), "checks": checks, "speed": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("LWNMT_DATA_MIRROR") or str(ROOT.parent / "shared" /
                                                                                      "data-mirror"))
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "gpu.json"))
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--max-tokens", type=int, default=12288)
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="also measure torch.compile'd models")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=list(FAMILIES))
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu-check: no CUDA device visible to PyTorch; nothing checked (run it on a GPU machine)")
        return 0
    from layerwise_nmt import config as cfg

    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as work:
        checks = correctness(device, Path(work), args.families)
    rows = [] if args.skip_speed else speed(cfg.load(ROOT / "config.yaml"), Path(args.data), device, args)
    result = report(device, checks, rows)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(f"gpu-check: {'all checks passed' if result['all_checks_ok'] else 'SOME CHECKS FAILED'}; {args.json}")
    return 0 if result["all_checks_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
