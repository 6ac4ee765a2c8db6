"""Validating within an epoch (validate_interval_updates) adds points to metrics.csv and changes nothing else: the
same weights, bit for bit, as a run that validates at epoch ends only — no random draw, no update."""

import hashlib
from pathlib import Path

import pandas as pd
import torch

from layerwise_nmt.training.loop import train

from conftest import toy_spec as spec


def test_validating_every_few_updates_leaves_the_model_bit_for_bit(toy_data, tmp_path):
    runs = {}
    for every in (0, 3):
        save_dir = tmp_path / f"every{every}"
        train(
            spec(max_update=14, validate_interval_updates=every),
            str(toy_data),
            "de",
            "en",
            str(save_dir),
            final=str(tmp_path / f"model{every}.pt"),
        )
        runs[every] = pd.read_csv(save_dir / "metrics.csv")
    plain, frequent = runs[0], runs[3]
    assert len(frequent) > len(plain) >= 2  # several epochs, and points between their ends
    assert set(plain["update"]) <= set(frequent["update"]) and frequent["update"].is_monotonic_increasing
    assert all(u % 3 == 0 for u in set(frequent["update"]) - set(plain["update"]))
    ends = frequent[frequent["update"].isin(plain["update"])].reset_index(drop=True)
    assert ends["valid_loss"].tolist() == plain["valid_loss"].tolist()  # the same model at every epoch's end
    a, b = (torch.load(tmp_path / f"model{every}.pt", weights_only=False)["model"] for every in (0, 3))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert digest(tmp_path / "every0" / "checkpoint_last.pt", "model") == digest(
        tmp_path / "every3" / "checkpoint_last.pt", "model"
    )


def digest(path: Path, key: str) -> str:
    state = torch.load(path, weights_only=False)[key]
    return hashlib.sha256(b"".join(state[k].cpu().numpy().tobytes() for k in sorted(state))).hexdigest()


def test_the_demo_baselines_training_gives_the_same_model_with_its_validations(toy_data, tmp_path):
    """config/demo.yaml's baseline (its model, architecture and schedule, scaled to a few updates on the toy data)
    with and without validation within the epoch: the same sha256 of every weight."""
    from layerwise_nmt import grid

    config = grid.load(grid.ROOT / "config.yaml", grid.ROOT / "config/demo.yaml")
    e = grid.experiment(config, "demo.transformer")
    assert e["train"]["validate_interval_updates"] > 0
    shas = {}
    for every in (0, 1):
        train_cfg = {
            **e["train"],
            "max_update": 6,
            "total_num_update": 6,
            "warmup_updates": 2,
            "max_tokens": 300,
            "validate_interval_updates": every,
        }
        spec = {"model": e["model"], "arch": e["arch"], "train": train_cfg}
        train(spec, str(toy_data), "de", "en", str(tmp_path / f"every{every}"), final=str(tmp_path / f"{every}.pt"))
        shas[every] = digest(tmp_path / f"{every}.pt", "model")
    assert len(pd.read_csv(tmp_path / "every1" / "metrics.csv")) > len(pd.read_csv(tmp_path / "every0" / "metrics.csv"))
    assert shas[0] == shas[1]


def test_validation_bleu_at_every_validation_leaves_the_model_bit_for_bit(toy_data, tmp_path):
    """`valid_bleu: true` adds BLEU to every validation, within epochs too (the validation_curves figure's
    `metric: bleu`), and changes neither the weights nor what a checkpoint resumes with."""
    from layerwise_nmt.inference.decode import validation_search
    from layerwise_nmt.training import checkpoint

    for bleu in (False, True):
        train(
            spec(max_update=8, validate_interval_updates=3, valid_bleu=bleu),
            str(toy_data),
            "de",
            "en",
            str(tmp_path / f"bleu{bleu}"),
            final=str(tmp_path / f"model{bleu}.pt"),
            search=validation_search,
        )
    rows = pd.read_csv(tmp_path / "bleuTrue" / "metrics.csv")
    assert len(rows) >= 3 and (~rows["partial"]).any() and rows["partial"].any()
    assert pd.to_numeric(rows["valid_bleu"], errors="coerce").notna().all()  # every row, mid-epoch ones too
    assert pd.read_csv(tmp_path / "bleuFalse" / "metrics.csv")["valid_bleu"].isna().all()
    assert digest(tmp_path / "modelFalse.pt", "model") == digest(tmp_path / "modelTrue.pt", "model")
    assert checkpoint.resume_key(spec(max_update=8, valid_bleu=True)) == checkpoint.resume_key(spec(max_update=8))
