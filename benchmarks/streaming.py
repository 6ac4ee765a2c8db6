"""Peak memory of the WMT-sized preprocessing steps: tokenize, assemble (clean) and apply-bpe stream their input,
so their peak RSS must stay flat as the corpus grows (WMT14 En-Fr has 36M pairs; holding it would need ~20 GB).

The corpus is real text repeated: the mirror's newstest2013/2014 En-De (6,003 pairs) concatenated N times, run
through `lwnmt tokenize` (with the WMT options: normalize-punctuation, -a), `lwnmt assemble` (clean-corpus-n) and
`lwnmt apply-bpe` (fairseq's IWSLT14 codes) as the Snakemake rules call them, at two sizes, both larger than the
200,000-line blocks the steps work in (so both peaks are a full block's). Each step is a fresh process; its peak
RSS is read from the kernel (ru_maxrss of the finished child and the workers it waited for).

    python benchmarks/streaming.py [--small 400000] [--large 1200000] [--json benchmarks/results/streaming.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("LWNMT_DATA_MIRROR") or ROOT / "data-mirror").resolve()  # or a link here
CODES = MIRROR / "iwslt14-de-en/iwslt14.tokenized.de-en/code"
OPTIONS = '{"normalize_punctuation": true, "remove_non_printing": true, "aggressive_dash_splits": true}'


def lwnmt(*args: str) -> tuple[float, float]:
    """Run one CLI step; (seconds, peak RSS in MB of that child alone)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "layerwise_nmt", *args], stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"lwnmt {args[0]} failed")
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def corpus(lines: int, work: Path) -> dict[str, Path]:
    text = {}
    for lang in ("en", "de"):
        base = (MIRROR / f"wmt14-en-de/plain/newstest2013.{lang}").read_text(encoding="utf-8").splitlines()
        base += (MIRROR / f"wmt14-en-de/plain/newstest2014.{lang}").read_text(encoding="utf-8").splitlines()
        path = work / f"raw.{lang}"
        with open(path, "w", encoding="utf-8") as f:
            for i in range(lines):
                f.write(base[i % len(base)] + "\n")
        text[lang] = path
    return text


def run(lines: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        raw = corpus(lines, work)
        steps: dict[str, tuple[float, float]] = {}
        for lang in ("en", "de"):
            steps[f"tokenize {lang}"] = lwnmt(
                "tokenize",
                str(raw[lang]),
                str(work / f"tok.{lang}"),
                "--lang",
                lang,
                "--options",
                OPTIONS,
                "--workers",
                "2",
            )
        spec = {
            "train": {
                "parts": [[str(raw["en"]), str(raw["de"]), str(work / "tok.en"), str(work / "tok.de"), "plain"]],
                "clean": {"ratio": 1.5, "min_len": 1, "max_len": 250},
            },
            "valid": {"hold_out_every": 100},
        }
        spec["test"] = {"parts": spec["train"]["parts"], "max_lines": 100}
        steps["assemble (clean, hold out)"] = lwnmt(
            "assemble",
            "--spec",
            json.dumps(spec),
            "--src",
            "en",
            "--tgt",
            "de",
            "--out-dir",
            str(work),
            "--stats",
            str(work / "s.json"),
        )
        steps["apply-bpe en"] = lwnmt(
            "apply-bpe", str(work / "train.en-de.en"), str(work / "bpe.en"), "--codes", str(CODES), "--workers", "2"
        )
        size_mb = sum(p.stat().st_size for p in raw.values()) / 2**20
    return {
        "lines": lines,
        "corpus_mb": size_mb,
        "steps": {k: {"seconds": s, "peak_rss_mb": m} for k, (s, m) in steps.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=400_000)
    parser.add_argument("--large", type=int, default=1_200_000)
    parser.add_argument("--json", default=str(ROOT / "benchmarks/results/streaming.json"))
    args = parser.parse_args()
    results = [run(args.small), run(args.large)]
    small, large = results
    print(
        f"pairs: {small['lines']:,} ({small['corpus_mb']:.0f} MB) vs {large['lines']:,} "
        f"({large['corpus_mb']:.0f} MB), 2 workers\n"
    )
    print(f"{'step':<28} {'RSS small':>10} {'RSS large':>10} {'growth':>7} {'s small':>8} {'s large':>8}")
    for step in small["steps"]:
        a, b = small["steps"][step], large["steps"][step]
        print(
            f"{step:<28} {a['peak_rss_mb']:8.0f}MB {b['peak_rss_mb']:8.0f}MB "
            f"{b['peak_rss_mb'] / a['peak_rss_mb']:6.2f}x {a['seconds']:8.1f} {b['seconds']:8.1f}"
        )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"runs": results, "cpu_count": os.cpu_count()}, indent=2) + "\n")
    print(f"\nwritten {args.json}")


if __name__ == "__main__":
    main()
