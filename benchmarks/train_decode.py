"""CPU training and decoding speed vs fairseq 0.12.2 and plain torch.nn.Transformer, measured back to back here.

Every figure is filed under the CPU it was measured on (model name, PyTorch's kernel level, native bf16 or not), with
the threads used, the load average (a shared machine says so) and the peak FLOP/s it is compared with: measured, the
fastest of several 2048x2048 @ 2048x2048 matmuls per precision at the same threads (portable, and what the kernels
can actually reach on this CPU; no datasheet clock or FMA count assumed).

The parts (--parts), each measured by a module of train_decode_parts/ that says at its top what it measures:
  train        training target tokens/s and MFU: fairseq-train, lwnmt's trainer, torch.nn.Transformer (training.py)
  gemm         the most bf16 can gain over fp32: the GEMMs alone (bf16_ceiling.py)
  profile      where an update's time goes, and the ceiling if only the GEMMs gain (bf16_ceiling.py)
  decode       fairseq-generate vs lwnmt translate on trained models, each decoding the same weights (decoding.py,
               the models in decode_cases.py)
  ctranslate2  CTranslate2 (the engine users deploy with), the decoding anchor beside fairseq-generate: the demo
               model converted with `lwnmt export --format ctranslate2`, fp32 at 1 and 2 threads and int8, whole
               process and loop alone, agreement (log-probabilities, identical hypotheses, BLEU); in its own venv
               (ctranslate2_decode.py, beside this file)
  precisions   the demo model's trainer update in fp32, bf16 autocast and bf16 weights, paired (precisions.py)
  shapes       trainer updates on fairseq's batches and on fixed shapes, paired (shapes.py)
  loss         trainer updates with the chunked loss and with fairseq's formulation, paired (chunked_loss.py)
  compile      trainer updates eagerly and with `compile: true`, paired (compilation.py)
The paired parts share paired.py; all share common.py.

--isa avx2 re-runs itself with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 (an
emulated AVX2-only CPU: amp auto picks fp32 there, so only fp32 is measured) for fairseq and for us alike.

fairseq runs in its own venv (`.fairseq-venv`, Python 3.10 from pyenv; created on first use, ~2 minutes); the
project never imports it.

    python benchmarks/train_decode.py [--updates 12] [--warmup 3] [--isa native|avx2] [--models iwslt,demo]
    python benchmarks/train_decode.py --parts precisions --updates 40 --warmup 4
    python benchmarks/train_decode.py --parts shapes --updates 40 --warmup 4 --models demo,iwslt
    python benchmarks/train_decode.py --parts loss --updates 30 --warmup 3 --models demo,iwslt
    python benchmarks/train_decode.py --parts compile --updates 20 --warmup 3 --models demo,iwslt
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from ctranslate2_decode import ctranslate2_part
from train_decode_parts.bf16_ceiling import gemm_bound, where_time_goes
from train_decode_parts.chunked_loss import loss_part
from train_decode_parts.common import (
    AVX2_ENV,
    MODELS,
    ROOT,
    THREADS,
    demo_training_data,
    ensure_demo_data,
    ensure_fairseq,
    machine,
    machine_label,
    measured_peak,
    record,
)
from train_decode_parts.compilation import compile_part
from train_decode_parts.decode_cases import demo_case, demo_model, fixture_case
from train_decode_parts.decoding import decode_part, decode_utilisation
from train_decode_parts.precisions import precision_part
from train_decode_parts.report import report
from train_decode_parts.shapes import shapes_part
from train_decode_parts.training import prepare, train_part


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


if __name__ == "__main__":
    main()
