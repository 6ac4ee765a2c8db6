"""Training learns: a small Transformer trained with `lwnmt train` on a reversal task (the Annotated Transformer's
copy task, reversed so that attention must look across the sentence) and decoded with `lwnmt translate` reaches a
BLEU it must reach. Every other test checks that the parts compute what they should; this one that, put together
as a user runs them, they learn."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import sacrebleu

from conftest import train_command

pytestmark = pytest.mark.system

WORDS = [f"w{i}" for i in range(16)]
BLEU_FLOOR = 90.0  # 600 updates pass it in under a minute on one core; 60 updates score about 1 BLEU


def reversal_data(root: Path) -> Path:
    from layerwise_nmt.data.binarize import binarize
    from layerwise_nmt.data.vocab import Dictionary

    rng = np.random.RandomState(0)
    vocab = Dictionary.build(Counter({w: 1 for w in WORDS}))
    (root / "vocab").mkdir(parents=True)
    vocab.save(root / "vocab" / "dict.joint.txt")
    (root / "bin-joint").mkdir()
    for split, n in {"train": 4000, "valid": 100, "test": 200}.items():
        src = [" ".join(rng.choice(WORDS, rng.randint(3, 11))) for _ in range(n)]
        tgt = [" ".join(reversed(s.split())) for s in src]
        for lang, lines in (("de", src), ("en", tgt)):
            path = root / f"{split}.{lang}"
            path.write_text("\n".join(lines) + "\n")
            binarize(str(path), vocab, str(root / "bin-joint" / f"{split}.de-en.{lang}"))
    return root / "bin-joint"


def test_a_small_transformer_learns_to_reverse_sentences(tmp_path):
    data = reversal_data(tmp_path)
    spec = {
        "model": "transformer",
        "arch": {
            "d_model": 64,
            "d_ff": 128,
            "heads": 4,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "tie": "all",
            "dropout": 0.1,
        },
        "train": {
            "max_tokens": 1024,
            "lr": 0.003,
            "lr_scheduler": "polynomial_decay",
            "warmup_updates": 100,
            "total_num_update": 600,
            "max_update": 600,
            "max_epoch": 0,
            "patience": 0,
            "log_interval": 100,
            "amp": "none",
        },
    }
    model = tmp_path / "model.pt"
    subprocess.run(train_command(spec, data, tmp_path / "run", "--final", str(model)), check=True, timeout=600)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerwise_nmt",
            "translate",
            str(tmp_path / "test.de"),
            "--model",
            str(model),
            "--data",
            str(data),
            "--src",
            "de",
            "--tgt",
            "en",
            "--threads",
            "1",
            "--options",
            json.dumps({"beam": 4, "lenpen": 1.0}),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    hypotheses = done.stdout.splitlines()
    references = (tmp_path / "test.en").read_text().splitlines()
    bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none").score
    assert bleu >= BLEU_FLOOR, f"BLEU {bleu:.1f} on the reversal task after 600 updates; expected ≥ {BLEU_FLOOR}"
