"""The first two minutes of `scripts/study_gpu.sh run` on a GPU node: one update per model family in the precision
`amp: auto` picks there (is the CUDA path alive at all?), then a short probe of the study's demo-size model that
sizes the small study to the time left: how many trainings share the GPU and how long each may train.

    python benchmarks/study_probe.py checks --json OUT/gpu.json [--device cpu]
    python benchmarks/study_probe.py probe DATA_DIR --json OUT/gpu.json --study-seconds S [--seconds 10]
        [--together 1 9] [--overlays config/study_small.yaml ...]

Both add to the same gpu.json (benchmarks/gpu_check.py's shape, rewritten after every step); `probe` prints one
line, `jobs N seconds_per_run T`, which the script reads. The full gpu-check (every family × precision, the speed
rows with MFU) is the optional second command, `scripts/study_gpu.sh check`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("gpu_check", HERE / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)

# the small study: 9 runs that need nothing (3 seeds of the baseline, LWC, MLRF), then 9 warm-started from the
# baselines (GCA, Dou, the baseline trained on): two phases, each as many waves as the GPU's slots need
PHASES = (9, 9)
OVERHEAD_S = 45  # per wave: average, export, beam decode of test2016, score, and each job's Python start


def one_update(family: str, label: str, device: torch.device, data: Path, work: Path) -> dict:
    """One trainer update (`train.start_run` / `train.update_step`) of a tiny model of this family: a finite loss."""
    from layerwise_nmt.data.batching import ParallelData, collate
    from layerwise_nmt.data.vocab import load_pair
    from layerwise_nmt.training.precision import cuda_kernels
    from layerwise_nmt.training.loop import TrainConfig, start_run, update_step
    from layerwise_nmt.training.master_weights import compute_model

    spec = gpu_check.family_spec(family, label)
    precision, tf32 = gpu_check.precision_of(label, device)
    run = start_run(
        spec,
        TrainConfig.from_dict(spec["train"]),
        dict(zip(("de", "en"), load_pair(data, "de", "en"), strict=True)),
        work / f"one-{family}-{label}",
        device,
        precision,
    )
    batch = collate(ParallelData(data, "train", "de", "en"), list(range(16)))
    run.model.train()
    with cuda_kernels(device, tf32):
        net = compute_model(run.model, precision)
        result = update_step(run, net, [batch], device, lambda: precision.autocast(device)).read()
    loss = math.nan if result["skipped"] else result["loss"] / result["ntokens"]
    return {
        "ok": math.isfinite(loss),
        "loss": round(loss, 4) if math.isfinite(loss) else str(loss),
        "precision": precision.amp,
    }


def checks(device: torch.device, results, work: Path, families=tuple(gpu_check.FAMILIES)) -> dict:
    label = gpu_check.precisions(device)[0]  # what `amp: auto` picks here
    data = gpu_check.toy_data(work / "toy")
    results.checks["scope"] = f"one update per family in {label} (the full check: scripts/study_gpu.sh check)"
    for family in families:
        key = f"{family}/{label}"
        results.checks["families"][key] = {
            "one_update": gpu_check._guarded(lambda: one_update(family, label, device, data, work))  # noqa: B023  (run within this iteration)
        }
        results.save()
        print(f"{key}: {json.dumps(results.checks['families'][key]['one_update'])}", flush=True)
    return results.checks


def epoch_tokens(data_dir: Path, src: str = "de", tgt: str = "en") -> int:
    from layerwise_nmt.data.batching import ParallelData

    return int(ParallelData(data_dir, "train", src, tgt).tgt.sizes.sum())


def plan(
    probe_runs: list[dict],
    study_seconds: float,
    tokens_per_epoch: int,
    phases=PHASES,
    overhead_s: float = OVERHEAD_S,
    floor_s: float = 30,
) -> dict:
    """How many trainings at once (the measured count with the most target tokens/s in all) and each one's
    wall-clock budget: the study's seconds shared by its waves, less each wave's decode and scoring."""
    measured = {r["together"]: r for r in probe_runs if "error" not in r and r.get("total")}
    if not measured:  # the probe failed: every run of a phase at once (small models), said in gpu.json
        jobs, each = max(phases), None
    else:
        jobs = max(measured, key=lambda n: (measured[n]["total"], -n))
        each = measured[jobs]["total"] / jobs
    jobs = max(1, min(jobs, max(phases)))
    waves = sum(math.ceil(n / jobs) for n in phases)
    seconds = max(floor_s, (study_seconds - waves * overhead_s) / waves)
    epochs = each * seconds / tokens_per_epoch if each and tokens_per_epoch else None
    return {
        "jobs": jobs,
        "waves": waves,
        "seconds_per_run": round(seconds),
        "study_seconds": round(study_seconds),
        "overhead_per_wave_s": overhead_s,
        "target_tokens_per_epoch": tokens_per_epoch,
        "target_tokens_per_second_each": round(each) if each else None,
        "epochs_per_run": round(epochs, 1) if epochs is not None else None,
        "measured": not not measured,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["checks", "probe"])
    parser.add_argument("data", nargs="?", help="probe: the study's binarized data (bin-joint)")
    parser.add_argument("--json", required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--families", nargs="*", default=list(gpu_check.FAMILIES), choices=list(gpu_check.FAMILIES))
    parser.add_argument("--seconds", type=float, default=8, help="probe: training seconds per stage")
    parser.add_argument("--together", type=int, nargs="*", default=[1, 9], help="probe: trainings at once, per stage")
    parser.add_argument("--overlays", nargs="*", default=[], help="probe: overlays after config/study.yaml")
    parser.add_argument("--study-seconds", type=float, default=380, help="probe: what the study may take in all")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("study_probe: no CUDA device visible to PyTorch (the study needs one; --device cpu rehearses it)")
        return 1
    device = torch.device(args.device)
    results = gpu_check.Results(Path(args.json), device)
    if Path(args.json).exists():  # the checks' file: the probe adds to it
        saved = json.loads(Path(args.json).read_text())
        results.checks, results.speed, results.probe = saved["checks"], saved["speed"], saved["probe"]
    with tempfile.TemporaryDirectory() as work:
        if args.what == "checks":
            checks(device, results, Path(work), args.families)
            return 0 if results.save()["all_checks_ok"] else 1
        found = gpu_check._guarded(
            lambda: gpu_check.probe(
                Path(args.data),
                device,
                Path(work),
                results,
                args.seconds,
                tuple(args.together),
                tuple(map(Path, args.overlays)),
            )
        )
        if "ok" in found and not found["ok"]:  # the probe raised: say so in gpu.json, size from a guess
            results.probe = {**results.probe, "error": found["error"]}
    results.probe["plan"] = plan(results.probe.get("runs", []), args.study_seconds, epoch_tokens(Path(args.data)))
    results.save()
    sized = results.probe["plan"]
    print(f"study_probe: {json.dumps(sized)}", file=sys.stderr)
    print(f"jobs {sized['jobs']} seconds_per_run {sized['seconds_per_run']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
