"""A decode beside a busy core: how much slower than on a quiet machine, with and without lwnmt's thread choice.

A cluster node shared with other jobs, or a workflow decoding beside a training, leaves a job fewer free cores than
it has. Each measurement is a fresh process decoding the same sentences with the demo's model shape (3+3 layers,
d=256, 8,000 joint BPE types; random weights with a fixed seed, and every hypothesis runs to its length limit, so
each variant does exactly the same work), beam 5, batch 128, fp32, asking for every core of the machine:

    quiet      nothing else running
    busy       one other process spinning on one core for the whole decode (started before, stopped after)

each for
    torch      torch.set_num_threads(every core): what the decode did before
    lwnmt      threads.set_threads(), what `lwnmt translate` and `lwnmt train` do: every core asked for (the
               thread count changes the numbers), waits sleeping where another process kept a core busy at the start
    passive    every core, with waiting OpenMP threads sleeping (OMP_WAIT_POLICY=PASSIVE) instead of spinning

The decode loop is timed inside the process (start-up excluded); the median of `--repeat` runs is reported with its
range. Goal: lwnmt's busy decode within 2x of its quiet one.

    python benchmarks/busy_core.py [--sentences 256] [--repeat 3] [--json benchmarks/results/busy_core.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

DECODE = """
import sys, time
from layerwise_nmt.training import threads

variant, sentences = sys.argv[1], int(sys.argv[2])
cores = len(threads.allowed_cores())
chosen = threads.set_threads() if variant == "lwnmt" else cores  # before torch loads, as the commands do
import torch
from layerwise_nmt.inference.config import BeamConfig
from layerwise_nmt.inference.decode import beam_search
from layerwise_nmt.models import build

torch.set_num_threads(chosen)
torch.manual_seed(0)
model = build("transformer", {"preset": "small", "encoder_layers": 3, "decoder_layers": 3, "tie": "all",
                              "src_vocab": 8000, "tgt_vocab": 8000}).eval()
src = torch.randint(4, 8000, (sentences, 16), generator=torch.Generator().manual_seed(1))
src[:, -1] = 2
cfg = BeamConfig(beam=5, batch_size=128, max_len_a=0, max_len_b=20, amp="none")
start = time.perf_counter()
for b in range(0, sentences, cfg.batch_size):
    beam_search(model, src[b:b + cfg.batch_size], cfg)
print(time.perf_counter() - start, chosen)
"""


ENV = {**{k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}, "PYTHONPATH": str(ROOT / "src")}


def decode(variant: str, sentences: int) -> tuple[float, int]:
    env = {**ENV, "OMP_WAIT_POLICY": "PASSIVE"} if variant == "passive" else ENV
    out = subprocess.run(
        [sys.executable, "-c", DECODE, variant, str(sentences)], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    return float(out[0]), int(out[1])


def measure(variant: str, load: str, sentences: int, repeat: int) -> dict:
    seconds, chosen = [], set()
    for _ in range(repeat):
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy" else None
        try:
            if spinner:
                time.sleep(0.5)  # running before the job starts, as another job would be
            took, threads = decode(variant, sentences)
        finally:
            if spinner:
                spinner.kill()
                spinner.wait()
        seconds.append(took)
        chosen.add(threads)
    return {
        "variant": variant,
        "load": load,
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "threads": sorted(chosen),
        "runs": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=str(ROOT / "benchmarks/results/busy_core.json"))
    a = parser.parse_args()
    from layerwise_nmt.training.precision import cpu_model

    rows = [
        measure(variant, load, a.sentences, a.repeat)
        for variant in ("torch", "lwnmt", "passive")
        for load in ("quiet", "busy")
    ]
    quiet = {row["variant"]: row["median_s"] for row in rows if row["load"] == "quiet"}
    print(f"{cpu_model()}, {os.cpu_count()} cores; {a.sentences} sentences, beam 5, fp32; median of {a.repeat}")
    print(f"{'threads':8} {'load':6} {'threads used':>12} {'seconds':>8} {'range':>13} {'vs quiet':>9}")
    for row in rows:
        print(
            f"{row['variant']:8} {row['load']:6} {','.join(map(str, row['threads'])):>12} {row['median_s']:8.2f} "
            f"{row['min_s']:6.2f}-{row['max_s']:<6.2f} {row['median_s'] / quiet[row['variant']]:8.2f}x"
        )
    result = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "sentences": a.sentences,
        "repeat": a.repeat,
        "measured": time.strftime("%Y-%m-%d"),
        "rows": rows,
    }
    Path(a.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
