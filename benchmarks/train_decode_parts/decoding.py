"""`--parts decode`: fairseq-generate vs lwnmt translate on trained models (decode_cases.py), each decoding the same
weights: whole-process wall time of each command (start-up and model loading included), each tool's own decoding
rate, and how many hypotheses agree; for the demo model, the model FLOP utilisation of our decode.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import THREADS, fairseq_generate_command, sh
from .decode_cases import DecodeCase


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
