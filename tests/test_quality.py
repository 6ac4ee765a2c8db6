"""Training learns: a small Transformer trained with `lwnmt train` on a reversal task (the Annotated Transformer's
copy task, reversed so that attention must look across the sentence) and decoded with `lwnmt translate` reaches a
BLEU it must reach. Every other test checks that the parts compute what they should; this one that, put together
as a user runs them, they learn."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sacrebleu

from conftest import reversal_task, train_command

pytestmark = pytest.mark.system

BLEU_FLOOR = 90.0  # 600 updates pass it in under a minute on one core; 60 updates score about 1 BLEU


def test_a_small_transformer_learns_to_reverse_sentences(tmp_path):
    data = reversal_task(tmp_path, 16, {"train": 4000, "valid": 100, "test": 200}, (3, 11))
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
