"""Checkpoint averaging with fairseq's `average_checkpoints.py` semantics: the element-wise mean of the last N
checkpoints (by update number, or by epoch), accumulated in float64 and cast back to each tensor's dtype; the
metadata (model name and config) comes from the newest checkpoint."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from .. import UserError
from .checkpoint import load_model, save

log = logging.getLogger(__name__)


def average(paths: list[Path], out: str | Path) -> None:
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    newest = None
    shapes: dict[str, tuple] | None = None
    for path in paths:
        state = load_model(path)
        own = {key: tuple(tensor.shape) for key, tensor in state["model"].items()}
        if shapes is not None and own != shapes:  # else a shape error naming no file, or a key divided by too many
            raise UserError(f"{path}: cannot be averaged with {paths[0]}: {differs(shapes, own)}; expected one run's")
        shapes = own
        for key, tensor in state["model"].items():
            dtypes[key] = tensor.dtype
            value = tensor.to(torch.float64) if tensor.is_floating_point() else tensor
            total[key] = total[key] + value if key in total and tensor.is_floating_point() else value.clone()
        newest = state
    assert newest is not None  # averaging takes at least one checkpoint
    averaged = {k: (v / len(paths)).to(dtypes[k]) if dtypes[k].is_floating_point else v for k, v in total.items()}
    recorded = {k: newest[k] for k in ("model_class",) if k in newest}  # a model from outside the package: its class
    save(
        Path(out),
        {
            "model": averaged,
            "model_name": newest["model_name"],
            **recorded,
            "model_config": newest["model_config"],
            "averaged_from": [p.name for p in paths],
            "progress": newest.get("progress"),
            "dictionaries": newest.get("dictionaries"),
            "languages": newest.get("languages"),
            "trained_lengths": newest.get("trained_lengths"),
        },
    )
    log.info("averaged %d checkpoints (%s) → %s", len(paths), ", ".join(p.name for p in paths), out)


def differs(first: dict[str, tuple], other: dict[str, tuple]) -> str:
    """The first way two checkpoints' tensors differ, in words."""
    if missing := sorted(first.keys() - other.keys()):
        return f"it lacks {missing[0]}"
    if extra := sorted(other.keys() - first.keys()):
        return f"it has {extra[0]}, which the first lacks"
    key = next(k for k in first if first[k] != other[k])
    return f"{key} is {list(other[key])}, not {list(first[key])}"
