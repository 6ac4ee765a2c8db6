"""Tokenize+BPE throughput: our chain on 2 cores vs the plain single-process sacremoses + subword-nmt chain.

Input: real text from the data mirror (Multi30k train, both sides, and the raw IWSLT14 De/En test XML: 71,500
sentences), BPE codes = fairseq's IWSLT14 `code`. Each variant runs in its own process, back to back, `--repeat`
times; the median is reported. Output must be identical between our 1- and 2-worker runs; against plain sacremoses
it differs only where tokenizer.perl's line-final period rule applies (counted and printed).

    python benchmarks/preprocess.py [--repeat 3] [--json benchmarks/results/preprocess.json]
"""

from __future__ import annotations

import argparse
import codecs
import gzip
import hashlib
import json
import multiprocessing as mp
import os
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("LWNMT_DATA_MIRROR") or ROOT / "data-mirror").resolve()  # or a link here
CODES = MIRROR / "iwslt14-de-en/iwslt14.tokenized.de-en/code"
IWSLT = [
    "IWSLT14.TED.dev2010",
    "IWSLT14.TEDX.dev2012",
    "IWSLT14.TED.tst2010",
    "IWSLT14.TED.tst2011",
    "IWSLT14.TED.tst2012",
]


def corpus() -> dict[str, list[str]]:
    from layerwise_nmt.data.readers import read_xml

    text = {}
    for lang in ("de", "en"):
        lines = gzip.open(MIRROR / f"multi30k/train.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
        for part in IWSLT:
            lines += read_xml(str(MIRROR / f"iwslt14-de-en/orig/de-en/{part}.de-en.{lang}.xml"))[0]
        text[lang] = lines
    return text


def plain_chain(text: dict[str, list[str]]) -> list[str]:
    """What a user writes by hand: sacremoses then subword-nmt, one process."""
    import sacremoses
    from subword_nmt.apply_bpe import BPE

    with codecs.open(CODES, encoding="utf-8") as f:
        bpe = BPE(f)
    out = []
    for lang, lines in text.items():
        tok = sacremoses.MosesTokenizer(lang)
        out += [
            bpe.process_line(tok.tokenize(line, escape=True, return_str=True).lower() + "\n")[:-1] for line in lines
        ]
    return out


def our_chain(text: dict[str, list[str]], workers: int) -> list[str]:
    """The workflow's tokenize and apply-bpe steps, as the rules run them."""
    from layerwise_nmt.data.bpe import apply as apply_bpe
    from layerwise_nmt.data.parallel import map_lines
    from layerwise_nmt.data.tokenize import TokenizeOptions

    out = []
    for lang, lines in text.items():
        tokenized = list(map_lines(TokenizeOptions(lang, lowercase=True).build, lines, workers))
        out += apply_bpe(str(CODES), tokenized, workers)
    return out


def run(variant: str, queue) -> None:
    text = corpus()
    start = time.perf_counter()
    out = plain_chain(text) if variant == "plain" else our_chain(text, int(variant))
    seconds = time.perf_counter() - start
    queue.put((seconds, sum(map(len, text.values())), out))


def measure(variant: str):
    queue = mp.get_context("spawn").Queue()
    proc = mp.get_context("spawn").Process(target=run, args=(variant, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=str(ROOT / "benchmarks/results/preprocess.json"))
    args = parser.parse_args()

    times: dict[str, list[float]] = {"plain": [], "1": [], "2": []}
    outputs = {}
    for _ in range(args.repeat):
        for variant in times:  # back to back, interleaved, so machine noise hits all variants alike
            seconds, n, out = measure(variant)
            times[variant].append(seconds)
            outputs[variant] = out
    assert outputs["1"] == outputs["2"], "2 workers changed the output"
    differing = sum(a != b for a, b in zip(outputs["plain"], outputs["2"], strict=True))
    median = {v: statistics.median(t) for v, t in times.items()}
    rows = [
        ("plain sacremoses + subword-nmt, 1 process", "plain"),
        ("lwnmt tokenize + apply-bpe, 1 worker", "1"),
        ("lwnmt tokenize + apply-bpe, 2 workers", "2"),
    ]
    print(
        f"{n:,} sentences (Multi30k train + IWSLT14 test, de+en), fairseq IWSLT14 BPE codes, median of {args.repeat}\n"
    )
    print(f"{'chain':<45} {'seconds':>8} {'sent/s':>9} {'vs plain':>9}")
    for label, key in rows:
        print(f"{label:<45} {median[key]:8.2f} {n / median[key]:9,.0f} {median['plain'] / median[key]:8.2f}x")
    print(
        f"\noutput of 2 workers == 1 worker: yes; lines differing from plain sacremoses: {differing} "
        f"(tokenizer.perl's line-final period rule)"
    )
    result = {
        "sentences": n,
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "seconds_median": median,
        "seconds_all": times,
        "sentences_per_second": {k: n / v for k, v in median.items()},
        "speedup_vs_plain": {k: median["plain"] / v for k, v in median.items()},
        "identical_1_vs_2_workers": True,
        "lines_differing_from_plain_sacremoses": differing,
        "output_sha256": hashlib.sha256("\n".join(outputs["2"]).encode()).hexdigest(),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {args.json}")


if __name__ == "__main__":
    main()
