"""What fixed batch shapes (`bucket_growth_factor`, `seq_len_multiple`) cost on real sentence lengths: counting only,
no model runs.

For each data set, max_tokens and bucket setting, the epoch's training batches are made twice, as the trainer makes
them (`make_batches`, seed 1): fairseq's batches, each padded to its own longest source and target, and the fixed
shapes' (data/batch_shapes.py). Each reports

    shapes     distinct (rows, source length, target length) tensors an epoch feeds the model
    padding    the share of padded token slots, source and target together, that are padding (dummy rows included)
    sentences  sentences per batch (× update_freq × GPUs = per update); fewer with buckets, whose rows are counted
               against the padded length

Targets: padding at most 10%, sentences per update within a few % of fairseq's batches.

Data: Multi30k De-En training data as the workflow binarizes it (`make demo`, or only its data:
`snakemake --configfile config/demo.yaml --cores 2 --until binarize`), and IWSLT14 De-En's BPE'd valid and test
sets from fairseq's prepare-iwslt14.sh in the data mirror ($LWNMT_DATA_MIRROR/iwslt14-de-en/iwslt14.tokenized.de-en,
docs/data.md), their whitespace tokens + </s> as lengths; a missing one is skipped with a note. 14K pairs make only
~120 batches of 4,096 tokens, where a batch's last sentences and the sort's transitions weigh more than in a
training set; so the IWSLT14 pairs are also drawn with replacement (seed 0) to the training set's 160K pairs: the
lengths of real sentences, in the number a training epoch has.

    python benchmarks/batch_shapes.py [--multi30k results/multi30k_deen/data/bin-joint] [--mirror DIR]
                                      [--json benchmarks/results/batch_shapes.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from layerwise_nmt.data.batch_shapes import FixedShapes, batching_summary  # noqa: E402
from layerwise_nmt.data.batching import ParallelData, make_batches  # noqa: E402

MAX_TOKENS = (1024, 4096)
# (bucket_growth_factor, seq_len_multiple): MLPerf's Transformer's, the advised one, fewer shapes, a GPU-tidy multiple
SETTINGS = ((1.035, 2), (1.1, 2), (1.2, 2), (1.1, 8))
IWSLT14_TRAIN_PAIRS = 160_239  # fairseq's prepare-iwslt14.sh training set, which the mirror does not hold


def multi30k_lengths(data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    data = ParallelData(data_dir, "train", "de", "en")
    return np.asarray(data.src.sizes), np.asarray(data.tgt.sizes)


def text_lengths(paths: list[Path]) -> np.ndarray:
    """Whitespace tokens + </s> per line, as binarizing the BPE'd text would count them."""
    return np.array([len(line.split()) + 1 for path in paths for line in path.read_text(encoding="utf-8").splitlines()])


def data_sets(multi30k: Path, mirror: Path | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    found = {}
    if (multi30k / "train.de-en.de.tokens.npy").exists():
        found["Multi30k De-En train (29K, demo BPE)"] = multi30k_lengths(multi30k)
    else:
        print(f"skipped Multi30k: no binarized data in {multi30k}", file=sys.stderr)
    iwslt = mirror / "iwslt14-de-en" / "iwslt14.tokenized.de-en" if mirror else None
    if iwslt and (iwslt / "valid.de").exists():
        splits = ("valid", "test")
        found["IWSLT14 De-En valid+test (14K, BPE 10K)"] = (
            text_lengths([iwslt / f"{split}.de" for split in splits]),
            text_lengths([iwslt / f"{split}.en" for split in splits]),
        )
        src, tgt = found["IWSLT14 De-En valid+test (14K, BPE 10K)"]
        drawn = np.random.RandomState(0).randint(0, len(src), IWSLT14_TRAIN_PAIRS)
        found["the same, resampled to 160K (train's size)"] = src[drawn], tgt[drawn]
    else:
        print(f"skipped IWSLT14: no BPE'd valid/test in {iwslt or '$LWNMT_DATA_MIRROR (not set)'}", file=sys.stderr)
    return found


def measure(src: np.ndarray, tgt: np.ndarray, max_tokens: int, growth: float, multiple: int) -> dict:
    shapes = FixedShapes(growth, multiple, max_tokens, None)
    today = batching_summary(src, tgt, make_batches(src, tgt, max_tokens, None, 1), None)
    fixed = batching_summary(src, tgt, make_batches(src, tgt, max_tokens, None, 1, shapes=shapes), shapes)
    return {
        "max_tokens": max_tokens,
        "bucket_growth_factor": growth,
        "seq_len_multiple": multiple,
        "buckets_up_to_longest": int(np.searchsorted(shapes.lengths, max(src.max(), tgt.max())) + 1),
        "today": today,
        "fixed": fixed,
        "sentences_change": fixed["sentences_per_batch"] / today["sentences_per_batch"] - 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--multi30k", type=Path, default=ROOT / "results/multi30k_deen/data/bin-joint")
    parser.add_argument("--mirror", type=Path, default=os.environ.get("LWNMT_DATA_MIRROR"))
    parser.add_argument("--json", default=str(ROOT / "benchmarks/results/batch_shapes.json"))
    a = parser.parse_args()
    from layerwise_nmt.training.precision import cpu_model

    rows = []
    for name, (src, tgt) in data_sets(a.multi30k, a.mirror).items():
        for max_tokens in MAX_TOKENS:
            for growth, multiple in SETTINGS:
                rows.append({"data": name, "sentences": len(src), **measure(src, tgt, max_tokens, growth, multiple)})
    print(
        f"{'data':40} {'max_tokens':>10} {'growth':>6} {'mult':>4} {'buckets':>7} {'shapes':>11} "
        f"{'padding':>13} {'sentences/batch':>21}"
    )
    print(f"{'':70} {'today fixed':>11} {'today  fixed':>13} {'today  fixed  change':>21}")
    for row in rows:
        today, fixed = row["today"], row["fixed"]
        print(
            f"{row['data']:40} {row['max_tokens']:>10} {row['bucket_growth_factor']:>6} {row['seq_len_multiple']:>4} "
            f"{row['buckets_up_to_longest']:>7} {today['shapes']:>5} {fixed['shapes']:>5} "
            f"{100 * today['padding']:5.1f}% {100 * fixed['padding']:5.1f}% "
            f"{today['sentences_per_batch']:6.1f} {fixed['sentences_per_batch']:6.1f} "
            f"{100 * row['sentences_change']:+6.1f}%"
        )
    result = {"cpu": cpu_model(), "measured": time.strftime("%Y-%m-%d"), "seed": 1, "rows": rows}
    Path(a.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
