"""Checkpoint averaging with fairseq's `average_checkpoints.py` semantics: the element-wise mean of the last N
checkpoints (by update number, or by epoch), accumulated in float64 and cast back to each tensor's dtype; the
metadata (model name and config) comes from the newest checkpoint."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import torch

from . import UserError
from .data.io import atomic_path

log = logging.getLogger(__name__)
PATTERNS = {"update": r"checkpoint_\d+_(\d+)\.pt", "epoch": r"checkpoint(\d+)\.pt"}


def last_checkpoints(save_dir: str | Path, n: int, by: str = "epoch") -> list[Path]:
    if by not in PATTERNS:
        raise UserError(f"average by {by!r}; expected update or epoch")
    found = sorted((int(m.group(1)), p) for p in Path(save_dir).iterdir()
                   if (m := re.fullmatch(PATTERNS[by], p.name)))
    if not found:
        raise UserError(f"{save_dir}: no {by} checkpoints ({PATTERNS[by]}) to average")
    if len(found) < n:
        log.warning("%s: only %d %s checkpoints, averaging those instead of %d", save_dir, len(found), by, n)
    return [p for _, p in found[-n:]]


def average(paths: list[Path], out: str | Path) -> None:
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    newest = None
    for path in paths:
        state = torch.load(path, map_location="cpu", weights_only=False)
        for key, tensor in state["model"].items():
            dtypes[key] = tensor.dtype
            value = tensor.to(torch.float64) if tensor.is_floating_point() else tensor
            total[key] = total[key] + value if key in total and tensor.is_floating_point() else value.clone()
        newest = state
    averaged = {k: (v / len(paths)).to(dtypes[k]) if dtypes[k].is_floating_point else v for k, v in total.items()}
    with atomic_path(out) as tmp:
        torch.save({"model": averaged, "model_name": newest["model_name"], "model_config": newest["model_config"],
                    "averaged_from": [p.name for p in paths], "progress": newest.get("progress")}, tmp)
    log.info("averaged %d checkpoints (%s) → %s", len(paths), ", ".join(p.name for p in paths), out)
