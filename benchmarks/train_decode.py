"""CPU training and decoding speed vs fairseq 0.12.2 and plain torch.nn.Transformer, measured back to back here.

Every figure is filed under the CPU it was measured on (model name, PyTorch's kernel level, native bf16 or not), with
the threads used, the load average (a shared machine says so) and the peak FLOP/s it is compared with: measured, the
fastest of several 2048x2048 @ 2048x2048 matmuls per precision at the same threads (portable, and what the kernels
can actually reach on this CPU; no datasheet clock or FMA count assumed).

Training: target tokens/s after warm-up updates, on the real BPE'd IWSLT14 test set (6,750 pairs from the data
mirror, used only as realistic sentence lengths), for two models:
  iwslt  transformer_iwslt_de_en (512/1024/4, 6+6, decoder embeddings shared, dropout 0.3), max_tokens 4096
  demo   config/demo.yaml's baseline (256/1024/4, 3+3, all embeddings shared, dropout 0.1), max_tokens 1024
each by fairseq-train (fp32, --cpu), lwnmt's trainer (fp32 and bf16 autocast) and, for iwslt, a hand-written
torch.nn.Transformer (fp32 and bf16). Model FLOP utilisation = 6 * parameters * target tokens/s / peak.
Decoding, fairseq-generate vs lwnmt translate on trained models, each decoding the same weights:
  demo         config/demo.yaml's baseline trained here once with the demo's recipe (1,000 updates, 30.5 BLEU),
               with fairseq's init and position table, renamed into a fairseq-train checkpoint; Multi30k test2016
               (1,000 sentences), the demo's beam 5, batch 128
  shared_post, separate_pre
               the fairseq fixture's models (tests/fixtures/fairseq: d = 64 / 32, trained 1,500 updates on Multi30k
               by fairseq), its 300 test sources, beam 5, batch 64, imported with `lwnmt import-fairseq`
whole-process wall time of each command (start-up and model loading included), each tool's own decoding rate, and
how many hypotheses agree.
CTranslate2 (the engine users deploy with), the decoding anchor beside fairseq-generate: the demo model converted with
`lwnmt export --format ctranslate2`, fp32 at 1 and 2 threads and int8, whole process and loop alone, agreement
(log-probabilities, identical hypotheses, BLEU); in its own venv (benchmarks/ctranslate2_decode.py).

--isa avx2 re-runs itself with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 (an
emulated AVX2-only CPU: amp auto picks fp32 there, so only fp32 is measured) for fairseq and for us alike.

fairseq runs in its own venv (`.fairseq-venv`, Python 3.10 from pyenv; created on first use, ~2 minutes); the
project never imports it.

Precisions (`--parts precisions`): the demo model's update through the trainer's own `_update` in fp32, bf16
autocast and bf16 weights with fp32 masters (`amp: bf16-weights`), paired round by round, in one thread's CPU time.

    python benchmarks/train_decode.py [--updates 12] [--warmup 3] [--isa native|avx2] [--models iwslt,demo]
    python benchmarks/train_decode.py --parts precisions --updates 40 --warmup 4

Fixed batch shapes (`--parts shapes`): each of --models trained through `_update` on fairseq's batches and on fixed
shapes (`bucket_growth_factor: 1.1`), paired round by round, per precision, in real target tokens per CPU second.

    python benchmarks/train_decode.py --parts shapes --updates 40 --warmup 4 --models demo,iwslt

The loss (`--parts loss`): each of --models trained through `_update` with the chunked label-smoothed
cross-entropy (`training/loss.py`) and with fairseq's formulation, on the same batches, paired round by round.

    python benchmarks/train_decode.py --parts loss --updates 30 --warmup 3 --models demo,iwslt

Compilation (`--parts compile`): each of --models trained through `_update` eagerly and with `compile: true`
(`training/compiler.py`, Inductor), on the same batches, paired round by round; the first compiled update's wall
seconds (the compilation) reported apart.

    python benchmarks/train_decode.py --parts compile --updates 20 --warmup 3 --models demo,iwslt
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from ctranslate2_decode import ctranslate2_part, report as report_ctranslate2

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("LWNMT_DATA_MIRROR") or ROOT / "data-mirror").resolve()  # or a link here
BPE_DIR = MIRROR / "iwslt14-de-en/iwslt14.tokenized.de-en"
FAIRSEQ_VENV = ROOT / ".fairseq-venv"
FAIRSEQ_BIN = FAIRSEQ_VENV / "bin"
FIXTURE = ROOT / "tests" / "fixtures" / "fairseq"
THREADS = 2
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
LAYERS = ["--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]
MODELS = {
    "iwslt": {
        "title": "transformer_iwslt_de_en (512/1024/4, 6+6), max_tokens 4096",
        "max_tokens": 4096,
        "ours": {"preset": "iwslt", "encoder_layers": 6, "decoder_layers": 6, "tie": "decoder", "dropout": 0.3},
        "fairseq": ["--arch", "transformer_iwslt_de_en", "--share-decoder-input-output-embed", "--dropout", "0.3"],
    },
    "demo": {
        "title": "config/demo.yaml's baseline (256/1024/4, 3+3), max_tokens 1024",
        "max_tokens": 1024,
        "ours": {"preset": "small", "encoder_layers": 3, "decoder_layers": 3, "tie": "all", "dropout": 0.1},
        "fairseq": [
            "--arch",
            "transformer",
            "--share-all-embeddings",
            "--encoder-embed-dim",
            "256",
            "--decoder-embed-dim",
            "256",
            "--encoder-ffn-embed-dim",
            "1024",
            "--decoder-ffn-embed-dim",
            "1024",
            "--encoder-layers",
            "3",
            "--decoder-layers",
            "3",
            "--dropout",
            "0.1",
            *LAYERS,
        ],
    },
}
FIXTURE_DECODE = {"beam": 5, "lenpen": 1.0, "max_len_a": 0, "max_len_b": 200, "batch_size": 64}  # the fixture's beam5
DEMO_DATA = ROOT / "results/multi30k_deen/data"


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if result.returncode:
        raise RuntimeError(f"{cmd[0]} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def ensure_fairseq() -> None:
    if (FAIRSEQ_BIN / "fairseq-train").exists():
        return
    python310 = sh(["pyenv", "root"]).stdout.strip() + "/versions/3.10.13/bin/python"
    print("creating .fairseq-venv (fairseq 0.12.2, torch 1.13.1) ...", flush=True)
    sh([python310, "-m", "venv", str(FAIRSEQ_VENV)])
    pip = [str(FAIRSEQ_BIN / "pip"), "install", "--quiet"]
    sh(pip + ["pip<24.1"])
    sh(pip + ["torch==1.13.1", "numpy<1.24", "cython"])
    sh(pip + ["fairseq==0.12.2"])


def fairseq_cli(tool: str) -> list[str]:
    """The command running fairseq_cli.<tool> (generate, interactive) on a loaded checkpoint. fairseq 0.12.2 +
    torch 1.13 crash in the BetterTransformer encoder fast path of a loaded post-norm checkpoint ("Mask Type should
    be defined", fairseq issues #4858/#4899); the driver turns that path off, as in training mode, which computes the
    same layer."""
    driver = (
        "import sys, fairseq.modules.transformer_layer as tl\n"
        "load = tl.TransformerEncoderLayerBase._load_from_state_dict\n"
        "def no_bt(self, *a, **k):\n    load(self, *a, **k)\n    self.load_to_BT = False\n"
        "tl.TransformerEncoderLayerBase._load_from_state_dict = no_bt\n"
        f"from fairseq_cli.{tool} import cli_main\nsys.argv = ['fairseq-{tool}'] + sys.argv[1:]\ncli_main()\n"
    )
    return [str(FAIRSEQ_BIN / "python"), "-c", driver]


def fairseq_generate_command(data: Path, checkpoint: Path, settings: dict, subset: str = "test") -> list[str]:
    """fairseq-generate on the CPU with a decode's settings (beam, lenpen, max_len_a/b, batch_size)."""
    return fairseq_cli("generate") + [
        str(data),
        "--path",
        str(checkpoint),
        "--gen-subset",
        subset,
        "--cpu",
        "--beam",
        str(settings["beam"]),
        "--lenpen",
        str(settings["lenpen"]),
        "--max-len-a",
        str(settings["max_len_a"]),
        "--max-len-b",
        str(settings["max_len_b"]),
        "--batch-size",
        str(settings["batch_size"]),
        "--num-workers",
        "0",
    ]


def prepare(work: Path, fairseq: bool = True) -> None:
    """The same BPE text binarized for fairseq (fairseq-preprocess) and for us (lwnmt vocab + binarize)."""
    for lang in ("de", "en"):
        for split in ("train", "valid"):
            (work / f"{split}.{lang}").write_bytes((BPE_DIR / f"test.{lang}").read_bytes())
    if fairseq:
        sh(
            [
                str(FAIRSEQ_BIN / "fairseq-preprocess"),
                "--source-lang",
                "de",
                "--target-lang",
                "en",
                "--trainpref",
                str(work / "train"),
                "--validpref",
                str(work / "valid"),
                "--destdir",
                str(work / "fairseq-bin"),
                "--joined-dictionary",
                "--workers",
                "2",
            ]
        )
    lwnmt = [sys.executable, "-m", "layerwise_nmt"]
    (work / "ours" / "vocab").mkdir(parents=True)
    sh(
        lwnmt
        + ["vocab", str(work / "train.de"), str(work / "train.en"), "--out", str(work / "ours/vocab/dict.joint.txt")]
    )
    for split in ("train", "valid"):
        for lang in ("de", "en"):
            sh(
                lwnmt
                + [
                    "binarize",
                    str(work / f"{split}.{lang}"),
                    str(work / f"ours/bin-joint/{split}.de-en.{lang}"),
                    "--vocab",
                    str(work / "ours/vocab/dict.joint.txt"),
                ]
            )


def rate_after_warmup(lines: list[tuple[float, int]], warmup: int) -> float:
    """(timestamp, target tokens) per update → tokens/s over the updates after `warmup`."""
    (t0, _), rest = lines[warmup - 1], lines[warmup:]
    return sum(n for _, n in rest) / (rest[-1][0] - t0)


def machine() -> dict:
    """The CPU this run's figures belong to, as PyTorch sees it (ATEN_CPU_CAPABILITY lowers the kernel level)."""
    import torch

    from layerwise_nmt.training.precision import cpu_flags, cpu_capability, cpu_has_native_bf16, cpu_model

    emulated = {k: os.environ[k] for k in AVX2_ENV if k in os.environ}
    flags = sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    return {
        "cpu": cpu_model(),
        "cpu_flags": flags,
        "pytorch_cpu_capability": cpu_capability(),
        "native_bf16": cpu_has_native_bf16(),
        "threads": THREADS,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "isa_limits": emulated or None,
    }


def machine_label(info: dict) -> str:
    return f"{info['cpu']}, PyTorch kernels at {info['pytorch_cpu_capability']}" + (
        " (emulated AVX2-only CPU)" if info["isa_limits"] else ""
    )


def measured_peak(size: int = 2048, repeats: int = 8) -> dict:
    """FLOP/s of the fastest of `repeats` size³ matmuls per precision, at THREADS threads."""
    import torch

    torch.set_num_threads(THREADS)
    peak = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        a @ b
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        peak[name] = 2 * size**3 / min(times)
    peak["method"] = (
        f"measured: fastest of {repeats} {size}x{size} @ {size}x{size} torch.matmul per precision, "
        f"{THREADS} threads, on this machine at this time"
    )
    return peak


def gemm_bound(work: Path, name: str, repeats: int = 3) -> dict:
    """Single-thread CPU seconds (process time: a shared machine does not inflate it) of one layer's GEMM shapes
    and the output projection at the model's batch size, fp32 vs bf16: the most bf16 can gain on a whole update."""
    import torch

    torch.set_num_threads(1)
    model = MODELS[name]
    config = ours_model(work, model).config
    d, d_ff = config.d_model, config.d_ff
    tokens, vocab = model["max_tokens"], vocab_size(work)
    shapes = [(tokens, d, 3 * d), (tokens, d, d), (tokens, d, d_ff), (tokens, d_ff, d), (tokens, d, vocab)]
    seconds = {}
    for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        total = 0.0
        for m, k, n in shapes:
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
            a @ b
            start = time.process_time()
            for _ in range(repeats):
                a @ b
            total += (time.process_time() - start) / repeats
        seconds[label] = total
    return {"shapes_mkn": shapes, "cpu_seconds_1_thread": seconds, "bf16_over_fp32": seconds["fp32"] / seconds["bf16"]}


def fairseq_train(work: Path, model: dict, updates: int, warmup: int) -> float:
    cmd = [
        str(FAIRSEQ_BIN / "fairseq-train"),
        str(work / "fairseq-bin"),
        *model["fairseq"],
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--clip-norm",
        "0.0",
        "--lr",
        "5e-4",
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        "4000",
        "--weight-decay",
        "0.0001",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--max-tokens",
        str(model["max_tokens"]),
        "--max-update",
        str(updates + warmup),
        "--cpu",
        "--no-save",
        "--disable-validation",
        "--log-format",
        "json",
        "--log-interval",
        "1",
        "--seed",
        "1",
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    stamps = []
    for line in proc.stdout:  # one JSON log line per update, stamped as it arrives
        match = re.search(r"train_inner \| (\{.*\})", line)
        if match:
            stamps.append((time.perf_counter(), float(json.loads(match.group(1))["wpb"])))
    proc.wait()
    if proc.returncode or len(stamps) <= warmup:
        raise RuntimeError(f"fairseq-train failed or logged too little ({len(stamps)} updates)")
    return rate_after_warmup(stamps, warmup)


def training_batches(work: Path, max_tokens: int):
    from layerwise_nmt.data.batching import ParallelData, collate, epoch_order, make_batches

    data = ParallelData(work / "ours/bin-joint", "train", "de", "en")
    for ids in epoch_order(make_batches(data.src.sizes, data.tgt.sizes, max_tokens, None, 1), 1, 1):
        yield collate(data, ids)


def vocab_size(work: Path) -> int:
    from layerwise_nmt.data.vocab import Dictionary

    return len(Dictionary.load(work / "ours/vocab/dict.joint.txt"))


def ours_model(work: Path, model: dict):
    import torch

    from layerwise_nmt.models import build

    torch.manual_seed(1)
    vocab = vocab_size(work)
    return build("transformer", {**model["ours"], "src_vocab": vocab, "tgt_vocab": vocab}).train()


def parameters(module) -> int:
    return sum(p.numel() for p in module.parameters())  # a tied matrix is one parameter, counted once


def ours_updates(work: Path, model: dict, amp: str, count: int):
    """Runs `count` updates of lwnmt's trainer (train.accumulate: autocast forward, fp32 loss, backward; then
    Adam, as `lwnmt train`), yielding each one's target tokens when it is done."""
    import torch

    from layerwise_nmt.training.precision import resolve
    from layerwise_nmt.training.loop import TrainConfig, accumulate

    net = ours_model(work, model)
    cfg = TrainConfig.from_dict({"max_update": 1, "amp": amp})
    # AdamW: fairseq's --weight-decay is decoupled, as lwnmt train's _adam
    opt = torch.optim.AdamW(net.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=1e-4)
    cpu = torch.device("cpu")
    precision = resolve(amp, cpu)
    for _, batch in zip(range(count), training_batches(work, model["max_tokens"]), strict=False):
        stats = accumulate(net, [batch], cfg, cpu, lambda: precision.autocast(cpu))
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield float(stats["ntokens"])  # accumulate's sums are tensors: a rate of them would be one too


def ours_train(work: Path, model: dict, updates: int, warmup: int, amp: str) -> float:
    import torch

    torch.set_num_threads(THREADS)
    return rate_after_warmup(
        [(time.perf_counter(), n) for n in ours_updates(work, model, amp, updates + warmup)], warmup
    )


TRAIN_PRECISIONS = {"fp32": "none", "bf16": "bf16", "bf16-weights": "bf16-weights"}  # label → amp


def precision_part(data: Path, model: dict, rounds: int, warmup: int) -> dict:
    """One trainer update (`loop._update`: forward, loss, backward, the master-weight copies of bf16-weights, clipping
    and AdamW, as `lwnmt train` runs it) of `model` in each of TRAIN_PRECISIONS, on `data` (a bin-joint folder whose
    vocab/ is beside it). Paired: each round takes the next batch and updates every precision's own model (the same
    initial weights) on it, the order of the precisions reversed every other round, so that a change in the
    machine's load hits all of them. Timed in the CPU time of the one thread that computes, as the precision probe
    (a background job on the other core changes it little; wall time is recorded beside it). Reports each
    precision's median and fastest update and, per round, fp32's time over each precision's (median and quartiles)."""
    import tempfile

    import torch

    from layerwise_nmt.data.batching import ParallelData, collate, epoch_order, make_batches
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.training import master_weights
    from layerwise_nmt.training.loop import TrainConfig, _start, _update
    from layerwise_nmt.training.precision import Precision

    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    train_data = ParallelData(str(data), "train", "de", "en")
    order = epoch_order(make_batches(train_data.src.sizes, train_data.tgt.sizes, model["max_tokens"], None, 1), 1, 1)
    batches = [collate(train_data, ids) for ids in order[: warmup + rounds]]
    vocabs = dict(zip(("de", "en"), load_pair(str(data), "de", "en"), strict=True))
    train = {"max_tokens": model["max_tokens"], "max_update": 1}
    spec = {"model": "transformer", "arch": model["ours"], "train": train}
    runs = {}
    for label, amp in TRAIN_PRECISIONS.items():
        precision = Precision(amp, amp, "benchmark", "cpu")
        torch.manual_seed(1)
        with tempfile.TemporaryDirectory() as tmp:
            run = _start(spec, TrainConfig.from_dict(spec["train"]), vocabs, Path(tmp), cpu, precision)
        runs[label] = (run, master_weights.compute_model(run.model, precision), precision)
    cpu_s: dict[str, list[float]] = {label: [] for label in runs}
    wall_s: dict[str, list[float]] = {label: [] for label in runs}
    for i, batch in enumerate(batches):
        for label in list(runs) if i % 2 == 0 else list(runs)[::-1]:
            run, net, precision = runs[label]
            t0, w0 = time.thread_time(), time.perf_counter()
            _update(run, net, [batch], cpu, lambda precision=precision: precision.autocast(cpu))
            if i >= warmup:
                cpu_s[label].append(time.thread_time() - t0)
                wall_s[label].append(time.perf_counter() - w0)
            run.progress.update += 1

    def quartiles(values: list[float]) -> dict:
        q1, median, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
        return {"q1": q1, "median": median, "q3": q3}

    tokens = [b.ntokens for b in batches[warmup:]]
    return {
        "model": model["title"],
        "parameters": parameters(runs["fp32"][0].model),
        "rounds": rounds,
        "warmup": warmup,
        "threads": 1,
        "target_tokens_per_update_mean": statistics.mean(tokens),
        "cpu_seconds_per_update": {k: {"median": statistics.median(v), "min": min(v)} for k, v in cpu_s.items()},
        "wall_seconds_per_update": {k: {"median": statistics.median(v), "min": min(v)} for k, v in wall_s.items()},
        "speedup_over_fp32_per_round": {
            k: quartiles([f / x for f, x in zip(cpu_s["fp32"], v, strict=True)])
            for k, v in cpu_s.items()
            if k != "fp32"
        },
        "bf16_weights_over_bf16_per_round": quartiles(
            [a / w for a, w in zip(cpu_s["bf16"], cpu_s["bf16-weights"], strict=True)]
        ),
        "load_average": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


SHAPES = {"fairseq": 0.0, "fixed 1.1": 1.1}  # label → bucket_growth_factor (seq_len_multiple 2, the default)


def shapes_part(data: Path, name: str, rounds: int, warmup: int, precisions: list[str]) -> dict:
    """`bucket_growth_factor` on the CPU: `model` trained by the trainer's `_update` on fairseq's batches (each padded
    to its own longest) and on fixed shapes (1.1), in each precision, one thread. Paired: each round updates both
    batchings' models (the same initial weights; each its own epoch of batches, in the trainer's seeded order), the
    order reversed every other round. The batches differ, so the figure compared is real target tokens per CPU
    second over the timed rounds (padding and dummy rows cost time and count nothing), with the padded share of
    each batching's token slots beside it."""
    import tempfile

    import torch

    from layerwise_nmt.data.batch_shapes import FixedShapes
    from layerwise_nmt.data.batching import ParallelData, collate, epoch_order, make_batches
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.training.loop import TrainConfig, _start
    from layerwise_nmt.training.precision import Precision

    model = MODELS[name]
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    train_data = ParallelData(str(data), "train", "de", "en")
    vocabs = dict(zip(("de", "en"), load_pair(str(data), "de", "en"), strict=True))
    result: dict = {"model": model["title"], "rounds": rounds, "warmup": warmup, "threads": 1}
    for label in precisions:
        amp = TRAIN_PRECISIONS[label]
        precision = Precision(amp, amp, "benchmark", "cpu")
        runs = {}
        for batching, growth in SHAPES.items():
            train = {"max_tokens": model["max_tokens"], "max_update": 1, "bucket_growth_factor": growth}
            spec = {"model": "transformer", "arch": model["ours"], "train": train}
            shapes = FixedShapes(growth, 2, model["max_tokens"], None) if growth else None
            batches = make_batches(
                train_data.src.sizes, train_data.tgt.sizes, model["max_tokens"], None, 1, shapes=shapes
            )
            order = epoch_order(batches, 1, 1)[: warmup + rounds]
            torch.manual_seed(1)
            with tempfile.TemporaryDirectory() as tmp:
                run = _start(spec, TrainConfig.from_dict(train), vocabs, Path(tmp), cpu, precision)
            runs[batching] = (run, [collate(train_data, ids, shapes=shapes) for ids in order])
        rate, padding = paired_updates(runs, rounds, warmup, precision)
        result[label] = {
            "target_tokens_per_cpu_s": rate,
            "padding_share": padding,
            "fixed_over_fairseq": rate["fixed 1.1"] / rate["fairseq"],
        }
    result["load_average"] = os.getloadavg()
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return result


def paired_updates(runs: dict, rounds: int, warmup: int, precision, around=None) -> tuple[dict, dict]:
    """Each variant's run (`runs`: name → (the trainer's Run, its batches)) updated once a round through the
    trainer's `_update`, the variants' order reversed every other round, each update inside `around(name)`, one
    thread: real target tokens per CPU second over the timed rounds, and the padded share of each variant's token
    slots (source and target)."""
    from contextlib import nullcontext

    import torch

    from layerwise_nmt.training.loop import _update

    cpu = torch.device("cpu")
    cpu_s = {name: 0.0 for name in runs}
    tokens = {name: 0 for name in runs}
    slots = {name: [0, 0] for name in runs}  # padded token slots (source + target), of them padding
    for i in range(warmup + rounds):
        for name in list(runs) if i % 2 == 0 else list(runs)[::-1]:
            run, batches = runs[name]
            batch = batches[i]
            with around(name) if around else nullcontext():
                t0 = time.thread_time()
                _update(run, run.model, [batch], cpu, lambda: precision.autocast(cpu))
                spent = time.thread_time() - t0
            if i >= warmup:
                cpu_s[name] += spent
                tokens[name] += batch.ntokens
                real = int((batch.src != 1).sum() + (batch.tgt != 1).sum())
                size = batch.src.numel() + batch.tgt.numel()
                slots[name] = [slots[name][0] + size, slots[name][1] + size - real]
            run.progress.update += 1
    rate = {name: tokens[name] / cpu_s[name] for name in runs}
    return rate, {name: pad / size for name, (size, pad) in slots.items()}


def same_start(data: Path, name: str, rounds: int, warmup: int):
    """What the parts comparing variants of one update share: `model`'s first warmup + rounds batches (fairseq's, in
    the trainer's seeded order), the part's result with its header, and `start(variants, precision)`: one trainer
    Run per variant, each from the same initial weights, with those batches."""
    import tempfile

    import torch

    from layerwise_nmt.data.batching import ParallelData, collate, epoch_order, make_batches
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.training.loop import TrainConfig, _start

    model = MODELS[name]
    torch.set_num_threads(1)
    train_data = ParallelData(str(data), "train", "de", "en")
    vocabs = dict(zip(("de", "en"), load_pair(str(data), "de", "en"), strict=True))
    batches = make_batches(train_data.src.sizes, train_data.tgt.sizes, model["max_tokens"], None, 1)
    order = [collate(train_data, ids) for ids in epoch_order(batches, 1, 1)[: warmup + rounds]]
    result: dict = {"model": model["title"], "rounds": rounds, "warmup": warmup, "threads": 1}
    train = {"max_tokens": model["max_tokens"], "max_update": 1, "bucket_growth_factor": 0}
    spec = {"model": "transformer", "arch": model["ours"], "train": train}

    def start(variants, precision) -> dict:
        runs = {}
        for variant in variants:
            torch.manual_seed(1)
            with tempfile.TemporaryDirectory() as tmp:
                run = _start(spec, TrainConfig.from_dict(train), vocabs, Path(tmp), torch.device("cpu"), precision)
            runs[variant] = (run, order)
        return runs

    return order, result, start


def loss_part(data: Path, name: str, rounds: int, warmup: int, precisions: list[str]) -> dict:
    """The chunked label-smoothed cross-entropy (training/loss.py, `SmoothedCrossEntropy`) against fairseq's
    formulation, which keeps the (tokens × vocabulary) fp32 log-probabilities: `model` trained by the trainer's
    `_update` with each, on the same batches (fairseq's) from the same initial weights, paired round by round, in
    each precision, one thread, in target tokens per CPU second."""
    from unittest import mock

    from layerwise_nmt.training import loss
    from layerwise_nmt.training.precision import Precision

    _, result, start = same_start(data, name, rounds, warmup)
    for label in precisions:
        amp = TRAIN_PRECISIONS[label]
        precision = Precision(amp, amp, "benchmark", "cpu")
        rate, _ = paired_updates(
            start(loss.LOSSES, precision),
            rounds,
            warmup,
            precision,
            lambda v: mock.patch.object(loss, "smoothed_loss", loss.LOSSES[v]),
        )
        result[label] = {"target_tokens_per_cpu_s": rate, "chunked_over_reference": rate["chunked"] / rate["reference"]}
    result["load_average"] = os.getloadavg()
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return result


def compile_part(data: Path, name: str, rounds: int, warmup: int, precisions: list[str]) -> dict:
    """`compile: true` (training/compiler.py) against the eager model: `model` trained by the trainer's `_update`
    compiled and not, on the same batches (fairseq's) from the same initial weights, paired round by round, in each
    precision, one thread, in target tokens per CPU second; the compilation itself, in the warm-up rounds, is timed
    apart (wall seconds of the first compiled update)."""
    import torch

    from layerwise_nmt.training import compiler
    from layerwise_nmt.training.loop import _update
    from layerwise_nmt.training.precision import Precision

    cpu = torch.device("cpu")
    order, result, start = same_start(data, name, rounds, warmup)
    for label in precisions:
        amp = TRAIN_PRECISIONS[label]
        precision = Precision(amp, amp, "benchmark", "cpu")
        runs = start(("eager", "compiled"), precision)
        torch._dynamo.reset()
        compiled = compiler.compile_model(runs["compiled"][0].model, cpu)
        started = time.perf_counter()
        _update(runs["compiled"][0], compiled, [order[0]], cpu, lambda: precision.autocast(cpu))  # noqa: B023  (used within this iteration)
        compile_s = time.perf_counter() - started
        rate, _ = paired_updates(runs, rounds, warmup, precision)
        result[label] = {
            "target_tokens_per_cpu_s": rate,
            "compiled_over_eager": rate["compiled"] / rate["eager"],
            "first_compiled_update_s": round(compile_s, 1),
        }
    result["load_average"] = os.getloadavg()
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return result


GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm"}


def where_time_goes(work: Path, name: str, gemm_ratio: float, updates: int = 3, warmup: int = 2) -> dict:
    """Single-thread CPU seconds per update of our trainer in fp32 and bf16 (process time), the share of it in
    matrix products (torch.profiler's self time of mm/addmm/bmm over a further `updates` updates), and what that
    bounds: the bf16/fp32 ratio if bf16 sped up only the GEMMs (by gemm_ratio) and left the rest as in fp32."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    out = {}
    for amp, label in (("none", "fp32"), ("bf16", "bf16")):
        steps = ours_updates(work, MODELS[name], amp, warmup + 2 * updates)
        for _ in range(warmup):
            next(steps)
        start = time.process_time()
        for _ in range(updates):
            next(steps)
        seconds = (time.process_time() - start) / updates
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in steps:
                pass
        ops = prof.key_averages()
        share = sum(e.self_cpu_time_total for e in ops if e.key in GEMM_OPS) / sum(e.self_cpu_time_total for e in ops)
        top = sorted(ops, key=lambda e: -e.self_cpu_time_total)[:12]
        total = sum(e.self_cpu_time_total for e in ops)
        out[label] = {
            "cpu_seconds_per_update": seconds,
            "gemm_share": share,
            "top_ops_share": {e.key: e.self_cpu_time_total / total for e in top},
        }
    fp32 = out["fp32"]
    gemm, rest = (
        fp32["cpu_seconds_per_update"] * fp32["gemm_share"],
        fp32["cpu_seconds_per_update"] * (1 - fp32["gemm_share"]),
    )
    out["bf16_over_fp32"] = fp32["cpu_seconds_per_update"] / out["bf16"]["cpu_seconds_per_update"]
    out["ceiling_if_only_gemms_gain"] = fp32["cpu_seconds_per_update"] / (gemm / gemm_ratio + rest)
    out["non_gemm_seconds_fp32"] = rest
    out["non_gemm_seconds_allowed_for_2_5x"] = fp32["cpu_seconds_per_update"] / 2.5 - gemm / gemm_ratio
    return out


def plain_model(vocab: int):
    import torch

    torch.manual_seed(1)
    emb = torch.nn.Embedding(vocab, 512, padding_idx=1)
    net = torch.nn.Transformer(512, 4, 6, 6, 1024, dropout=0.3, batch_first=True)
    return torch.nn.ModuleList([emb, net])


def plain_train(work: Path, model: dict, updates: int, warmup: int, amp: str) -> float:
    """What a user writes by hand: torch.nn.Transformer + embeddings + cross-entropy, same batches (iwslt sizes)."""
    import math

    import torch
    import torch.nn.functional as F

    from layerwise_nmt.models.transformer import sinusoidal_positions

    torch.set_num_threads(THREADS)
    V = vocab_size(work)
    emb, net = plain_model(V)
    opt = torch.optim.Adam(list(emb.parameters()) + list(net.parameters()), lr=5e-4, betas=(0.9, 0.98), eps=1e-9)
    pos = sinusoidal_positions(1024, 512)
    stamps = []
    for _, b in zip(range(updates + warmup), training_batches(work, model["max_tokens"]), strict=False):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp == "bf16"):
            src = emb(b.src) * math.sqrt(512) + pos[: b.src.size(1)]
            tgt = emb(b.prev) * math.sqrt(512) + pos[: b.prev.size(1)]
            mask = net.generate_square_subsequent_mask(b.prev.size(1))
            h = net(src, tgt, tgt_mask=mask, src_key_padding_mask=b.src == 1, memory_key_padding_mask=b.src == 1)
            logits = h @ emb.weight.t()
        loss = (
            F.cross_entropy(
                logits.float().view(-1, V), b.tgt.view(-1), ignore_index=1, label_smoothing=0.1, reduction="sum"
            )
            / b.ntokens
        )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        stamps.append((time.perf_counter(), b.ntokens))
    return rate_after_warmup(stamps, warmup)


def train_part(work: Path, name: str, updates: int, warmup: int, peak: dict, precisions: list[str]) -> dict:
    """One model's training rates, their ratios to fairseq and our fp32, and MFU against the measured peak."""
    model = MODELS[name]
    n_params = parameters(ours_model(work, model))  # fairseq's model of the same arch has the same count
    systems = {"fairseq 0.12.2 (fp32)": ("fp32", n_params, lambda: fairseq_train(work, model, updates, warmup))}
    for amp, label in (("none", "fp32"), ("bf16", "bf16")):
        if label in precisions:
            systems[f"lwnmt ({label})"] = (
                label,
                n_params,
                lambda amp=amp: ours_train(work, model, updates, warmup, amp),
            )
    if name == "iwslt":
        plain_params = parameters(plain_model(vocab_size(work)))
        for amp, label in (("none", "fp32"), ("bf16", "bf16")):
            if label in precisions:
                systems[f"torch.nn.Transformer ({label})"] = (
                    label,
                    plain_params,
                    lambda amp=amp: plain_train(work, model, updates, warmup, amp),
                )
    rates, mfu = {}, {}
    for system, (precision, count, measure) in systems.items():
        print(f"training {name}: {system} ...", flush=True)
        rates[system] = measure()
        mfu[system] = 6 * count * rates[system] / peak[precision]
    base = rates["fairseq 0.12.2 (fp32)"]
    part = {
        "model": model["title"],
        "parameters": n_params,
        "target_tokens_per_s": rates,
        "vs_fairseq_fp32": {k: v / base for k, v in rates.items()},
        "model_flop_utilisation": mfu,
    }
    if "lwnmt (bf16)" in rates:
        part["lwnmt_bf16_over_fp32"] = rates["lwnmt (bf16)"] / rates["lwnmt (fp32)"]
    return part


@dataclass
class DecodeCase:
    """One trained model as each tool loads it, the sources to translate and the beam settings."""

    description: str
    fairseq_checkpoint: Path
    fairseq_data: Path  # its sources binarized (fairseq-generate's --gen-subset test)
    our_model: Path
    our_data: Path  # translate --data
    sources: Path
    settings: dict


def fixture_case(work: Path, name: str) -> DecodeCase:
    """A fixture model trained by fairseq (d = 64 / 32), imported with `lwnmt import-fairseq`."""
    imported = work / f"imported-{name}"
    sh(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "import-fairseq",
            str(FIXTURE / name / "checkpoint.pt"),
            "--data",
            str(FIXTURE / name),
            "--src",
            "de",
            "--tgt",
            "en",
            "--out",
            str(imported),
        ]
    )
    return DecodeCase(
        f"tests/fixtures/fairseq/{name}: {' '.join(fixture_train_args(name))}",
        FIXTURE / name / "checkpoint.pt",
        binarize_fixture_sources(work, name),
        imported / "model.pt",
        imported,
        FIXTURE / "test.de",
        FIXTURE_DECODE,
    )


def demo_case(cache: Path) -> DecodeCase:
    """config/demo.yaml's baseline architecture (256/1024/4, 3+3, 7.5M parameters) trained here by `lwnmt train` with
    the demo's recipe (1,000 updates, fp32) but fairseq's initialisation and position table, so that its weights,
    renamed into a checkpoint of fairseq-train's own, are the same model for fairseq-generate. Multi30k test2016 (1,000
    sentences), the demo's beam settings. Trained once (~8 min on 2 cores) and kept in `cache`."""
    data = ensure_demo_data()
    model, settings = demo_model(cache)
    fairseq_data = cache / "fairseq-bin"
    if not (fairseq_data / "valid.de-en.en.bin").exists():  # train, valid: for fairseq-train's checkpoint
        joint = str(data / "vocab/dict.joint.txt")
        sh(
            [
                str(FAIRSEQ_BIN / "fairseq-preprocess"),
                "--source-lang",
                "de",
                "--target-lang",
                "en",
                "--srcdict",
                joint,
                "--tgtdict",
                joint,
                *(f"--{split}pref={data / 'bpe/test.de-en'}" for split in ("train", "valid", "test")),
                "--destdir",
                str(fairseq_data),
                "--workers",
                "1",
            ]
        )
    exported = cache / "fairseq-checkpoint.pt"
    if not exported.exists() or exported.stat().st_mtime < model.stat().st_mtime:
        export_to_fairseq(model, fairseq_data, cache)
    return DecodeCase(
        "config/demo.yaml's baseline (256/1024/4, 3+3, all embeddings shared), 1,000 updates on "
        "Multi30k with fairseq's init and positions; test2016",
        exported,
        fairseq_data,
        model,
        data / "bin-joint",
        data / "bpe/test.de-en.de",
        settings,
    )


def demo_model(cache: Path) -> tuple[Path, dict]:
    """demo_case's model.pt, trained once into `cache`, and the demo's decoding settings."""
    data = ensure_demo_data()
    baseline = yaml.safe_load((ROOT / "config/demo.yaml").read_text())["experiments"]["demo.transformer"]
    settings = {**FIXTURE_DECODE, "max_len_a": 1.2, "max_len_b": 10, **baseline["decode"]}  # ours' defaults
    model = cache / "model.pt"
    if not model.exists():
        print(f"training the demo-sized model for decoding into {cache} (~8 min) ...", flush=True)
        spec = {
            "model": "transformer",
            "arch": {**MODELS["demo"]["ours"], "init": "fairseq", "sinusoid": "fairseq"},
            "train": {**baseline["train"], "amp": "none"},
        }
        sh(
            [
                sys.executable,
                "-m",
                "layerwise_nmt",
                "train",
                "--spec",
                json.dumps(spec),
                "--data",
                str(data / "bin-joint"),
                "--src",
                "de",
                "--tgt",
                "en",
                "--save-dir",
                str(cache / "checkpoints"),
                "--final",
                str(model),
                "--threads",
                str(THREADS),
            ]
        )
    return model, settings


def ensure_demo_data() -> Path:
    """`make demo`'s prepared Multi30k (BPE, joint dictionary, binarized), made by its own rules if absent."""
    files = ["bpe/test.de-en.de", "vocab/dict.joint.txt"] + [
        f"bin-joint/{split}.de-en.{lang}.{kind}.npy"
        for split in ("train", "valid")
        for lang in ("de", "en")
        for kind in ("tokens", "offsets")
    ]
    if not all((DEMO_DATA / f).exists() for f in files):
        targets = [str(DEMO_DATA.relative_to(ROOT) / f) for f in files]  # before the list options, which take all
        sh(
            [
                str(Path(sys.executable).parent / "snakemake"),
                *targets,
                "--cores",
                str(THREADS),
                "--configfile",
                "config/demo.yaml",
                "--quiet",
                "rules",
            ],
            cwd=ROOT,
        )
    return DEMO_DATA


def fairseq_weights(state: dict) -> dict:
    """Our model.pt's weights under fairseq TransformerModel's names: fairseq_import.linear_names read backwards
    (a stacked q/k/v split into its parts), plus the copies fairseq 0.12's encoder layers keep for torch's
    BetterTransformer fast path (which fairseq_cli turns off)."""
    from layerwise_nmt.inference.fairseq_import import linear_names

    ours, config, out = state["model"], state["model_config"], {}
    for name, theirs in linear_names(config).items():
        for part in ("weight", "bias"):
            out |= {
                f"{t}.{part}": chunk.clone()
                for t, chunk in zip(theirs, ours[f"{name}.{part}"].chunk(len(theirs)), strict=True)
            }
    for i in range(config["encoder_layers"]):
        for name, theirs in (("attn.qkv", "in_proj"), ("attn.out", "out_proj"), ("ffn.fc1", "fc1"), ("ffn.fc2", "fc2")):
            for part in ("weight", "bias"):
                out[f"encoder.layers.{i}.{theirs}_{part}"] = ours[f"encoder.layers.{i}.{name}.{part}"].clone()
    for side in ("encoder", "decoder"):
        out[f"{side}.embed_tokens.weight"] = ours[f"{side}.embed.tokens.weight"].clone()
    out["decoder.output_projection.weight"] = ours["output.weight"].clone()
    return out


# Run by fairseq's Python: every floating-point tensor of fairseq-train's checkpoint replaced by ours, already renamed
# (shapes checked); its buffers (version numbers, the position table's placeholder) kept.
EXPORT_DRIVER = """
import sys, torch
template, weights, out = sys.argv[1:4]
state, ours = torch.load(template, map_location="cpu"), torch.load(weights)
for key, value in state["model"].items():
    if key.endswith(("_float_tensor", ".version")):
        continue
    assert ours[key].shape == value.shape, (key, ours[key].shape, value.shape)
    state["model"][key] = ours[key]
assert set(ours) <= set(state["model"]), set(ours) - set(state["model"])
state["last_optimizer_state"] = None
torch.save(state, out)
"""


def export_to_fairseq(model: Path, fairseq_data: Path, cache: Path) -> None:
    """Our model.pt → a fairseq checkpoint: fairseq-train makes one update of the same architecture (its checkpoint
    carries fairseq's own configuration), then its weights are replaced by ours."""
    import torch

    from layerwise_nmt.training.checkpoint import load

    template = cache / "fairseq-template"
    sh(
        [
            str(FAIRSEQ_BIN / "fairseq-train"),
            str(fairseq_data),
            *MODELS["demo"]["fairseq"],
            "--optimizer",
            "adam",
            "--lr",
            "1e-4",
            "--max-tokens",
            "1024",
            "--max-update",
            "1",
            "--cpu",
            "--disable-validation",
            "--no-epoch-checkpoints",
            "--save-dir",
            str(template),
            "--seed",
            "1",
        ]
    )
    state = load(model)
    torch.save(fairseq_weights(state), cache / "fairseq-weights.pt")
    sh(
        [
            str(FAIRSEQ_BIN / "python"),
            "-c",
            EXPORT_DRIVER,
            str(template / "checkpoint_last.pt"),
            str(cache / "fairseq-weights.pt"),
            str(cache / "fairseq-checkpoint.pt"),
        ]
    )


def decode_part(case: DecodeCase, work: Path, name: str, precisions: list[str], repeats: int) -> dict:
    """fairseq-generate vs lwnmt translate on one trained model: whole-process wall (median of `repeats`, taken in
    turn), each tool's own decoding rate, and agreement of the hypotheses."""
    settings = case.settings
    generate = fairseq_generate_command(case.fairseq_data, case.fairseq_checkpoint, settings)
    commands = {"fairseq-generate (fp32)": generate}
    for amp, label in (("none", "fp32"), ("bf16", "bf16")):
        if label in precisions:
            commands[f"lwnmt translate ({label})"] = [
                sys.executable,
                "-m",
                "layerwise_nmt",
                "translate",
                str(case.sources),
                "--model",
                str(case.our_model),
                "--data",
                str(case.our_data),
                "--src",
                "de",
                "--tgt",
                "en",
                "--out-prefix",
                str(work / f"hyp-{name}-{label}"),
                "--threads",
                str(THREADS),
                "--options",
                json.dumps({**settings, "amp": amp}),
            ]
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    walls = {system: [] for system in commands}
    outputs = {}
    for _ in range(repeats):  # in turn, so that a change in the machine's load hits every system alike
        for system, cmd in commands.items():
            print(f"decoding {name}: {system} ...", flush=True)
            start = time.perf_counter()
            outputs[system] = sh(cmd, env=env)
            walls[system].append(time.perf_counter() - start)
    theirs = fairseq_hypotheses(outputs["fairseq-generate (fp32)"].stdout)
    own_rate = {"fairseq-generate (fp32)": fairseq_rate(outputs["fairseq-generate (fp32)"])}
    agree = {}
    for system in commands:
        if system.startswith("lwnmt"):
            label = system[system.index("(") + 1 : -1]
            prefix = work / f"hyp-{name}-{label}"
            own_rate[system] = json.loads(Path(f"{prefix}.json").read_text())["sentences_per_second"]
            ours = Path(f"{prefix}.bpe").read_text(encoding="utf-8").splitlines()
            agree[system] = sum(a == b for a, b in zip(ours, theirs, strict=True))
    sentences = len(theirs)
    wall = {k: statistics.median(v) for k, v in walls.items()}
    base = wall["fairseq-generate (fp32)"]
    per_turn = {k: [a / b for a, b in zip(walls["fairseq-generate (fp32)"], v, strict=True)] for k, v in walls.items()}
    return {
        "model": case.description,
        "settings": settings,
        "sentences": sentences,
        "whole_process_seconds": wall,
        "whole_process_sentences_per_s": {k: sentences / v for k, v in wall.items()},
        "whole_process_vs_fairseq_fp32": {k: base / v for k, v in wall.items()},
        "whole_process_vs_fairseq_fp32_per_turn": {
            k: {"median": statistics.median(r), "min": min(r), "max": max(r)} for k, r in per_turn.items()
        },
        "decoding_sentences_per_s_own_timer": own_rate,
        "own_timer_vs_fairseq_fp32": {k: v / own_rate["fairseq-generate (fp32)"] for k, v in own_rate.items()},
        "hypotheses_identical_to_fairseq": agree,
    }


def decode_utilisation(case: DecodeCase, precisions: list[str], peak: dict) -> dict:
    """Model FLOP utilisation of one in-process `lwnmt translate` decode per precision: the FLOPs of its matrix
    products (torch.profiler's count for addmm, mm, bmm), their own time and the decode's wall (profiled, so a little
    slower than unprofiled), against this CPU's measured peak."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from layerwise_nmt.data.io import read_lines
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.inference.decode import BeamConfig, decode_lines, load_model

    torch.set_num_threads(THREADS)
    src_vocab, tgt_vocab = load_pair(case.our_data, "de", "en")
    model, sources = load_model(case.our_model, src_vocab, tgt_vocab), list(read_lines(case.sources))
    result = {}
    for label in precisions:
        cfg = BeamConfig.from_dict({**case.settings, "amp": {"fp32": "none"}.get(label, label)})
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            start = time.perf_counter()
            decode_lines(model, sources, src_vocab, tgt_vocab, cfg, str(case.sources))
            wall = time.perf_counter() - start
        products = [e for e in prof.key_averages() if e.key in ("aten::addmm", "aten::mm", "aten::bmm")]
        flops, seconds = sum(e.flops for e in products), sum(e.self_cpu_time_total for e in products) / 1e6
        result[label] = {
            "matmul_gflop": flops / 1e9,
            "decode_wall_s": wall,
            "matmul_s": seconds,
            "matmul_fraction_of_peak": flops / seconds / peak[label],
            "decode_fraction_of_peak": flops / wall / peak[label],
        }
    return result


def fixture_train_args(name: str) -> list[str]:
    return json.loads((FIXTURE / "manifest.json").read_text())["models"][name]["fairseq_train_args"]


def binarize_fixture_sources(work: Path, name: str) -> Path:
    """The fixture's sources binarized with the model's dictionaries for fairseq-generate (which needs a target
    side: the sources again, only printed, never scored here)."""
    head = work / f"fixture-{name}"
    for lang in ("de", "en"):
        Path(f"{head}.{lang}").write_bytes((FIXTURE / "test.de").read_bytes())
    dest = work / f"fixture-bin-{name}"
    sh(
        [
            str(FAIRSEQ_BIN / "fairseq-preprocess"),
            "--source-lang",
            "de",
            "--target-lang",
            "en",
            "--srcdict",
            str(FIXTURE / name / "dict.de.txt"),
            "--tgtdict",
            str(FIXTURE / name / "dict.en.txt"),
            "--testpref",
            str(head),
            "--destdir",
            str(dest),
            "--workers",
            "1",
        ]
    )
    return dest


def fairseq_hypotheses(text: str) -> list[str]:
    hyps = {int(m[1]): m[2] for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", text, re.M)}
    return [hyps[i] for i in range(len(hyps))]


def fairseq_rate(result: subprocess.CompletedProcess) -> float:
    match = re.search(
        r"Translated [\d,]+ sentences \([\d,]+ tokens\) in [\d.]+s \(([\d.]+) sentences/s",
        result.stdout + result.stderr,
    )
    if not match:
        raise RuntimeError("fairseq-generate printed no 'Translated ... sentences/s' line")
    return float(match.group(1))


def plain(value):
    """A measurement as JSON holds it: tensors and numpy scalars or arrays as numbers or lists, paths as text."""
    if hasattr(value, "tolist"):  # torch.Tensor, numpy scalars and arrays
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} in the benchmark's results: not JSON ({value!r})")


def record(out: Path, result: dict) -> None:
    """Write every CPU's measurements to `out`, whichever parts this run measured; serialised before the file is
    touched, so that a value JSON cannot hold leaves the earlier file whole."""
    text = json.dumps(result, indent=2, default=plain) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(f"written {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--models", default="iwslt,demo", help="training models to measure (iwslt, demo)")
    parser.add_argument(
        "--decode-models",
        default="demo,shared_post,separate_pre",
        help="trained models to decode: demo (a demo-sized model trained here once) and the fairseq "
        "fixture's shared_post, separate_pre",
    )
    parser.add_argument(
        "--cache",
        default=str(ROOT / "results/benchmarks/decode-demo"),
        help="where the demo-sized decoding model is trained and kept",
    )
    parser.add_argument("--decode-repeats", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="precisions: measurements, each with fresh models")
    parser.add_argument(
        "--isa",
        choices=("native", "avx2"),
        default="native",
        help="avx2: emulate an AVX2-only CPU (fp32 only, as amp auto would choose)",
    )
    parser.add_argument("--json", default=str(ROOT / "benchmarks/results/train_decode.json"))
    parser.add_argument(
        "--parts",
        default="train,decode,gemm,profile,ctranslate2",
        help="which parts to (re)measure: train, decode, gemm (the GEMM-only bound on bf16 over "
        "fp32), profile (where an update's time goes; needs gemm), ctranslate2 (the demo baseline "
        "decoded by CTranslate2 and by us, benchmarks/ctranslate2_decode.py), precisions (the demo "
        "model's trainer update in fp32, bf16 autocast and bf16 weights, paired, --updates rounds "
        "after --warmup; not in the default), shapes (--models' trainer updates on fairseq's batches and on "
        "fixed shapes, paired, per precision; not in the default), loss (--models' trainer updates with the "
        "chunked label-smoothed cross-entropy and fairseq's formulation, paired, per precision; not in the "
        "default), compile (--models' trainer updates eagerly and with compile: true, paired, per precision; "
        "not in the default); others are kept",
    )
    args = parser.parse_args(argv)
    if args.isa == "avx2" and any(os.environ.get(k) != v for k, v in AVX2_ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **AVX2_ENV})  # before torch loads
    parts, models = set(args.parts.split(",")), args.models.split(",")
    if args.isa == "avx2":
        parts -= {"gemm", "profile"}  # they compare bf16 with fp32, and bf16 is emulated there
    precisions = ["fp32"] if args.isa == "avx2" else ["fp32", "bf16"]
    out = Path(args.json)
    result = json.loads(out.read_text()) if out.exists() else {}
    needs_fairseq = bool(parts & {"train", "decode"})
    if needs_fairseq:
        ensure_fairseq()
    info = machine()
    run = result.setdefault("runs", {}).setdefault(machine_label(info), {})
    # the precisions, shapes and loss parts date themselves: run alone, they leave the other parts' date as it was
    dated = bool(parts - {"precisions", "shapes", "loss", "compile"}) or "machine" not in run
    if dated:
        run["machine"] = {
            **info,
            "load_average_at_start": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if parts & {"train", "gemm", "profile", "decode"}:
            prepare(work, needs_fairseq)
        if "train" in parts:
            run["peak_flops_per_s"] = peak = measured_peak()
            run.setdefault("train", {}).update(
                {name: train_part(work, name, args.updates, args.warmup, peak, precisions) for name in models}
            )
            run["train_settings"] = {
                "updates": args.updates,
                "warmup": args.warmup,
                "mfu": "6 * parameters * target tokens/s / peak_flops_per_s[precision]",
            }
        if "gemm" in parts:
            run.setdefault("gemm_bound", {}).update({name: gemm_bound(work, name) for name in models})
        if "profile" in parts:
            run.setdefault("where_time_goes", {}).update(
                {name: where_time_goes(work, name, run["gemm_bound"][name]["bf16_over_fp32"]) for name in models}
            )
        if "decode" in parts:
            for name in args.decode_models.split(","):
                case = demo_case(Path(args.cache)) if name == "demo" else fixture_case(work, name)
                part = decode_part(case, work, name, precisions, args.decode_repeats)
                if name == "demo":
                    run["peak_flops_per_s"] = peak = run.get("peak_flops_per_s") or measured_peak()
                    part["model_flop_utilisation"] = decode_utilisation(case, precisions, peak)
                # figures taken apart from this script (dated), e.g. longer paired runs, are kept
                part.update({k: v for k, v in run.get("decode", {}).get(name, {}).items() if k == "paired_runs"})
                run.setdefault("decode", {})[name] = part
            run["decode_settings"] = {
                "threads": THREADS,
                "repeats": args.decode_repeats,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            }
        if "ctranslate2" in parts:
            model, settings = demo_model(Path(args.cache))
            data = ensure_demo_data()
            run["ctranslate2"] = ctranslate2_part(
                model,
                data / "bin-joint",
                data / "bpe/test.de-en.de",
                data / "bpe/test.de-en.en",
                settings,
                work,
                args.decode_repeats,
            )
        if "precisions" in parts:
            data = demo_training_data()
            repeats = [precision_part(data, MODELS["demo"], args.updates, args.warmup) for _ in range(args.repeats)]
            run.setdefault("train_precisions", {})["demo"] = {"repeats": repeats}
        for name_of_part, measure, key in (
            ("shapes", shapes_part, "train_shapes"),
            ("loss", loss_part, "train_loss"),
            ("compile", compile_part, "train_compile"),
        ):
            if name_of_part in parts:  # each of --models, --repeats times, paired in each precision
                data = demo_training_data()
                measured = {
                    name: [measure(data, name, args.updates, args.warmup, precisions) for _ in range(args.repeats)]
                    for name in models
                }
                run.setdefault(key, {}).update(measured)
    if dated:
        run["machine"]["load_average_at_end"] = os.getloadavg()
    record(out, result)  # before the report: a table that fails to print must not lose what was measured
    report(machine_label(info), run)


def demo_training_data() -> Path:
    """The demo's binarized training set (only its training side is read): made by `make demo` or here."""
    trained_on = DEMO_DATA / "bin-joint"
    return trained_on if (trained_on / "train.de-en.en.tokens.npy").exists() else ensure_demo_data() / "bin-joint"


def report(label: str, run: dict) -> None:
    print(f"\n{label}; load average {run['machine']['load_average_at_start']}")
    for part in run.get("train", {}).values():
        print(f"\ntraining {part['model']}\n{'system':<36} {'target tok/s':>12} {'vs fairseq':>10} {'MFU':>6}")
        for system, rate in part["target_tokens_per_s"].items():
            print(
                f"{system:<36} {rate:12.1f} {part['vs_fairseq_fp32'][system]:9.2f}x "
                f"{part['model_flop_utilisation'][system]:6.1%}"
            )
    for name, part in run.get("gemm_bound", {}).items():
        print(f"{name}: its GEMMs alone run {part['bf16_over_fp32']:.2f}x faster in bf16 than in fp32")
    for name, part in run.get("where_time_goes", {}).items():
        print(
            f"{name}: 1-thread CPU s/update fp32 {part['fp32']['cpu_seconds_per_update']:.3f} "
            f"(GEMMs {part['fp32']['gemm_share']:.0%}), bf16 {part['bf16']['cpu_seconds_per_update']:.3f} "
            f"(GEMMs {part['bf16']['gemm_share']:.0%}): bf16 {part['bf16_over_fp32']:.2f}x; ceiling with only "
            f"the GEMMs gaining {part['ceiling_if_only_gemms_gain']:.2f}x"
        )
    for measured in run.get("train_precisions", {}).values():
        for part in measured["repeats"]:
            print(f"\ntrainer update, {part['model']}, 1 thread, {part['rounds']} paired rounds ({part['date']})")
            for label, seconds in part["cpu_seconds_per_update"].items():
                ratio = part["speedup_over_fp32_per_round"].get(label)
                versus = f"  {ratio['median']:.2f}x fp32 [{ratio['q1']:.2f}, {ratio['q3']:.2f}]" if ratio else ""
                print(f"{label:<14} CPU s/update median {seconds['median']:.3f}, fastest {seconds['min']:.3f}{versus}")
            pair = part["bf16_weights_over_bf16_per_round"]
            print(f"bf16-weights {pair['median']:.2f}x bf16 autocast per round [{pair['q1']:.2f}, {pair['q3']:.2f}]")
    for repeats in run.get("train_shapes", {}).values():
        for part in repeats:
            print(f"\ntrainer update, {part['model']}, 1 thread, {part['rounds']} paired rounds ({part['date']})")
            for label in ("fp32", "bf16"):
                if label in part:
                    rates, pads = part[label]["target_tokens_per_cpu_s"], part[label]["padding_share"]
                    print(
                        f"{label:<5} target tokens per CPU s: "
                        + ", ".join(f"{b} {rates[b]:.0f} ({pads[b]:.1%} padding)" for b in rates)
                        + f"; fixed/fairseq {part[label]['fixed_over_fairseq']:.3f}"
                    )
    paired_variants = {  # part → how a variant's rate and the part's ratio read
        "train_loss": ("{} loss", "chunked/reference", "chunked_over_reference"),
        "train_compile": ("{}", "compiled/eager", "compiled_over_eager"),
    }
    for key, (variant_name, ratio_name, ratio_key) in paired_variants.items():
        for repeats in run.get(key, {}).values():
            for part in repeats:
                print(f"\ntrainer update, {part['model']}, 1 thread, {part['rounds']} paired rounds ({part['date']})")
                for label in ("fp32", "bf16"):
                    if label in part:
                        rates, measured = part[label]["target_tokens_per_cpu_s"], part[label]
                        compiling = measured.get("first_compiled_update_s")
                        print(
                            f"{label:<5} target tokens per CPU s: "
                            + ", ".join(f"{variant_name.format(v)} {rate:.0f}" for v, rate in rates.items())
                            + f"; {ratio_name} {measured[ratio_key]:.3f}"
                            + (f" (compiling: {compiling:.0f} s)" if compiling is not None else "")
                        )
    if "ctranslate2" in run:
        report_ctranslate2(run["ctranslate2"])
    for name, part in run.get("decode", {}).items():
        print(
            f"\ndecoding {name}, beam 5\n{'system':<28} {'whole-process s':>15} {'vs fairseq':>10} "
            f"{'own sent/s':>10} {'same hyps':>9}"
        )
        for system, seconds in part["whole_process_seconds"].items():
            same = part["hypotheses_identical_to_fairseq"].get(system, part["sentences"])
            print(
                f"{system:<28} {seconds:15.2f} {part['whole_process_vs_fairseq_fp32'][system]:9.2f}x "
                f"{part['decoding_sentences_per_s_own_timer'][system]:10.1f} {same:>5}/{part['sentences']}"
            )
        for system, r in part.get("whole_process_vs_fairseq_fp32_per_turn", {}).items():
            if system.startswith("lwnmt"):
                print(
                    f"{system}: {r['median']:.2f}x fairseq-generate per turn (median) [{r['min']:.2f}, {r['max']:.2f}]"
                )
        for label, u in part.get("model_flop_utilisation", {}).items():
            print(
                f"{label}: {u['matmul_gflop']:.0f} GFLOP of matrix products; at {u['matmul_fraction_of_peak']:.0%} "
                f"of this CPU's {label} peak while they run, {u['decode_fraction_of_peak']:.0%} over the decode"
            )


if __name__ == "__main__":
    main()
